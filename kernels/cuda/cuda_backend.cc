// CudaBackend: the ops of kernels/ops.h on one GPU (cuda_backend.h). Dense weights go to
// cuBLAS (F32: SGEMM; F16/BF16: GemmEx with the activations converted to the weight's
// type and F32 accumulation); the block types and I4_G128 go to the weight-only GEMV kernel
// for up to kMaxGemvTokens tokens, and for more are decoded to F32 once per call and
// multiplied by GEMM. Stacked projections (LinearParts: Q/K/V, gate/up) share one GEMV
// launch. With the tuned kernels (CudaKernels::kTuned) F16/BF16 and Q8_0/Q4_0/Q4_1/Q4_K/
// Q6_K decode steps take their own GEMVs (and, by CASCADE_CUDA_QUANT_GEMM=int8, the block
// types' prefills int8 tensor-core tiles), prefill rows the tiled attention, and the
// residual sum joins the next norm.
//
// An op's host metadata (ids, positions, KV slots, block tables) is packed here and copied
// into scratch buffers that grow to the largest call; with the tuned kernels it is staged
// in a pinned arena and copied only when it changed since that slot's last copy. Graph steps (BeginGraphStep) record or
// replay the ops through kernels/cuda/step_graphs.h.
#include "kernels/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/quant_blocks.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cpu/block_codes.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/step_graphs.h"

namespace cascade::kernels {
namespace {

// The device's value tables (cuda_kernels.h) are the host's (core/quant_blocks.h).
constexpr uint32_t TableWord(const int8_t* t, int i) {
  uint32_t w = 0;
  for (int j = 3; j >= 0; --j) w = w << 8 | static_cast<uint8_t>(t[4 * i + j]);
  return w;
}
static_assert(TableWord(kIq4nlValues, 0) == cuda::kIq4nlWord0 && TableWord(kIq4nlValues, 1) == cuda::kIq4nlWord1 &&
              TableWord(kIq4nlValues, 2) == cuda::kIq4nlWord2 && TableWord(kIq4nlValues, 3) == cuda::kIq4nlWord3);
static_assert(TableWord(kMxfp4Values, 0) == cuda::kMxfp4Word0 && TableWord(kMxfp4Values, 1) == cuda::kMxfp4Word1 &&
              TableWord(kMxfp4Values, 2) == cuda::kMxfp4Word2 && TableWord(kMxfp4Values, 3) == cuda::kMxfp4Word3);

using cuda::Bits;

constexpr int64_t kMaxGemvTokens = 16;
// cuBLAS's workspace, set once so that a captured GEMM never allocates.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// The ops' codes in a graph step's signature.
enum OpCode : uint64_t {
  kOpLinear = 1,
  kOpRmsNorm,
  kOpRope,
  kOpSiluMul,
  kOpClampedSwiglu,
  kOpAddBias,
  kOpAdd,
  kOpScaledRows,
  kOpEmbedding,
  kOpWriteKv,
  kOpAttention,
  kOpCopyIn,
  kOpCopyOut,
  kOpUpload,
  kOpAddRmsNorm,
  kOpMoe,
  kOpRopeWriteKv,
  kOpGather,
  kOpSigmoidGated,
};
constexpr int64_t kKeysPerSplit = 256;  // Flash-decoding: keys per (row, head) block.
// With the tuned kernels, a sequence feeding more rows than this is a prefill chunk: its
// rows go to the tiled kernel.
constexpr int64_t kMaxSplitRowsPerSeq = 8;

// CASCADE_CUDA_SYNC=1: every op waits for its kernels (LastError); a debugging aid, slow.
bool SyncEachOpFromEnv() {
  const char* v = std::getenv("CASCADE_CUDA_SYNC");
  return v != nullptr && std::string_view(v) == "1";
}

absl::Status CudaError(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(StrCat(what, ": CUDA error ", static_cast<int>(err), " (", cudaGetErrorString(err), ")"));
}

absl::Status CublasError(cublasStatus_t st, std::string_view what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(StrCat(what, ": cuBLAS status ", static_cast<int>(st)));
}

#define CASCADE_CUDA_RETURN(expr, what)          \
  do {                                           \
    absl::Status _s = CudaError((expr), (what)); \
    if (!_s.ok()) return _s;                     \
  } while (0)

// The kernels take a DType's value as their weight code.
static_assert(cuda::kWQ4_1 == static_cast<int>(DType::kQ4_1) && cuda::kWI4G128 == static_cast<int>(DType::kI4_G128));
static_assert(cuda::kWQ4_K == static_cast<int>(DType::kQ4_K) && cuda::kWQ6_K == static_cast<int>(DType::kQ6_K));
static_assert(cuda::kWQ5_0 == static_cast<int>(DType::kQ5_0) && cuda::kWIQ4_XS == static_cast<int>(DType::kIQ4_XS));
static_assert(cuda::kWQ8_0 == static_cast<int>(DType::kQ8_0) && cuda::kWQ4_0 == static_cast<int>(DType::kQ4_0));
static_assert(cuda::kWF16 == static_cast<int>(DType::kF16) && cuda::kWBF16 == static_cast<int>(DType::kBF16));
static_assert(cuda::kWF8 == static_cast<int>(DType::kF8_E4M3) &&
              cuda::kWF8B128 == static_cast<int>(DType::kF8_E4M3_B128) &&
              cuda::kWMXFP4 == static_cast<int>(DType::kMXFP4));

// Dense types, Q8_0, I4_G128, F8_E4M3_B128 and every block-code type (decoded in
// registers: cuda_kernels.cu).
bool Supported(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kQ8_0 || d == DType::kI4_G128 ||
         d == DType::kF8_E4M3_B128 || cpu::HasBlockCodes(d);
}

float* F32(const TensorView& v) { return static_cast<float*>(v.data); }

// The kernels' view of a KV cache: f32, f16, q8_0 with head_dim % 32 == 0, or fp8_e4m3
// with its per-head scales.
absl::StatusOr<cuda::KvCacheRef> KvRef(const KvCacheLayer& cache) {
  cuda::KvCacheRef r{.k = cache.k.data, .v = cache.v.data, .head_dim = cache.head_dim};
  const DType t = cache.k.dtype;
  if (t == DType::kF32) {
    r.code = cuda::kWF32;
  } else if (t == DType::kF16) {
    r.code = cuda::kWF16;
  } else if (t == DType::kQ8_0 && cache.head_dim % 32 == 0) {
    r.code = cuda::kWQ8_0;
  } else if (t == DType::kF8_E4M3 && cache.k_scale.NumElements() == cache.n_kv_heads &&
             cache.v_scale.NumElements() == cache.n_kv_heads) {
    r.code = cuda::kWF8;
    r.k_scale = F32(cache.k_scale);
    r.v_scale = F32(cache.v_scale);
  } else {
    return absl::UnimplementedError(StrCat("CUDA attention: KV cache of ", DTypeName(t), " with head_dim ",
                                           cache.head_dim,
                                           " (reads f32, f16, q8_0 with head_dim % 32 == 0, "
                                           "fp8_e4m3 with a scale per KV head)"));
  }
  if (cache.v.dtype != t) return absl::InvalidArgumentError("CUDA attention: K and V caches of different dtypes");
  return r;
}

// Backend memory of a CudaBackend: a DeviceBuffer behind the Buffer interface.
class CudaBuffer final : public Buffer {
 public:
  explicit CudaBuffer(DeviceBuffer b) : Buffer(b.data(), b.bytes()), buf_(std::move(b)) {}

 private:
  DeviceBuffer buf_;
};

// Page-locked host memory (cudaHostAlloc): staging for copies in and out.
class PinnedBuffer final : public Buffer {
 public:
  PinnedBuffer(void* data, size_t bytes) : Buffer(data, bytes) {}
  ~PinnedBuffer() override { cudaFreeHost(data()); }
};

// A weight uploaded at load: the ops read the device copy, never the host source.
class CudaWeight final : public PreparedWeight {
 public:
  CudaWeight(const TensorView& source, DeviceBuffer buf, int device)
      : PreparedWeight(source),
        buf_(std::move(buf)),
        view_(buf_.data(), source.dtype, {source.Rows(), source.Cols()}, Device{DeviceKind::kCuda, device}) {}
  bool reads_source() const override { return false; }
  const TensorView& view() const { return view_; }

 private:
  DeviceBuffer buf_;
  TensorView view_;
};

// A MoE layer's held experts on the device: the kernels' arguments, with the table of each
// expert's matrices (cuda::MoeExpertRows) and the act-order matrices' input orders (args'
// order pointers point into `orders`) uploaded once.
class CudaExperts final : public PreparedExperts {
 public:
  CudaExperts(cuda::MoeArgs args, DeviceBuffer table, DeviceBuffer orders)
      : args_(args), table_(std::move(table)), orders_(std::move(orders)) {
    args_.experts = static_cast<const cuda::MoeExpertRows*>(table_.data());
  }
  const cuda::MoeArgs& args() const { return args_; }

 private:
  cuda::MoeArgs args_;
  DeviceBuffer table_, orders_;
};

// The input orders of one matrix kind of every held expert, [n_held, cols] (0, 1, 2, ...
// where an expert's matrix has none), or empty when none has one. Only integer matrices
// gather (the act-order GPTQ types); each order must be a permutation of [0, cols).
absl::StatusOr<std::vector<int32_t>> ExpertOrders(std::span<const Backend::ExpertWeights> experts,
                                                  std::span<const int32_t> Backend::ExpertWeights::*order, int64_t cols,
                                                  int code, std::string_view what) {
  const bool any = std::any_of(experts.begin(), experts.end(), [&](const auto& e) { return !(e.*order).empty(); });
  if (!any) return std::vector<int32_t>();
  if (!cuda::Q8GemvCode(code)) {
    return absl::UnimplementedError(StrCat("PrepareExperts: act-order ", what, " in ", DTypeName(DType(code))));
  }
  std::vector<int32_t> all;
  all.reserve(experts.size() * cols);
  for (const Backend::ExpertWeights& e : experts) {
    std::span<const int32_t> o = e.*order;
    if (o.empty()) {
      for (int64_t j = 0; j < cols; ++j) all.push_back(static_cast<int32_t>(j));
      continue;
    }
    const auto not_permutation = [&] {
      return absl::InvalidArgumentError(
          StrCat("PrepareExperts: ", what, "'s input order is not a permutation of its ", cols, " columns"));
    };
    if (o.size() != static_cast<size_t>(cols)) return not_permutation();
    std::vector<bool> seen(cols, false);
    for (const int32_t c : o) {
      if (c < 0 || c >= cols || seen[c]) return not_permutation();
      seen[c] = true;
    }
    all.insert(all.end(), o.begin(), o.end());
  }
  return all;
}

// An expert's bias: null for an empty view, else its f32 values in device memory, n of them.
absl::StatusOr<const float*> ExpertBias(const TensorView& v, int64_t n, std::string_view what) {
  if (v.data == nullptr) return nullptr;
  if (v.dtype != DType::kF32 || v.NumElements() != n || v.device.kind != DeviceKind::kCuda) {
    return absl::InvalidArgumentError(StrCat("PrepareExperts: ", what, " bias ", DTypeName(v.dtype), " ",
                                             v.ShapeString(), ": not ", n, " f32 values in device memory"));
  }
  return static_cast<const float*>(v.data);
}

// One matrix of every held expert: the same encoding and row length for all (the kernels
// take one of each), a block type with an integer form, `n_in` columns, rows [row0, row0 +
// n_rows) present. Returns the address of row0.
absl::StatusOr<const uint8_t*> ExpertMatrix(const PreparedWeight* w, int64_t row0, int64_t n_rows, int64_t n_in,
                                            int& code, int64_t& row_bytes, std::string_view what) {
  const auto* cw = dynamic_cast<const CudaWeight*>(w);
  if (cw == nullptr) return absl::InternalError(StrCat("PrepareExperts: ", what, " prepared by another backend"));
  const TensorView& v = cw->view();
  const int c = static_cast<int>(v.dtype);
  if (!cuda::Q8GemvCode(c) && !cuda::FloatChunkCode(c)) {
    return absl::UnimplementedError(StrCat("PrepareExperts: no device routing for ", what, " in ", DTypeName(v.dtype)));
  }
  if (row_bytes != 0 && (c != code || v.RowBytes() != row_bytes)) {
    return absl::UnimplementedError(StrCat("PrepareExperts: the experts' ", what, " matrices differ in type"));
  }
  if (v.Cols() != n_in || row0 < 0 || row0 + n_rows > v.Rows()) {
    return absl::InvalidArgumentError(StrCat("PrepareExperts: ", what, " ", v.ShapeString(), ": rows [", row0, ", ",
                                             row0 + n_rows, ") of ", n_in, " columns"));
  }
  code = c;
  row_bytes = v.RowBytes();
  return static_cast<const uint8_t*>(v.data) + row0 * row_bytes;
}

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(int device, CudaKernels kernels) : device_(device), kernels_(kernels) {}
  ~CudaBackendImpl() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    graphs_.reset();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (arena_ != nullptr) cudaFreeHost(arena_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    CASCADE_CUDA_RETURN(cudaSetDevice(device_), StrCat("cudaSetDevice(", device_, ")"));
    CASCADE_CUDA_RETURN(cudaStreamCreate(&stream_), "cudaStreamCreate");
    CASCADE_RETURN_IF_ERROR(CublasError(cublasCreate(&blas_), "cublasCreate"));
    CASCADE_RETURN_IF_ERROR(CublasError(cublasSetStream(blas_, stream_), "cublasSetStream"));
    CASCADE_ASSIGN_OR_RETURN(blas_workspace_, DeviceBuffer::Create(device_, kCublasWorkspaceBytes));
    CASCADE_RETURN_IF_ERROR(
        CublasError(cublasSetWorkspace(blas_, blas_workspace_.data(), blas_workspace_.bytes()), "cublasSetWorkspace"));
    graphs_ = std::make_unique<cuda::StepGraphs>(stream_);
    CASCADE_CUDA_RETURN(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device_),
                        "cudaDeviceGetAttribute");
    return absl::OkStatus();
  }

  absl::Status BeginGraphStep(GraphPass pass) override {
    Bind();
    if (graphs_->open()) return absl::FailedPreconditionError("a graph step is already open");
    // The arena restarts for the step (its staged metadata then sits at the same addresses
    // every time), and the slots' memo is void: graphs write the slots behind it.
    CASCADE_RETURN_IF_ERROR(Synchronize());
    for (std::vector<uint8_t>& u : uploaded_) u.clear();
    return graphs_->Begin(pass);
  }

  absl::StatusOr<bool> EndGraphStep() override {
    Bind();
    return graphs_->End();
  }

  void AbortGraphStep() override {
    Bind();
    graphs_->Abort();
  }

  void set_kernels(CudaKernels k) override {
    kernels_ = k;
    for (std::vector<uint8_t>& u : uploaded_) u.clear();  // The reference path copies behind the memo.
  }
  void set_op_timing(bool on) override {
    Bind();
    timing_ = on;
    marks_.clear();
    Mark("start");
  }
  std::vector<OpTime> TakeOpTimes() override {
    Bind();
    cudaStreamSynchronize(stream_);
    std::vector<OpTime> times;
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, events_[i - 1], events_[i]);
      auto it = std::find_if(times.begin(), times.end(), [&](const OpTime& t) { return t.op == marks_[i]; });
      if (it == times.end()) it = times.insert(times.end(), OpTime{.op = std::string(marks_[i])});
      ++it->count;
      it->ms += ms;
    }
    std::sort(times.begin(), times.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
    marks_.clear();
    Mark("start");
    return times;
  }
  int64_t graphs_captured() const override { return graphs_->captured(); }
  int64_t graphs_launched() const override { return graphs_->launched(); }

  Device device() const override { return Device{DeviceKind::kCuda, device_}; }
  int n_threads() const override { return 1; }
  bool SupportsWeight(DType dtype) const override { return Supported(dtype); }

  absl::Status Synchronize() override {
    Bind();
    if (graphs_->recording()) return absl::OkStatus();  // The step runs at EndGraphStep.
    CASCADE_CUDA_RETURN(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    staged_ = 0;  // Every staged upload has been read.
    return absl::OkStatus();
  }

  bool host_memory() const override { return false; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    graphs_->Abandon();  // No allocation inside a capture.
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Create(device_, std::max<size_t>(bytes, 64));
    if (!b.ok()) return absl::ResourceExhaustedError(std::string(b.status().message()));
    return std::unique_ptr<Buffer>(std::make_unique<CudaBuffer>(*std::move(b)));
  }

  absl::StatusOr<std::unique_ptr<Buffer>> AllocateStaging(size_t bytes) override {
    graphs_->Abandon();  // No allocation inside a capture.
    void* p = nullptr;
    CASCADE_CUDA_RETURN(cudaHostAlloc(&p, std::max<size_t>(bytes, 64), cudaHostAllocDefault),
                        StrCat("cudaHostAlloc(", bytes, ")"));
    return std::unique_ptr<Buffer>(std::make_unique<PinnedBuffer>(p, bytes));
  }

  // Stream-ordered, then waited for: the host side may be pinned (registered) memory that
  // the caller reuses as soon as this returns.
  absl::Status CopyIn(void* dst, const void* host, size_t bytes) override {
    Bind();
    if (bytes == 0) return absl::OkStatus();
    if (graphs_->recording()) {  // Not captured (the source may be reused at once): run eagerly.
      graphs_->Sign({kOpCopyIn, Bits(dst), Bits(host), bytes});
      graphs_->Abandon();
      return absl::OkStatus();
    }
    CASCADE_CUDA_RETURN(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "CopyIn");
    Mark("CopyIn");
    return Synchronize();
  }

  absl::Status CopyOut(void* host, const void* src, size_t bytes) override {
    Bind();
    if (bytes == 0) return absl::OkStatus();
    graphs_->Sign({kOpCopyOut, Bits(host), Bits(src), bytes});
    if (graphs_->capturing() && !Pinned(host)) graphs_->Abandon();
    if (graphs_->dry()) return absl::OkStatus();
    CASCADE_CUDA_RETURN(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyOut");
    Mark("CopyOut");
    return Synchronize();
  }

  // Uploads the weight as stored (quantized blocks stay quantized); the caller may then
  // drop the host copy.
  absl::StatusOr<std::unique_ptr<PreparedWeight>> PrepareWeight(const TensorView& weight) override {
    if (!Supported(weight.dtype)) {
      return absl::UnimplementedError(StrCat("PrepareWeight: no CUDA kernel for ", DTypeName(weight.dtype)));
    }
    const size_t bytes = static_cast<size_t>(weight.NumBytes());
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(device_, std::max<size_t>(bytes, 64));
    if (!buf.ok())
      return absl::ResourceExhaustedError(StrCat("weight ", weight.ShapeString(), ": ", buf.status().message()));
    CASCADE_RETURN_IF_ERROR(buf->Upload(weight.data, bytes));
    return std::unique_ptr<PreparedWeight>(std::make_unique<CudaWeight>(weight, *std::move(buf), device_));
  }

  absl::StatusOr<std::unique_ptr<PreparedExperts>> PrepareExperts(std::span<const ExpertWeights> experts, int64_t n_ff,
                                                                  const ExpertActivation& activation) override {
    Bind();
    if (experts.empty() || experts[0].down == nullptr) return absl::UnimplementedError("PrepareExperts: none held");
    cuda::MoeArgs a;
    a.swiglu_alpha = activation.swiglu_alpha;
    a.swiglu_limit = activation.swiglu_limit;
    a.n_embd = experts[0].down->n_out();
    a.n_ff = n_ff;
    a.n_held = static_cast<int64_t>(experts.size());
    if (a.n_embd % 32 != 0 || n_ff % 32 != 0) {
      return absl::UnimplementedError(
          StrCat("PrepareExperts: hidden ", a.n_embd, " / expert FFN ", n_ff, " columns are not multiples of 32"));
    }
    std::vector<cuda::MoeExpertRows> rows;
    for (const ExpertWeights& e : experts) {
      cuda::MoeExpertRows r;
      CASCADE_ASSIGN_OR_RETURN(
          r.gate, ExpertMatrix(e.gate, e.gate_row0, n_ff, a.n_embd, a.gate_code, a.gate_row_bytes, "gate"));
      CASCADE_ASSIGN_OR_RETURN(r.up, ExpertMatrix(e.up, e.up_row0, n_ff, a.n_embd, a.up_code, a.up_row_bytes, "up"));
      CASCADE_ASSIGN_OR_RETURN(r.down, ExpertMatrix(e.down, 0, a.n_embd, n_ff, a.down_code, a.down_row_bytes, "down"));
      CASCADE_ASSIGN_OR_RETURN(r.gate_bias, ExpertBias(e.gate_bias, n_ff, "gate"));
      CASCADE_ASSIGN_OR_RETURN(r.up_bias, ExpertBias(e.up_bias, n_ff, "up"));
      CASCADE_ASSIGN_OR_RETURN(r.down_bias, ExpertBias(e.down_bias, a.n_embd, "down"));
      rows.push_back(r);
    }
    if (cuda::FloatChunkCode(a.gate_code) != cuda::FloatChunkCode(a.up_code)) {
      return absl::UnimplementedError(StrCat("PrepareExperts: gate in ", DTypeName(experts[0].gate->dtype()),
                                             " and up in ", DTypeName(experts[0].up->dtype()),
                                             ": one float and one quantized"));
    }
    const size_t bytes = rows.size() * sizeof(cuda::MoeExpertRows);
    CASCADE_ASSIGN_OR_RETURN(DeviceBuffer table, DeviceBuffer::Create(device_, bytes));
    CASCADE_RETURN_IF_ERROR(table.Upload(rows.data(), bytes));
    // Act-order orders, uploaded one after another; up shares gate's when they are equal
    // (GPTQ orders by the input's statistics, which gate and up share).
    using EW = ExpertWeights;
    CASCADE_ASSIGN_OR_RETURN(std::vector<int32_t> gate,
                             ExpertOrders(experts, &EW::gate_order, a.n_embd, a.gate_code, "gate"));
    CASCADE_ASSIGN_OR_RETURN(std::vector<int32_t> up, ExpertOrders(experts, &EW::up_order, a.n_embd, a.up_code, "up"));
    CASCADE_ASSIGN_OR_RETURN(std::vector<int32_t> down,
                             ExpertOrders(experts, &EW::down_order, n_ff, a.down_code, "down"));
    const bool shared = up == gate;
    std::vector<int32_t> all = gate;
    if (!shared) all.insert(all.end(), up.begin(), up.end());
    all.insert(all.end(), down.begin(), down.end());
    DeviceBuffer orders;
    if (!all.empty()) {
      CASCADE_ASSIGN_OR_RETURN(orders, DeviceBuffer::Create(device_, all.size() * sizeof(int32_t)));
      CASCADE_RETURN_IF_ERROR(orders.Upload(all.data(), all.size() * sizeof(int32_t)));
      const auto* base = static_cast<const int32_t*>(orders.data());
      if (!gate.empty()) a.gate_order = base;
      if (!up.empty()) a.up_order = shared ? a.gate_order : base + gate.size();
      if (!down.empty()) a.down_order = base + all.size() - down.size();
    }
    return std::unique_ptr<PreparedExperts>(std::make_unique<CudaExperts>(a, std::move(table), std::move(orders)));
  }

  bool RoutesExperts(int64_t n_tokens) const override {
    return kernels_ == CudaKernels::kTuned && n_tokens > 0 && n_tokens <= moe_device_max_tokens_;
  }
  void set_moe_device_max_tokens(int64_t n) override { moe_device_max_tokens_ = n; }
  absl::Status set_quant_gemm(QuantGemm g) override {
    if (g == QuantGemm::kInt8) CASCADE_RETURN_IF_ERROR(NeedTensorCores("CASCADE_CUDA_QUANT_GEMM=int8", "int8 tiles"));
    quant_gemm_ = g;
    return absl::OkStatus();
  }
  absl::Status set_prefill_attention(PrefillAttention p) override {
    if (p == PrefillAttention::kF16) {
      CASCADE_RETURN_IF_ERROR(NeedTensorCores("CASCADE_CUDA_PREFILL_ATTENTION=f16", "tensor-core tiles"));
    }
    prefill_attention_ = p;
    return absl::OkStatus();
  }
  // The mma.sync kernels need compute capability 8.0: InvalidArgument naming `choice` below it.
  absl::Status NeedTensorCores(std::string_view choice, std::string_view kernels) const {
    if (cc_major_ >= 8) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat(choice, ": cuda:", device_, " has compute capability ", cc_major_,
                                             ".x; the ", kernels, " need 8.0 or later"));
  }

  // Tokens a MoE pass takes at most: its scratch grows with tokens x top k x (n_ff + n_embd)
  // floats (~100 MiB at 512 tokens for Qwen3-235B-A22B's 8 of 128 experts), and each pass reads
  // the chosen experts' weights once, so longer batches run in passes of this many.
  static constexpr int64_t kMoePassTokens = 512;

  absl::Status RoutedExperts(TensorView acc, const TensorView& x, const TensorView& logits,
                             const PreparedExperts& experts, const MoeRouting& routing, void* load) override {
    Bind();
    const auto* ex = dynamic_cast<const CudaExperts*>(&experts);
    if (ex == nullptr) return absl::InternalError("RoutedExperts: experts prepared by another backend");
    cuda::MoeArgs a = ex->args();
    a.n_experts = routing.n_experts;
    a.top_k = routing.top_k;
    a.expert_begin = routing.expert_begin;
    a.norm = routing.norm_topk;
    const int64_t n = x.Rows();
    if (!RoutesExperts(n)) return absl::FailedPreconditionError(StrCat("RoutedExperts: not for ", n, " tokens now"));
    if (x.Cols() != a.n_embd || acc.Rows() != n || acc.Cols() != a.n_embd || logits.Rows() != n ||
        logits.Cols() != a.n_experts || a.n_experts > cuda::kMaxMoeExperts || a.top_k < 1 ||
        a.top_k > std::min(cuda::kMaxMoeTopK, a.n_experts) || a.expert_begin < 0 ||
        a.expert_begin + a.n_held > a.n_experts) {
      return absl::InvalidArgumentError(StrCat("RoutedExperts: x ", x.ShapeString(), ", acc ", acc.ShapeString(),
                                               ", logits ", logits.ShapeString(), ", top ", a.top_k, " of ",
                                               a.n_experts, " experts, ", a.n_held, " held from ", a.expert_begin));
    }
    for (int64_t t0 = 0; t0 < n; t0 += kMoePassTokens) {
      const int64_t rows = std::min(kMoePassTokens, n - t0);
      // Prefill passes (more tokens than the GEMVs take) by the int8 tiles, when chosen.
      a.mma = quant_gemm_ == QuantGemm::kInt8 && rows > kMaxGemvTokens;
      CASCADE_RETURN_IF_ERROR(RoutedExpertsPass(acc.RowSlice(t0, t0 + rows), x.RowSlice(t0, t0 + rows),
                                                logits.RowSlice(t0, t0 + rows), *ex, a, load));
    }
    return absl::OkStatus();
  }

  // One pass of RoutedExperts over x's rows.
  absl::Status RoutedExpertsPass(TensorView acc, const TensorView& x, const TensorView& logits, const CudaExperts& ex,
                                 const cuda::MoeArgs& a, void* load) {
    // The work areas, carved out of one scratch buffer at 256-byte boundaries.
    const int64_t n = x.Rows(), m = n * a.top_k;
    size_t end = 0;
    const auto take = [&](size_t bytes) { return std::exchange(end, end + ((bytes + 255) & ~size_t{255})); };
    const size_t x_rows = m * a.n_embd / 32 * sizeof(cuda::Q8Block);  // Act-order: gathered per row.
    const size_t chosen = take(m * 4), weights = take(m * 4), entry_row = take(m * 4),
                 expert_rows = take((a.n_held + 1) * 4), expert_tiles = take((a.n_held + 1) * 4),
                 token_of_row = take(m * 4), xq = take(n * a.n_embd / 32 * sizeof(cuda::Q8Block)),
                 xg = take(a.gate_order ? x_rows : 0), xu = take(a.up_order && a.up_order != a.gate_order ? x_rows : 0),
                 h = take(m * a.n_ff * 4), hq = take(m * a.n_ff / 32 * sizeof(cuda::Q8Block)),
                 out = take(m * a.n_embd * 4);
    auto* base = static_cast<uint8_t*>(Scratch(kMoe, end));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    const cuda::MoeWork w{.chosen = reinterpret_cast<int32_t*>(base + chosen),
                          .weights = reinterpret_cast<float*>(base + weights),
                          .entry_row = reinterpret_cast<int32_t*>(base + entry_row),
                          .expert_rows = reinterpret_cast<int32_t*>(base + expert_rows),
                          .expert_tiles = reinterpret_cast<int32_t*>(base + expert_tiles),
                          .token_of_row = reinterpret_cast<int32_t*>(base + token_of_row),
                          .xq = reinterpret_cast<cuda::Q8Block*>(base + xq),
                          .xg = reinterpret_cast<cuda::Q8Block*>(base + xg),
                          .xu = reinterpret_cast<cuda::Q8Block*>(base + xu),
                          .h = reinterpret_cast<float*>(base + h),
                          .hq = reinterpret_cast<cuda::Q8Block*>(base + hq),
                          .out = reinterpret_cast<float*>(base + out)};
    graphs_->Sign({kOpMoe, Bits(acc.data), Bits(x.data), Bits(logits.data), Bits(load), Bits(&ex), Dims(x),
                   static_cast<uint64_t>(a.n_experts), static_cast<uint64_t>(a.top_k),
                   static_cast<uint64_t>(a.expert_begin), static_cast<uint64_t>(a.norm), Bits(base),
                   static_cast<uint64_t>(a.mma)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::MoeRoutedExperts(F32(acc), F32(x), F32(logits), static_cast<int32_t*>(load), n, a, w, stream_);
    return LastError("MoeRoutedExperts");
  }

  absl::Status Linear(TensorView out, const TensorView& in, const PreparedWeight& weight,
                      const TensorView& bias) override {
    const auto* w = dynamic_cast<const CudaWeight*>(&weight);
    if (w == nullptr) return absl::InternalError("Linear: weight prepared by another backend");
    return Linear(out, in, w->view(), bias);
  }

  absl::Status Embedding(TensorView out, const PreparedWeight& table, std::span<const int32_t> ids) override {
    const auto* w = dynamic_cast<const CudaWeight*>(&table);
    if (w == nullptr) return absl::InternalError("Embedding: table prepared by another backend");
    return Embedding(out, w->view(), ids);
  }

  absl::Status Linear(TensorView out, const TensorView& in, const TensorView& weight, const TensorView& bias) override {
    if (weight.Cols() != in.Cols() || out.Rows() != in.Rows() || out.Cols() != weight.Rows()) {
      return absl::InvalidArgumentError(
          StrCat("Linear: in ", in.ShapeString(), ", weight ", weight.ShapeString(), ", out ", out.ShapeString()));
    }
    return LinearStacked({&out, 1}, in, weight, {&bias, 1});
  }

  absl::Status LinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                           std::span<const TensorView> biases) override {
    const auto* w = dynamic_cast<const CudaWeight*>(&weight);
    if (w == nullptr) return absl::InternalError("LinearParts: weight prepared by another backend");
    CASCADE_RETURN_IF_ERROR(CheckLinearParts(outs, in, weight, biases));
    if (outs.size() > static_cast<size_t>(cuda::kMaxGemvParts)) {
      return absl::InvalidArgumentError(
          StrCat("LinearParts: ", outs.size(), " parts (at most ", cuda::kMaxGemvParts, ")"));
    }
    return LinearStacked(outs, in, w->view(), biases);
  }

  absl::Status RmsNorm(TensorView out, const TensorView& in, const TensorView& weight, float eps) override {
    Bind();
    graphs_->Sign({kOpRmsNorm, Bits(out.data), Bits(in.data), Bits(weight.data), Dims(in), Bits(eps)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::RmsNorm(F32(out), F32(in), F32(weight), in.Rows(), in.Cols(), eps, stream_);
    return LastError("RmsNorm");
  }

  // Tuned: one fused pass; reference: AddInPlace then RmsNorm (Backend's default).
  absl::Status AddRmsNorm(TensorView out, TensorView hidden, const TensorView& add, const TensorView& weight,
                          float eps) override {
    if (kernels_ != CudaKernels::kTuned) return Backend::AddRmsNorm(out, hidden, add, weight, eps);
    Bind();
    graphs_->Sign(
        {kOpAddRmsNorm, Bits(out.data), Bits(hidden.data), Bits(add.data), Bits(weight.data), Dims(hidden), Bits(eps)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::AddRmsNorm(F32(out), F32(hidden), F32(add), F32(weight), hidden.Rows(), hidden.Cols(), eps, stream_);
    return LastError("AddRmsNorm");
  }

  absl::Status Rope(TensorView x, std::span<const int32_t> positions, const RopeParams& params) override {
    Bind();
    const int64_t n_tokens = x.Rows();
    if (static_cast<int64_t>(positions.size()) != n_tokens) {
      return absl::InvalidArgumentError(StrCat("Rope: ", positions.size(), " positions for ", n_tokens, " rows"));
    }
    int32_t* pos = Upload(kPositions, positions);
    float* freq = Upload(kFreq, params.inv_freq);
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign(
        {kOpRope, Bits(x.data), Dims(x), static_cast<uint64_t>(params.head_dim), static_cast<uint64_t>(params.style)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::Rope(F32(x), pos, freq, n_tokens, x.Cols() / params.head_dim, params.head_dim,
               params.style == RopeStyle::kAdjacentPairs ? 0 : 1, stream_);
    return LastError("Rope");
  }

  absl::Status GatherColumns(TensorView out, const TensorView& in, std::span<const int32_t> cols) override {
    Bind();
    CASCADE_RETURN_IF_ERROR(CheckGatherColumns(out, in, cols));
    const int32_t* dev_cols = Upload(kGatherCols, cols);
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpGather, Bits(out.data), Bits(in.data), Dims(in), static_cast<uint64_t>(cols.size())});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::GatherColumns(F32(out), F32(in), dev_cols, in.Rows(), in.Cols(), out.Cols(), stream_);
    return LastError("GatherColumns");
  }

  absl::Status SiluMul(TensorView out, const TensorView& gate, const TensorView& up) override {
    Bind();
    graphs_->Sign({kOpSiluMul, Bits(out.data), Bits(gate.data), Bits(up.data), Dims(gate)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::SiluMul(F32(out), F32(gate), F32(up), gate.NumElements(), stream_);
    return LastError("SiluMul");
  }

  absl::Status ClampedSwiglu(TensorView out, const TensorView& gate, const TensorView& up, float alpha,
                             float limit) override {
    Bind();
    if (gate.NumElements() != up.NumElements() || out.NumElements() != gate.NumElements()) {
      return absl::InvalidArgumentError(
          StrCat("ClampedSwiglu: out ", out.ShapeString(), ", gate ", gate.ShapeString(), ", up ", up.ShapeString()));
    }
    graphs_->Sign(
        {kOpClampedSwiglu, Bits(out.data), Bits(gate.data), Bits(up.data), Dims(gate), Bits(alpha), Bits(limit)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::ClampedSwiglu(F32(out), F32(gate), F32(up), gate.NumElements(), alpha, limit, stream_);
    return LastError("ClampedSwiglu");
  }

  absl::Status AddBias(TensorView out, const TensorView& bias) override {
    Bind();
    CASCADE_RETURN_IF_ERROR(CheckAddBias(out, bias));
    graphs_->Sign({kOpAddBias, Bits(out.data), Bits(bias.data), Dims(out)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::AddBias(F32(out), F32(bias), out.Rows(), out.Cols(), stream_);
    return LastError("AddBias");
  }

  absl::Status AddInPlace(TensorView out, const TensorView& in) override {
    Bind();
    graphs_->Sign({kOpAdd, Bits(out.data), Bits(in.data), Dims(out)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::Add(F32(out), F32(in), out.NumElements(), stream_);
    return LastError("AddInPlace");
  }

  absl::Status AddScaledRows(TensorView out, const TensorView& in, std::span<const int32_t> rows,
                             std::span<const float> scales) override {
    Bind();
    CASCADE_RETURN_IF_ERROR(CheckScaledRows(out, in, rows, scales));
    const int32_t* dev_rows = Upload(kScatterRows, rows);
    const float* dev_scales = Upload(kScatterScales, scales);
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpScaledRows, Bits(out.data), Bits(in.data), Dims(in)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::AddScaledRows(F32(out), F32(in), dev_rows, dev_scales, in.Rows(), in.Cols(), stream_);
    return LastError("AddScaledRows");
  }

  // The tuned kernels scale by the gate on the device; the reference path (the one measured
  // on a GPU) reads it back to the host, as Backend's default does.
  absl::Status AddSigmoidGatedRows(TensorView out, const TensorView& in, const TensorView& gate) override {
    if (kernels_ != CudaKernels::kTuned) return Backend::AddSigmoidGatedRows(out, in, gate);
    Bind();
    CASCADE_RETURN_IF_ERROR(CheckSigmoidGatedRows(out, in, gate));
    graphs_->Sign({kOpSigmoidGated, Bits(out.data), Bits(in.data), Bits(gate.data), Dims(in)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::AddSigmoidGatedRows(F32(out), F32(in), F32(gate), in.Rows(), in.Cols(), stream_);
    return LastError("AddSigmoidGatedRows");
  }

  absl::Status Embedding(TensorView out, const TensorView& table, std::span<const int32_t> ids) override {
    Bind();
    if (!Supported(table.dtype))
      return absl::UnimplementedError(StrCat("Embedding: no CUDA kernel for ", DTypeName(table.dtype)));
    for (int32_t id : ids) {
      if (id < 0 || id >= table.Rows()) {
        return absl::InvalidArgumentError(StrCat("Embedding: id ", id, " is outside [0, ", table.Rows(), ")"));
      }
    }
    int32_t* dev_ids = Upload(kIds, ids);
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpEmbedding, Bits(out.data), Bits(table.data), static_cast<uint64_t>(table.dtype), Dims(out)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::Embedding(F32(out), table.data, static_cast<int>(table.dtype), dev_ids, static_cast<int64_t>(ids.size()),
                    table.Cols(), stream_);
    return LastError("Embedding");
  }

  absl::Status WriteKv(KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                       std::span<const AttentionSeq> seqs) override {
    Bind();
    CASCADE_RETURN_IF_ERROR(ListSlots(cache, seqs));
    const std::vector<int32_t>& slots = slots_;
    CASCADE_ASSIGN_OR_RETURN(const cuda::KvCacheRef ref, KvRef(cache));
    int32_t* dev = Upload(kSlots, std::span<const int32_t>(slots));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpWriteKv, Bits(ref.k), Bits(ref.v), static_cast<uint64_t>(ref.code), Bits(ref.k_scale),
                   Bits(ref.v_scale), Bits(k.data), Bits(v.data), Dims(k)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::WriteKv(ref, F32(k), F32(v), dev, static_cast<int64_t>(slots.size()), cache.n_kv_heads * cache.head_dim,
                  stream_);
    return LastError("WriteKv");
  }

  // The tuned kernels fuse the three ops into one launch (same bits); the reference path
  // runs them one by one.
  absl::Status RopeWriteKv(TensorView q, TensorView k, const TensorView& v, std::span<const int32_t> positions,
                           const RopeParams& params, const HeadNorms& norms, KvCacheLayer& cache,
                           std::span<const AttentionSeq> seqs) override {
    if (kernels_ != CudaKernels::kTuned) return Backend::RopeWriteKv(q, k, v, positions, params, norms, cache, seqs);
    Bind();
    const int64_t n = q.Rows(), kv_dim = cache.n_kv_heads * cache.head_dim;
    const bool normed = norms.q.data != nullptr;
    if (static_cast<int64_t>(positions.size()) != n || k.Rows() != n || v.Rows() != n || k.Cols() != kv_dim ||
        v.Cols() != kv_dim || params.head_dim != cache.head_dim || q.Cols() % params.head_dim != 0 ||
        (normed && (norms.q.NumElements() != params.head_dim || norms.k.NumElements() != params.head_dim))) {
      return absl::InvalidArgumentError(StrCat("RopeWriteKv: q ", q.ShapeString(), ", k ", k.ShapeString(), ", v ",
                                               v.ShapeString(), ", ", positions.size(), " positions, the cache's ",
                                               cache.n_kv_heads, " KV heads of ", cache.head_dim, ", head norms ",
                                               norms.q.ShapeString(), " and ", norms.k.ShapeString()));
    }
    CASCADE_RETURN_IF_ERROR(ListSlots(cache, seqs));
    if (static_cast<int64_t>(slots_.size()) != n) {
      return absl::InvalidArgumentError(StrCat("RopeWriteKv: ", slots_.size(), " new positions for ", n, " rows"));
    }
    CASCADE_ASSIGN_OR_RETURN(const cuda::KvCacheRef ref, KvRef(cache));
    int32_t* pos = Upload(kPositions, positions);
    float* freq = Upload(kFreq, params.inv_freq);
    int32_t* slots = Upload(kSlots, std::span<const int32_t>(slots_));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpRopeWriteKv, Bits(q.data), Bits(k.data), Bits(v.data), Dims(q), Dims(k),
                   static_cast<uint64_t>(params.head_dim), static_cast<uint64_t>(params.style), Bits(ref.k),
                   Bits(ref.v), static_cast<uint64_t>(ref.code), Bits(ref.k_scale), Bits(ref.v_scale),
                   Bits(norms.q.data), Bits(norms.k.data), static_cast<uint64_t>(std::bit_cast<uint32_t>(norms.eps))});
    if (graphs_->dry()) return absl::OkStatus();
    const int style = params.style == RopeStyle::kAdjacentPairs ? 0 : 1;
    const int64_t n_heads = q.Cols() / params.head_dim;
    if (normed) {
      cuda::NormRopeWriteKv(F32(q), F32(k), F32(v), F32(norms.q), F32(norms.k), norms.eps, pos, freq, n, n_heads,
                            cache.n_kv_heads, params.head_dim, style, ref, slots, stream_);
    } else {
      cuda::RopeWriteKv(F32(q), F32(k), F32(v), pos, freq, n, n_heads, cache.n_kv_heads, params.head_dim, style, ref,
                        slots, stream_);
    }
    return LastError("RopeWriteKv");
  }

  absl::Status Attention(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                         std::span<const AttentionSeq> seqs, const AttentionParams& params) override {
    Bind();
    if (cache.head_dim < 1 || cache.head_dim > 256 || params.n_heads % cache.n_kv_heads != 0) {
      return absl::UnimplementedError(StrCat("Attention: head_dim ", cache.head_dim, " with ", params.n_heads,
                                             " heads over ", cache.n_kv_heads, " KV heads (needs head_dim <= 256)"));
    }
    std::vector<int32_t>&row_pos = row_pos_, &row_table = row_table_, &tables = tables_;
    row_pos.clear();
    row_table.clear();
    tables.clear();
    // Tuned kernels: a prefill chunk's rows go to the tiled kernel, kTileRows at a time;
    // the others (decode and verification rows) to the split kernel, as a row list.
    const bool tiled = kernels_ == CudaKernels::kTuned && cuda::TiledAttentionHeadDim(cache.head_dim);
    split_rows_.clear();
    tiles_.clear();
    int64_t max_keys = 0;
    for (const AttentionSeq& s : seqs) {
      const int32_t off = static_cast<int32_t>(tables.size());
      tables.insert(tables.end(), s.block_table.begin(), s.block_table.end());
      const bool prefill = tiled && s.n_new > kMaxSplitRowsPerSeq;
      for (int64_t i = 0; i < s.n_new; ++i) {
        if (!prefill && tiled) split_rows_.push_back(static_cast<int32_t>(row_pos.size()));
        if (prefill && i % cuda::kTileRows == 0) {
          tiles_.push_back({static_cast<int32_t>(row_pos.size()),
                            static_cast<int32_t>(std::min<int64_t>(cuda::kTileRows, s.n_new - i)), off,
                            static_cast<int32_t>(s.n_past + i)});
        }
        row_pos.push_back(static_cast<int32_t>(s.n_past + i));
        row_table.push_back(off);
      }
      if (!prefill) max_keys = std::max(max_keys, s.n_past + s.n_new);
    }
    cuda::AttentionArgs a;
    CASCADE_ASSIGN_OR_RETURN(const cuda::KvCacheRef ref, KvRef(cache));
    a.kv_code = ref.code;
    a.k_scale = ref.k_scale;
    a.v_scale = ref.v_scale;
    a.out = F32(out);
    a.q = F32(q);
    a.k_cache = cache.k.data;
    a.v_cache = cache.v.data;
    a.row_pos = Upload(kRowPos, std::span<const int32_t>(row_pos));
    a.row_table = Upload(kRowTable, std::span<const int32_t>(row_table));
    a.tables = Upload(kTables, std::span<const int32_t>(tables));
    a.n_rows = static_cast<int64_t>(row_pos.size());
    a.n_heads = params.n_heads;
    a.n_kv_heads = cache.n_kv_heads;
    a.head_dim = cache.head_dim;
    a.block_size = cache.block_size;
    a.keys_per_split = kKeysPerSplit;
    a.n_splits = std::max<int64_t>(1, (max_keys + kKeysPerSplit - 1) / kKeysPerSplit);
    a.scale = params.scale;
    a.window = params.window;
    a.kept_prefix = params.window > 0 ? params.kept_prefix : 0;
    if (params.sinks.data != nullptr) {
      if (params.sinks.dtype != DType::kF32 || params.sinks.NumElements() != params.n_heads) {
        return absl::InvalidArgumentError(
            StrCat("Attention: sinks ", params.sinks.ShapeString(), " for ", params.n_heads, " heads"));
      }
      a.sinks = F32(params.sinks);
    }
    a.partial = static_cast<float*>(
        Scratch(kPartial, static_cast<size_t>(a.n_rows * a.n_heads * a.n_splits * (a.head_dim + 2)) * sizeof(float)));
    if (tiled) {
      a.split_rows = Upload(kSplitRows, std::span<const int32_t>(split_rows_));
      a.n_split_rows = static_cast<int64_t>(split_rows_.size());
    }
    const cuda::PrefillTile* dev_tiles =
        tiles_.empty() ? nullptr : Upload(kTiles, std::span<const cuda::PrefillTile>(tiles_));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpAttention,
                   Bits(a.out),
                   Bits(a.q),
                   Bits(a.k_cache),
                   Bits(a.v_cache),
                   Bits(a.partial),
                   static_cast<uint64_t>(a.kv_code),
                   Bits(a.k_scale),
                   Bits(a.v_scale),
                   static_cast<uint64_t>(a.n_rows),
                   static_cast<uint64_t>(a.n_heads),
                   static_cast<uint64_t>(a.n_kv_heads),
                   static_cast<uint64_t>(a.head_dim),
                   static_cast<uint64_t>(a.block_size),
                   static_cast<uint64_t>(a.n_splits),
                   Bits(a.scale),
                   static_cast<uint64_t>(a.window),
                   static_cast<uint64_t>(a.kept_prefix),
                   Bits(a.sinks),
                   Bits(a.split_rows),
                   static_cast<uint64_t>(a.n_split_rows),
                   tiles_.size(),
                   static_cast<uint64_t>(prefill_attention_)});
    if (graphs_->dry()) return absl::OkStatus();
    cuda::Attention(a, stream_);
    if (prefill_attention_ == PrefillAttention::kF16) {
      cuda::AttentionTilesF16(a, dev_tiles, static_cast<int64_t>(tiles_.size()), stream_);
    } else {
      cuda::AttentionTiles(a, dev_tiles, static_cast<int64_t>(tiles_.size()), stream_);
    }
    return LastError("Attention");
  }

  absl::Status Argmax(std::span<int32_t> out, const TensorView& logits) override {
    Bind();
    if (graphs_->open()) return absl::FailedPreconditionError("Argmax inside a graph step");
    const int64_t n_rows = logits.Rows();
    if (static_cast<int64_t>(out.size()) != n_rows) return absl::InvalidArgumentError("Argmax: one id per row");
    auto* dev = static_cast<int32_t*>(Scratch(kArgmax, static_cast<size_t>(n_rows) * sizeof(int32_t)));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    cuda::Argmax(dev, F32(logits), n_rows, logits.Cols(), stream_);
    CASCADE_RETURN_IF_ERROR(LastError("Argmax"));
    CASCADE_CUDA_RETURN(cudaMemcpyAsync(out.data(), dev, out.size_bytes(), cudaMemcpyDeviceToHost, stream_),
                        "Argmax copy");
    return Synchronize();
  }

  absl::Status Sample(std::span<SampleResult> out, const TensorView& logits, std::span<const SampleRow> rows,
                      std::span<const SamplePenalty> penalties, std::span<const uint8_t> masks) override {
    Bind();
    if (graphs_->open()) return absl::FailedPreconditionError("Sample inside a graph step");
    const int64_t n_rows = logits.Rows(), n_vocab = logits.Cols();
    if (static_cast<int64_t>(out.size()) != n_rows || static_cast<int64_t>(rows.size()) != n_rows) {
      return absl::InvalidArgumentError("Sample: one SampleRow and one SampleResult per logits row");
    }
    bool shape = false;
    for (const SampleRow& r : rows) {
      if (r.draft >= n_vocab)
        return absl::InvalidArgumentError(StrCat("Sample: draft ", r.draft, " outside the vocabulary"));
      if (r.n_logprobs < 0 || r.n_logprobs > kMaxTopLogprobs)
        return absl::InvalidArgumentError(StrCat("Sample: n_logprobs ", r.n_logprobs, " outside [0, 20]"));
      if (r.penalty_begin < 0 || r.n_penalties < 0 ||
          static_cast<size_t>(r.penalty_begin) + r.n_penalties > penalties.size()) {
        return absl::InvalidArgumentError("Sample: a row's penalties lie outside the list");
      }
      if (r.mask_offset >= 0 && (r.mask_bits < 0 || r.mask_bits % 8 != 0 ||
                                 static_cast<size_t>(r.mask_offset) + r.mask_bits / 8 > masks.size())) {
        return absl::InvalidArgumentError("Sample: a row's mask lies outside the list");
      }
      shape |= r.n_penalties > 0 || r.mask_offset >= 0;
    }
    for (const SamplePenalty& p : penalties) {
      if (p.token < 0 || p.token >= n_vocab)
        return absl::InvalidArgumentError(StrCat("Sample: penalised token ", p.token, " outside the vocabulary"));
    }
    const SampleRow* dev_rows = Upload(kSampleRows, rows);
    const SamplePenalty* dev_penalties = Upload(kPenalties, penalties);
    const uint8_t* dev_masks = Upload(kMasks, masks);
    float* shaped = shape ? static_cast<float*>(Scratch(kShaped, static_cast<size_t>(n_rows * n_vocab) * 4)) : nullptr;
    auto* dev_out = static_cast<SampleResult*>(Scratch(kSampleOut, out.size_bytes()));
    CASCADE_RETURN_IF_ERROR(ScratchError());
    cuda::Sample(dev_out, F32(logits), shaped, dev_rows, dev_penalties, dev_masks, shape, n_rows, n_vocab, stream_);
    CASCADE_RETURN_IF_ERROR(LastError("Sample"));
    CASCADE_CUDA_RETURN(cudaMemcpyAsync(out.data(), dev_out, out.size_bytes(), cudaMemcpyDeviceToHost, stream_),
                        "Sample copy");
    return Synchronize();
  }

 private:
  enum ScratchSlot {
    kConvert,
    kDequant,
    kPositions,
    kFreq,
    kIds,
    kSlots,
    kRowPos,
    kRowTable,
    kTables,
    kPartial,
    kArgmax,
    kSampleRows,
    kSampleOut,
    kPenalties,
    kMasks,
    kShaped,
    kScatterRows,
    kScatterScales,
    kSplitRows,
    kTiles,
    kActQ,
    kMoe,
    kGatherCols,
    kNumSlots
  };

  // A launch's error, and with CASCADE_CUDA_SYNC=1 (debugging) also its execution's: the
  // stream waited on after each op outside a graph capture, so that a fault is reported by
  // the op that made it rather than by a later one (CUDA errors are sticky).
  // Op timing (set_op_timing): an event at this point of the stream, named `op` (a literal).
  void Mark(std::string_view op) {
    if (!timing_ || graphs_->recording()) return;
    if (marks_.size() == events_.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      events_.push_back(e);
    }
    cudaEventRecord(events_[marks_.size()], stream_);
    marks_.push_back(op);
  }

  absl::Status LastError(std::string_view what) {
    CASCADE_RETURN_IF_ERROR(CudaError(cudaGetLastError(), what));
    Mark(what);
    if (!sync_each_op_ || graphs_->recording()) return absl::OkStatus();
    return CudaError(cudaStreamSynchronize(stream_), what);
  }

  // outs[p] = in x (rows of part p of `weight`)^T (+ biases[p]); the parts' rows stack in
  // `weight` (one part: a plain Linear). Few tokens over quantized weights: one GEMV
  // launch for all parts. Otherwise one GEMM per part over its rows (dense rows are
  // contiguous; quantized weights are decoded to F32 once for all parts).
  absl::Status LinearStacked(std::span<const TensorView> outs, const TensorView& in, const TensorView& weight,
                             std::span<const TensorView> biases) {
    Bind();
    const int64_t n_tokens = in.Rows(), n_in = in.Cols(), n_out = weight.Rows();
    if (!Supported(weight.dtype)) {
      return absl::UnimplementedError(StrCat("Linear: no CUDA kernel for ", DTypeName(weight.dtype)));
    }
    if (n_tokens == 0 || n_out == 0) return absl::OkStatus();
    const int code = static_cast<int>(weight.dtype);
    const bool half = weight.dtype == DType::kF16 || weight.dtype == DType::kBF16;
    // Tuned kernels: F16/BF16 weights for a few tokens by the half GEMV, reading the F32
    // activations as they are.
    const bool half_gemv = kernels_ == CudaKernels::kTuned && half && n_tokens <= cuda::kMaxHalfGemvTokens &&
                           n_in % 8 == 0 && reinterpret_cast<uintptr_t>(weight.data) % 16 == 0;
    // Tuned kernels: the block types with an integer form by 8-bit activations and __dp4a.
    const bool q8_gemv =
        kernels_ == CudaKernels::kTuned && cuda::Q8GemvCode(code) && n_tokens <= kMaxGemvTokens && n_in % 32 == 0;
    const bool gemv = half_gemv || (IsQuantized(weight.dtype) && n_tokens <= kMaxGemvTokens);
    // Tuned kernels, CASCADE_CUDA_QUANT_GEMM=int8: those types for many tokens by int8
    // tensor-core tiles over 8-bit activations.
    const bool int8_mma = kernels_ == CudaKernels::kTuned && quant_gemm_ == QuantGemm::kInt8 && !gemv &&
                          cuda::Q8GemvCode(code) && n_in % 32 == 0;
    // Tuned kernels otherwise: quantized weights for many tokens decoded to BF16 for a
    // tensor-core GEMM on BF16 activations (the reference path decodes to F32 for an F32 GEMM).
    const bool bf16_gemm = kernels_ == CudaKernels::kTuned && !gemv && !int8_mma && IsQuantized(weight.dtype);
    const bool blas = !gemv && !int8_mma;
    const bool fused_bias = kernels_ == CudaKernels::kTuned && !blas;
    // GEMMs read F16/BF16 activations converted into one scratch buffer, or quantized
    // weights decoded into another.
    void* converted =
        blas && (half || bf16_gemm) ? Scratch(kConvert, static_cast<size_t>(n_tokens * n_in) * 2) : nullptr;
    void* deq = blas && !half && weight.dtype != DType::kF32
                    ? Scratch(kDequant, static_cast<size_t>(n_out * n_in) * (bf16_gemm ? 2 : 4))
                    : nullptr;
    auto* xq = q8_gemv || int8_mma ? static_cast<cuda::Q8Block*>(Scratch(
                                         kActQ, static_cast<size_t>(n_tokens * n_in / 32) * sizeof(cuda::Q8Block)))
                                   : nullptr;
    CASCADE_RETURN_IF_ERROR(ScratchError());
    graphs_->Sign({kOpLinear, Bits(in.data), Bits(weight.data), static_cast<uint64_t>(code), Dims(in),
                   static_cast<uint64_t>(n_out), Bits(converted), Bits(deq), static_cast<uint64_t>(half_gemv),
                   static_cast<uint64_t>(bf16_gemm), Bits(xq), static_cast<uint64_t>(int8_mma)});
    for (size_t p = 0; p < outs.size(); ++p) {
      graphs_->Sign({Bits(outs[p].data), Dims(outs[p]), p < biases.size() ? Bits(biases[p].data) : 0});
    }
    if (graphs_->dry()) return absl::OkStatus();
    if (!blas) {
      cuda::GemvOut parts;
      int64_t end = 0;
      for (const TensorView& o : outs) {
        parts.out[parts.n_parts] = F32(o);
        parts.end[parts.n_parts++] = end += o.Cols();
      }
      // The tuned kernels add the biases as they store (the bits of AddBias after them).
      for (size_t p = 0; fused_bias && p < biases.size(); ++p) parts.bias[p] = F32(biases[p]);
      if (xq != nullptr) cuda::QuantizeActivations(xq, F32(in), n_tokens, n_in, stream_);  // int8 tiles, Q8 GEMV.
      if (int8_mma) {
        cuda::Q8Mma(parts, xq, weight.data, code, weight.RowBytes(), n_tokens, n_out, n_in, stream_);
      } else if (half_gemv) {
        cuda::HalfGemv(parts, F32(in), weight.data, code, n_tokens, n_out, n_in, stream_);
      } else if (q8_gemv) {
        cuda::Q8Gemv(parts, xq, weight.data, code, weight.RowBytes(), n_tokens, n_out, n_in, stream_);
      } else {
        cuda::QuantGemv(parts, F32(in), weight.data, code, n_tokens, n_out, n_in, stream_);
      }
      CASCADE_RETURN_IF_ERROR(LastError(int8_mma    ? "Q8Mma"
                                        : half_gemv ? "HalfGemv"
                                        : q8_gemv   ? "Q8Gemv"
                                                    : "QuantGemv"));
    } else {
      const void* w = weight.data;
      int64_t row_bytes = weight.RowBytes();
      cudaDataType wt = CUDA_R_32F;
      const void* x = in.data;
      if (half) {
        cuda::ConvertActivations(converted, F32(in), code, n_tokens * n_in, stream_);
        CASCADE_RETURN_IF_ERROR(LastError("ConvertActivations"));
        x = converted;
        wt = weight.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
      } else if (bf16_gemm) {
        cuda::DequantizeBf16(deq, weight.data, code, n_out, n_in, stream_);
        cuda::ConvertActivations(converted, F32(in), cuda::kWBF16, n_tokens * n_in, stream_);
        CASCADE_RETURN_IF_ERROR(LastError("DequantizeBf16"));
        w = deq;
        x = converted;
        row_bytes = n_in * 2;
        wt = CUDA_R_16BF;
      } else if (deq != nullptr) {
        cuda::Dequantize(static_cast<float*>(deq), weight.data, code, n_out, n_in, stream_);
        CASCADE_RETURN_IF_ERROR(LastError("Dequantize"));
        w = deq;
        row_bytes = n_in * 4;
      }
      const float alpha = 1.0f, beta = 0.0f;
      int64_t first = 0;
      for (const TensorView& o : outs) {
        const int64_t rows = o.Cols();
        const void* wp = static_cast<const uint8_t*>(w) + first * row_bytes;
        CASCADE_RETURN_IF_ERROR(CublasError(
            cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n_tokens),
                         static_cast<int>(n_in), &alpha, wp, wt, static_cast<int>(n_in), x, wt, static_cast<int>(n_in),
                         &beta, o.data, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx"));
        first += rows;
      }
      Mark(half ? "cublasGemmEx (F16/BF16)" : bf16_gemm ? "cublasGemmEx (decoded BF16)" : "cublasGemmEx (F32)");
    }
    for (size_t p = 0; p < biases.size() && !fused_bias; ++p) {
      if (biases[p].data == nullptr) continue;
      cuda::AddBias(F32(outs[p]), F32(biases[p]), n_tokens, outs[p].Cols(), stream_);
      CASCADE_RETURN_IF_ERROR(LastError("AddBias"));
    }
    return absl::OkStatus();
  }

  // slots_ = the cache slot of every new position of `seqs`, in row order.
  absl::Status ListSlots(const KvCacheLayer& cache, std::span<const AttentionSeq> seqs) {
    slots_.clear();
    for (const AttentionSeq& s : seqs) {
      for (int64_t i = 0; i < s.n_new; ++i) {
        const int64_t pos = s.n_past + i;
        const int64_t b = pos / cache.block_size;
        if (b >= static_cast<int64_t>(s.block_table.size())) {
          return absl::InvalidArgumentError(StrCat("WriteKv: position ", pos, " is past the block table"));
        }
        slots_.push_back(static_cast<int32_t>(s.block_table[b] * cache.block_size + pos % cache.block_size));
      }
    }
    return absl::OkStatus();
  }

  // Makes this backend's GPU the calling thread's current device: the worker loads on one
  // RPC thread and steps on another, and the current device is per thread.
  void Bind() const { cudaSetDevice(device_); }

  // A device buffer of at least `bytes` for `slot`; grows (stream-ordered) when needed.
  // On an allocation failure it returns null and keeps the error for `ScratchError`.
  void* Scratch(ScratchSlot slot, size_t bytes) {
    DeviceBuffer& b = scratch_[slot];
    if (b.bytes() < bytes) {
      graphs_->Abandon();              // Not inside a capture: the step reruns eagerly.
      cudaStreamSynchronize(stream_);  // The old buffer may still be read.
      auto nb = DeviceBuffer::Create(device_, std::max(bytes, b.bytes() * 2));
      if (!nb.ok()) {
        if (scratch_error_.ok()) scratch_error_ = nb.status();
        return nullptr;
      }
      b = std::move(*nb);
      uploaded_[slot].clear();  // The new buffer holds nothing yet.
    }
    return b.data();
  }

  // The first scratch allocation failure since the last call (then cleared).
  absl::Status ScratchError() { return std::exchange(scratch_error_, absl::OkStatus()); }

  // An op's host metadata copied up into `slot`. The reference kernels copy from the
  // caller's memory every call (the path measured on a GPU). The tuned kernels and graph
  // steps stage it through the pinned arena, so that the copy is a DMA the host does not
  // wait for, and (outside graph steps) skip it when the bytes equal the slot's last upload
  // (a step's positions, KV slots and block tables are the same for every layer, so a
  // decode step copies each once, not once per layer).
  template <typename T>
  T* Upload(ScratchSlot slot, std::span<const T> host) {
    const size_t bytes = host.size_bytes();
    T* dev = static_cast<T*>(Scratch(slot, std::max<size_t>(bytes, 4)));
    if (dev == nullptr || bytes == 0) return dev;
    const auto* p = reinterpret_cast<const uint8_t*>(host.data());
    if (graphs_->recording()) {
      // Always staged, at the step's next arena offset: a replay's copy reads it there.
      const void* staged = Stage(p, bytes);
      if (staged == nullptr) graphs_->Abandon();
      graphs_->Sign({kOpUpload, static_cast<uint64_t>(slot), Bits(dev), bytes, Bits(staged)});
      if (!graphs_->dry()) cudaMemcpyAsync(dev, staged, bytes, cudaMemcpyHostToDevice, stream_);
      return dev;
    }
    if (kernels_ != CudaKernels::kTuned) {
      cudaMemcpyAsync(dev, p, bytes, cudaMemcpyHostToDevice, stream_);
      return dev;
    }
    std::vector<uint8_t>& last = uploaded_[slot];
    if (last.size() == bytes && std::memcmp(last.data(), p, bytes) == 0) return dev;
    last.assign(p, p + bytes);
    const void* staged = Stage(p, bytes);
    cudaMemcpyAsync(dev, staged != nullptr ? staged : p, bytes, cudaMemcpyHostToDevice, stream_);
    return dev;
  }

  // A copy of `bytes` in the pinned arena, valid until the stream has run the copy that
  // reads it: the arena restarts only after a synchronisation (when full, it waits for the
  // stream and doubles). Null when pinned memory cannot be had (the caller copies from
  // pageable memory then).
  const void* Stage(const uint8_t* host, size_t bytes) {
    const size_t need = (bytes + 255) & ~size_t{255};
    if (staged_ + need > arena_bytes_) {
      graphs_->Abandon();  // Not inside a capture: the step reruns eagerly.
      cudaStreamSynchronize(stream_);
      staged_ = 0;
      const size_t grown = std::max({need, 2 * arena_bytes_, kArenaBytes});
      void* p = nullptr;
      if (cudaHostAlloc(&p, grown, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();  // Clear it: pageable copies still work.
        return nullptr;
      }
      if (arena_ != nullptr) cudaFreeHost(arena_);
      arena_ = static_cast<uint8_t*>(p);
      arena_bytes_ = grown;
    }
    std::memcpy(arena_ + staged_, host, bytes);
    const void* out = arena_ + staged_;
    staged_ += need;
    return out;
  }

  static constexpr size_t kArenaBytes = size_t{1} << 20;

  // A view's shape for a graph step's signature.
  static uint64_t Dims(const TensorView& v) {
    return (static_cast<uint64_t>(v.Rows()) << 32) ^ static_cast<uint64_t>(v.Cols());
  }
  // Page-locked host memory (a capture may copy only to or from it).
  static bool Pinned(const void* host) {
    cudaPointerAttributes a{};
    const bool ok = cudaPointerGetAttributes(&a, host) == cudaSuccess;
    cudaGetLastError();
    return ok && a.type == cudaMemoryTypeHost;
  }

  int device_ = 0;
  CudaKernels kernels_ = CudaKernels::kReference;
  QuantGemm quant_gemm_ = QuantGemm::kBf16;
  PrefillAttention prefill_attention_ = PrefillAttention::kF32;
  int cc_major_ = 0;  // The device's compute capability, major.
  int64_t moe_device_max_tokens_ = std::numeric_limits<int64_t>::max();
  const bool sync_each_op_ = SyncEachOpFromEnv();
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer scratch_[kNumSlots];
  std::vector<uint8_t> uploaded_[kNumSlots];  // Each upload slot's last bytes.
  DeviceBuffer blas_workspace_;
  std::unique_ptr<cuda::StepGraphs> graphs_;
  absl::Status scratch_error_;
  uint8_t* arena_ = nullptr;  // Pinned staging of uploads; arena_bytes_ long.
  size_t arena_bytes_ = 0;
  size_t staged_ = 0;  // Bytes of the arena the stream may still read.
  // The ops' metadata lists, reused so that a steady step allocates nothing.
  std::vector<int32_t> slots_, row_pos_, row_table_, tables_, split_rows_;
  std::vector<cuda::PrefillTile> tiles_;
  // Op timing: whether on, the events (reused) and the names of those recorded so far.
  bool timing_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string_view> marks_;
};

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(int device, size_t bytes) {
  CASCADE_CUDA_RETURN(cudaSetDevice(device), StrCat("cudaSetDevice(", device, ")"));
  DeviceBuffer b;
  b.device_ = device;
  b.bytes_ = bytes;
  if (bytes > 0) CASCADE_CUDA_RETURN(cudaMalloc(&b.data_, bytes), StrCat("cudaMalloc(", bytes, ")"));
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    device_ = other.device_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::Status DeviceBuffer::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) return absl::InvalidArgumentError(StrCat("Upload of ", bytes, " bytes into ", bytes_));
  return CudaError(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "Upload");
}

absl::Status DeviceBuffer::Download(void* host, size_t bytes) const {
  if (bytes > bytes_) return absl::InvalidArgumentError(StrCat("Download of ", bytes, " bytes from ", bytes_));
  CASCADE_CUDA_RETURN(cudaDeviceSynchronize(), "Download");
  return CudaError(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "Download");
}

TensorView DeviceBuffer::View(DType dtype, std::initializer_list<int64_t> shape) const {
  return TensorView(data_, dtype, shape, Device{DeviceKind::kCuda, device_});
}

// A kernel choice: the option when given, else its environment variable's value; logged
// with its source (CudaChoiceSource) when `log`.
template <typename T>
absl::StatusOr<T> Choose(const std::optional<T>& given, absl::StatusOr<T> (*from_env)(), std::string_view (*name)(T),
                         const char* variable, std::string_view what, int device, bool log) {
  if (given.has_value()) return *given;
  CASCADE_ASSIGN_OR_RETURN(const T v, from_env());
  if (log)
    CASCADE_LOG(Info) << "cuda:" << device << ": " << what << name(v) << " (" << CudaChoiceSource(variable) << ")";
  return v;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count <= options.device) {
    return absl::UnavailableError(StrCat("no CUDA device ", options.device, ": ",
                                         err != cudaSuccess ? cudaGetErrorString(err) : "not that many devices"));
  }
  const int d = options.device;
  CASCADE_ASSIGN_OR_RETURN(const CudaKernels kernels, Choose(options.kernels, &CudaKernelsFromEnv, &CudaKernelsName,
                                                             "CASCADE_CUDA_KERNELS", "kernels: ", d, true));
  // The tuned kernels' own choices, logged where they apply.
  const bool tuned = kernels == CudaKernels::kTuned;
  CASCADE_ASSIGN_OR_RETURN(const QuantGemm quant_gemm,
                           Choose(options.quant_gemm, &QuantGemmFromEnv, &QuantGemmName, "CASCADE_CUDA_QUANT_GEMM",
                                  "quantized weights over many tokens by the GEMM: ", d, tuned));
  CASCADE_ASSIGN_OR_RETURN(const PrefillAttention prefill_attention,
                           Choose(options.prefill_attention, &PrefillAttentionFromEnv, &PrefillAttentionName,
                                  "CASCADE_CUDA_PREFILL_ATTENTION", "prefill attention by the tiles: ", d, tuned));
  auto b = std::make_unique<CudaBackendImpl>(d, kernels);
  CASCADE_RETURN_IF_ERROR(b->Init());
  CASCADE_RETURN_IF_ERROR(b->set_quant_gemm(quant_gemm));
  CASCADE_RETURN_IF_ERROR(b->set_prefill_attention(prefill_attention));
  return std::unique_ptr<CudaBackend>(std::move(b));
}

}  // namespace cascade::kernels
