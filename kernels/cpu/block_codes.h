// One common decoded form for every 4/5/6-bit GGUF block type, per 32 elements: the
// element codes (unsigned, 4 to 6 bits) and, per 16-element half, a scale and an offset, so
// that element e is
//     x[e] = d[e / 16] * V(code[e]) + m[e / 16],
// with V(c) = c for the linear types and V(c) = table[c] (m = 0) for the table types:
// kIq4nlValues for IQ4_NL / IQ4_XS, kMxfp4Values for MXFP4.
// Scales are the products ggml itself forms in f32 (d * sc, dmin * mn), so dequantizing from
// this form gives the file's values. The super-block types (the K types and IQ4_XS) also
// give the factors: their integer sub-scales and the f16 super-block scales, so that the
// packed layout can keep the file's sub-scales as integers (packed_weight.h). The packer
// (packed_weight.cc) and the scalar dequantizer (quantize.cc) both read blocks through it,
// so the bit layouts live in one place.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/quant_blocks.h"

namespace cascade::kernels::cpu {

struct BlockCodes {
  uint8_t code[32];
  float d[2];
  float m[2];
  // Super-block types only: d[h] = super_d * sc[h] and, with a stored min,
  // m[h] = -(super_m * mn[h]), as ggml forms them (super_d and super_m are f16 values).
  int sc[2] = {0, 0};
  int mn[2] = {0, 0};
  float super_d = 0.0f;
  float super_m = 0.0f;
};

// How a super-block type keeps its sub-scales (the factors of BlockCodes).
enum class SubScales : uint8_t {
  kNone,         // Not a super-block type: an f16 scale (and min) per block.
  kSixBitPairs,  // Two 6-bit values per 32 elements, kept in 6 bits: Q4_K / Q5_K's scale and
                 // min, Q3_K's scales of the two halves (each + sub_bias).
  kI8,           // Q6_K (per 16) and IQ4_XS (per 32): a signed scale, no stored min.
  kNibbles,      // Q2_K: 4-bit scale and min per 16 elements, one byte (scale low, min high).
};

// How a dtype's codes are represented (see packed_weight.h for the packed layout).
struct CodeFormat {
  int bits = 4;                   // Bits per code: 2 to 6.
  const int8_t* table = nullptr;  // V: a 16-entry table (core/quant_blocks.h); null: V(c) = c.
  bool sub16 = false;             // d/m differ between the halves (the 16-element group types).
  bool stored_min = false;        // m is free; otherwise m = min_factor * d.
  float min_factor = 0.0f;        // For !stored_min (0 for the table types).
  SubScales sub_scales = SubScales::kNone;
  int sub_bias = 0;  // Added to a signed sub-scale to store it in kSixBitPairs' 6 bits.
};

// The dtypes DecodeBlock reads, as an X-macro (kernel tables, explicit instantiations).
// clang-format off
#define CASCADE_FOR_EACH_CODE_DTYPE(X)                                                   \
  X(DType::kQ4_0) X(DType::kQ4_1) X(DType::kQ5_0) X(DType::kQ5_1) X(DType::kQ2_K)        \
  X(DType::kQ3_K) X(DType::kQ4_K) X(DType::kQ5_K) X(DType::kQ6_K) X(DType::kIQ4_NL)      \
  X(DType::kIQ4_XS) X(DType::kMXFP4)
// clang-format on

// Whether DecodeBlock reads `dtype` (one of CASCADE_FOR_EACH_CODE_DTYPE).
constexpr bool HasBlockCodes(DType dtype) {
#define CASCADE_IS_CODE_DTYPE(D) dtype == D ||
  return CASCADE_FOR_EACH_CODE_DTYPE(CASCADE_IS_CODE_DTYPE) false;
#undef CASCADE_IS_CODE_DTYPE
}

// The representation of `dtype` (HasBlockCodes(dtype) must hold). Q3_K's codes are its
// value + 4 (0..7).
constexpr CodeFormat CodeFormatOf(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return {.bits = 4, .min_factor = -8.0f};
    case DType::kQ5_0: return {.bits = 5, .min_factor = -16.0f};
    case DType::kQ4_1: return {.bits = 4, .stored_min = true};
    case DType::kQ4_K: return {.bits = 4, .stored_min = true, .sub_scales = SubScales::kSixBitPairs};
    case DType::kQ5_1: return {.bits = 5, .stored_min = true};
    case DType::kQ5_K: return {.bits = 5, .stored_min = true, .sub_scales = SubScales::kSixBitPairs};
    case DType::kQ6_K: return {.bits = 6, .sub16 = true, .min_factor = -32.0f, .sub_scales = SubScales::kI8};
    case DType::kQ3_K:
      return {.bits = 3, .sub16 = true, .min_factor = -4.0f, .sub_scales = SubScales::kSixBitPairs, .sub_bias = 32};
    case DType::kQ2_K: return {.bits = 2, .sub16 = true, .stored_min = true, .sub_scales = SubScales::kNibbles};
    case DType::kIQ4_NL: return {.bits = 4, .table = kIq4nlValues};
    case DType::kIQ4_XS: return {.bits = 4, .table = kIq4nlValues, .sub_scales = SubScales::kI8};
    case DType::kMXFP4: return {.bits = 4, .table = kMxfp4Values};
    default: return {};
  }
}

// Decodes 32-element block `b` of a row stored as `dtype` (HasBlockCodes) at `row`.
void DecodeBlock(DType dtype, const uint8_t* row, int64_t b, BlockCodes* out);

}  // namespace cascade::kernels::cpu
