// The step protocol's conversions (wire/step_wire.h): every field of the sampling
// parameters and every KV cache type survives the trip to the proto and back, with values
// that differ from the defaults so that a dropped field shows.
#include "wire/step_wire.h"

#include <gtest/gtest.h>

namespace cascade::wire {
namespace {

TEST(StepWireTest, SamplingParamsRoundTrip) {
  const sampling::SamplingParams p{.temperature = 0.3f,
                                   .top_k = 17,
                                   .top_p = 0.7f,
                                   .min_p = 0.11f,
                                   .repetition_penalty = 1.4f,
                                   .presence_penalty = -0.5f,
                                   .frequency_penalty = 0.25f,
                                   .seed = 0xfedcba9876543210ull,
                                   .n_logprobs = 7};
  const v1::StepSampling s = ToStepSampling(p);
  EXPECT_EQ(s.temperature(), 0.3f);
  EXPECT_EQ(s.top_k(), 17);
  EXPECT_EQ(s.seed(), 0xfedcba9876543210ull);
  EXPECT_EQ(s.logprobs(), 7);
  const sampling::SamplingParams back = FromStepSampling(s);
  EXPECT_EQ(back.temperature, p.temperature);
  EXPECT_EQ(back.top_k, p.top_k);
  EXPECT_EQ(back.top_p, p.top_p);
  EXPECT_EQ(back.min_p, p.min_p);
  EXPECT_EQ(back.repetition_penalty, p.repetition_penalty);
  EXPECT_EQ(back.presence_penalty, p.presence_penalty);
  EXPECT_EQ(back.frequency_penalty, p.frequency_penalty);
  EXPECT_EQ(back.seed, p.seed);
  EXPECT_EQ(back.n_logprobs, p.n_logprobs);
  // Every field of the message is set by ToStepSampling (a new field must be added here).
  EXPECT_EQ(v1::StepSampling::descriptor()->field_count(), 9);
}

TEST(StepWireTest, KvCacheTypesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kQ8_0}) EXPECT_EQ(FromKvCacheDType(ToKvCacheDType(d)), d);
  EXPECT_EQ(ToKvCacheDType(DType::kF16), v1::KV_CACHE_F16);  // The protocol's zero value.
}

}  // namespace
}  // namespace cascade::wire
