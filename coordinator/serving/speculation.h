// The coordinator's per-sequence speculative-decoding state (docs/ARCHITECTURE.md §5): how many
// tokens to draft next (adaptive k, and the switch-off under load), where the drafter's KV
// cache stands, and the counters reported in the final stream message and the status.
//
// Adaptive k, cost-aware: with a per-draft acceptance rate a (an exponential average) and
// the measured cost r of one more verified row per sequence relative to a plain step of
// the current batch (StepCostModel), k maximises the expected tokens per step over its
// cost, (1 + a + ... + a^k) / (1 + r k), within [0, num_tokens] (Leviathan et al.'s
// optimum with the cost measured, not assumed). Near r = 0 (a memory-bound GPU) k climbs
// to num_tokens while drafts pass; on one CPU core, where a verify row costs about 0.3 of
// a one-sequence step, it settles at 2-5. k = 0, no drafting, when even one draft does not
// pay (a <= r): the measured switch-off, since r grows with the batch. While a sequence
// does not draft its a drifts back up, so it probes again later. Until the cost is known,
// k is the average number of accepted drafts rounded up, plus one.
// Back-off: a sequence whose drafts are mostly rejected (an average acceptance below 20%
// over its recent verify steps) stops drafting for 16 decode steps, then 32, 64, ... up
// to 256, and tries again: a drafter that does not fit the text costs little.
// Hard cap: while more than `max_batch` sequences decode at once (when set), k is 0,
// whatever the cost model says.
//
// Thread-safety: plain values, owned by the serving loop.
#pragma once

#include <cstdint>
#include <optional>

#include "cascade/v1/inference.pb.h"
#include "coordinator/config.h"

namespace cascade::coordinator {

struct SpeculationOptions {
  DraftKind kind = DraftKind::kNone;
  int ngram_n = 3;     // Longest suffix the n-gram drafter matches.
  int num_tokens = 4;  // Most drafts per step.
  bool adaptive = true;
  int max_batch = 0;  // Off above this many decoding sequences; 0 = the cost model decides.

  bool enabled() const { return kind != DraftKind::kNone; }
  // The drafter runs on its own worker (self or model), not in the coordinator.
  bool has_worker() const { return kind == DraftKind::kSelf || kind == DraftKind::kModel; }
};

// Decode-step time against the rows the step scores, t = a + b * rows, fitted by
// exponentially weighted least squares over recent decode-only steps.
class StepCostModel {
 public:
  void Observe(int64_t rows, double seconds);
  // A drafter worker's step that proposed up to `proposed` tokens per sequence (one
  // forward each) took `seconds`: its cost per drafted position joins RowCost.
  void ObserveDraft(int64_t proposed, double seconds);
  // What one more draft per sequence costs relative to a plain step of `n_decoding`
  // sequences (>= 0): verifying it, b n / (a + b n), which grows with the batch (what switches
  // speculation off under load), plus proposing it on a drafter worker, if any. nullopt until steps of different sizes
  // were seen; the last fit is kept while recent steps all have one size (a settled k).
  std::optional<double> RowCost(int n_decoding = 1) const;

 private:
  double s0_ = 0, s1_ = 0, s2_ = 0, sy_ = 0, sry_ = 0;  // Weighted sums of 1, R, R², t, R t.
  bool fitted_ = false;
  double a_ = 0, b_ = 0;
  double draft_per_token_s_ = 0;  // Exponential average; 0 for in-coordinator drafters.
};

// The k in [0, max_k] that maximises (1 + a + ... + a^k) / (1 + row_cost * k); 0 when no
// k >= 1 beats plain decoding (for k = 1 that is a <= row_cost).
int32_t BestDraftTokens(double acceptance, double row_cost, int32_t max_k);

class SpeculativeState {
 public:
  // `enabled` and `num_tokens` (0: the options' value) come from the request.
  SpeculativeState(const SpeculationOptions& options, bool enabled, int32_t num_tokens);

  // Drafts wanted for the next decode step while `n_decoding` sequences decode, given
  // the measured cost of a verify row (StepCostModel::RowCost).
  int32_t DraftTokens(int n_decoding, std::optional<double> row_cost = std::nullopt) const;
  // A verify step with `n_drafted` drafts emitted `n_emitted` tokens (accepted + 1).
  void OnVerified(int32_t n_drafted, int32_t n_emitted, double verify_s);
  // A decode step without drafts.
  void OnPlainStep();
  void OnDrafted(double draft_s) { stats_.set_draft_s(stats_.draft_s() + draft_s); }
  // The stats with the derived rates filled in.
  v1::SpeculativeStats Stats() const;
  bool used() const { return stats_.steps() > 0; }

  // The drafter worker's cache of this sequence: positions [0, draft_cached) are valid;
  // a draft request in flight will have written [0, draft_fed).
  int64_t draft_cached = 0;
  int64_t draft_fed = 0;

 private:
  SpeculationOptions options_;
  bool enabled_ = false;
  int32_t max_k_ = 0;
  double mean_accepted_ = 0;  // Exponential average of drafts accepted per step.
  double mean_rate_ = 1;      // Exponential average of the acceptance rate per step.
  // Per-draft acceptance as Bernoulli trials: accepted drafts over drafts examined (the
  // accepted ones plus the rejected one, if any), exponentially weighted.
  double alpha_num_ = 1, alpha_den_ = 1;
  int32_t skip_ = 0;           // Decode steps left without drafting (back-off).
  int32_t backoff_ = 16;       // The next back-off.
  int32_t since_backoff_ = 0;  // Verify steps since the last back-off.
  v1::SpeculativeStats stats_;
};

// Adds `one` to `total` and recomputes the rates.
void AccumulateStats(const v1::SpeculativeStats& one, v1::SpeculativeStats* total);

}  // namespace cascade::coordinator
