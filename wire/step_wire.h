// The step protocol's side of the types the coordinator and the workers share
// (proto/cascade/v1/cluster.proto): each conversion written once, here, so that the two
// ends cannot drift apart. Every field goes both ways unchanged (tests/wire/).
#pragma once

#include "cascade/v1/cluster.pb.h"
#include "core/dtype.h"
#include "sampling/sampler.h"

namespace cascade::wire {

// A request's sampling parameters as a step carries them, and back.
v1::StepSampling ToStepSampling(const sampling::SamplingParams& p);
sampling::SamplingParams FromStepSampling(const v1::StepSampling& s);

// The KV cache's element type (f32, f16, q8_0 or fp8_e4m3, scheduler.kv_cache_dtype) as LoadShard
// carries it, and back. Another DType maps to f16, the protocol's zero value.
v1::KvCacheDType ToKvCacheDType(DType d);
DType FromKvCacheDType(v1::KvCacheDType d);

}  // namespace cascade::wire
