// Token sampling from one row of logits: penalties, temperature, top-k, top-p, min-p, and
// a seeded RNG so the same seed gives the same output. Logprobs are reported from the
// model's own distribution (log-softmax of the raw logits), as OpenAI's API does.
// A Sampler holds one sequence's RNG: single owner, not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cascade::sampling {

// The defaults are the one definition of what a request gets for a field it leaves unset:
// the gRPC API, `cascade run` and `cascade generate` all read them from here. They are
// llama.cpp's sampling defaults (common/common.h `common_params_sampling`).
struct SamplingParams {
  float temperature = 0.8f;         // 0 = greedy (argmax). REQUIRES >= 0.
  int32_t top_k = 40;               // Keep the k most likely tokens; 0 = all.
  float top_p = 0.95f;              // Nucleus: smallest set with mass >= top_p; 1 = off.
  float min_p = 0.05f;              // Drop tokens with p < min_p * p(most likely); 0 = off.
  float repetition_penalty = 1.0f;  // CTRL-style, on tokens already seen; 1 = off.
  float presence_penalty = 0.0f;    // Subtracted once from seen tokens' logits.
  float frequency_penalty = 0.0f;   // Subtracted per occurrence.
  uint64_t seed = 0;                // RNG seed.
  int32_t n_logprobs = 0;           // Also report the top-n logprobs; 0 = none.

  // InvalidArgument naming the field when out of range.
  absl::Status Validate() const;
  bool greedy() const { return temperature == 0.0f; }
};

struct SampledToken {
  int32_t id = -1;
  // log p(id) under the raw logits, and the top n_logprobs (id, logprob), most likely first:
  // computed only for n_logprobs > 0 (the API's "logprobs" switch), else 0 and empty, so
  // that a request that asked for none pays no pass over its row for them.
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

// The seed of the draws for the token at `position` of a sequence seeded with `seed`
// (splitmix64 of both): it depends on nothing else, so a sequence recomputed after a
// preemption or a worker's death draws what it would have drawn, on any backend.
uint64_t PositionSeed(uint64_t seed, size_t position);

// Whether the repetition, presence or frequency penalty applies.
bool Penalised(const SamplingParams& params);

// Each distinct token of `history` in [0, n_vocab) with its count, in first-seen order:
// what the penalties read.
std::vector<std::pair<int32_t, int32_t>> TokenCounts(std::span<const int32_t> history, int32_t n_vocab);

// The penalised logit x of a token seen `count` times (CTRL's repetition penalty, then the
// presence and frequency penalties).
inline float PenalisedLogit(float x, int32_t count, const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
  return x - (p.presence_penalty + p.frequency_penalty * static_cast<float>(count));
}

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Samples from `logits` [n_vocab] (modified in place by penalties and temperature).
  // `history` holds the sequence's tokens so far (prompt and output) for the penalties.
  // `allowed`, when not empty, is a constrained decoding's bitmask (MaskLogits): only the
  // tokens it allows can be drawn; the logprobs stay those of the model's distribution.
  SampledToken Sample(std::span<float> logits, std::span<const int32_t> history, std::span<const uint8_t> allowed = {});

  // Speculative verification of `drafts` [k] (sampling/rejection_sampler.h, q one-hot on each
  // draft: the drafters propose deterministically). `logits` [(k + 1) * n_vocab]: row i
  // scores the position of draft i, row k the one after the last draft. `history` holds the
  // tokens before the drafts; row i is shaped as `Sample` would shape it with drafts
  // [0, i) appended. Returns the accepted drafts then the correction or bonus token, each
  // with its logprob; their law is that of calling `Sample` once per token. `allowed`,
  // when not empty, holds k + 1 bitmasks of equal length, row i's for row i.
  std::vector<SampledToken> Verify(std::span<const float> logits, std::span<const int32_t> drafts,
                                   std::span<const int32_t> history, std::span<const uint8_t> allowed = {});

  const SamplingParams& params() const { return params_; }

 private:
  bool penalised() const { return Penalised(params_); }
  // Applies the repetition/presence/frequency penalties of `history` in place.
  void Penalize(std::span<float> logits, std::span<const int32_t> history) const;
  // Fills candidates_ with (unnormalised probability, id), most likely first, after
  // top-k, temperature and min-p/top-p; returns how many are kept. REQUIRES !greedy().
  size_t Shape(std::span<const float> logits);
  // `id` with, when asked for, its logprob and the top-n under the raw logits.
  SampledToken Describe(std::span<const float> raw, int32_t id) const;
  // Reseeds the RNG for the token at `position` (the history's length).
  void SeedFor(size_t position);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // Scratch, reused.
};

// Constrained decoding: sets to -inf every logit whose token `allowed` does not allow (bit
// t of byte t / 8 allows token t; tokens past its bits are not allowed).
void MaskLogits(std::span<float> logits, std::span<const uint8_t> allowed);

// Index of the largest value (the first one on ties).
int32_t Argmax(std::span<const float> values);

// The k largest (logit, id) of `logits` into `out`, largest first and the lower id first
// on ties: the order of a partial sort of every pair, in one pass with a heap of k (all of
// them, sorted, when k >= logits.size()).
void TopK(std::span<const float> logits, size_t k, std::vector<std::pair<float, int32_t>>& out);

}  // namespace cascade::sampling
