// Warp-level reductions shared by the kernels of kernels/cuda/, and the GEMV kernels'
// common epilogue.
#pragma once

#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

constexpr int kWarp = 32;

// The sum of v over the warp; every lane gets it.
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The inclusive prefix sum of v over the warp's lanes (lane i gets lanes 0..i), added in
// the same order on every lane and run.
template <typename T>
__device__ __forceinline__ T WarpInclusiveSum(T v, int lane) {
  for (int o = 1; o < kWarp; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += up;
  }
  return v;
}

// The end of a warp-per-row GEMV: each of the n_t tokens' partial dot products of output
// row `o` summed over the warp, and written by lane 0 into the part of `out` that row
// belongs to (row o - first of part p; tokens from t0), with its part's bias.
template <int T>
__device__ __forceinline__ void StoreGemvRow(const GemvOut& out, int64_t o, float (&acc)[T], int n_t, int64_t t0,
                                             int lane) {
#pragma unroll
  for (int t = 0; t < T; ++t) {
    if (t >= n_t) break;
    const float s = WarpSum(acc[t]);
    if (lane == 0) out.Store(o, t0 + t, s);
  }
}

}  // namespace cascade::kernels::cuda
