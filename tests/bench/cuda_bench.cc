// GPU benchmark of CudaBackend's linear layers (not a test; scripts/gpu_check.sh runs it):
// for SmolLM2-135M (Q4_1 matrices, the Q8_0-tied LM head) and a Llama-3-8B-shaped model
// (BF16, Q8_0 and Q4_K; random weights made on the device), every matrix of a forward pass
// (30 or 32 layers x q, k, v, o, gate, up, down, then the LM head) run through
// Backend::Linear for 1, 32 and 512 tokens, with the reference kernels and the tuned ones;
// for the quantized shapes the tuned ones twice, many tokens by the BF16 GEMM and by the
// int8 tensor-core tiles (CASCADE_CUDA_QUANT_GEMM). Prints tokens/s of the linear layers
// alone (no attention or elementwise ops: gpu_model_bench times whole forwards) and the
// achieved weight bandwidth against a device-to-device copy measured in the same run.
// Usage: cuda_bench [--json FILE]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/clock.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"

namespace {

using cascade::DType;
using cascade::SecondsSince;
using cascade::kernels::CudaBackend;
using cascade::kernels::CudaKernels;
using cascade::kernels::DeviceBuffer;
using cascade::kernels::QuantGemm;

// A kernel configuration of a run.
struct Config {
  const char* name;
  CudaKernels kernels;
  QuantGemm quant_gemm;
};
constexpr Config kReference{"reference", CudaKernels::kReference, QuantGemm::kBf16};
constexpr Config kTuned{"tuned", CudaKernels::kTuned, QuantGemm::kBf16};
constexpr Config kTunedInt8{"tuned, int8 GEMM", CudaKernels::kTuned, QuantGemm::kInt8};

struct Shape {
  const char* name;
  int64_t hidden, kv_dim, ffn, vocab, layers;
  DType matrix_type, head_type;
};

struct Matrix {
  DeviceBuffer w;
  int64_t n_out, n_in;
  DType dtype;
};

std::vector<Matrix> MakeModel(const Shape& s) {
  std::vector<Matrix> m;
  const auto add = [&](int64_t n_out, int64_t n_in, DType t) {
    const size_t bytes = static_cast<size_t>(cascade::RowBytes(t, n_in) * n_out);
    auto w = DeviceBuffer::Create(0, bytes);
    if (!w.ok()) {
      std::fprintf(stderr, "cuda_bench: %s\n", std::string(w.status().message()).c_str());
      std::exit(1);
    }
    cascade::kernels::cuda::FillRandom(w->data(), static_cast<int>(t), n_out * n_in, 0.02f,
                                       static_cast<uint32_t>(m.size()), nullptr);
    m.push_back({std::move(*w), n_out, n_in, t});
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    add(s.hidden, s.hidden, s.matrix_type);
    add(s.kv_dim, s.hidden, s.matrix_type);
    add(s.kv_dim, s.hidden, s.matrix_type);
    add(s.hidden, s.hidden, s.matrix_type);
    add(s.ffn, s.hidden, s.matrix_type);
    add(s.ffn, s.hidden, s.matrix_type);
    add(s.hidden, s.ffn, s.matrix_type);
  }
  add(s.vocab, s.hidden, s.head_type);
  cudaDeviceSynchronize();
  return m;
}

// Milliseconds per Sample call (top-k 40, top-p 0.9, temperature 0.8) and per Argmax
// call, the greedy reference, for the vocabularies of both shapes; a JSON array.
std::string SampleBench(cascade::kernels::CudaBackend& backend) {
  using cascade::kernels::SampleResult;
  using cascade::kernels::SampleRow;
  std::string json = "[";
  std::printf("\n%-8s %7s %14s %14s\n", "vocab", "rows", "sample ms", "argmax ms");
  for (int64_t vocab : {49152, 128256}) {
    for (int64_t rows : {1, 32}) {
      auto logits = DeviceBuffer::Create(0, static_cast<size_t>(rows * vocab) * 4);
      if (!logits.ok()) std::exit(1);
      cascade::kernels::cuda::FillRandom(logits->data(), 0, rows * vocab, 8.0f, 7, nullptr);
      const auto view = logits->View(DType::kF32, {rows, vocab});
      std::vector<SampleRow> params(rows);
      for (int64_t r = 0; r < rows; ++r) params[r] = {0.8f, 40, 0.9f, 0.0f, -1, 0.5f, (r + 0.5f) / rows};
      std::vector<SampleResult> out(rows);
      std::vector<int32_t> ids(rows);
      const auto time = [](const auto& op) {
        op();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) op();
        return 1e3 * SecondsSince(t0) / 20;
      };
      const double sample_ms = time([&] { (void)backend.Sample(out, view, params); });
      const double argmax_ms = time([&] { (void)backend.Argmax(ids, view); });
      std::printf("%-8lld %7lld %14.3f %14.3f\n", static_cast<long long>(vocab), static_cast<long long>(rows),
                  sample_ms, argmax_ms);
      json += std::string(json.size() > 1 ? ", " : "") + "{\"vocab\": " + std::to_string(vocab) +
              ", \"rows\": " + std::to_string(rows) + ", \"sample_ms\": " + std::to_string(sample_ms) +
              ", \"argmax_ms\": " + std::to_string(argmax_ms) + "}";
    }
  }
  return json + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
  }
  const auto avail = cascade::kernels::QueryCudaDevices();
  if (avail.device_count == 0) {
    std::printf("SKIP: no GPU: %s\n", avail.reason.c_str());
    return 0;
  }
  auto backend = CudaBackend::Create({});
  if (!backend.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  const double copy_bw = cascade::kernels::MeasureCopyBandwidth(0);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_bw / 1e9);
  const Shape shapes[] = {
      {"SmolLM2-135M (Q4_1, Q8_0 head)", 576, 192, 1536, 49152, 30, DType::kQ4_1, DType::kQ8_0},
      {"Llama-3-8B shape (BF16)", 4096, 1024, 14336, 128256, 32, DType::kBF16, DType::kBF16},
      {"Llama-3-8B shape (Q8_0)", 4096, 1024, 14336, 128256, 32, DType::kQ8_0, DType::kQ8_0},
      {"Llama-3-8B shape (Q4_K)", 4096, 1024, 14336, 128256, 32, DType::kQ4_K, DType::kQ6_K},
  };
  std::string json = "{\"copy_bandwidth_gb_s\": " + std::to_string(copy_bw / 1e9) + ", \"models\": [";
  std::printf("%-32s %-17s %7s %12s %12s %10s\n", "model", "kernels", "tokens", "ms/pass", "tok/s", "GB/s");
  for (size_t si = 0; si < std::size(shapes); ++si) {
    const Shape& s = shapes[si];
    std::vector<Matrix> model = MakeModel(s);
    double weight_bytes = 0;
    for (const Matrix& m : model) weight_bytes += static_cast<double>(m.w.bytes());
    const int64_t max_tokens = 512, max_dim = std::max({s.hidden, s.ffn, s.vocab});
    auto x = DeviceBuffer::Create(0, static_cast<size_t>(max_tokens * std::max(s.hidden, s.ffn)) * 4);
    auto y = DeviceBuffer::Create(0, static_cast<size_t>(max_tokens * max_dim) * 4);
    if (!x.ok() || !y.ok()) return 1;
    cudaMemset(x->data(), 0, x->bytes());
    json += std::string(si ? ", " : "") + "{\"name\": \"" + s.name +
            "\", \"weight_bytes\": " + std::to_string(weight_bytes) + ", \"runs\": [";
    bool first = true;
    std::vector<Config> configs = {kReference, kTuned};
    if (cascade::IsQuantized(s.matrix_type)) configs.push_back(kTunedInt8);
    for (const Config& config : configs) {
      (*backend)->set_kernels(config.kernels);
      if (absl::Status st = (*backend)->set_quant_gemm(config.quant_gemm); !st.ok()) {
        std::fprintf(stderr, "cuda_bench: %s\n", std::string(st.message()).c_str());
        continue;
      }
      for (int64_t n_tokens : {1, 32, 512}) {
        const auto pass = [&] {
          for (const Matrix& m : model) {
            absl::Status st =
                (*backend)->Linear(y->View(DType::kF32, {n_tokens, m.n_out}), x->View(DType::kF32, {n_tokens, m.n_in}),
                                   m.w.View(m.dtype, {m.n_out, m.n_in}), {});
            if (!st.ok()) {
              std::fprintf(stderr, "cuda_bench: %s\n", std::string(st.message()).c_str());
              std::exit(1);
            }
          }
          (void)(*backend)->Synchronize();
        };
        pass();  // Warm-up (cuBLAS heuristics, scratch growth).
        const int reps = n_tokens == 512 ? 3 : 10;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) pass();
        const double per_pass = SecondsSince(t0) / reps;
        const double gbs = weight_bytes / per_pass / 1e9;
        std::printf("%-32s %-17s %7lld %12.3f %12.1f %10.0f\n", s.name, config.name, static_cast<long long>(n_tokens),
                    1e3 * per_pass, n_tokens / per_pass, gbs);
        json += std::string(first ? "" : ", ") + "{\"kernels\": \"" + config.name +
                "\", \"tokens\": " + std::to_string(n_tokens) + ", \"ms_per_pass\": " + std::to_string(1e3 * per_pass) +
                ", \"tok_s\": " + std::to_string(n_tokens / per_pass) + ", \"weight_gb_s\": " + std::to_string(gbs) +
                ", \"fraction_of_copy_bw\": " + std::to_string(gbs * 1e9 / copy_bw) + "}";
        first = false;
      }
    }
    json += "]}";
  }
  json += "], \"sampling\": " + SampleBench(**backend) + "}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
