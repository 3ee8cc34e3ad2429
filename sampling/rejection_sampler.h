// Lossless verification of drafted tokens (speculative decoding; Leviathan et al. 2023,
// "Fast Inference from Transformers via Speculative Decoding", and Chen et al. 2023):
// draft token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the first
// rejection a token is drawn from norm(max(0, p_i - q_i)); when all k drafts pass, a bonus
// token is drawn from p_k. The emitted tokens are then distributed exactly as sampling
// from the target p one token at a time. Greedy verification accepts while the target's
// argmax equals the draft.
// Pure functions; thread-safe given distinct RNGs.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace cascade::sampling {

struct VerifyResult {
  int32_t n_accepted = 0;   // Drafts kept, a prefix of the k drafted tokens.
  int32_t next_token = -1;  // The correction (on a rejection) or the bonus token.
};

// p: target probabilities [(k + 1) * n_vocab] (row i scores the position of draft i; row
// k the position after the last draft). q: draft probabilities [k * n_vocab], or empty
// for a deterministic drafter (q_i is one-hot on draft i, as for n-gram drafts).
// drafts: [k]. Rows of p and q each sum to 1.
VerifyResult VerifyDrafts(std::span<const float> p, std::span<const float> q, std::span<const int32_t> drafts,
                          int32_t n_vocab, std::mt19937_64& rng);

// Greedy: accept while argmax(logits row i) == drafts[i]; next_token is the argmax at the
// first mismatch, or of row k when all match. logits: [(k + 1) * n_vocab].
VerifyResult VerifyGreedy(std::span<const float> logits, std::span<const int32_t> drafts, int32_t n_vocab);

}  // namespace cascade::sampling
