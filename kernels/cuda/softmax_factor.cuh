// The last step of an online softmax, shared by the attention kernels: the factor that
// turns an unnormalised output (sum_t e^(s_t - m) v_t, with l = sum_t e^(s_t - m)) into
// the softmax's, as kernels/cpu/attention_kernels.h SoftmaxFactor.
#pragma once

namespace cascade::kernels::cuda {

// 1 / l, or with an attention sink logit (`sink` non-null) e^(m - M) / (l e^(m - M) +
// e^(sink - M)), M = max(m, sink), so that no exponent overflows. 0 with nothing to divide.
__device__ __forceinline__ float SoftmaxFactor(float m, float l, const float* sink) {
  if (sink == nullptr) return l > 0.0f ? 1.0f / l : 0.0f;
  const float big = fmaxf(m, *sink);
  const float c = __expf(m - big);
  const float denom = l * c + __expf(*sink - big);
  return denom > 0.0f ? c / denom : 0.0f;
}

}  // namespace cascade::kernels::cuda
