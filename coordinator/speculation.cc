#include "coordinator/speculation.h"

#include <algorithm>
#include <cmath>

namespace cascade::coordinator {
namespace {

void FillRates(v1::SpeculativeStats* s) {
  s->set_acceptance_rate(s->drafted_tokens() > 0 ? static_cast<double>(s->accepted_tokens()) / s->drafted_tokens() : 0);
  s->set_mean_accepted_length(s->steps() > 0 ? static_cast<double>(s->accepted_tokens() + s->steps()) / s->steps() : 0);
}

}  // namespace

SpeculativeState::SpeculativeState(const SpeculationOptions& options, bool enabled, int32_t num_tokens)
    : options_(options),
      enabled_(enabled && options.enabled()),
      max_k_(num_tokens > 0 ? num_tokens : options.num_tokens),
      mean_accepted_(max_k_) {}

int32_t SpeculativeState::DraftTokens(int n_decoding) const {
  if (!enabled_ || skip_ > 0) return 0;
  if (options_.max_batch > 0 && n_decoding > options_.max_batch) return 0;
  if (!options_.adaptive) return max_k_;
  const int32_t k = static_cast<int32_t>(std::ceil(mean_accepted_ - 1e-9)) + 1;
  return std::clamp(k, 1, max_k_);
}

void SpeculativeState::OnVerified(int32_t n_drafted, int32_t n_emitted, double verify_s) {
  if (n_drafted <= 0) return;
  const int32_t accepted = n_emitted - 1;
  stats_.set_steps(stats_.steps() + 1);
  stats_.set_drafted_tokens(stats_.drafted_tokens() + n_drafted);
  stats_.set_accepted_tokens(stats_.accepted_tokens() + accepted);
  stats_.set_verify_s(stats_.verify_s() + verify_s);
  // All k accepted says nothing about k + 1: count it as one more, so k can grow.
  const double observed = accepted == n_drafted ? accepted + 1 : accepted;
  mean_accepted_ = 0.5 * mean_accepted_ + 0.5 * observed;
  mean_rate_ = 0.7 * mean_rate_ + 0.3 * accepted / n_drafted;
  if (++since_backoff_ >= 4 && mean_rate_ < 0.2) {
    skip_ = backoff_;
    backoff_ = std::min(backoff_ * 2, 256);
    since_backoff_ = 0;
    mean_rate_ = 0.5;
  }
}

v1::SpeculativeStats SpeculativeState::Stats() const {
  v1::SpeculativeStats s = stats_;
  FillRates(&s);
  return s;
}

void AccumulateStats(const v1::SpeculativeStats& one, v1::SpeculativeStats* total) {
  total->set_steps(total->steps() + one.steps());
  total->set_drafted_tokens(total->drafted_tokens() + one.drafted_tokens());
  total->set_accepted_tokens(total->accepted_tokens() + one.accepted_tokens());
  total->set_draft_s(total->draft_s() + one.draft_s());
  total->set_verify_s(total->verify_s() + one.verify_s());
  FillRates(total);
}

}  // namespace cascade::coordinator
