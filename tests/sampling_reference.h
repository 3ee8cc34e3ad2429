// The sampling law of sampling/sampler.h and kernels/sample_row.h in double precision,
// written apart from the code under test, for the tests of the batched samplers (the CPU
// sampler over the thread pool and the GPU's kernel): penalties of the seen tokens, top-k
// over the penalised logits, softmax with temperature, min-p, then top-p with the mass
// normalised over the top-k set. Also the raw row's log-softmax (what logprobs report) and
// the two inverse CDFs (most likely first, as the CPU sampler walks; vocabulary order, as
// the GPU and the rejection rule walk).
//
// `near_boundary` flags a row or a draw that float rounding in the code under test could
// decide otherwise (a probability within 1e-6 of a cut, a draw within 1e-6 of a step):
// tests skip those rather than widen their tolerance.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace cascade::testing {

using RefParams = sampling::SamplingParams;

struct RefLaw {
  std::vector<double> p;       // The law over the vocabulary; 0 outside the kept set.
  std::vector<int32_t> order;  // The kept ids, most likely first (the lower id on ties).
  int32_t argmax = -1;         // Of the penalised logits, the first on ties.
  bool near_boundary = false;
};

// The penalised logits of `raw` (in double) for the tokens of `seen`.
std::vector<double> RefPenalised(std::span<const float> raw, const RefParams& params, std::span<const int32_t> seen);

// The law a row samples from. Greedy rows (temperature 0) put all the mass on the argmax.
RefLaw RefSampleLaw(std::span<const float> raw, const RefParams& params, std::span<const int32_t> seen);

// log-softmax of the raw row.
std::vector<double> RefLogSoftmax(std::span<const float> raw);

// The top n ids of the raw row, largest first, the lower id first on ties.
std::vector<int32_t> RefTopIds(std::span<const float> raw, int n);

// The token where the running mass passes `c` * (total mass) when the kept ids are walked
// most likely first, or in vocabulary order skipping `excluded` (-1: none). c in [0, 1).
int32_t RefWalkSorted(const RefLaw& law, double c, bool* near_boundary);
int32_t RefWalkVocab(const RefLaw& law, double c, int32_t excluded, bool* near_boundary);

// One sequence of a step: its parameters, history, the drafts it verifies (none: it
// samples one token) and its drafts.size() + 1 logit rows.
struct RefSeq {
  RefParams params;
  std::vector<int32_t> history;
  std::vector<int32_t> drafts;
  std::vector<float> logits;
};

// A step of 16 sequences over `n_vocab` that covers the sampler's paths: greedy and
// temperatures 0.7-1.3, top-k, top-p, min-p, the three penalties over a history that holds
// the rows' likeliest tokens, logprobs (top 3) on some, and 3-draft verifications whose
// drafts are sometimes the likeliest token (so some are accepted) and sometimes not.
std::vector<RefSeq> RefStep(int64_t n_vocab, uint32_t seed);

// The tokens a sequence emits, replaying the draws of the seed contract
// (sampling::PositionSeed): as sampling::Sampler draws them (sorted inverse CDF; the
// rejection rule's draws one after the other), and as the GPU's kernel draws them (two
// uniforms of 24 bits per row: accept, then sample in vocabulary order).
std::vector<int32_t> RefHostEmitted(const RefSeq& seq, bool* near_boundary);
std::vector<int32_t> RefDeviceEmitted(const RefSeq& seq, bool* near_boundary);

// What is wrong with the logprobs a sampler reported for `emitted` (token i from logit row
// i of `seq`): each must carry log p(id) under its raw row within 1e-5 and the row's top
// n_logprobs (ids, most likely first, and logprobs), or, with n_logprobs 0, a logprob of 0
// and no top. Empty when nothing is.
std::string LogprobErrors(const RefSeq& seq, std::span<const sampling::SampledToken> emitted);

// Constrained decoding: a random bitmask per logit row of `seq` (about half the vocabulary
// allowed, always the row's draft, sometimes not its largest logit), the rows one after
// the other as model::SampleSeq::allowed holds them.
std::vector<uint8_t> RefRandomMasks(const RefSeq& seq, int64_t n_vocab, uint32_t seed);
// `seq` with every logit its mask refuses at -1e30: the law a mask must give, written
// without -inf so that the double-precision reference needs no special case.
RefSeq RefPremasked(const RefSeq& seq, std::span<const uint8_t> masks, int64_t n_vocab);

}  // namespace cascade::testing
