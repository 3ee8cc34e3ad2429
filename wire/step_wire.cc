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
  return d == DType::kF32 ? v1::KV_CACHE_F32 : d == DType::kQ8_0 ? v1::KV_CACHE_Q8_0 : v1::KV_CACHE_F16;
}

DType FromKvCacheDType(v1::KvCacheDType d) {
  return d == v1::KV_CACHE_F32 ? DType::kF32 : d == v1::KV_CACHE_Q8_0 ? DType::kQ8_0 : DType::kF16;
}

}  // namespace cascade::wire
