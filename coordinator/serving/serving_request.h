// The request as the serving loop carries it: validated and tokenized by a front
// (coordinator/front/request_validation.h), then queued by Replicas and ServingLoop. Its own header
// so that the serving loop needs nothing of the fronts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "sampling/sampler.h"
#include "text/output_filter.h"

namespace cascade::coordinator {

// A validated request, already tokenized.
struct ServingRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  sampling::SamplingParams sampling;
  int32_t max_tokens = 256;
  text::StopConditions stops;                                    // EOS handling, stop strings and stop ids.
  text::OutputFormat output_format = text::OutputFormat::kText;  // kHarmony: reasoning apart.
  bool speculate = true;                                         // Off: plain decoding for this request.
  int32_t num_tokens = 0;  // Most drafts per step; 0: the cluster's draft.num_tokens.
  // Constrained decoding (coordinator/serving/output_constraint.h); null: free text.
  std::shared_ptr<const grammar::Grammar> grammar;
};

}  // namespace cascade::coordinator
