// Element types of tensors, dense and block-quantized, with their storage geometry.
// Block-quantized types store `BlockElems()` elements in `BlockBytes()` bytes; a dense
// type is a block of one element. Thread-safe (constants only).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cascade {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kQ8_0,  // 32 elements: f16 scale + 32 x int8.
  kQ4_0,  // 32 elements: f16 scale + 16 bytes of nibbles, value = d * (q - 8).
  kQ4_1,  // 32 elements: f16 scale, f16 min + 16 bytes of nibbles, value = d * q + m.
  kQ4_K,  // 256 elements: super-block of 8 x 32 with 6-bit scales and mins.
  kQ6_K,  // 256 elements: 16 x 16 with int8 scales, 6-bit quants.
  kQ8_K,  // 256 elements: f32 scale + 256 x int8 + 16 x int16 sums (activations only).
  // 128 elements: f16 scale, f16 zero point, 16 x uint32 of 8 nibbles each, value =
  // d * (q - z). The row-major form of GPTQ/AWQ group-128 INT4 (model/format/int4_checkpoint.h).
  kI4_G128,
  // The rest of GGUF's common types (llama.cpp's ggml-common.h; see core/quant_blocks.h).
  kQ5_0,    // 32 elements: f16 scale, 32 high bits, 16 bytes of nibbles: d * (q - 16).
  kQ5_1,    // 32 elements: f16 scale and min, 32 high bits, nibbles: d * q + m.
  kQ2_K,    // 256 elements: 16 x 16 with 4-bit scales and mins, 2-bit quants.
  kQ3_K,    // 256 elements: 16 x 16 with 6-bit signed scales, 3-bit quants.
  kQ5_K,    // 256 elements: 8 x 32 with 6-bit scales and mins (as Q4_K), 5-bit quants.
  kIQ4_NL,  // 32 elements: f16 scale, 4-bit indices into a fixed non-linear table.
  kIQ4_XS,  // 256 elements: 8 x 32 with 6-bit scales, indices as IQ4_NL.
  // FP8 E4M3 (core/fp8.h): one byte per element, as a checkpoint stores it (its scales are
  // other tensors; read by model/format/fp8_checkpoint.h) and as the fp8_e4m3 KV cache
  // holds it (its scales per KV head: model/kv_cache.h).
  kF8_E4M3,
  // 128 elements: f32 scale d + 128 x E4M3, value = d * e4m3(q). The row-major form of
  // block-scaled (128 x 128), per-channel and per-tensor FP8 checkpoints, scales exact.
  kF8_E4M3_B128,
  // 32 elements: an E8M0 exponent e + 16 bytes of E2M1 nibbles (Q4_0's order), value =
  // 2^(e - 128) * kMxfp4Values[q] (OCP Microscaling MXFP4, as GGUF stores it).
  kMXFP4,
  // Raw bytes (safetensors "U8"): packed codes a checkpoint stores beside their scales
  // (gpt-oss's MXFP4 `*_blocks` / `*_scales`), read by model/format, never by kernels.
  kU8,
};

struct DTypeInfo {
  std::string_view name;
  int32_t block_elems;
  int32_t block_bytes;
  bool quantized;
};

const DTypeInfo& GetDTypeInfo(DType dtype);
inline std::string_view DTypeName(DType d) { return GetDTypeInfo(d).name; }
inline int64_t BlockElems(DType d) { return GetDTypeInfo(d).block_elems; }
inline int64_t BlockBytes(DType d) { return GetDTypeInfo(d).block_bytes; }
inline bool IsQuantized(DType d) { return GetDTypeInfo(d).quantized; }

// Bytes of a row of `n_elems` elements; `n_elems` must be a multiple of BlockElems().
inline int64_t RowBytes(DType d, int64_t n_elems) { return n_elems / BlockElems(d) * BlockBytes(d); }

// Parses a name such as "f32", "q4_1" (case-insensitive).
std::optional<DType> DTypeFromName(std::string_view name);

}  // namespace cascade
