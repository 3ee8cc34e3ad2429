// Packed block structs of the GGUF / ggml block-quantized formats, byte-for-byte the
// layouts of llama.cpp's ggml-common.h (`block_q8_0`, `block_q4_0`, ...), so that a row
// of a mapped GGUF tensor can be read as an array of these structs.
// Thread-safety: plain data definitions only.
//
// Element values (q = stored quant, d/m/dmin = f16 scales stored as raw IEEE binary16 bits):
//   Q8_0: x = d * q, q int8.
//   Q4_0: x = d * (q - 8); qs[j] holds element j in its low nibble and j + 16 in its high.
//   Q4_1: x = d * q + m; nibble order as Q4_0.
//   Q4_K: 256 = 8 sub-blocks of 32; sub-block j has 6-bit scale sc[j] and min mn[j]
//         (see `UnpackQ4KScaleMin`): x = d * sc[j] * q - dmin * mn[j]. Within each 64-element
//         pair of sub-blocks (2i, 2i + 1), qs[32 i + l] holds element l of sub-block 2i in
//         its low nibble and element l of sub-block 2i + 1 in its high nibble.
//   Q6_K: 256 = 16 groups of 16 with int8 scales: x = d * scales[g] * (q - 32), q 6-bit
//         (4 low bits in ql, 2 high bits in qh; see kernels/cpu/quantize.cc).
//   Q8_K: x = d * q (f32 d); bsums[g] = sum of qs[16 g .. 16 g + 15]. Activations only.
//   Q5_0: x = d * (q - 16), q 5-bit: nibbles as Q4_0, bit e of the little-endian qh word is
//         element e's fifth bit.  Q5_1: x = d * q + m, likewise.
//   Q2_K: 256 = 16 groups of 16; scales[g] holds the group's 4-bit scale (low nibble) and
//         min (high nibble): x = d * sc * q - dmin * mn, q 2-bit. Element e = 128 n + 32 j + l
//         (n < 2, j < 4, l < 32) is bits [2 j, 2 j + 2) of qs[32 n + l].
//   Q3_K: 256 = 16 groups of 16 with 6-bit scales (packed in 12 bytes, see
//         kernels/cpu/quantize.cc): x = d * (sc - 32) * (q - 4), q 3-bit: its low 2 bits as
//         Q2_K's, its third bit is bit (4 n + j) of hmask[l].
//   Q5_K: scales and mins as Q4_K; nibble of element e as Q4_K's, its fifth bit is bit
//         e / 32 of qh[e % 32]: x = d * sc * q - dmin * mn.
//   IQ4_NL: x = d * kIq4nlValues[q], q 4-bit in Q4_0's nibble order.
//   IQ4_XS: 256 = 8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in scales_l, high 2
//         in scales_h): x = d * (ls - 32) * kIq4nlValues[q], nibbles as IQ4_NL per sub-block.
//   I4_G128 (Cascade's own, not ggml's): 128 elements with one f16 scale d and one f16 zero
//         point z: x = d * (q - z). Element 8 w + j sits in bits [4 j, 4 j + 4) of qs[w]:
//         the nibble order of GPTQ/AWQ's int32 words, stored row-major ([n_out, n_in], so
//         rows shard like every other type). model/format/int4_checkpoint.h repacks GPTQ and AWQ
//         checkpoints into it exactly (scales and zeros are copied, never re-rounded).
//   MXFP4: e8m0 exponent e + 16 bytes of E2M1 nibbles in Q4_0's order: x = 2^(e - 128) *
//         kMxfp4Values[q] (OCP Microscaling; GGUF type 39).
//   F8_E4M3_B128 (Cascade's own): 128 elements with one f32 scale d and 128 E4M3 codes
//         (core/fp8.h): x = d * e4m3(q). model/format/fp8_checkpoint.h repacks FP8
//         checkpoints into it exactly (their scales are f32 and are copied).
#pragma once

#include <cstdint>

namespace cascade {

inline constexpr int kQK = 32;    // Elements per block of the Q4_0/Q4_1/Q8_0 family.
inline constexpr int kQKK = 256;  // Elements per super-block of the K family.
inline constexpr int kQG = 128;   // Elements per group of I4_G128.

#pragma pack(push, 1)
struct BlockQ8_0 {  // ggml `block_q8_0`.
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ4_0 {  // ggml `block_q4_0`.
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {  // ggml `block_q4_1`.
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {  // ggml `block_q4_K`.
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {  // ggml `block_q6_K`.
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
struct BlockQ8_K {  // ggml `block_q8_K`.
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
struct BlockQ5_0 {  // ggml `block_q5_0`.
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {  // ggml `block_q5_1`.
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ2_K {  // ggml `block_q2_K`.
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {  // ggml `block_q3_K`.
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ5_K {  // ggml `block_q5_K`.
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockIQ4_NL {  // ggml `block_iq4_nl`.
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockIQ4_XS {  // ggml `block_iq4_xs`.
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
struct BlockI4G128 {
  uint16_t d;
  uint16_t z;
  uint32_t qs[kQG / 8];
};
struct BlockMXFP4 {
  uint8_t e;       // E8M0 shared exponent.
  uint8_t qs[16];  // E2M1 codes: element j in the low nibble of qs[j], j + 16 in the high.
};
struct BlockF8E4M3B128 {
  float d;
  uint8_t qs[128];  // E4M3 codes (core/fp8.h).
};
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockI4G128) == 68);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockF8E4M3B128) == 132);
static_assert(sizeof(BlockMXFP4) == 17);

// Bytes of an F8_E4M3_B128 row from its start to the block holding input k (its f32 scale,
// then its 128 codes).
inline constexpr int64_t F8BlockOffset(int64_t k) { return (k >> 7) * static_cast<int64_t>(sizeof(BlockF8E4M3B128)); }

// The 16 values of IQ4_NL / IQ4_XS quants (ggml's `kvalues_iq4nl`).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 16 E2M1 values of MXFP4 codes, doubled (ggml's `kvalues_mxfp4`): 0, 0.5, 1, 1.5, 2,
// 3, 4, 6 and their negatives; the block's scale carries the half (Mxfp4Scale).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128): an E8M0 exponent's value (2^(e - 127)) halved for the doubled codes (ggml's
// GGML_E8M0_TO_FP32_HALF; e = 0 and 1 are f32 subnormals).
inline float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// The 16 6-bit scales of a Q3_K super-block, unsigned (subtract 32 for the signed scale):
// scale g keeps its low 4 bits in a nibble of scales[g % 8] (the low one for g < 8) and its
// high 2 bits in bits [2 (g / 4), 2 (g / 4) + 2) of scales[8 + g % 4] (ggml's kmask unpacking).
inline void UnpackQ3KScales(const uint8_t* scales, uint8_t out[16]) {
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? scales[g] & 0x0f : scales[g - 8] >> 4;
    const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = static_cast<uint8_t>(low | (high << 4));
  }
}

// Quant `j` (0..127) of an I4_G128 block.
inline int I4G128Quant(const BlockI4G128& b, int j) { return static_cast<int>((b.qs[j / 8] >> (4 * (j % 8))) & 0xf); }

// The 6-bit scale and min of sub-block `j` (0..7) of a Q4_K super-block: sub-blocks 0..3
// keep theirs in the low 6 bits of scales[j] / scales[j + 4]; sub-blocks 4..7 keep the low
// 4 bits in the nibbles of scales[j + 4] and the high 2 bits in the top bits of
// scales[j - 4] (scale) / scales[j] (min). (ggml's `get_scale_min_k4`.)
inline void UnpackQ4KScaleMin(const uint8_t* scales, int j, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *mn = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace cascade
