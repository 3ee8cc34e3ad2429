// The op set of Cascade's transformer, behind one `Backend` interface that each device
// implements (kernels/cpu/, kernels/cuda/). Ops are stateless functions of
// tensor views; buffers are owned by the caller. Outputs come first, then inputs, then
// sizes. Activations are F32; weights may be any DType the backend reports in
// `SupportsWeight`.
//
// Memory: every TensorView an op reads or writes lives in the backend's memory: host
// memory for the CPU backend, device memory for a GPU backend. Callers allocate it with
// `Allocate` and move bytes across with `CopyIn` / `CopyOut`; the same code then runs on
// either. The std::span arguments (ids, positions, block tables, frequencies) are always
// host memory.
//
// Thread-safety: a Backend is single-owner (one device thread calls it); ops run on the
// backend's own thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace cascade {
class ThreadPool;
}

namespace cascade::kernels {

// How RoPE pairs the dimensions of a head. GGUF (llama.cpp) files store Q/K rows so that
// adjacent pairs (x[2i], x[2i+1]) rotate together; Hugging Face checkpoints rotate the
// halves (x[i], x[i + head_dim/2]).
enum class RopeStyle { kAdjacentPairs, kRotateHalf };

struct RopeParams {
  RopeStyle style = RopeStyle::kAdjacentPairs;
  int64_t head_dim = 0;
  // Inverse frequency of each rotated pair, [head_dim / 2], scaling already applied.
  std::span<const float> inv_freq;
};

// The paged KV cache of one layer on one device. K and V are each
// [n_blocks, block_size, n_kv_heads, head_dim]; a sequence's position p lives in block
// `block_table[p / block_size]` at slot `p % block_size`.
struct KvCacheLayer {
  TensorView k;
  TensorView v;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  // FP8 (F8_E4M3) caches only: F32 [n_kv_heads] in the same memory as k and v. The
  // element of KV head h stored as code c means E4M3(c) * k_scale[h] (v_scale[h] for V);
  // WriteKv stores E4M3(x / scale). Empty views for the other dtypes.
  TensorView k_scale;
  TensorView v_scale;

  // The layer over caches k and v [n_blocks, block_size, n_kv_heads, head_dim] (the
  // geometry read off k's shape), with FP8's scales when given.
  static KvCacheLayer Over(const TensorView& k, const TensorView& v, const TensorView& k_scale = {},
                           const TensorView& v_scale = {}) {
    return {k, v, k.dim(1), k.dim(2), k.dim(3), k_scale, v_scale};
  }
};

// One sequence inside a batch of tokens. Its `n_new` tokens are rows
// [row_begin, row_begin + n_new) of the batch and sit at positions
// [n_past, n_past + n_new); attention is causal over positions [0, own position].
struct AttentionSeq {
  int64_t row_begin = 0;
  int64_t n_new = 0;
  int64_t n_past = 0;
  std::span<const int32_t> block_table;  // Covers positions [0, n_past + n_new).
};

struct AttentionParams {
  int64_t n_heads = 0;  // Query heads; a multiple of the cache's n_kv_heads (GQA).
  float scale = 1.0f;   // Usually 1 / sqrt(head_dim).
  // > 0: sliding-window attention (Mistral, gpt-oss's alternate layers): the row at position
  // p sees positions (p - window, p] only, p included.
  int64_t window = 0;
  // With window > 0: positions [0, kept_prefix) stay visible to every row as well, the
  // window's positions apart (StreamingLLM's attention sinks, Xiao et al. 2023:
  // scheduler.kv_policy). A row at p then sees [0, kept_prefix) and (p - window, p]; the KV
  // blocks between are never read, and their block-table entries may be -1. 0: none.
  int64_t kept_prefix = 0;
  // Attention sinks (gpt-oss): F32 [n_heads] in the backend's memory, one learned logit per
  // query head that joins every row's softmax denominator and adds nothing to the output:
  // out = sum_t e^(s_t) v_t / (e^(sink) + sum_t e^(s_t)). Empty: none.
  TensorView sinks;
};

// A weight matrix [n_out, n_in] as a backend prepared it once at load (`PrepareWeight`):
// possibly repacked into a layout of the backend's own, possibly just the original view.
// Owned by the caller; it does not borrow the backend, but only the backend that made it
// (or one of the same kind) can run ops on it. Immutable, so const use from any thread is
// safe.
class PreparedWeight {
 public:
  explicit PreparedWeight(const TensorView& source) : source_(source) {}
  virtual ~PreparedWeight() = default;
  PreparedWeight(const PreparedWeight&) = delete;
  PreparedWeight& operator=(const PreparedWeight&) = delete;

  DType dtype() const { return source_.dtype; }
  int64_t n_out() const { return source_.Rows(); }
  int64_t n_in() const { return source_.Cols(); }
  // The view it was prepared from; its memory is read by later ops only while
  // `reads_source()`.
  const TensorView& source() const { return source_; }
  // False when the backend holds its own copy: the caller may then release the source's
  // memory (e.g. drop the file pages behind it) and must not expect ops to read it.
  virtual bool reads_source() const { return true; }

 private:
  TensorView source_;
};

// A MoE layer's held experts as one backend runs them in one call (Backend::PrepareExperts).
class PreparedExperts {
 public:
  PreparedExperts() = default;
  virtual ~PreparedExperts() = default;
  PreparedExperts(const PreparedExperts&) = delete;
  PreparedExperts& operator=(const PreparedExperts&) = delete;
};

// An allocation in a backend's memory (Backend::Allocate); freed with it.
class Buffer {
 public:
  Buffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  float* f32() const { return static_cast<float*>(data_); }

 private:
  void* data_;
  size_t bytes_;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual int n_threads() const = 0;

  // True when ops work on host memory (the CPU backend): a host pointer may then be
  // handed to an op directly and CopyIn/CopyOut are plain copies.
  virtual bool host_memory() const { return true; }
  // `bytes` of the backend's memory, 64-byte aligned, uninitialised (a large host
  // allocation is fresh zero pages, resident only once written). ResourceExhausted when
  // it cannot be had.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes);
  // Host memory for staging copies in and out of the backend (page-locked on a GPU, so
  // CopyIn/CopyOut from it run at full bus speed and a host-memory communicator can send
  // it as is); the host reads and writes it freely. By default, like AllocateHost.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateStaging(size_t bytes);
  // Copies `bytes` from host memory into backend memory at `dst`, after every op issued
  // before it; `host` may be reused once it returns.
  virtual absl::Status CopyIn(void* dst, const void* host, size_t bytes);
  // Copies `bytes` of backend memory at `src` into host memory once every op issued
  // before it has finished; the bytes are in `host` when it returns.
  virtual absl::Status CopyOut(void* host, const void* src, size_t bytes);
  // Waits until every op issued so far has finished (a no-op for a synchronous backend);
  // the first asynchronous error, if any. Needed before another agent (a communicator on
  // its own stream) reads what the ops wrote.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // True when `Linear` and `Embedding` accept weights of `dtype`.
  virtual bool SupportsWeight(DType dtype) const = 0;

  // out[t, o] = sum_i in[t, i] * weight[o, i] (+ bias[o] when bias.data != nullptr).
  // out [n_tokens, n_out] f32; in [n_tokens, n_in] f32; weight [n_out, n_in] any
  // supported dtype; bias [n_out] f32 or empty. Unimplemented for an unsupported dtype.
  virtual absl::Status Linear(TensorView out, const TensorView& in, const TensorView& weight,
                              const TensorView& bias) = 0;

  // (optional) Prepares weight [n_out, n_in] (any supported dtype) for `Linear` and
  // `Embedding` once, at load: the backend may repack it into a layout of its own (the CPU
  // backend does for Q8_0/Q4_0/Q4_1 on AVX-512 machines). Unimplemented for an unsupported
  // dtype; InvalidArgument for a bad shape. The default borrows the view as is.
  virtual absl::StatusOr<std::unique_ptr<PreparedWeight>> PrepareWeight(const TensorView& weight) {
    if (!SupportsWeight(weight.dtype)) return absl::UnimplementedError("PrepareWeight: unsupported weight dtype");
    return std::make_unique<PreparedWeight>(weight);
  }
  // `Linear` over a prepared weight (optional: the default reads `weight.source()`).
  virtual absl::Status Linear(TensorView out, const TensorView& in, const PreparedWeight& weight,
                              const TensorView& bias) {
    if (!weight.reads_source()) return absl::InternalError("Linear: weight prepared by another backend");
    return Linear(out, in, weight.source(), bias);
  }
  // (optional) Several projections of one input in one pass (Q/K/V, gate/up): `weight`
  // was prepared from their matrices stacked by rows, and outs[i] [n_tokens, rows_i]
  // receives the next rows_i of its output rows, plus biases[i] when that view has data
  // (`biases` is empty or has one view per part). Every rows_i but the last must be a
  // multiple of kLinearPartRows (the row groups backends tile by). The inputs are read,
  // and quantized where the kernels need it, once. The default runs `Linear` on row slices
  // of `weight.source()`: for backends whose prepared weights read their source.
  static constexpr int64_t kLinearPartRows = 16;
  virtual absl::Status LinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                                   std::span<const TensorView> biases);
  // (optional) Several independent LinearParts calls (no biases) at once: the active
  // experts of a MoE layer, each its own weight and input. A backend may run them as one
  // parallel loop (the CPU backend does for packed weights) instead of one per job; the
  // default calls LinearParts for each.
  struct LinearJob {
    std::span<const TensorView> outs;
    TensorView in;
    const PreparedWeight* weight = nullptr;
  };
  virtual absl::Status LinearBatch(std::span<const LinearJob> jobs);
  // (optional) A MoE layer's routed experts run where the router's logits are, with no
  // host synchronisation (model/layers/moe.h). PrepareExperts takes, at load, the experts
  // this rank holds (ExpertWeights: n_ff rows of gate and of up, down [n_embd, n_ff]) and
  // their activation; Unimplemented where the backend has no such path or not for these
  // weights' types (the layer then routes on the host). RoutesExperts says whether
  // RoutedExperts runs `n_tokens` tokens now (kernels selected, batch small enough).
  // RoutedExperts:
  //   acc [n, n_embd] += sum over each token's top k experts that are held of its weight
  //   times the expert's act(gate x + gate_bias, up x + up_bias) through down (+ down_bias),
  // routed from the router's `logits` [n, n_experts] as RouteToken does (softmax, top k with
  // the lower id on ties, weights renormalised over the k when `norm_topk`); `load`
  // (int32 [n_experts], this backend's memory, or null) gains one per chosen expert.
  struct ExpertWeights {
    const PreparedWeight* gate = nullptr;  // Rows [gate_row0, gate_row0 + n_ff) are the gate.
    int64_t gate_row0 = 0;
    const PreparedWeight* up = nullptr;  // May be `gate` (stacked), with up_row0 = n_ff.
    int64_t up_row0 = 0;
    const PreparedWeight* down = nullptr;
    // Act-order GPTQ: column j of the matrix multiplies input column order[j] (Linear's
    // input order); empty where the matrix reads its input as it is.
    std::span<const int32_t> gate_order = {}, up_order = {}, down_order = {};
    // gpt-oss: f32 vectors in this backend's memory, [n_ff] for gate and up, [n_embd] for
    // down; empty views where the expert has none.
    TensorView gate_bias = {}, up_bias = {}, down_bias = {};
  };
  // act(g, u) = silu(g) * u (SiluMul), or with swiglu_limit > 0 gpt-oss's clamped SwiGLU
  // (ClampedSwiglu with this alpha and limit).
  struct ExpertActivation {
    float swiglu_alpha = 0, swiglu_limit = 0;
  };
  struct MoeRouting {
    int64_t n_experts = 0, top_k = 0;
    int64_t expert_begin = 0;  // The first held expert's id.
    bool norm_topk = false;
  };
  virtual absl::StatusOr<std::unique_ptr<PreparedExperts>> PrepareExperts(std::span<const ExpertWeights> experts,
                                                                          int64_t n_ff,
                                                                          const ExpertActivation& activation) {
    return absl::UnimplementedError("PrepareExperts: this backend routes experts on the host");
  }
  virtual bool RoutesExperts(int64_t n_tokens) const { return false; }
  virtual absl::Status RoutedExperts(TensorView acc, const TensorView& x, const TensorView& logits,
                                     const PreparedExperts& experts, const MoeRouting& routing, void* load) {
    return absl::UnimplementedError("RoutedExperts: this backend routes experts on the host");
  }
  // `Embedding` over a prepared table (optional: the default reads `table.source()`).
  virtual absl::Status Embedding(TensorView out, const PreparedWeight& table, std::span<const int32_t> ids) {
    if (!table.reads_source()) return absl::InternalError("Embedding: table prepared by another backend");
    return Embedding(out, table.source(), ids);
  }

  // out [n_tokens, n] = in * weight[n] / rms(in row), f32. `out` may alias `in`.
  virtual absl::Status RmsNorm(TensorView out, const TensorView& in, const TensorView& weight, float eps) = 0;

  // hidden += add, then out = RmsNorm(hidden): a layer's residual sum and the next norm.
  // A backend may fuse them (one pass, one launch); the default runs the two ops, and any
  // fusion must give their bits.
  virtual absl::Status AddRmsNorm(TensorView out, TensorView hidden, const TensorView& add, const TensorView& weight,
                                  float eps) {
    absl::Status s = AddInPlace(hidden, add);
    return s.ok() ? RmsNorm(out, hidden, weight, eps) : s;
  }

  // Rotates x [n_tokens, n_heads * head_dim] in place; positions [n_tokens].
  virtual absl::Status Rope(TensorView x, std::span<const int32_t> positions, const RopeParams& params) = 0;

  // Qwen3's RMSNorm of each head of q and k before RoPE: weights [head_dim] for q's heads
  // and for k's, and the norm's eps; empty views where a model has none.
  struct HeadNorms {
    TensorView q, k;
    float eps = 0;
  };
  // A layer's head norms, RoPE and KV write: each head of q [n, n_heads * head_dim] and k
  // [n, n_kv_heads * head_dim] normalised in place (RmsNorm over its head_dim, when `norms`
  // has weights), both rotated in place (Rope), then k and v written into the cache
  // (WriteKv). A backend may fuse them (one launch); the default runs the ops, and any
  // fusion must give their bits.
  virtual absl::Status RopeWriteKv(TensorView q, TensorView k, const TensorView& v, std::span<const int32_t> positions,
                                   const RopeParams& params, const HeadNorms& norms, KvCacheLayer& cache,
                                   std::span<const AttentionSeq> seqs);

  // out [n, cols.size()] = the columns `cols` (host memory, each in [0, in.Cols())) of in
  // [n, d], in that order: the activations of an act-order GPTQ weight (its inputs
  // reordered by group). InvalidArgument for a column outside `in`.
  virtual absl::Status GatherColumns(TensorView out, const TensorView& in, std::span<const int32_t> cols) {
    return absl::UnimplementedError("GatherColumns: not on this backend");
  }
  // The shape and column checks every GatherColumns starts with.
  static absl::Status CheckGatherColumns(const TensorView& out, const TensorView& in, std::span<const int32_t> cols);

  // out [n, d] = silu(gate) * up; gate and up [n, d]. `out` may alias `gate`.
  virtual absl::Status SiluMul(TensorView out, const TensorView& gate, const TensorView& up) = 0;

  // gpt-oss's clamped SwiGLU, as transformers' GptOssExperts: with g = min(gate, limit) and
  // u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g). Shapes as SiluMul.
  virtual absl::Status ClampedSwiglu(TensorView out, const TensorView& gate, const TensorView& up, float alpha,
                                     float limit) {
    return absl::UnimplementedError("ClampedSwiglu: not on this backend");
  }

  // out[t, :] += bias for every row t: out [n, d], bias [d], f32.
  virtual absl::Status AddBias(TensorView out, const TensorView& bias) {
    return absl::UnimplementedError("AddBias: not on this backend");
  }
  // The shape checks every AddBias starts with: InvalidArgument naming both shapes.
  static absl::Status CheckAddBias(const TensorView& out, const TensorView& bias);

  // out += in, both [n, d] f32.
  virtual absl::Status AddInPlace(TensorView out, const TensorView& in) = 0;

  // out[rows[i], :] += scales[i] * in[i, :] for every i, in order of i (rows may repeat):
  // the weighted scatter that sums each token's experts back into its row. out [n, d] and
  // in [rows.size(), d] f32; rows and scales (host memory) of one length. InvalidArgument
  // for a row outside out.
  virtual absl::Status AddScaledRows(TensorView out, const TensorView& in, std::span<const int32_t> rows,
                                     std::span<const float> scales) = 0;

  // out[i, :] += sigmoid(gate[i]) * in[i, :] for each row i: a shared expert's output
  // scaled by its gate (Qwen2-MoE). out and in [n, d], gate n values, all f32 in this
  // backend's memory. The default reads the gate back to the host (CopyOut) and adds
  // through AddScaledRows; a device backend may do it where the values are.
  virtual absl::Status AddSigmoidGatedRows(TensorView out, const TensorView& in, const TensorView& gate);

  // out [n_ids, n_embd] f32 = rows `ids` of table [n_vocab, n_embd] (any supported dtype).
  // InvalidArgument for an id outside [0, n_vocab).
  virtual absl::Status Embedding(TensorView out, const TensorView& table, std::span<const int32_t> ids) = 0;

  // Writes k and v [n_tokens, n_kv_heads * head_dim] into the cache slots of each
  // sequence's new positions.
  virtual absl::Status WriteKv(KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                               std::span<const AttentionSeq> seqs) = 0;

  // out [n_tokens, n_heads * head_dim] = softmax(q k^T * scale) v per head, causal (and
  // windowed, with sinks, as `params` say), over the cache (which must already hold the
  // new tokens' K/V). q has out's shape.
  // Computed flash-style: online softmax over KV tiles, no score matrix.
  virtual absl::Status Attention(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                                 std::span<const AttentionSeq> seqs, const AttentionParams& params) = 0;
};

// A 64-byte aligned, uninitialised host allocation (what Backend::Allocate does by
// default). ResourceExhausted when it cannot be had.
absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes);

// The shape checks every LinearParts implementation starts with: one output per part of
// the input's rows, the part sizes summing to the weight's rows (all but the last a
// multiple of kLinearPartRows), one bias per part or none.
absl::Status CheckLinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                              std::span<const TensorView> biases);
// The shape and row checks of AddScaledRows.
absl::Status CheckScaledRows(const TensorView& out, const TensorView& in, std::span<const int32_t> rows,
                             std::span<const float> scales);
// The shape checks of AddSigmoidGatedRows.
absl::Status CheckSigmoidGatedRows(const TensorView& out, const TensorView& in, const TensorView& gate);

// Makes `buf` hold at least `bytes` of `backend`'s memory (its staging memory when
// `staging`), reallocating (contents lost) only when it is smaller: for workspaces that
// grow to the largest batch seen.
absl::Status GrowBuffer(Backend& backend, std::unique_ptr<Buffer>& buf, size_t bytes, bool staging = false);

struct CpuBackendOptions {
  int n_threads = 1;  // Threads of the backend's pool, the calling thread included.
  // Prefills of FP8 weights round their activations to bf16 where the CPU multiplies bf16
  // pairs (cpu::LinearOptions; `scheduler.cpu_prefill_activations: bf16`, opt-in, lossy).
  bool bf16_prefill = false;
};

// What `options` makes of a CPU backend's prefill activations on this CPU, for the log,
// ModelInfo and `cascade run`: "f32", "bf16 (FP8 weights' prefills of 8 or more tokens)",
// or "f32 (bf16 asked; this CPU has no AVX512_BF16)".
std::string DescribeCpuPrefillActivations(const CpuBackendOptions& options);

// The CPU backend (AVX-512 / AVX2 paths chosen at run time, portable fallback).
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

}  // namespace cascade::kernels
