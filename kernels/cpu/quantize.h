// Row conversion between f32 and the stored weight formats (dense and GGUF block-quantized),
// scalar reference code: used to load and test weights and to generate test models, not on
// the inference hot path (`kernels/cpu/linear.h` quantizes activations with SIMD).
// Thread-safety: pure functions; concurrent calls on disjoint buffers are safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace cascade::kernels::cpu {

// Converts one row of `n` elements stored as `dtype` at `src` (RowBytes(dtype, n) bytes)
// to f32 `dst` [n]. Supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q8_K,
// I4_G128. InvalidArgument when `n` is not a multiple of BlockElems(dtype), Unimplemented for other
// dtypes; `dst` is untouched on error.
absl::Status DequantizeRow(DType dtype, const void* src, float* dst, int64_t n);

// Converts f32 `src` [n] to one row stored as `dtype` at `dst` (RowBytes(dtype, n) bytes).
// Supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q8_K, I4_G128. Block scales follow the
// standard round-to-nearest choices of ggml's reference quantizers (`quantize_row_*_ref`);
// the K types use a direct min/max fit, not ggml's iterative search, so the bits may differ
// from llama.cpp's while the format is the same; I4_G128 is round-to-nearest with an
// integer zero point. Errors as for `DequantizeRow`.
absl::Status QuantizeRow(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace cascade::kernels::cpu
