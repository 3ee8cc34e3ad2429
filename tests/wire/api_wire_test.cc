// The public API's sampling conversion (wire/api_wire.h): every field survives the trip to
// the proto and back, with values that differ from the defaults so that a dropped field
// shows, and a request that sets nothing gets SamplingParams' defaults.
#include "wire/api_wire.h"

#include <gtest/gtest.h>

namespace cascade::wire {
namespace {

TEST(ApiWireTest, SamplingParamsRoundTrip) {
  const sampling::SamplingParams p{.temperature = 0.3f,
                                   .top_k = 17,
                                   .top_p = 0.7f,
                                   .min_p = 0.11f,
                                   .repetition_penalty = 1.4f,
                                   .presence_penalty = -0.5f,
                                   .frequency_penalty = 0.25f,
                                   .seed = 0xfedcba9876543210ull,
                                   .n_logprobs = 7};
  const v1::SamplingParams s = ToApiSampling(p);
  EXPECT_EQ(s.temperature(), 0.3f);
  EXPECT_EQ(s.seed(), 0xfedcba9876543210ull);
  const sampling::SamplingParams back = FromApiSampling(s, 7);
  EXPECT_EQ(back.temperature, p.temperature);
  EXPECT_EQ(back.top_k, p.top_k);
  EXPECT_EQ(back.top_p, p.top_p);
  EXPECT_EQ(back.min_p, p.min_p);
  EXPECT_EQ(back.repetition_penalty, p.repetition_penalty);
  EXPECT_EQ(back.presence_penalty, p.presence_penalty);
  EXPECT_EQ(back.frequency_penalty, p.frequency_penalty);
  EXPECT_EQ(back.seed, p.seed);
  EXPECT_EQ(back.n_logprobs, 7);
  // Every field of the message is set by ToApiSampling (a new field must be added here).
  EXPECT_EQ(v1::SamplingParams::descriptor()->field_count(), 8);
}

TEST(ApiWireTest, UnsetFieldsKeepTheDefaults) {
  const sampling::SamplingParams defaults;
  v1::SamplingParams s;
  s.set_top_k(5);
  const sampling::SamplingParams p = FromApiSampling(s, 0);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_EQ(p.temperature, defaults.temperature);
  EXPECT_EQ(p.top_p, defaults.top_p);
  EXPECT_EQ(p.min_p, defaults.min_p);
  EXPECT_EQ(p.repetition_penalty, defaults.repetition_penalty);
  EXPECT_EQ(p.seed, defaults.seed);
  EXPECT_EQ(p.n_logprobs, 0);
}

}  // namespace
}  // namespace cascade::wire
