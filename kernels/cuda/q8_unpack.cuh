// The 32-weight chunks of the block types with an integer form (Q8_0, Q4_0, Q4_1, Q4_K,
// Q6_K, and I4_G128 for GPTQ/AWQ: cuda_kernels.h Q8GemvCode) as 8 words of 4 signed bytes with their multipliers,
// for the __dp4a kernels: the dense GEMV (q8_gemv.cu) and the grouped expert GEMVs
// (moe_experts.cu). Layouts from core/quant_blocks.h; see q8_gemv.cu for the arithmetic.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// Four nibbles (bits 0-15, lowest first) as four bytes, lowest first.
__device__ __forceinline__ uint32_t SpreadNibbles(uint32_t x) {
  x = (x | (x << 8)) & 0x00ff00ffu;
  return (x | (x << 4)) & 0x0f0f0f0fu;
}

struct WeightChunk {
  int32_t q[8];            // Weights 4k .. 4k + 3 in word k, as signed bytes.
  float a0, a1, b = 0.0f;  // Multipliers (see the file comment).
};

// Chunk c (weights [32 c, 32 c + 32)) of a row in `code`, from core/quant_blocks.h's layouts.
__device__ __forceinline__ void Unpack(const uint8_t* row, int code, int64_t c, WeightChunk& w) {
  if (code == kWQ8_0) {
    const uint8_t* b = row + c * 34;
    w.a0 = w.a1 = Half(b);
#pragma unroll
    for (int k = 0; k < 8; ++k) w.q[k] = static_cast<int32_t>(Le32(b + 2 + 4 * k));
    return;
  }
  if (code == kWQ4_0 || code == kWQ4_1) {
    const bool q4_1 = code == kWQ4_1;
    const uint8_t* b = row + c * (q4_1 ? 20 : 18);
    const uint8_t* qs = b + (q4_1 ? 4 : 2);
    const float d = Half(b);
    w.a0 = w.a1 = d;
    w.b = q4_1 ? Half(b + 2) : 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t v = Le32(qs + 4 * k);
      uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;  // Weights 4k.., 16 + 4k..
      if (!q4_1) {
        lo = __vsub4(lo, 0x08080808u);  // Q4_0: q - 8, a signed byte.
        hi = __vsub4(hi, 0x08080808u);
      }
      w.q[k] = static_cast<int32_t>(lo);
      w.q[4 + k] = static_cast<int32_t>(hi);
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
      const uint32_t word = Le32(qs + 4 * k);
      w.q[2 * k] = static_cast<int32_t>(SpreadNibbles(word & 0xffffu));
      w.q[2 * k + 1] = static_cast<int32_t>(SpreadNibbles(word >> 16));
    }
    return;
  }
  const int64_t super = c / 8;
  const int s = static_cast<int>(c % 8);  // The 32-weight sub-block.
  if (code == kWQ4_K) {
    const uint8_t* sb = row + super * 144;
    const uint8_t* sc = sb + 4;
    int scale, mn;
    if (s < 4) {
      scale = sc[s] & 63;
      mn = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
      mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    w.a0 = w.a1 = Half(sb) * static_cast<float>(scale);
    w.b = -Half(sb + 2) * static_cast<float>(mn);
    const uint8_t* qs = sb + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) w.q[k] = static_cast<int32_t>((Le32(qs + 4 * k) >> shift) & 0x0f0f0f0fu);
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
    const uint32_t low = (Le32(ql + 4 * k) >> (4 * (quarter / 2))) & 0x0f0f0f0fu;
    const uint32_t high = (Le32(qh + 4 * k) >> (2 * quarter)) & 0x03030303u;
    w.q[k] = static_cast<int32_t>(__vsub4(low | (high << 4), 0x20202020u));  // q - 32.
  }
}

// acc += the dot product of chunk `w` with activation block `x` (one token's 32 values).
__device__ __forceinline__ float DotChunk(const WeightChunk& w, const Q8Block& x) {
  int lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo = __dp4a(w.q[k], x.q[k], lo);
    hi = __dp4a(w.q[4 + k], x.q[4 + k], hi);
  }
  return x.d * (w.a0 * static_cast<float>(lo) + w.a1 * static_cast<float>(hi)) + w.b * x.s;
}

}  // namespace cascade::kernels::cuda
