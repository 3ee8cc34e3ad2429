// Quantized weights times 8-bit activations for a few tokens (cuda_kernels.h, Q8Gemv): the
// idea of llama.cpp's MMVQ, written here. The activations are quantized once per call to
// blocks of 32 int8 with a scale (and the scaled sum of the quants, for the types whose
// values carry an offset); each 32-weight chunk is unpacked to 8 words of 4 signed bytes
// with up to two multipliers (a0 for its first 16 weights, a1 for the last 16) and an
// offset multiplier b, so that
//     sum_j w_j x_j = dx * (a0 * dot(q[0:16], xq[0:16]) + a1 * dot(q[16:32], xq[16:32])) + b * sx
// with the integer dot products done four bytes at a time by __dp4a. One warp per output
// row, as the F32-decoding QuantGemv, which stays for the other types.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

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

__global__ void QuantizeActivationsKernel(Q8Block* out, const float* x, int64_t n_blocks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const float* v = x + i * 32;
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  Q8Block b;
  int sum = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = __float2int_rn(v[4 * k + j] * id);
      sum += q;
      word |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(q))) << (8 * j);
    }
    b.q[k] = static_cast<int32_t>(word);
  }
  b.d = d;
  b.s = d * static_cast<float>(sum);
  out[i] = b;
}

template <int T>
__global__ void Q8GemvKernel(GemvOut out, const Q8Block* xq, const uint8_t* w, int code, int64_t row_bytes,
                             int64_t n_tokens, int64_t n_out, int64_t n_in, int64_t t0) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (o >= n_out) return;
  const int64_t n_chunks = n_in / 32;
  const uint8_t* row = w + o * row_bytes;
  const int n_t = static_cast<int>(n_tokens - t0 < T ? n_tokens - t0 : T);
  float acc[T];
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < n_chunks; c += kWarp) {
    WeightChunk wc;
    Unpack(row, code, c, wc);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= n_t) break;
      const Q8Block& xb = xq[(t0 + t) * n_chunks + c];
      int lo = 0, hi = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        lo = __dp4a(wc.q[k], xb.q[k], lo);
        hi = __dp4a(wc.q[4 + k], xb.q[4 + k], hi);
      }
      acc[t] += xb.d * (wc.a0 * static_cast<float>(lo) + wc.a1 * static_cast<float>(hi)) + wc.b * xb.s;
    }
  }
  StoreGemvRow(out, o, acc, n_t, t0, lane);
}

}  // namespace

void QuantizeActivations(Q8Block* out, const float* x, int64_t n_tokens, int64_t n_in, cudaStream_t stream) {
  const int64_t n_blocks = n_tokens * n_in / 32;
  if (n_blocks > 0) {
    QuantizeActivationsKernel<<<static_cast<unsigned>((n_blocks + 127) / 128), 128, 0, stream>>>(out, x, n_blocks);
  }
}

void Q8Gemv(const GemvOut& out, const Q8Block* xq, const void* w, int code, int64_t row_bytes, int64_t n_tokens,
            int64_t n_out, int64_t n_in, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const auto* wb = static_cast<const uint8_t*>(w);
  constexpr int kThreads = kWarpsPerBlock * kWarp;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    if (n_tokens - t0 == 1) {
      Q8GemvKernel<1><<<blocks, kThreads, 0, stream>>>(out, xq, wb, code, row_bytes, n_tokens, n_out, n_in, t0);
    } else if (n_tokens - t0 <= 4) {
      Q8GemvKernel<4><<<blocks, kThreads, 0, stream>>>(out, xq, wb, code, row_bytes, n_tokens, n_out, n_in, t0);
    } else {
      Q8GemvKernel<8><<<blocks, kThreads, 0, stream>>>(out, xq, wb, code, row_bytes, n_tokens, n_out, n_in, t0);
    }
  }
}

}  // namespace cascade::kernels::cuda
