#include "coordinator/serving/speculation.h"

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

void StepCostModel::Observe(int64_t rows, double seconds) {
  constexpr double kDecay = 0.97;  // About the last 30 steps.
  const double r = static_cast<double>(rows);
  s0_ = kDecay * s0_ + 1;
  s1_ = kDecay * s1_ + r;
  s2_ = kDecay * s2_ + r * r;
  sy_ = kDecay * sy_ + seconds;
  sry_ = kDecay * sry_ + r * seconds;
  // Weighted variance of the row counts: below 0.05 rows² the slope is noise.
  const double det = s0_ * s2_ - s1_ * s1_;
  if (det < 0.05 * s0_ * s0_) return;
  b_ = std::max(0.0, (s0_ * sry_ - s1_ * sy_) / det);
  a_ = std::max(0.0, (sy_ - b_ * s1_) / s0_);
  fitted_ = a_ + b_ > 0;
}

void StepCostModel::ObserveDraft(int64_t proposed, double seconds) {
  if (proposed <= 0) return;
  const double per_token = seconds / static_cast<double>(proposed);
  draft_per_token_s_ = draft_per_token_s_ == 0 ? per_token : 0.8 * draft_per_token_s_ + 0.2 * per_token;
}

std::optional<double> StepCostModel::RowCost(int n_decoding) const {
  if (!fitted_) return std::nullopt;
  const double n = std::max(1, n_decoding);
  const double step = a_ + b_ * n;
  return (b_ * n + draft_per_token_s_) / step;
}

int32_t BestDraftTokens(double acceptance, double row_cost, int32_t max_k) {
  const double a = std::clamp(acceptance, 0.0, 1.0);
  int32_t best = 0;
  double best_value = 1, expected = 1, power = 1;  // k = 0: one token per plain step.
  for (int32_t k = 1; k <= max_k; ++k) {
    power *= a;
    expected += power;
    const double value = expected / (1 + row_cost * k);
    if (value > best_value + 1e-9) {
      best_value = value;
      best = k;
    }
  }
  return best;
}

void SpeculativeState::OnPlainStep() {
  if (skip_ > 0) --skip_;
  // Drift the acceptance estimate back towards 1, so a sequence the cost model switched
  // off drafts again after a while and measures afresh.
  alpha_num_ = 0.95 * alpha_num_ + 0.05;
  alpha_den_ = 0.95 * alpha_den_ + 0.05;
}

int32_t SpeculativeState::DraftTokens(int n_decoding, std::optional<double> row_cost) const {
  if (!enabled_ || skip_ > 0) return 0;
  if (options_.max_batch > 0 && n_decoding > options_.max_batch) return 0;
  if (!options_.adaptive) return max_k_;
  if (row_cost) return BestDraftTokens(alpha_num_ / alpha_den_, *row_cost, max_k_);
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
  alpha_num_ = 0.8 * alpha_num_ + accepted;
  alpha_den_ = 0.8 * alpha_den_ + accepted + (accepted < n_drafted ? 1 : 0);
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
