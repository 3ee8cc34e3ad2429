// The eight sampling fields that the public API's `SamplingParams` (inference.proto) and
// the step protocol's `StepSampling` (cluster.proto) both carry, under the same names:
// written once for both messages (api_wire.cc, step_wire.cc). Reading them back differs
// (the API's fields are optional, the step's are not), so each file reads its own.
#pragma once

#include "sampling/sampler.h"

namespace cascade::wire::internal {

template <typename Message>
void SetSamplingFields(const sampling::SamplingParams& p, Message* m) {
  m->set_temperature(p.temperature);
  m->set_top_k(p.top_k);
  m->set_top_p(p.top_p);
  m->set_min_p(p.min_p);
  m->set_repetition_penalty(p.repetition_penalty);
  m->set_presence_penalty(p.presence_penalty);
  m->set_frequency_penalty(p.frequency_penalty);
  m->set_seed(p.seed);
}

}  // namespace cascade::wire::internal
