// The 32-weight chunks of every GGUF block type and of I4_G128 (GPTQ/AWQ; cuda_kernels.h
// Q8GemvCode) as 8 words of 4 signed bytes with their multipliers, for the __dp4a kernels:
// the dense GEMV (q8_gemv.cu) and the grouped expert GEMVs (moe_experts.cu). Layouts from
// core/quant_blocks.h (the byte offsets as cuda_kernels.cu's CodeValue reads them); see
// q8_gemv.cu for the arithmetic. The 5-bit and 3-bit types add their top bit to the
// nibble or 2-bit field as a byte each; the table types (IQ4_NL, IQ4_XS, MXFP4) look their
// codes up four at a time with byte permutes (TableBytes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// The device intrinsics the unpacking uses. Compiled by a host compiler (no __CUDACC__:
// tests/kernels/q8_unpack_test.cc), the same arithmetic in plain C++, so that the CPU
// test suite checks every type's unpacking against the CPU's dequantizer without a GPU.
#ifdef __CUDACC__
__device__ __forceinline__ uint32_t Vsub4(uint32_t a, uint32_t b) { return __vsub4(a, b); }
__device__ __forceinline__ uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) { return __byte_perm(x, y, s); }
__device__ __forceinline__ int Dp4a(int32_t a, int32_t b, int c) { return __dp4a(a, b, c); }
__device__ __forceinline__ int RoundToInt(float x) { return __float2int_rn(x); }
#else
inline uint32_t Vsub4(uint32_t a, uint32_t b) {  // Per byte, modulo 256.
  uint32_t r = 0;
  for (int i = 0; i < 32; i += 8) r |= ((((a >> i) & 0xffu) - ((b >> i) & 0xffu)) & 0xffu) << i;
  return r;
}
inline uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {  // Selectors below 8 only.
  const uint64_t both = static_cast<uint64_t>(y) << 32 | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((both >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
inline int Dp4a(int32_t a, int32_t b, int c) {  // Four signed byte products.
  for (int i = 0; i < 32; i += 8) c += static_cast<int8_t>(a >> i) * static_cast<int8_t>(b >> i);
  return c;
}
inline int RoundToInt(float x) { return static_cast<int>(std::nearbyint(x)); }  // Ties to even.
#endif

// Four bytes little-endian from an address aligned to 4 (Load32) or to 2 (Load32By16):
// one load, or two, where Le32 makes four. Which a field takes follows from its block's size
// and offset (every weight starts 256-aligned: its own cudaMalloc; rows and stacked parts at
// whole rows): 4 for the blocks of Q4_1, Q5_1, I4_G128, Q2_K, Q4_K, Q5_K and IQ4_XS (20, 24,
// 68, 84, 144, 176 and 136 bytes), 2 for Q8_0, Q4_0, Q5_0, IQ4_NL, Q3_K and Q6_K (34, 18,
// 22, 18, 110 and 210); MXFP4's 17 keeps Le32. The host build counts the loads whose
// address is not so aligned (MisalignedLoads), which the unpacking test holds at zero.
#ifdef __CUDACC__
__device__ __forceinline__ uint32_t Load32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t Load32By16(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
}
#else
inline int& MisalignedLoads() {
  static int n = 0;
  return n;
}
inline uint32_t Load32(const uint8_t* p) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0) ++MisalignedLoads();
  return Le32(p);
}
inline uint32_t Load32By16(const uint8_t* p) {
  if (reinterpret_cast<uintptr_t>(p) % 2 != 0) ++MisalignedLoads();
  return Le32(p);
}
#endif
// A field's loads by its alignment (above): 4, 2, or 1 byte.
template <int kAlign>
__device__ __forceinline__ uint32_t LoadWord(const uint8_t* p) {
  if constexpr (kAlign == 4) {
    return Load32(p);
  } else if constexpr (kAlign == 2) {
    return Load32By16(p);
  } else {
    return Le32(p);
  }
}

// Four nibbles (bits 0-15, lowest first) as four bytes, lowest first.
__device__ __forceinline__ uint32_t SpreadNibbles(uint32_t x) {
  x = (x | (x << 8)) & 0x00ff00ffu;
  return (x | (x << 4)) & 0x0f0f0f0fu;
}

// Four bits (bits 0-3) as the low bits of four bytes, lowest first.
__device__ __forceinline__ uint32_t SpreadBits(uint32_t x) {
  return (x & 1u) | (x & 2u) << 7 | (x & 4u) << 14 | (x & 8u) << 21;
}

// Four 4-bit codes, one per byte, as the table's int8 entries, the table held as four
// little-endian words (entries 4 i .. 4 i + 3 in t_i): one byte permute picks each code's
// entry among entries 0-7, one among 8-15, and a third keeps the one its bit 3 names.
// A byte permute's selector takes a nibble per output byte, so the codes' low 3 bits and
// their bit 3 are first gathered from bytes into nibbles.
__device__ __forceinline__ uint32_t TableBytes(uint32_t codes, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
  const auto nibbles = [](uint32_t bytes) {  // Bytes (each < 16) 0..3 to nibbles 0..3.
    const uint32_t u = bytes | bytes >> 4;
    return (u & 0xffu) | ((u >> 8) & 0xff00u);
  };
  const uint32_t low = nibbles(codes & 0x07070707u), high = nibbles((codes >> 3) & 0x01010101u);
  const uint32_t from_low = BytePerm(t0, t1, low), from_high = BytePerm(t2, t3, low);
  return BytePerm(from_low, from_high, 0x3210u | high << 2);
}
__device__ __forceinline__ uint32_t Iq4nlBytes(uint32_t codes) {
  return TableBytes(codes, kIq4nlWord0, kIq4nlWord1, kIq4nlWord2, kIq4nlWord3);
}
__device__ __forceinline__ uint32_t Mxfp4Bytes(uint32_t codes) {
  return TableBytes(codes, kMxfp4Word0, kMxfp4Word1, kMxfp4Word2, kMxfp4Word3);
}

struct WeightChunk {
  int32_t q[8];  // Weights 4k .. 4k + 3 in word k, as signed bytes.
  // Multipliers (see q8_gemv.cu): a0 of weights 0-15, a1 of 16-31, b of the activations'
  // sum, b1 of the sum of their last 16 (Q2_K, whose halves have their own mins).
  float a0, a1, b = 0.0f, b1 = 0.0f;
};

// The 16 bytes of a block in Q4_0's nibble order (qs[j]: element j low, j + 16 high) as
// its 8 words of codes, each through `f` (a table, or an offset).
template <int kAlign, typename F>
__device__ __forceinline__ void SplitNibbleWords(const uint8_t* qs, WeightChunk& w, F f) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = LoadWord<kAlign>(qs + 4 * k);
    w.q[k] = static_cast<int32_t>(f(v & 0x0f0f0f0fu, k));
    w.q[4 + k] = static_cast<int32_t>(f((v >> 4) & 0x0f0f0f0fu, 4 + k));
  }
}

// Chunk c (weights [32 c, 32 c + 32)) of a row in `code`, from core/quant_blocks.h's layouts.
__device__ __forceinline__ void Unpack(const uint8_t* row, int code, int64_t c, WeightChunk& w) {
  if (code == kWQ8_0) {
    const uint8_t* b = row + c * 34;
    w.a0 = w.a1 = Half(b);
#pragma unroll
    for (int k = 0; k < 8; ++k) w.q[k] = static_cast<int32_t>(Load32By16(b + 2 + 4 * k));
    return;
  }
  if (code == kWQ4_0 || code == kWQ4_1) {
    const bool q4_1 = code == kWQ4_1;
    const uint8_t* b = row + c * (q4_1 ? 20 : 18);
    const uint8_t* qs = b + (q4_1 ? 4 : 2);
    w.a0 = w.a1 = Half(b);
    w.b = q4_1 ? Half(b + 2) : 0.0f;
    // Q4_0: q - 8, a signed byte.
    const auto value = [&](uint32_t q, int) { return q4_1 ? q : Vsub4(q, 0x08080808u); };
    if (q4_1) {
      SplitNibbleWords<4>(qs, w, value);
    } else {
      SplitNibbleWords<2>(qs, w, value);
    }
    return;
  }
  if (code == kWI4G128) {
    // A quarter of a group: d * (q - z) = d * q - d * z, so a = d and b = -d * z. Word w
    // of the group holds elements 8 w .. 8 w + 7 as nibbles, lowest first: its low and high
    // halves spread to four bytes each.
    const uint8_t* g = row + (c / 4) * 68;
    const float d = Half(g);
    w.a0 = w.a1 = d;
    w.b = -d * Half(g + 2);
    const uint8_t* qs = g + 4 + 16 * (c % 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t word = Load32(qs + 4 * k);
      w.q[2 * k] = static_cast<int32_t>(SpreadNibbles(word & 0xffffu));
      w.q[2 * k + 1] = static_cast<int32_t>(SpreadNibbles(word >> 16));
    }
    return;
  }
  if (code == kWQ5_0 || code == kWQ5_1) {  // d (m) qh[4] qs[16]: x = d (q - 16), or d q + m.
    const bool q5_1 = code == kWQ5_1;
    const uint8_t* b = row + c * (q5_1 ? 24 : 22);
    const uint8_t* qh = b + (q5_1 ? 4 : 2);
    w.a0 = w.a1 = Half(b);
    w.b = q5_1 ? Half(b + 2) : 0.0f;
    const uint32_t high = q5_1 ? Load32(qh) : Load32By16(qh);  // Bit e: element e's fifth bit.
    const auto value = [&](uint32_t q, int k) {
      const uint32_t v = q | SpreadBits(high >> (4 * k)) << 4;
      return q5_1 ? v : Vsub4(v, 0x10101010u);
    };
    if (q5_1) {
      SplitNibbleWords<4>(qh + 4, w, value);
    } else {
      SplitNibbleWords<2>(qh + 4, w, value);
    }
    return;
  }
  if (code == kWIQ4_NL) {  // d qs[16]: x = d kIq4nlValues[q].
    const uint8_t* b = row + c * 18;
    w.a0 = w.a1 = Half(b);
    SplitNibbleWords<2>(b + 2, w, [](uint32_t q, int) { return Iq4nlBytes(q); });
    return;
  }
  if (code == kWMXFP4) {  // e qs[16]: x = 2^(e - 128) kMxfp4Values[q] (the doubled E2M1 values).
    const uint8_t* b = row + c * 17;
    const uint32_t e = b[0];
    w.a0 = w.a1 = UintAsFloat(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    SplitNibbleWords<1>(b + 1, w, [](uint32_t q, int) { return Mxfp4Bytes(q); });
    return;
  }
  const int64_t super = c / 8;
  const int s = static_cast<int>(c % 8);   // The 32-weight sub-block.
  if (code == kWQ4_K || code == kWQ5_K) {  // d dmin scales[12] (qh[32]) qs[128].
    const bool q5 = code == kWQ5_K;
    const uint8_t* sb = row + super * (q5 ? 176 : 144);
    int scale, mn;
    ScaleMinK4(sb + 4, s, &scale, &mn);
    w.a0 = w.a1 = Half(sb) * static_cast<float>(scale);
    w.b = -Half(sb + 2) * static_cast<float>(mn);
    const uint8_t* qs = sb + (q5 ? 48 : 16) + 32 * (s / 2);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t v = (Load32(qs + 4 * k) >> shift) & 0x0f0f0f0fu;
      if (q5) v |= ((Load32(sb + 16 + 4 * k) >> s) & 0x01010101u) << 4;  // Bit s of qh[l].
      w.q[k] = static_cast<int32_t>(v);
    }
    return;
  }
  if (code == kWQ2_K || code == kWQ3_K) {
    // Element 32 s + l is bits [2 j, 2 j + 2) of qs[32 n + l], n = s / 4, j = s % 4; Q3_K's
    // third bit is bit s of hmask[l], and its value q - 4.
    const bool q3 = code == kWQ3_K;
    const uint8_t* sb = row + super * (q3 ? 110 : 84);
    const uint8_t* qs = sb + (q3 ? 32 : 16) + 32 * (s / 4);
    const int shift = 2 * (s % 4);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t v = ((q3 ? Load32By16(qs + 4 * k) : Load32(qs + 4 * k)) >> shift) & 0x03030303u;
      if (q3) v = Vsub4(v | ((Load32By16(sb + 4 * k) >> s) & 0x01010101u) << 2, 0x04040404u);
      w.q[k] = static_cast<int32_t>(v);
    }
    if (q3) {  // hmask[32] qs[64] scales[12] d.
      const float d = Half(sb + 108);
      w.a0 = d * static_cast<float>(ScaleQ3K(sb + 96, 2 * s));
      w.a1 = d * static_cast<float>(ScaleQ3K(sb + 96, 2 * s + 1));
    } else {  // scales[16] (scale low, min high) qs[64] d dmin: x = d sc q - dmin mn.
      const float d = Half(sb + 80), dmin = Half(sb + 82);
      const int g0 = sb[2 * s], g1 = sb[2 * s + 1];
      w.a0 = d * static_cast<float>(g0 & 0x0f);
      w.a1 = d * static_cast<float>(g1 & 0x0f);
      // The first half's min over all 32, then the second half's difference over its 16.
      w.b = -dmin * static_cast<float>(g0 >> 4);
      w.b1 = -dmin * static_cast<float>((g1 >> 4) - (g0 >> 4));
    }
    return;
  }
  if (code == kWIQ4_XS) {  // d scales_h(2) scales_l[4] qs[128]: x = d (ls - 32) kIq4nlValues[q].
    const uint8_t* sb = row + super * 136;
    const int scales_h = sb[2] | sb[3] << 8;
    const int ls = ((sb[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | ((scales_h >> (2 * s)) & 3) << 4;
    w.a0 = w.a1 = Half(sb) * static_cast<float>(ls - 32);
    SplitNibbleWords<4>(sb + 8 + 16 * s, w, [](uint32_t q, int) { return Iq4nlBytes(q); });
    return;
  }
  // Q6_K: ql[128], qh[64], int8 scales[16] (one per 16 weights), f16 d.
  const uint8_t* sb = row + super * 210;
  const int h = s / 4, quarter = s % 4;
  const uint8_t* ql = sb + 64 * h + 32 * (quarter % 2);
  const uint8_t* qh = sb + 128 + 32 * h;
  const float d = Half(sb + 208);
  w.a0 = d * static_cast<float>(static_cast<int8_t>(sb[192 + 2 * s]));
  w.a1 = d * static_cast<float>(static_cast<int8_t>(sb[192 + 2 * s + 1]));
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t low = (Load32By16(ql + 4 * k) >> (4 * (quarter / 2))) & 0x0f0f0f0fu;
    const uint32_t high = (Load32By16(qh + 4 * k) >> (2 * quarter)) & 0x03030303u;
    w.q[k] = static_cast<int32_t>(Vsub4(low | (high << 4), 0x20202020u));  // q - 32.
  }
}

// acc += the dot product of chunk `w` with activation block `x` (one token's 32 values).
// 32 activations, element j read as v(j), quantized to 8 bits with an amax scale (Q8Block):
// what QuantizeActivations writes for each block, and the device MoE layers' gathered rows.
template <typename Value>
__device__ __forceinline__ Q8Block QuantizeBlock(Value v) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v(j)));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  Q8Block b;
  int sum[2] = {0, 0};  // Of elements 0-15, 16-31.
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = RoundToInt(v(4 * k + j) * id);
      sum[k / 4] += q;
      word |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(q))) << (8 * j);
    }
    b.q[k] = static_cast<int32_t>(word);
  }
  b.d = d;
  b.s = d * static_cast<float>(sum[0] + sum[1]);
  b.s1 = d * static_cast<float>(sum[1]);
  return b;
}

__device__ __forceinline__ float DotChunk(const WeightChunk& w, const Q8Block& x) {
  int lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo = Dp4a(w.q[k], x.q[k], lo);
    hi = Dp4a(w.q[4 + k], x.q[4 + k], hi);
  }
  return x.d * (w.a0 * static_cast<float>(lo) + w.a1 * static_cast<float>(hi)) + w.b * x.s + w.b1 * x.s1;
}

}  // namespace cascade::kernels::cuda
