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
// Verification (draft >= 0) applies the rejection rule for a one-hot draft q, which is
// what Cascade's drafters propose: accept with probability p(draft) (u_accept <
// p(draft)), else sample from norm(max(0, p - q)) = p without the draft, renormalised.
// Greedy rows accept while the draft is the argmax and otherwise answer the argmax.
#pragma once

#include <cstdint>

namespace cascade::kernels {

struct SampleRow {
  float temperature = 1.0f;  // 0 = greedy.
  int32_t top_k = 0;         // 0 = all.
  float top_p = 1.0f;        // 1 = off.
  float min_p = 0.0f;        // 0 = off.
  int32_t draft = -1;        // The drafted token to verify; -1 = plain sampling.
  float u_accept = 0.0f;     // Uniform in [0, 1) for the acceptance test.
  float u_sample = 0.0f;     // Uniform in [0, 1) for the inverse CDF.
};

struct SampleResult {
  int32_t id = -1;       // The sampled (or accepted) token.
  int32_t accepted = 0;  // 1 when the row's draft was accepted (then id == draft).
};

}  // namespace cascade::kernels
