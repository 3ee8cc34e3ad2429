// Sampling parameters that differ from every default, so that a field a conversion drops
// shows, and the field-by-field comparison both wire tests make.
#pragma once

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace cascade::wire {

inline sampling::SamplingParams NonDefaultSampling() {
  return {.temperature = 0.3f,
          .top_k = 17,
          .top_p = 0.7f,
          .min_p = 0.11f,
          .repetition_penalty = 1.4f,
          .presence_penalty = -0.5f,
          .frequency_penalty = 0.25f,
          .seed = 0xfedcba9876543210ull,
          .n_logprobs = 7};
}

inline void ExpectSameSampling(const sampling::SamplingParams& a, const sampling::SamplingParams& b) {
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.min_p, b.min_p);
  EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
  EXPECT_EQ(a.presence_penalty, b.presence_penalty);
  EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.n_logprobs, b.n_logprobs);
}

}  // namespace cascade::wire
