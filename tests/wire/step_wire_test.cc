// The step protocol's conversions (wire/step_wire.h): every field of the sampling
// parameters and every KV cache type survives the trip to the proto and back, with values
// that differ from the defaults so that a dropped field shows.
#include "wire/step_wire.h"

#include <gtest/gtest.h>

#include "tests/wire/sampling_values.h"

namespace cascade::wire {
namespace {

TEST(StepWireTest, SamplingParamsRoundTrip) {
  const sampling::SamplingParams p = NonDefaultSampling();
  const v1::StepSampling s = ToStepSampling(p);
  EXPECT_EQ(s.temperature(), 0.3f);
  EXPECT_EQ(s.top_k(), 17);
  EXPECT_EQ(s.seed(), 0xfedcba9876543210ull);
  EXPECT_EQ(s.logprobs(), 7);
  const sampling::SamplingParams back = FromStepSampling(s);
  ExpectSameSampling(back, p);
  // Every field of the message is set by ToStepSampling (a new field must be added here).
  EXPECT_EQ(v1::StepSampling::descriptor()->field_count(), 9);
}

TEST(StepWireTest, KvCacheTypesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kF8_E4M3})
    EXPECT_EQ(FromKvCacheDType(ToKvCacheDType(d)), d);
  EXPECT_EQ(ToKvCacheDType(DType::kF16), v1::KV_CACHE_F16);  // The protocol's zero value.
}

}  // namespace
}  // namespace cascade::wire
