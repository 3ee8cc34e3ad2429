// Whole-model GPU throughput (not a test; scripts/gpu_check.sh runs it): the Transformer
// of model/transformer.cc on the CUDA backend, weights and KV cache in device memory, for
// SmolLM2-135M (the default model, Q4_1) and a Llama-3-8B-shaped model (32 layers, 4096
// wide, GQA 32/8, FFN 14336, vocabulary 128256) with random BF16 weights written on the
// spot. For each: prefill tokens/s (one sequence of 512 tokens) and decode tokens/s at
// batch 1 and 32 (every sequence with 128 tokens of context, 16 steps), the weight
// bandwidth a decode step achieves (weight bytes / step time) against the device-to-device
// copy bandwidth measured in the same run, and the same runs on the CPU backend for
// SmolLM2 as the reference. Logits come back to the host every step (into pinned memory), as
// a worker's do when it samples on the host. With --graphs the GPU runs also time decode
// with CUDA graphs (model/graph_step.h) after the eager runs, on the same loaded model; with
// --tuned also with the tuned kernels (CudaKernels::kTuned; for a MoE model once more with
// batches over 32 tokens, its prefills, routed on the host: which path is faster where is
// not measured yet; once more with the tensor-core prefill attention,
// CASCADE_CUDA_PREFILL_ATTENTION=f16; for a quantized model once more with the int8
// tensor-core GEMM of prefill and batch 32, CASCADE_CUDA_QUANT_GEMM=int8), and the graphs
// then with them; each figure is printed as it is measured.
// With --quant also the 8B shape in Q8_0 and Q4_K_M and bench_moe.sh's MoE shape in Q8_0. Every
// model is set against the copy roofline and a dense BF16 one against the cuBLAS anchor of
// its matrices (tests/bench/cublas_anchor.h): one table row per kernel configuration.
// With --profile, each random model's GPU configurations also print where a prefill's and a
// batch-1 and batch-32 decode step's time goes, op by op (CudaBackend::set_op_timing).
// Usage: gpu_model_bench [--json FILE] [--model GGUF] [--llama-layers N] [--skip-llama] [--graphs] [--tuned]
//                        [--quant] [--profile]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/str_cat.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"
#include "model/transformer.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/cublas_anchor.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace {

using namespace cascade;

using cascade::SecondsSince;
void Check(const absl::Status& s, const std::string& what) { bench::Check(s, "gpu_model_bench", what); }

// One configuration's figures on one model (tokens/s; 0: not run).
struct Figures {
  std::string config;  // "reference", "tuned", "tuned + graphs", "cuBLAS anchor", ...
  double prefill = 0, decode1 = 0, decode_max = 0;
};

struct Result {
  std::string model, backend;
  int64_t weight_bytes = 0;
  // The weight bytes a batch-1 decode step reads: all of them for a dense model; for a MoE
  // model the routed experts' only in the share top_k / n_experts that one token chooses.
  int64_t step_bytes = 0;
  int max_batch = 32;
  std::vector<Figures> rows;          // The first is the eager reference kernels.
  std::vector<std::string> profiles;  // --profile: JSON objects, one per profiled step.
};

// Where one step's GPU time goes, op by op (CudaBackend::TakeOpTimes): printed as a table
// and returned as a JSON object.
std::string PrintProfile(const std::string& model, const std::string& step, const std::vector<kernels::OpTime>& times) {
  double total = 0;
  for (const kernels::OpTime& t : times) total += t.ms;
  std::printf("  profile of %s, %s: %.3f ms\n    %-34s %6s %10s %6s\n", model.c_str(), step.c_str(), total, "op",
              "count", "ms", "share");
  std::string ops;
  for (const kernels::OpTime& t : times) {
    std::printf("    %-34s %6lld %10.3f %5.1f%%\n", t.op.c_str(), static_cast<long long>(t.count), t.ms,
                100 * t.ms / std::max(total, 1e-9));
    ops += StrCat(ops.empty() ? "" : ", ", "{\"op\": \"", t.op, "\", \"count\": ", t.count, ", \"ms\": ", t.ms, "}");
  }
  return StrCat("{\"step\": \"", step, "\", \"ms\": ", total, ", \"ops\": [", ops, "]}");
}

// Steps of `batch` sequences, each of `n_new` tokens at position `past`; returns seconds.
double Step(model::Transformer& t, model::KvCache& cache, int batch, int64_t n_new, int64_t past,
            const std::vector<std::vector<int32_t>>& tables, kernels::Buffer& logits) {
  const int64_t n = batch * n_new, V = t.config().n_vocab;
  std::vector<int32_t> tokens(n), pos(n);
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int64_t> rows;
  for (int b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n_new; ++i) {
      tokens[b * n_new + i] = static_cast<int32_t>((b * 131 + (past + i) * 7 + 3) % V);
      pos[b * n_new + i] = static_cast<int32_t>(past + i);
    }
    seqs.push_back({b * n_new, n_new, past, tables[b]});
    rows.push_back(b * n_new + n_new - 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Check(t.Forward({tokens, pos, seqs, rows}, cache, TensorView(logits.data(), DType::kF32, {batch, V})), "forward");
  return SecondsSince(t0);  // Forward ends by copying the logits out: the GPU is done.
}

Result Bench(const std::string& name, const std::string& path, kernels::Backend* backend, const char* backend_name,
             bool quick, bool graphs, bool tuned, bool quantized, bool profile) {
  Result r;
  r.model = name;
  r.backend = backend_name;
  auto files = model::OpenModelFiles(path);
  Check(files.status(), path);
  const auto t_load = std::chrono::steady_clock::now();
  auto t = model::Transformer::Load(*files, backend, {});
  Check(t.status(), "load " + path);
  r.weight_bytes = (*t)->weight_bytes();
  const model::ModelConfig& c = (*t)->config();
  const double chosen = c.n_experts > 0 ? static_cast<double>(c.n_experts_used) / c.n_experts : 1.0;
  r.step_bytes = r.weight_bytes - static_cast<int64_t>((*t)->expert_bytes() * (1.0 - chosen));
  std::printf("%s on %s: loaded %.2f GB (a batch-1 step reads %.2f GB) in %.1f s\n", name.c_str(), backend_name,
              r.weight_bytes / 1e9, r.step_bytes / 1e9, SecondsSince(t_load));
  constexpr int64_t kBlock = 16, kContext = 128, kSteps = 16, kPrefill = 512;
  constexpr int64_t kHostMoeAbove = 32;  // A MoE row's prefills over this many tokens host-routed.
  const int max_batch = quick ? 4 : 32;
  const int64_t blocks_per_seq = (std::max(kPrefill, kContext + kSteps) + kBlock - 1) / kBlock;
  auto cache = model::KvCache::Create((*t)->CacheOptions(blocks_per_seq * max_batch, kBlock), backend);
  Check(cache.status(), "kv cache");
  std::vector<std::vector<int32_t>> tables(max_batch);
  for (int b = 0; b < max_batch; ++b) {
    tables[b].resize(blocks_per_seq);
    std::iota(tables[b].begin(), tables[b].end(), static_cast<int32_t>(b * blocks_per_seq));
  }
  auto logits = backend->AllocateStaging(static_cast<size_t>(max_batch * (*t)->config().n_vocab) * sizeof(float));
  Check(logits.status(), "logits");
  r.max_batch = max_batch;
  const int64_t prefill = quick ? 128 : kPrefill;
  Step(**t, *cache, 1, prefill, 0, tables, **logits);  // Warm-up: cuBLAS, scratch, workspaces.
  // Decode tokens/s at `batch` over kContext tokens: one untimed step (a graph's capture),
  // then kSteps timed ones.
  const auto decode = [&](int batch) {
    for (int b = 0; b < batch; ++b) Step(**t, *cache, 1, kContext, 0, {tables[b]}, **logits);
    Step(**t, *cache, batch, 1, kContext, tables, **logits);
    double total = 0;
    for (int64_t s = 1; s <= kSteps; ++s) total += Step(**t, *cache, batch, 1, kContext + s, tables, **logits);
    return batch * kSteps / total;
  };
  // One row: a prefill (after an untimed one: a graph's capture, new kernels' first calls)
  // and decode at batch 1 and max_batch, each printed as it is measured.
  const auto measure = [&](const std::string& config) {
    Figures f{.config = config};
    Step(**t, *cache, 1, prefill, 0, tables, **logits);
    f.prefill = prefill / Step(**t, *cache, 1, prefill, 0, tables, **logits);
    std::printf("  %s on %s, %s: prefill %.0f tok/s\n", name.c_str(), backend_name, config.c_str(), f.prefill);
    f.decode1 = decode(1);
    std::printf("  %s on %s, %s: decode b=1 %.1f tok/s\n", name.c_str(), backend_name, config.c_str(), f.decode1);
    f.decode_max = decode(max_batch);
    std::printf("  %s on %s, %s: decode b=%d %.1f tok/s\n", name.c_str(), backend_name, config.c_str(), max_batch,
                f.decode_max);
    r.rows.push_back(f);
  };
  measure("reference");
  auto* gpu = dynamic_cast<kernels::CudaBackend*>(backend);
  // --profile: a prefill and a batch-1 and a batch-max decode step, op by op (eager).
  const auto profile_steps = [&](const std::string& config) {
    if (!profile || gpu == nullptr) return;
    gpu->set_op_timing(true);
    Step(**t, *cache, 1, prefill, 0, tables, **logits);
    r.profiles.push_back(PrintProfile(name, StrCat(config, ", prefill ", prefill), gpu->TakeOpTimes()));
    for (const int batch : {1, max_batch}) {
      for (int b = 0; b < batch; ++b) Step(**t, *cache, 1, kContext, 0, {tables[b]}, **logits);
      (void)gpu->TakeOpTimes();
      Step(**t, *cache, batch, 1, kContext, tables, **logits);
      r.profiles.push_back(PrintProfile(name, StrCat(config, ", decode b=", batch), gpu->TakeOpTimes()));
    }
    gpu->set_op_timing(false);
  };
  profile_steps("reference");
  if (tuned && gpu != nullptr) {
    gpu->set_kernels(kernels::CudaKernels::kTuned);
    measure("tuned");
    profile_steps("tuned");
    if ((*t)->config().n_experts > 0) {  // Prefills through the host-routed path instead.
      gpu->set_moe_device_max_tokens(kHostMoeAbove);
      measure(StrCat("tuned, MoE>", kHostMoeAbove, " host"));
      gpu->set_moe_device_max_tokens(std::numeric_limits<int64_t>::max());
    }
    // Prefill attention by the tensor-core tiles instead of the f32 ones.
    Check(gpu->set_prefill_attention(kernels::PrefillAttention::kF16), "f16 attention");
    measure("tuned, f16 attention");
    profile_steps("tuned, f16 attention");
    Check(gpu->set_prefill_attention(kernels::PrefillAttention::kF32), "f32 attention");
    if (quantized) {  // Prefill and batch 32 by the int8 tiles instead of BF16 GEMMs.
      Check(gpu->set_quant_gemm(kernels::QuantGemm::kInt8), "int8 GEMM");
      measure("tuned, int8 GEMM");
      profile_steps("tuned, int8 GEMM");
      Check(gpu->set_quant_gemm(kernels::QuantGemm::kBf16), "bf16 GEMM");
    }
  }
  if (graphs && gpu != nullptr) {
    (*t)->set_cuda_graphs(true);
    measure(tuned ? "tuned + graphs" : "graphs");
    if (tuned) {  // Every new kernel at once: the row the table wants, once each has passed.
      Check(gpu->set_prefill_attention(kernels::PrefillAttention::kF16), "f16 attention");
      if (quantized) Check(gpu->set_quant_gemm(kernels::QuantGemm::kInt8), "int8 GEMM");
      measure("all tensor-core + graphs");
      Check(gpu->set_prefill_attention(kernels::PrefillAttention::kF32), "f32 attention");
      Check(gpu->set_quant_gemm(kernels::QuantGemm::kBf16), "bf16 GEMM");
    }
    (*t)->set_cuda_graphs(false);
  }
  return r;
}

struct Options {
  std::string json_path, smol = cascade::testing::DefaultModelPath();
  int64_t llama_layers = 32;
  bool skip_llama = false, graphs = false, tuned = false, quant = false, profile = false;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      o.json_path = argv[++i];
    else if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc)
      o.smol = argv[++i];
    else if (std::strcmp(argv[i], "--llama-layers") == 0 && i + 1 < argc)
      o.llama_layers = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--skip-llama") == 0)
      o.skip_llama = true;
    else if (std::strcmp(argv[i], "--graphs") == 0)
      o.graphs = true;
    else if (std::strcmp(argv[i], "--tuned") == 0)
      o.tuned = true;
    else if (std::strcmp(argv[i], "--quant") == 0)
      o.quant = true;
    else if (std::strcmp(argv[i], "--profile") == 0)
      o.profile = true;
  }
  return o;
}

// The random models of the run: the 8B shape (BF16; with --quant also Q8_0 and llama.cpp's
// Q4_K_M mix) and, with --quant, bench_moe.sh's shape: Qwen3-30B-A3B scaled (hidden 1024,
// 8 layers, 64 experts, top-8).
std::vector<std::pair<std::string, cascade::testing::RandomModelSpec>> WrittenModels(const Options& o) {
  std::vector<std::pair<std::string, cascade::testing::RandomModelSpec>> models;
  if (!o.skip_llama) {
    const cascade::testing::RandomModelSpec llama8b = {.n_layers = o.llama_layers,
                                                       .n_embd = 4096,
                                                       .n_heads = 32,
                                                       .n_kv_heads = 8,
                                                       .n_ff = 14336,
                                                       .n_vocab = 128256,
                                                       .n_ctx = 8192};
    for (const DType type :
         o.quant ? std::vector<DType>{DType::kBF16, DType::kQ8_0, DType::kQ4_K} : std::vector<DType>{DType::kBF16}) {
      cascade::testing::RandomModelSpec spec = llama8b;
      spec.weight_type = type;
      spec.q4_k_m = type == DType::kQ4_K;
      const std::string_view type_name = spec.q4_k_m ? "Q4_K_M" : DTypeName(type);
      models.emplace_back(StrCat("Llama-3-8B shape ", type_name, " (", o.llama_layers, " layers)"), spec);
    }
  }
  if (o.quant) {
    models.emplace_back("Qwen3-MoE scaled Q8_0 (64 experts, top-8)",
                        cascade::testing::RandomModelSpec{.weight_type = DType::kQ8_0,
                                                          .n_layers = 8,
                                                          .n_embd = 1024,
                                                          .n_heads = 16,
                                                          .n_kv_heads = 4,
                                                          .n_ff = 3072,
                                                          .n_vocab = 49152,
                                                          .qk_norm = true,
                                                          .n_ctx = 4096,
                                                          .moe = cascade::testing::MoeFamily::kQwen3Moe,
                                                          .n_experts = 64,
                                                          .n_experts_used = 8,
                                                          .n_ff_expert = 512});
  }
  return models;
}

// The rows a model is measured against, after it is unloaded: the copy roofline (decode
// only: each step reads its weight bytes once at the copy bandwidth, a batch-1 step its
// step_bytes, a batch of max_batch every weight) and, for a dense BF16 model, the cuBLAS
// anchor of the same matrices (tests/bench/cublas_anchor.h).
void AddAnchors(const cascade::testing::RandomModelSpec& spec, double copy_bw, Result& r) {
  r.rows.push_back({.config = "copy roofline",
                    .decode1 = copy_bw / r.step_bytes,
                    .decode_max = r.max_batch * copy_bw / r.weight_bytes});
  if (spec.weight_type != DType::kBF16 || spec.moe != cascade::testing::MoeFamily::kNone) return;
  const int64_t head_dim = spec.n_embd / spec.n_heads;
  const bench::DenseShape shape{.n_layers = spec.n_layers,
                                .n_embd = spec.n_embd,
                                .q_dim = spec.n_heads * head_dim,
                                .kv_dim = spec.n_kv_heads * head_dim,
                                .n_ff = spec.n_ff,
                                .n_vocab = spec.n_vocab};
  Figures a{.config = "cuBLAS anchor"};
  a.prefill = bench::AnchorTokensPerSecond(shape, 512, 1, 5);
  a.decode1 = bench::AnchorTokensPerSecond(shape, 1, 1, 20);
  a.decode_max = bench::AnchorTokensPerSecond(shape, r.max_batch, r.max_batch, 20);
  std::printf("  cuBLAS anchor (%.2f GB of matrices): prefill %.0f, decode b=1 %.1f, b=%d %.1f tok/s\n",
              bench::AnchorWeightBytes(shape) / 1e9, a.prefill, a.decode1, r.max_batch, a.decode_max);
  r.rows.push_back(a);
}

// A row per configuration; b=1 bandwidth is the weight bytes a batch-1 decode step reads
// (step_bytes) over its time, against the copy bandwidth and against the model's anchor row
// where it has one.
void Report(const std::vector<Result>& results, double copy_bw, const std::string& json_path) {
  std::printf("\n%-40s %-8s %-24s %11s %11s %12s %9s %7s %10s\n", "model", "backend", "kernels", "prefill t/s",
              "decode b=1", "decode b=32*", "b=1 GB/s", "of copy", "of anchor");
  std::string json = StrCat("{\"copy_bandwidth_gb_s\": ", copy_bw / 1e9, ", \"runs\": [");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const Figures* anchor = nullptr;  // The cuBLAS anchor, else the copy roofline.
    for (const Figures& f : r.rows) {
      if (f.config == "cuBLAS anchor" || (f.config == "copy roofline" && anchor == nullptr)) anchor = &f;
    }
    std::string rows;
    for (const Figures& f : r.rows) {
      const double gb_s = r.step_bytes * f.decode1 / 1e9;
      char of_anchor[16] = "";
      if (anchor != nullptr && anchor != &f && anchor->decode1 > 0) {
        std::snprintf(of_anchor, sizeof(of_anchor), "%.2fx", f.decode1 / anchor->decode1);
      }
      std::printf("%-40s %-8s %-24s %11.0f %11.1f %12.1f %9.0f %6.0f%% %10s\n", r.model.c_str(), r.backend.c_str(),
                  f.config.c_str(), f.prefill, f.decode1, f.decode_max, gb_s, 100 * gb_s * 1e9 / copy_bw, of_anchor);
      rows += StrCat(rows.empty() ? "" : ", ", "{\"kernels\": \"", f.config, "\", \"prefill_tok_s\": ", f.prefill,
                     ", \"decode_b1_tok_s\": ", f.decode1, ", \"decode_max_tok_s\": ", f.decode_max,
                     ", \"decode_b1_weight_gb_s\": ", gb_s, "}");
    }
    // The run's own keys are the reference kernels' figures (gpu_cluster_check.sh reads them).
    const Figures& ref = r.rows.front();
    json += StrCat(i ? ", " : "", "{\"model\": \"", r.model, "\", \"backend\": \"", r.backend,
                   "\", \"weight_bytes\": ", r.weight_bytes, ", \"step_bytes\": ", r.step_bytes,
                   ", \"max_batch\": ", r.max_batch, ", \"prefill_tok_s\": ", ref.prefill,
                   ", \"decode_b1_tok_s\": ", ref.decode1, ", \"decode_b32_tok_s\": ", ref.decode_max, ", \"rows\": [",
                   rows, "], \"profiles\": [");
    for (size_t p = 0; p < r.profiles.size(); ++p) json += StrCat(p ? ", " : "", r.profiles[p]);
    json += "]}";
  }
  std::printf("* the cpu reference runs batch 4 and a 128-token prefill (to keep the check short)\n");
  json += "]}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  const auto avail = kernels::QueryCudaDevices();
  if (avail.device_count == 0) {
    std::printf("SKIP: no GPU: %s\n", avail.reason.c_str());
    return 0;
  }
  const double copy_bw = kernels::MeasureCopyBandwidth(0);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_bw / 1e9);
  auto gpu = kernels::CudaBackend::Create({});
  Check(gpu.status(), "cuda:0");
  std::vector<Result> results;
  if (!o.smol.empty() && std::filesystem::exists(o.smol)) {
    results.push_back(Bench("SmolLM2-135M Q4_1", o.smol, gpu->get(), "cuda:0", false, o.graphs, o.tuned, true, false));
    (*gpu)->set_kernels(kernels::CudaKernels::kReference);
    auto cpu = kernels::MakeCpuBackend({.n_threads = 16});
    results.push_back(Bench("SmolLM2-135M Q4_1", o.smol, cpu.get(), "cpu x16", true, false, false, true, false));
  } else {
    std::printf("SmolLM2 not found (%s): skipped\n", o.smol.c_str());
  }
  // Each random model is written to a temporary file, benchmarked on the GPU, removed.
  for (auto& [name, spec] : WrittenModels(o)) {
    const std::string path = (std::filesystem::temp_directory_path() / "cascade-gpu-bench-model.gguf").string();
    const auto t0 = std::chrono::steady_clock::now();
    spec.distinct_values = 1 << 20;  // Values (and quantized blocks) repeat: quick to write.
    cascade::testing::WriteRandomModel(spec, path);
    std::printf("wrote %s in %.1f s\n", name.c_str(), SecondsSince(t0));
    results.push_back(
        Bench(name, path, gpu->get(), "cuda:0", false, o.graphs, o.tuned, IsQuantized(spec.weight_type), o.profile));
    (*gpu)->set_kernels(kernels::CudaKernels::kReference);
    std::filesystem::remove(path);
    AddAnchors(spec, copy_bw, results.back());
  }
  Report(results, copy_bw, o.json_path);
  return 0;
}
