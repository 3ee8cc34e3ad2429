// CPU linear layer (matrix product with a stored weight): out = in * weight^T, with the
// weight kept in its storage format (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K).
//
// Quantized weights follow llama.cpp's scheme: each activation row is quantized to 8 bits
// per 32-element block (for Q8_0/Q4_0/Q4_1 weights, with the block sums that Q4_1's
// offsets need) or per 256-element super-block (Q8_K, for Q4_K/Q6_K weights), and the
// products are integer dot products (AVX-512 VNNI `vpdpbusd`, AVX2 `vpmaddubsw`, or
// portable C++), scaled in f32. Float weights use f32 FMA loops (F16 through F16C).
// The kernel ISA is picked at run time (kernels/cpu_features.h).
//
// Work is split over the pool's threads by output rows; with several tokens, each block of
// weight rows is unpacked once into an L1-resident tile and reused for all tokens.
// Q8_0 and the 4-to-6-bit block types can also be repacked once at load (packed_weight.h
// says which and how) and run through `LinearPacked`: a layout the AVX-512 kernels stream
// at memory speed.
//
// Thread-safety: the functions are safe to call concurrently from different threads with
// different pools and output buffers. `Linear` keeps a per-calling-thread scratch buffer for
// the quantized activations, which grows to the largest call and is then reused (no
// allocation in steady state). A `QuantizedActivations` object is single owner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/packed_weight.h"

namespace cascade::kernels::cpu {

// How activations are prepared for a weight dtype.
enum class ActivationFormat : uint8_t {
  kF32,      // Used as is (F32, F16, BF16 weights).
  kQ8Block,  // int8 per 32-element block with f32 scale and block sum (Q8_0, Q4_0, Q4_1).
  kQ8K,      // ggml `block_q8_K` per 256 elements (Q4_K, Q6_K).
};

// Whether `Linear` supports weights of `weight_dtype`; the format their activations need.
bool LinearSupports(DType weight_dtype);
ActivationFormat ActivationFormatFor(DType weight_dtype);

// Activations [n_tokens, n_in] prepared once for a family of weights, so that several
// projections of the same input (Q/K/V, gate/up) share one quantization.
// Single owner; buffers grow to the largest input seen and are reused.
class QuantizedActivations {
 public:
  QuantizedActivations() = default;
  QuantizedActivations(const QuantizedActivations&) = delete;
  QuantizedActivations& operator=(const QuantizedActivations&) = delete;

  // Prepares `in` [n_tokens, n_in] in `format`. For kF32 the object only borrows `in`,
  // which must then outlive every use of this object. InvalidArgument when `n_in` is not a
  // multiple of the format's block (32 or 256), or a size is negative; the object is
  // left empty (n_tokens() == 0) on error. `pool` may be null (runs on the caller).
  absl::Status Quantize(const float* in, int64_t n_tokens, int64_t n_in, ActivationFormat format, ThreadPool* pool);

  ActivationFormat format() const { return format_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_in() const { return n_in_; }

  // Format kF32: [n_tokens, n_in].
  const float* f32() const { return f32_; }
  // Format kQ8Block: quants [n_tokens, n_in], scales and sums [n_tokens, n_in / 32]; the sum
  // is scale * (sum of the block's quants).
  const int8_t* q8_quants() const { return q8_quants_.data(); }
  const float* q8_scales() const { return q8_scales_.data(); }
  const float* q8_sums() const { return q8_sums_.data(); }
  // The same sums per 16 elements [n_tokens, n_in / 16] (weights with 16-element groups).
  const float* q8_sums16() const { return q8_sums16_.data(); }
  // The sums of the quants themselves per 16 elements [n_tokens, n_in / 16].
  const int16_t* q8_isums16() const { return q8_isums16_.data(); }
  // Format kQ8K: [n_tokens, n_in / 256].
  const BlockQ8_K* q8k_blocks() const { return q8k_.data(); }

  // Format kF32 on an AVX512_BF16 CPU, n_in a multiple of 32: also rounds the activations
  // to nearest bf16, once for every kernel and thread that multiplies bf16 pairs (each
  // thread's piece of each call had converted all of them). Until the next Quantize.
  void RoundToBf16(ThreadPool* pool);
  // Those bf16 values [n_tokens, n_in], or null when not rounded.
  const uint16_t* bf16() const { return has_bf16_ ? bf16_.data() : nullptr; }

 private:
  ActivationFormat format_ = ActivationFormat::kF32;
  int64_t n_tokens_ = 0;
  int64_t n_in_ = 0;
  const float* f32_ = nullptr;
  std::vector<int8_t> q8_quants_;
  std::vector<float> q8_scales_;
  std::vector<float> q8_sums_;
  std::vector<float> q8_sums16_;
  std::vector<int16_t> q8_isums16_;
  std::vector<BlockQ8_K> q8k_;
  std::vector<uint16_t> bf16_;
  bool has_bf16_ = false;
};

// How a CPU linear layer may round (CpuBackendOptions::bf16_prefill).
struct LinearOptions {
  // F8_E4M3_B128 weights times 8 or more tokens on a CPU with AVX512_BF16: activations
  // rounded to bf16 and multiplied by `vdpbf16ps` (linear_f8_avx512bf16.cc), twice the f32
  // FMA rate; the weights and their scales stay exact. Off: activations stay f32. Other
  // weight types and CPUs ignore it.
  bool bf16_prefill = false;
};

// out [n_tokens, n_out] = in [n_tokens, n_in] x weight^T, where weight is [n_out, n_in]
// (a 2-D CPU TensorView, rows contiguous, any supported dtype) and n_in is its Cols().
// `pool` may be null (single-threaded). Errors, with `out` unspecified:
//   Unimplemented    weight dtype not supported (see LinearSupports) or not on the CPU;
//   InvalidArgument  weight not 2-D, n_in not a multiple of the dtype's block (32 for
//                    Q8_0/Q4_0/Q4_1, 256 for Q4_K/Q6_K), null pointers, n_tokens < 0.
// `out` must not alias `in` or the weight.
absl::Status Linear(float* out, const float* in, const TensorView& weight, int64_t n_tokens, ThreadPool* pool,
                    const LinearOptions& options = {});

// As `Linear`, with activations prepared by `QuantizedActivations::Quantize` in
// ActivationFormatFor(weight.dtype) and n_in == weight.Cols(); InvalidArgument otherwise.
absl::Status LinearQuantized(float* out, const QuantizedActivations& in, const TensorView& weight, ThreadPool* pool);

// As `LinearQuantized` over a weight repacked at load (packed_weight.h), with activations
// in ActivationFormat::kQ8Block and n_in == weight.n_in(); InvalidArgument otherwise. Runs
// the active ISA's packed kernel (AVX-512 VNNI; the portable one below it).
absl::Status LinearPacked(float* out, const QuantizedActivations& in, const PackedWeight& weight, ThreadPool* pool);

// As `Linear` over a packed weight (quantizes `in` [n_tokens, weight.n_in()] first).
absl::Status LinearPacked(float* out, const float* in, const PackedWeight& weight, int64_t n_tokens, ThreadPool* pool);

// One projection of a weight whose rows stack several (Q, K, V; gate, up): the next `rows`
// rows of the weight, written to out [n_tokens, rows].
struct LinearPart {
  float* out = nullptr;
  int64_t rows = 0;
};

// As `Linear` / `LinearPacked`, over such a stacked weight: the activations are quantized
// once and all parts' rows are spread over the pool in one dispatch. The part rows must
// sum to the weight's n_out; for a packed weight every part but the last must be a
// multiple of 16 rows (its row groups). InvalidArgument otherwise.
absl::Status LinearParts(std::span<const LinearPart> parts, const float* in, const TensorView& weight, int64_t n_tokens,
                         ThreadPool* pool, const LinearOptions& options = {});
absl::Status LinearPartsPacked(std::span<const LinearPart> parts, const float* in, const PackedWeight& weight,
                               int64_t n_tokens, ThreadPool* pool);

// One matmul of a LinearPackedBatch: parts of `weight` (as LinearPartsPacked) over its own
// input [n_tokens, weight->n_in()].
struct PackedJob {
  std::span<const LinearPart> parts;
  const float* in = nullptr;
  int64_t n_tokens = 0;
  const PackedWeight* weight = nullptr;
};

// Several independent packed matmuls (the active experts of a MoE layer) in one dispatch:
// each input is quantized, then the rows of every job are spread over the pool together,
// so a batch of small matrices pays one fork/join instead of one per matrix. Each job as
// LinearPartsPacked (its errors too).
absl::Status LinearPackedBatch(std::span<const PackedJob> jobs, ThreadPool* pool);

// Whether the active ISA has a native kernel for packed weights of `dtype`, so that packing
// them at load pays off (otherwise the GGUF-layout kernels are faster).
bool PackedLayoutPreferred(DType dtype);

}  // namespace cascade::kernels::cpu
