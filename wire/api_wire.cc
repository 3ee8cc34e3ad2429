#include "wire/api_wire.h"

#include "wire/sampling_fields.h"

namespace cascade::wire {

v1::SamplingParams ToApiSampling(const sampling::SamplingParams& p) {
  v1::SamplingParams s;
  internal::SetSamplingFields(p, &s);
  return s;
}

sampling::SamplingParams FromApiSampling(const v1::SamplingParams& s, int32_t n_logprobs) {
  sampling::SamplingParams p;
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.seed = s.seed();
  p.n_logprobs = n_logprobs;
  return p;
}

}  // namespace cascade::wire
