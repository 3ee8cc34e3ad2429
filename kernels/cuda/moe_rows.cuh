// What the device MoE kernels (moe_experts.cu's GEMVs, moe_mma.cu's int8 tiles) share: the
// search from a grouped row (or tile) to its held expert, and the experts' activation.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// The held expert whose span of `starts` [n_held + 1] (each expert's first grouped row, or
// first tile) holds v (v < starts[n_held]): the last e with starts[e] <= v, which skips the
// empty experts before it.
__device__ __forceinline__ int64_t HeldExpertAt(const int32_t* starts, int64_t n_held, int32_t v) {
  int64_t lo = 0, hi = n_held;  // starts[lo] <= v < starts[hi].
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (starts[mid] <= v) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The expert activation of a gate and an up value, as the CPU backend's SiluMul and
// ClampedSwiglu compute it.
__device__ __forceinline__ float Activation(const MoeArgs& a, float g, float u) {
  if (a.swiglu_limit <= 0.0f) return g / (1.0f + expf(-g)) * u;
  g = fminf(g, a.swiglu_limit);
  u = fminf(fmaxf(u, -a.swiglu_limit), a.swiglu_limit);
  return (u + 1.0f) * g / (1.0f + expf(-a.swiglu_alpha * g));
}

}  // namespace cascade::kernels::cuda
