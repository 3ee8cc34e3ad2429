// The public API's side of the sampling parameters (proto/cascade/v1/inference.proto
// `SamplingParams`): the one conversion between them and sampling::SamplingParams, read
// by the coordinator when it validates a request (coordinator/front/request_validation.h)
// and written by the CLI's `cascade generate` (client/cli/request_flags.h). The OpenAI
// JSON's side is coordinator/front/openai_api.cc (ParseSampling), the step protocol's
// wire/step_wire.h. Every field goes both ways unchanged (tests/wire/).
#pragma once

#include "cascade/v1/inference.pb.h"
#include "sampling/sampler.h"

namespace cascade::wire {

// Every field set, so that the coordinator sees what the caller chose.
v1::SamplingParams ToApiSampling(const sampling::SamplingParams& p);
// Unset fields keep SamplingParams' defaults; `n_logprobs` is the request's `logprobs`.
// Not validated here (SamplingParams::Validate).
sampling::SamplingParams FromApiSampling(const v1::SamplingParams& s, int32_t n_logprobs);

}  // namespace cascade::wire
