#include "wire/step_wire.h"

#include "wire/sampling_fields.h"

namespace cascade::wire {

v1::StepSampling ToStepSampling(const sampling::SamplingParams& p) {
  v1::StepSampling s;
  internal::SetSamplingFields(p, &s);
  s.set_logprobs(p.n_logprobs);
  return s;
}

sampling::SamplingParams FromStepSampling(const v1::StepSampling& s) {
  sampling::SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p();
  p.min_p = s.min_p();
  p.repetition_penalty = s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.seed = s.seed();
  p.n_logprobs = s.logprobs();
  return p;
}

v1::KvCacheDType ToKvCacheDType(DType d) {
  switch (d) {
    case DType::kF32: return v1::KV_CACHE_F32;
    case DType::kQ8_0: return v1::KV_CACHE_Q8_0;
    case DType::kF8_E4M3: return v1::KV_CACHE_FP8_E4M3;
    default: return v1::KV_CACHE_F16;
  }
}

DType FromKvCacheDType(v1::KvCacheDType d) {
  switch (d) {
    case v1::KV_CACHE_F32: return DType::kF32;
    case v1::KV_CACHE_Q8_0: return DType::kQ8_0;
    case v1::KV_CACHE_FP8_E4M3: return DType::kF8_E4M3;
    default: return DType::kF16;
  }
}

}  // namespace cascade::wire
