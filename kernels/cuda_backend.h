// The CUDA implementation of kernels::Backend (ops.h) and the device memory it works on.
// Implemented by kernels/cuda/ when the CUDA backend is built and by kernels/nocuda/
// otherwise (every call then answers Unimplemented), so callers need no #ifdef.
//
// Contract beyond ops.h: every TensorView handed to a CudaBackend op points to device
// memory of that backend's GPU (DeviceBuffer); the std::span arguments (ids, positions,
// block tables, inverse frequencies) are host memory, read before the op returns (they
// are staged in pinned memory and copied up asynchronously). Ops run asynchronously on the
// backend's stream, in call order; `Synchronize` waits for them. Activations are F32 and
// accumulate in F32; weights may be F32, F16, BF16 (cuBLAS or the tuned GEMV) or any GGUF
// block type and I4_G128 (weight-only kernels that decode the blocks in registers).
//
// Thread-safety: a backend and its buffers are single-owner, as ops.h says.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "kernels/sample_row.h"

namespace cascade::kernels {

// An owned allocation of device memory (cudaMalloc, never managed memory).
class DeviceBuffer {
 public:
  // Unavailable without a usable GPU (the reason included); Unimplemented in a build
  // without CUDA.
  static absl::StatusOr<DeviceBuffer> Create(int device, size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Synchronous copies of the first `bytes` bytes.
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;
  // A view of the buffer as [shape] of dtype on this device.
  TensorView View(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  int device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Which CUDA kernels run where there is a choice (issue 29's kernels against today's).
enum class CudaKernels {
  kReference,  // The kernels every GPU test has passed with: cuBLAS for F16/BF16 weights.
  kTuned,      // New kernels, measured against the reference: F16/BF16 GEMV for <= 8 tokens.
};
// `CASCADE_CUDA_KERNELS` (reference | tuned); unset: reference, the rule until the tuned
// kernels have passed their GPU tests on a GPU. InvalidArgument naming the variable for
// another value.
absl::StatusOr<CudaKernels> CudaKernelsFromEnv();
std::string_view CudaKernelsName(CudaKernels k);

// How the tuned kernels multiply quantized weights (the GGUF block types and I4_G128) by
// more tokens than their GEMVs take: prefill.
enum class QuantGemm {
  kBf16,  // The weight decoded to BF16 per call, then a cuBLAS tensor-core GEMM on BF16 activations.
  kInt8,  // The activations quantized to 8 bits, int8 tensor-core tiles over the blocks as stored (Q8Mma).
};
// `CASCADE_CUDA_QUANT_GEMM` (bf16 | int8); unset: bf16, the rule until the int8 tiles have
// passed their GPU tests and been measured against it. InvalidArgument naming the variable
// for another value.
absl::StatusOr<QuantGemm> QuantGemmFromEnv();
std::string_view QuantGemmName(QuantGemm g);

// Which kernel the tuned kernels run prefill chunks' attention with.
enum class PrefillAttention {
  kF32,  // Tiles on CUDA cores in f32 (attention_prefill.cu).
  kF16,  // Tiles on tensor cores: q, k, v and the probabilities in f16, f32 sums (attention_prefill_f16.cu).
};
// `CASCADE_CUDA_PREFILL_ATTENTION` (f32 | f16); unset: f32, the rule until the tensor-core
// tiles have passed their GPU tests and been measured. InvalidArgument naming the variable
// for another value.
absl::StatusOr<PrefillAttention> PrefillAttentionFromEnv();
std::string_view PrefillAttentionName(PrefillAttention p);

// Where a choice's value comes from: "VARIABLE=value", or "VARIABLE unset: " and the rule
// that defaults it. What CudaBackend::Create logs.
std::string CudaChoiceSource(const char* variable);
// Each of the choices above as the environment sets them, with its source, in one line (or
// what is wrong with a variable): what `cascade info` shows, with or without a GPU.
std::string DescribeCudaKernels();

struct CudaBackendOptions {
  int device = 0;  // CUDA device index.
  // Unset: CudaKernelsFromEnv(), and Create logs the choice and its rule.
  std::optional<CudaKernels> kernels = std::nullopt;
  // Unset: QuantGemmFromEnv(), logged the same way. kInt8 needs compute capability 8.0.
  std::optional<QuantGemm> quant_gemm = std::nullopt;
  // Unset: PrefillAttentionFromEnv(), logged the same way. kF16 needs compute capability 8.0.
  std::optional<PrefillAttention> prefill_attention = std::nullopt;
};

// One op's share of the GPU's time over the ops timed (CudaBackend::TakeOpTimes).
struct OpTime {
  std::string op;  // The op (or the op's stage: a conversion, a weight's decoding).
  int64_t count = 0;
  double ms = 0;
};

// The passes of a step run as a CUDA graph (CudaBackend::BeginGraphStep).
enum class GraphPass {
  kDry,      // Host work only: checks, metadata staged, the step's signature; no launches.
  kCapture,  // The ops recorded into a new graph, which then runs.
  kEager,    // The ops run one by one, as outside a graph step.
};

class CudaBackend : public Backend {
 public:
  // Unavailable (with the CUDA runtime's reason) when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  // out[r] = argmax of logits row r (first on ties); logits [n_rows, n_vocab] on the
  // device, out is host memory of n_rows ids.
  virtual absl::Status Argmax(std::span<int32_t> out, const TensorView& logits) = 0;
  // Samples, or verifies a draft, for each row of logits [n_rows, n_vocab] on the device
  // as rows[r] says (kernels/sample_row.h); rows and out are host memory of n_rows
  // entries, `penalties` and `masks` host memory the rows index. Only ids, flags and
  // asked-for logprobs cross the bus, never the logits, which stay unmodified.
  virtual absl::Status Sample(std::span<SampleResult> out, const TensorView& logits, std::span<const SampleRow> rows,
                              std::span<const SamplePenalty> penalties = {}, std::span<const uint8_t> masks = {}) = 0;

  // CUDA graphs: a step's ops (the same calls with the same buffers and shapes) replayed as
  // one launch instead of one launch per op. The caller issues the step's ops between
  // BeginGraphStep(pass) and EndGraphStep, up to three times (model/graph_step.h):
  //  * kDry: every op does its host work (checks; its metadata staged in a pinned arena
  //    that restarts with each step, so the same step puts it at the same addresses) and
  //    hashes its arguments (buffers, shapes, staged addresses) into the step's
  //    signature, launching nothing. EndGraphStep launches the graph captured under that
  //    signature and answers true, or answers false when there is none.
  //  * kCapture: the ops are recorded into a new graph, kept under the signature, and
  //    launched: true. False when the step cannot be captured (a scratch buffer or the
  //    arena had to grow, a copy to or from pageable host memory): nothing ran.
  //  * kEager: the ops run as usual: true.
  // Inside a step, CopyOut's bytes and every op's results are ready only after EndGraphStep
  // (a graph runs as a whole); Synchronize waits for nothing until then. Argmax and Sample
  // are refused inside. At most kMaxGraphs graphs are kept (least recently used dropped).
  // Default: Unimplemented (a test double).
  static constexpr int kMaxGraphs = 64;
  virtual absl::Status BeginGraphStep(GraphPass) { return absl::UnimplementedError("no CUDA graphs here"); }
  virtual absl::StatusOr<bool> EndGraphStep() { return absl::UnimplementedError("no CUDA graphs here"); }
  // Closes a step whose ops failed: launches nothing, keeps no capture.
  virtual void AbortGraphStep() {}
  // Switches the kernels for the ops issued from now on (benchmarks compare both on one
  // loaded model).
  virtual void set_kernels(CudaKernels) {}
  // The most tokens a MoE layer routes on the device with the tuned kernels (RoutesExperts);
  // longer batches take the host-routed path (its experts' GEMMs on tensor cores). Default:
  // no limit. For benchmarks that compare the two paths on prefills, until a GPU run says
  // which is faster where.
  virtual void set_moe_device_max_tokens(int64_t) {}
  // Switches how the tuned kernels multiply quantized weights by many tokens (benchmarks
  // compare both on one loaded model). InvalidArgument for kInt8 below compute capability 8.0.
  virtual absl::Status set_quant_gemm(QuantGemm) { return absl::OkStatus(); }
  // Switches the tuned kernels' prefill attention (benchmarks compare both). InvalidArgument
  // for kF16 below compute capability 8.0.
  virtual absl::Status set_prefill_attention(PrefillAttention) { return absl::OkStatus(); }
  // Op timing, for benchmarks: while on, each op run eagerly (not in a graph capture)
  // records a CUDA event when its kernels are queued to end, and some ops between their
  // stages too (the activations' conversion, a weight's decoding). TakeOpTimes waits for the
  // stream and returns, per name, the time from the event before each event to it (its
  // kernels, plus any time the GPU waited for the host to launch them), most first, and
  // starts over.
  virtual void set_op_timing(bool) {}
  virtual std::vector<OpTime> TakeOpTimes() { return {}; }
  // Graphs captured so far and launched so far (for tests and logs).
  virtual int64_t graphs_captured() const { return 0; }
  virtual int64_t graphs_launched() const { return 0; }
};

}  // namespace cascade::kernels
