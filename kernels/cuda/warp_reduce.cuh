// Warp-level reductions shared by the kernels of kernels/cuda/.
#pragma once

namespace cascade::kernels::cuda {

constexpr int kWarp = 32;

// The sum of v over the warp; every lane gets it.
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace cascade::kernels::cuda
