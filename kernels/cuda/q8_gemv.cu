// Quantized weights times 8-bit activations for a few tokens (cuda_kernels.h, Q8Gemv): the
// idea of llama.cpp's MMVQ, written here. The activations are quantized once per call to
// blocks of 32 int8 with a scale (and the scaled sum of the quants, for the types whose
// values carry an offset); each 32-weight chunk is unpacked to 8 words of 4 signed bytes
// with up to two multipliers (a0 for its first 16 weights, a1 for the last 16) and an
// offset multipliers b and b1, so that
//     sum_j w_j x_j = dx * (a0 * dot(q[0:16], xq[0:16]) + a1 * dot(q[16:32], xq[16:32]))
//                     + b * sx + b1 * sx1
// (sx = dx * sum(xq), sx1 = dx * sum(xq[16:32])) with the integer dot products done four
// bytes at a time by __dp4a. One warp per output row, as the F32-decoding QuantGemv (the
// reference path, and F8_E4M3_B128's).
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/q8_unpack.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void QuantizeActivationsKernel(Q8Block* out, const float* x, int64_t n_blocks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const float* v = x + i * 32;
  out[i] = QuantizeBlock([v](int j) { return v[j]; });
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
      acc[t] += DotChunk(wc, xq[(t0 + t) * n_chunks + c]);
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
