// One row of GPU sampling or speculative verification (CudaBackend::Sample): plain C++17
// structs, shared by the C++20 backend interface and the nvcc-built kernels.
//
// Semantics, as sampling/sampler.h on raw (already penalised) logits: temperature 0 is
// greedy; otherwise top-k on the logits, softmax with temperature, min-p, then top-p with
// the mass normalised over the top-k set. Differences, by design: a tie at the top-k or
// top-p boundary keeps every tied token (the GPU selects thresholds, it does not sort),
// and the inverse CDF walks the kept tokens in vocabulary order; both leave the law of
// the sampled token as the CPU sampler's for distinct logits.
//
// Penalties come as (token, count) pairs of the row's history (SamplePenalty), applied to a
// copy of the row as sampling/sampler.h's PenalisedLogit does, and a constrained row's
// bitmask sets the tokens it refuses to -inf in that copy; the logprob and the top-n are
// of the raw row, as the CPU sampler reports them.
//
// Verification (draft >= 0) applies the rejection rule for a one-hot draft q, which is
// what Cascade's drafters propose: accept with probability p(draft) (u_accept <
// p(draft)), else sample from norm(max(0, p - q)) = p without the draft, renormalised.
// Greedy rows accept while the draft is the argmax and otherwise answer the argmax.
#pragma once

#include <cstdint>

namespace cascade::kernels {

// The most top logprobs a row may ask for (the API's limit).
constexpr int kMaxTopLogprobs = 20;

struct SampleRow {
  float temperature = 1.0f;  // 0 = greedy.
  int32_t top_k = 0;         // 0 = all.
  float top_p = 1.0f;        // 1 = off.
  float min_p = 0.0f;        // 0 = off.
  int32_t draft = -1;        // The drafted token to verify; -1 = plain sampling.
  float u_accept = 0.0f;     // Uniform in [0, 1) for the acceptance test.
  float u_sample = 0.0f;     // Uniform in [0, 1) for the inverse CDF.
  // Penalties: the row's (token, count) pairs are penalties[penalty_begin, + n_penalties).
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_begin = 0;
  int32_t n_penalties = 0;
  // 0: no logprobs; n >= 1: the chosen token's logprob and the top n (<= kMaxTopLogprobs).
  int32_t n_logprobs = 0;
  // Constrained decoding: the row's bitmask is masks[mask_offset, + mask_bits / 8) (bit t
  // of byte t / 8 allows token t; tokens from mask_bits on are refused), applied after
  // the penalties as sampling::MaskLogits does; -1: no mask. Logprobs stay the raw row's.
  int64_t mask_offset = -1;
  int32_t mask_bits = 0;
};

struct SamplePenalty {
  int32_t token = 0;
  int32_t count = 0;  // Occurrences in the history.
};

struct SampleResult {
  int32_t id = -1;                        // The sampled (or accepted) token.
  int32_t accepted = 0;                   // 1 when the row's draft was accepted (then id == draft).
  float logprob = 0.0f;                   // log p(id) under the raw row, when n_logprobs > 0.
  int32_t n_top = 0;                      // Entries of top_ids / top_logprobs: the row's n_logprobs.
  int32_t top_ids[kMaxTopLogprobs] = {};  // Most likely first, the lower id first on ties.
  float top_logprobs[kMaxTopLogprobs] = {};
};

}  // namespace cascade::kernels
