// Microbenchmark of kernels/cpu/linear.h on the shapes of SmolLM2-135M (hidden 576, 30
// layers, KV dim 192, FFN 1536, vocab 49152). Prints, per weight dtype, shape, token count
// and thread count: time per call, GB/s over the weight bytes and GFLOP/s; then the linear
// layers of a whole forward pass as tokens/s (decode: 1 token; prefill: 512 tokens with the
// LM head on the last one, as llama.cpp does).
//
// Weights exist once per layer (30 copies, ~84 MiB for Q4_1 in all), and calls cycle over
// the copies in layer order, so they stream from memory/L3 as in a real forward pass
// rather than sitting in L2. Q8_0/Q4_0/Q4_1 are timed twice: in the GGUF layout ("gguf")
// and repacked at load (packed_weight.h, "packed", what the engine runs on AVX-512).
//
// Then, for those dtypes, a whole-model decode pass: every matrix of SmolLM2-135M (30 x
// q, k, v, o, gate, up, down, then the LM head in Q8_0 as the GGUF file ties it), one
// ~96 MB working set read once per token in model order, so this measures memory-bound
// decode as the engine sees it (minus attention and the elementwise ops).
// With --model=1b, only a whole-model decode pass of Llama-3.2-1B's shapes (16 layers,
// hidden 2048, KV dim 512, FFN 8192; Q/K/V and gate/up stacked as the transformer runs them;
// the tied 128256-token LM head in the same dtype, Q6_K for a K type as llama-quantize's _M
// mixes write it, BF16 for FP8 as its checkpoints keep it): ~0.8 GB in Q4_K, n_in a
// multiple of 256, so every K type runs; the packed dtypes packed, the others (FP8, F16,
// BF16) in their file layout, as the engine runs them.
// With --resident, one [4096, 4096] matrix per dtype that stays in L3, at 1 and 64 tokens
// (--tokens=N,... for others) on one thread: the kernels' compute-side rate (Resident below).
// Usage: linear_bench [--quick] [--decode] [--model=1b | --resident[=ROWSxCOLS] [--tokens=1,64]]
//        [--dtype=q4_1,...] [--bf16-prefill]
// (--decode: only the 1-token passes; --bf16-prefill: LinearOptions::bf16_prefill, the
// activations of FP8 prefills rounded to bf16, scheduler.cpu_prefill_activations: bf16)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels::cpu {
namespace {

struct Shape {
  const char* name;
  int64_t n_out;
  int64_t n_in;
  int per_layer;  // Matrices of this shape per layer (q+o, k+v, gate+up, down).
  int copies;     // Distinct instances (30 layers, or 1 for the LM head).
};

constexpr Shape kShapes[] = {
    {"attn q/o 576x576", 576, 576, 2, 30},      {"attn k/v 192x576", 192, 576, 2, 30},
    {"ffn gate/up 1536x576", 1536, 576, 2, 30}, {"ffn down 576x1536", 576, 1536, 1, 30},
    {"lm head 49152x576", 49152, 576, 1, 1},
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU time of the calling thread: with one thread, immune to the core being shared.
double ThreadCpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

std::vector<uint8_t> MakeMatrix(DType dtype, int64_t n_out, int64_t n_in, int copies) {
  const int64_t rb = RowBytes(dtype, n_in);
  std::vector<uint8_t> w(copies * n_out * rb);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> row(n_in);
  // Quantizing every row is slow for the big ones; fill a few distinct rows and copy them.
  const int64_t distinct = std::min<int64_t>(64, n_out);
  for (int64_t r = 0; r < distinct; ++r) {
    for (auto& v : row) v = normal(rng);
    (void)QuantizeRow(dtype, row.data(), w.data() + r * rb, n_in);
  }
  for (int64_t r = distinct; r < copies * n_out; ++r) {
    std::memcpy(w.data() + r * rb, w.data() + (r % distinct) * rb, rb);
  }
  return w;
}

LinearOptions g_linear_options;  // --bf16-prefill.

// Seconds per call of Linear over `shape`, cycling over its copies (wall clock; with one
// thread, the thread's CPU time instead, so that other processes on the core don't count).
// With `packed` non-empty, its entries (one per copy) are used instead of `w`.
double TimeShape(DType dtype, const Shape& s, const std::vector<uint8_t>& w, const std::vector<PackedWeight>& packed,
                 int64_t n_tokens, ThreadPool* pool, const std::vector<float>& x, std::vector<float>* out,
                 double min_seconds) {
  const int64_t mat_bytes = s.n_out * RowBytes(dtype, s.n_in);
  auto call = [&](int copy) {
    absl::Status st;
    if (!packed.empty()) {
      st = LinearPacked(out->data(), x.data(), packed[copy], n_tokens, pool);
    } else {
      TensorView view(const_cast<uint8_t*>(w.data()) + copy * mat_bytes, dtype, {s.n_out, s.n_in});
      st = Linear(out->data(), x.data(), view, n_tokens, pool, g_linear_options);
    }
    if (!st.ok()) std::fprintf(stderr, "Linear failed: %s\n", st.ToString().c_str());
  };
  for (int c = 0; c < s.copies; ++c) call(c);  // Warm up.
  int64_t calls = 0;
  const bool cpu_time = pool == nullptr || pool->n_threads() == 1;
  const double start = cpu_time ? ThreadCpuNow() : Now();
  double elapsed = 0;
  do {
    for (int c = 0; c < s.copies; ++c) call(c);
    calls += s.copies;
    elapsed = (cpu_time ? ThreadCpuNow() : Now()) - start;
  } while (elapsed < min_seconds);
  return elapsed / calls;
}

std::vector<PackedWeight> PackCopies(DType dtype, const Shape& s, const std::vector<uint8_t>& w) {
  std::vector<PackedWeight> packed;
  const int64_t mat_bytes = s.n_out * RowBytes(dtype, s.n_in);
  for (int c = 0; c < s.copies; ++c) {
    TensorView view(const_cast<uint8_t*>(w.data()) + c * mat_bytes, dtype, {s.n_out, s.n_in});
    packed.push_back(*PackedWeight::Pack(view));
  }
  return packed;
}

// One decode token through every matrix of the model, in model order.
// SmolLM2-135M's linear layers for one decode token, in order: per layer Q, K, V, O,
// gate, up, down; then the Q8_0 LM head. Three layouts: GGUF rows, packed, and packed
// with Q/K/V and gate/up stacked into one weight each (LinearPartsPacked, what the
// transformer runs), so the stacking's saving shows against the same matrices.
void WholeModelDecode(DType dtype, ThreadPool* pool1, ThreadPool* pool2, double min_s, const std::vector<float>& x,
                      std::vector<float>* out) {
  struct Mat {
    DType dtype;
    int64_t n_out, n_in;
    std::vector<int64_t> parts;  // Rows of each stacked projection (one part: plain).
  };
  std::vector<Mat> plain, stacked;
  for (int l = 0; l < 30; ++l) {
    for (const int64_t rows : {576, 192, 192}) plain.push_back({dtype, rows, 576, {rows}});
    plain.push_back({dtype, 576, 576, {576}});
    for (const int64_t rows : {1536, 1536}) plain.push_back({dtype, rows, 576, {rows}});
    plain.push_back({dtype, 576, 1536, {576}});
    stacked.push_back({dtype, 960, 576, {576, 192, 192}});
    stacked.push_back({dtype, 576, 576, {576}});
    stacked.push_back({dtype, 3072, 576, {1536, 1536}});
    stacked.push_back({dtype, 576, 1536, {576}});
  }
  plain.push_back({DType::kQ8_0, 49152, 576, {49152}});
  stacked.push_back(plain.back());
  const auto make = [](const std::vector<Mat>& order, double* bytes) {
    std::vector<PackedWeight> packed;
    for (const Mat& m : order) {
      std::vector<uint8_t> w = MakeMatrix(m.dtype, m.n_out, m.n_in, 1);
      *bytes += static_cast<double>(w.size());
      packed.push_back(*PackedWeight::Pack(TensorView(w.data(), m.dtype, {m.n_out, m.n_in})));
    }
    return packed;
  };
  double bytes = 0, stacked_bytes = 0;
  std::vector<std::vector<uint8_t>> gguf;
  for (const Mat& m : plain) gguf.push_back(MakeMatrix(m.dtype, m.n_out, m.n_in, 1));
  const std::vector<PackedWeight> packed = make(plain, &bytes);
  const std::vector<PackedWeight> packed_stacked = make(stacked, &stacked_bytes);
  for (const char* layout : {"gguf", "packed", "stack"}) {
    const bool is_gguf = layout[0] == 'g', is_stacked = layout[0] == 's';
    const std::vector<Mat>& order = is_stacked ? stacked : plain;
    for (ThreadPool* pool : {pool1, pool2}) {
      auto pass = [&] {
        for (size_t i = 0; i < order.size(); ++i) {
          absl::Status st;
          if (is_gguf) {
            TensorView v(gguf[i].data(), order[i].dtype, {order[i].n_out, order[i].n_in});
            st = Linear(out->data(), x.data(), v, 1, pool);
          } else {
            std::vector<LinearPart> parts;
            int64_t at = 0;
            for (int64_t rows : order[i].parts) {
              parts.push_back({out->data() + at, rows});
              at += rows;
            }
            st = LinearPartsPacked(parts, x.data(), is_stacked ? packed_stacked[i] : packed[i], 1, pool);
          }
          if (!st.ok()) std::fprintf(stderr, "Linear failed: %s\n", st.ToString().c_str());
        }
      };
      pass();  // Warm up.
      const bool cpu_time = pool->n_threads() == 1;
      const double start = cpu_time ? ThreadCpuNow() : Now();
      int64_t passes = 0;
      double elapsed = 0;
      do {
        pass();
        ++passes;
        elapsed = (cpu_time ? ThreadCpuNow() : Now()) - start;
      } while (elapsed < std::max(min_s, 0.5));
      const double t = elapsed / passes;
      std::printf("%-6s whole-model decode (%5.1f MB, %-6s) %d thread(s): %.2f ms/token = %.1f tok/s, %.2f GB/s\n",
                  std::string(DTypeName(dtype)).c_str(), bytes / 1e6, layout, pool->n_threads(), t * 1e3, 1 / t,
                  bytes / t / 1e9);
    }
  }
}

// One decode token through Llama-3.2-1B's linear layers, stacked as the transformer runs
// them, packed, at 1 and 2 threads; prints ms/token and GB/s over the file's bytes and over
// the packed bytes.
void Decode1B(DType dtype, double min_s) {
  struct Mat {
    DType dtype;
    std::vector<int64_t> parts;
    int64_t n_in;
  };
  const bool k_type = dtype == DType::kQ2_K || dtype == DType::kQ3_K || dtype == DType::kQ4_K ||
                      dtype == DType::kQ5_K || dtype == DType::kQ6_K || dtype == DType::kIQ4_XS;
  std::vector<Mat> order;
  for (int l = 0; l < 16; ++l) {
    order.push_back({dtype, {2048, 512, 512}, 2048});
    order.push_back({dtype, {2048}, 2048});
    order.push_back({dtype, {8192, 8192}, 2048});
    order.push_back({dtype, {2048}, 8192});
  }
  // The head: Q6_K for a K type (llama-quantize's _M mixes), BF16 for FP8 (DeepSeek-V3 /
  // Qwen3-FP8 checkpoints keep the embedding in BF16), else the same dtype.
  order.push_back({k_type ? DType::kQ6_K : (dtype == DType::kF8_E4M3_B128 ? DType::kBF16 : dtype), {128256}, 2048});
  // Each matrix as the engine runs it: packed, or in the file's layout (FP8, F16, BF16).
  std::vector<std::vector<uint8_t>> plain;
  std::vector<std::optional<PackedWeight>> packed;
  double file_bytes = 0, packed_bytes = 0, pack_s = 0;
  ThreadPool pack_pool(2);  // As the engine packs: on its compute threads.
  for (const Mat& m : order) {
    int64_t n_out = 0;
    for (int64_t rows : m.parts) n_out += rows;
    std::vector<uint8_t> w = MakeMatrix(m.dtype, n_out, m.n_in, 1);
    file_bytes += static_cast<double>(w.size());
    if (!PackedLayoutPreferred(m.dtype)) {
      packed_bytes += static_cast<double>(w.size());
      plain.push_back(std::move(w));
      packed.emplace_back();
      continue;
    }
    plain.emplace_back();
    const double start = Now();
    packed.push_back(*PackedWeight::Pack(TensorView(w.data(), m.dtype, {n_out, m.n_in}), &pack_pool));
    pack_s += Now() - start;
    packed_bytes += static_cast<double>(packed.back()->bytes());
  }
  if (pack_s > 0) {
    std::printf("%-6s 1b packed at load on %d threads in %.2f s (%.2f GB/s of file)\n",
                std::string(DTypeName(dtype)).c_str(), pack_pool.n_threads(), pack_s, file_bytes / pack_s / 1e9);
  }
  std::vector<float> x(8192, 0.5f), out(2 * 8192 + 128256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    auto pass = [&] {
      for (size_t i = 0; i < order.size(); ++i) {
        std::vector<LinearPart> parts;
        int64_t at = 0;
        for (int64_t rows : order[i].parts) {
          parts.push_back({out.data() + at, rows});
          at += rows;
        }
        const absl::Status st =
            packed[i] ? LinearPartsPacked(parts, x.data(), *packed[i], 1, &pool)
                      : LinearParts(parts, x.data(), TensorView(plain[i].data(), order[i].dtype, {at, order[i].n_in}),
                                    1, &pool);
        if (!st.ok()) std::fprintf(stderr, "Linear failed: %s\n", st.ToString().c_str());
      }
    };
    pass();  // Warm up.
    const double start = Now();
    int64_t passes = 0;
    double elapsed = 0;
    do {
      pass();
      ++passes;
      elapsed = Now() - start;
    } while (elapsed < std::max(min_s, 1.0));
    const double t = elapsed / passes;
    std::printf(
        "%-6s 1b whole-model decode %d thread(s): %.2f ms/token = %.1f tok/s; file %.0f MB %.1f GB/s, "
        "packed %.0f MB %.1f GB/s\n",
        std::string(DTypeName(dtype)).c_str(), threads, t * 1e3, 1 / t, file_bytes / 1e6, file_bytes / t / 1e9,
        packed_bytes / 1e6, packed_bytes / t / 1e9);
  }
}

void Run(const std::vector<DType>& dtypes, bool quick, bool decode_only) {
  const CpuFeatures& f = GetCpuFeatures();
  std::printf("ISA: %s (avx2=%d avx512f=%d avx512vnni=%d avx_vnni=%d)\n",
              std::string(CpuIsaName(ActiveCpuIsa())).c_str(), f.avx2, f.avx512f, f.avx512vnni, f.avx_vnni);
  const double min_s = quick ? 0.05 : 0.3;
  std::vector<float> x(512 * 1536);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  std::vector<float> out(512 * 49152);
  ThreadPool pool1(1), pool2(2);

  std::printf("\n%-6s %-6s %-22s %6s %3s %11s %9s %9s\n", "dtype", "layout", "shape", "tokens", "thr", "us/call",
              "GB/s", "GFLOP/s");
  for (DType dtype : dtypes) {
    std::vector<std::vector<uint8_t>> mats;
    for (const Shape& s : kShapes) mats.push_back(MakeMatrix(dtype, s.n_out, s.n_in, s.copies));
    for (bool use_packed : {false, true}) {
      if (use_packed && !PackedWeight::Supports(dtype)) continue;
      std::vector<std::vector<PackedWeight>> packed(std::size(kShapes));
      if (use_packed) {
        for (size_t i = 0; i < std::size(kShapes); ++i) packed[i] = PackCopies(dtype, kShapes[i], mats[i]);
      }
      const char* layout = use_packed ? "packed" : "gguf";
      for (int64_t n_tokens : {int64_t{1}, int64_t{512}}) {
        if (decode_only && n_tokens != 1) continue;
        for (ThreadPool* pool : {&pool1, &pool2}) {
          double pass_s = 0;  // Linear layers of one forward pass.
          for (size_t i = 0; i < std::size(kShapes); ++i) {
            const Shape& s = kShapes[i];
            const bool lm_head = s.copies == 1;
            const int64_t nt = lm_head ? 1 : n_tokens;  // Prefill: logits of the last token.
            const double t = TimeShape(dtype, s, mats[i], packed[i], nt, pool, x, &out, min_s);
            const double bytes = static_cast<double>(s.n_out) * RowBytes(dtype, s.n_in);
            const double flops = 2.0 * s.n_out * s.n_in * nt;
            std::printf("%-6s %-6s %-22s %6lld %3d %11.1f %9.2f %9.1f\n", std::string(DTypeName(dtype)).c_str(), layout,
                        s.name, static_cast<long long>(nt), pool->n_threads(), t * 1e6, bytes / t / 1e9,
                        flops / t / 1e9);
            pass_s += t * s.per_layer * s.copies;
          }
          std::printf("%-6s %-6s => %s, %d thread(s): linear layers %.2f ms per pass = %.1f tok/s\n\n",
                      std::string(DTypeName(dtype)).c_str(), layout, n_tokens == 1 ? "decode" : "prefill 512",
                      pool->n_threads(), pass_s * 1e3, n_tokens / pass_s);
        }
      }
    }
  }
  for (DType dtype : dtypes) {
    if (PackedWeight::Supports(dtype)) WholeModelDecode(dtype, &pool1, &pool2, min_s, x, &out);
  }
}

// One matrix, [4096, 4096] unless --resident=ROWSxCOLS says otherwise, that stays in
// the caches (a 2 MiB L2 holds none of that one, a 260 MiB L3 all; a smaller one can stay
// in L2, past the bandwidth of a VM's shared L3), called over and over on one thread at 1
// and 64 tokens: the kernels' compute-side rate, apart from memory bandwidth (the
// whole-model passes above measure that). FP8 and the float types run in their file
// layout, the rest packed, as the engine runs them.
void Resident(const std::vector<DType>& dtypes, int64_t rows, int64_t cols, const std::vector<int64_t>& token_counts,
              bool quick) {
  const std::string name =
      absl::StrCat("resident ", rows, "x", cols, g_linear_options.bf16_prefill ? " (bf16 prefill)" : "");
  const Shape s{name.c_str(), rows, cols, 1, 1};
  for (DType d : dtypes) {
    const std::vector<uint8_t> w = MakeMatrix(d, s.n_out, s.n_in, 1);
    const std::vector<PackedWeight> packed =
        PackedWeight::Supports(d) ? PackCopies(d, s, w) : std::vector<PackedWeight>{};
    for (int64_t n_tokens : token_counts) {
      std::vector<float> x(n_tokens * s.n_in, 0.5f), out(n_tokens * s.n_out);
      double best = 1e30;  // Best of 5: the VM's neighbours only ever slow a run down.
      for (int rep = 0; rep < 5; ++rep) {
        best = std::min(best, TimeShape(d, s, w, packed, n_tokens, nullptr, x, &out, quick ? 0.05 : 0.2));
      }
      const double bytes = packed.empty() ? static_cast<double>(w.size()) : static_cast<double>(packed[0].bytes());
      // 1 token: the weights' bytes a second; more: multiply-adds a second.
      const double rate = n_tokens == 1 ? bytes / best / 1e9 : double(rows) * double(cols) * n_tokens / best / 1e9;
      std::printf("%-12s %s %2lld token(s), 1 thread: %7.1f us per token, %6.1f %s\n",
                  std::string(DTypeName(d)).c_str(), name.c_str(), static_cast<long long>(n_tokens),
                  best / n_tokens * 1e6, rate, n_tokens == 1 ? "GB/s of weights" : "G multiply-adds/s");
    }
  }
}

}  // namespace
}  // namespace cascade::kernels::cpu

int main(int argc, char** argv) {
  using cascade::DType;
  std::vector<DType> dtypes = {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0, DType::kF32};
  bool quick = false;
  bool decode_only = false;
  bool model_1b = false;
  bool resident = false;
  int64_t resident_rows = 4096, resident_cols = 4096;
  std::vector<int64_t> resident_tokens = {1, 64};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--model=1b") {
      model_1b = true;
    } else if (a == "--resident") {
      resident = true;
    } else if (a.rfind("--resident=", 0) == 0) {
      long long rows = 0, cols = 0;
      if (std::sscanf(a.c_str() + 11, "%lldx%lld", &rows, &cols) != 2 || rows < 16 || cols < 256 || cols % 256 != 0) {
        std::fprintf(stderr, "%s: want ROWSxCOLS, at least 16 rows and a multiple of 256 columns\n", a.c_str());
        return 2;
      }
      resident = true;
      resident_rows = rows;
      resident_cols = cols;
    } else if (a.rfind("--tokens=", 0) == 0) {  // The resident benchmark's token counts.
      resident_tokens.clear();
      for (const char* p = a.c_str() + 9; *p != '\0';) {
        char* end = nullptr;
        const long long n = std::strtoll(p, &end, 10);
        if (end == p || n < 1 || n > 4096 || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "%s: want token counts in [1, 4096], comma-separated\n", a.c_str());
          return 2;
        }
        resident_tokens.push_back(n);
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--decode") {
      decode_only = true;
    } else if (a == "--bf16-prefill") {
      cascade::kernels::cpu::g_linear_options.bf16_prefill = true;
    } else if (a.rfind("--dtype=", 0) == 0) {
      dtypes.clear();
      std::string list = a.substr(8);
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        const auto d = cascade::DTypeFromName(list.substr(pos, comma - pos));
        if (!d) {
          std::fprintf(stderr, "unknown dtype in %s\n", a.c_str());
          return 2;
        }
        dtypes.push_back(*d);
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--decode] [--model=1b | --resident[=ROWSxCOLS] [--tokens=1,64]] "
                   "[--dtype=q4_1,q8_0,...] [--bf16-prefill]\n",
                   argv[0]);
      return 2;
    }
  }
  if (resident) {
    cascade::kernels::cpu::Resident(dtypes, resident_rows, resident_cols, resident_tokens, quick);
    return 0;
  }
  if (model_1b) {
    for (DType d : dtypes) cascade::kernels::cpu::Decode1B(d, quick ? 0.5 : 2.0);
    return 0;
  }
  for (DType d : dtypes) {  // SmolLM2's 576-wide rows: no 256-element super-blocks.
    if (576 % cascade::BlockElems(d) != 0) {
      std::fprintf(stderr, "%s: SmolLM2's 576-column matrices are not whole %lld-element blocks; use --model=1b\n",
                   std::string(cascade::DTypeName(d)).c_str(), static_cast<long long>(cascade::BlockElems(d)));
      return 2;
    }
  }
  cascade::kernels::cpu::Run(dtypes, quick, decode_only);
  return 0;
}
