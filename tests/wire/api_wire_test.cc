// The public API's sampling conversion (wire/api_wire.h): every field survives the trip to
// the proto and back, with values that differ from the defaults so that a dropped field
// shows, and a request that sets nothing gets SamplingParams' defaults.
#include "wire/api_wire.h"

#include <gtest/gtest.h>

#include "tests/wire/sampling_values.h"

namespace cascade::wire {
namespace {

TEST(ApiWireTest, SamplingParamsRoundTrip) {
  const sampling::SamplingParams p = NonDefaultSampling();
  const v1::SamplingParams s = ToApiSampling(p);
  EXPECT_EQ(s.temperature(), 0.3f);
  EXPECT_EQ(s.seed(), 0xfedcba9876543210ull);
  const sampling::SamplingParams back = FromApiSampling(s, 7);
  ExpectSameSampling(back, p);
  // Every field of the message is set by ToApiSampling (a new field must be added here).
  EXPECT_EQ(v1::SamplingParams::descriptor()->field_count(), 8);
}

TEST(ApiWireTest, UnsetFieldsKeepTheDefaults) {
  v1::SamplingParams s;
  s.set_top_k(5);
  sampling::SamplingParams want;  // The defaults, but for the one field set.
  want.top_k = 5;
  ExpectSameSampling(FromApiSampling(s, 0), want);
}

}  // namespace
}  // namespace cascade::wire
