// The coordinator's per-sequence speculative-decoding state (DESIGN.md §5): how many
// tokens to draft next (adaptive k, and the switch-off under load), where the drafter's KV
// cache stands, and the counters reported in the final stream message and the status.
//
// Adaptive k: an exponential average of the drafts accepted per verify step; the next k is
// that average rounded up, plus one, within [1, num_tokens]. A sequence whose drafts keep
// passing climbs to num_tokens; one whose drafts fail drops to 1 (a verify step with one
// draft costs little more than a plain decode on a memory-bound device).
// Back-off: a sequence whose drafts are mostly rejected (an average acceptance below 20%
// over its recent verify steps) stops drafting for 16 decode steps, then 32, 64, ... up
// to 256, and tries again: a drafter that does not fit the text costs little.
// Switch-off: while more than `max_batch` sequences decode at once, k is 0. A batch that
// large already saturates the compute a verify step would otherwise have for free, so
// extra rows cost as much as they save (docs/PERFORMANCE.md has the measurement).
//
// Thread-safety: plain values, owned by the engine loop.
#pragma once

#include <cstdint>

#include "cascade/v1/inference.pb.h"
#include "coordinator/config.h"

namespace cascade::coordinator {

struct SpeculationOptions {
  DraftKind kind = DraftKind::kNone;
  int ngram_n = 3;     // Longest suffix the n-gram drafter matches.
  int num_tokens = 4;  // Most drafts per step.
  bool adaptive = true;
  int max_batch = 4;   // Off above this many decoding sequences; 0 = never.

  bool enabled() const { return kind != DraftKind::kNone; }
  // The drafter runs on its own worker (self or model), not in the coordinator.
  bool has_worker() const { return kind == DraftKind::kSelf || kind == DraftKind::kModel; }
};

class SpeculativeState {
 public:
  // `enabled` and `num_tokens` (0: the options' value) come from the request.
  SpeculativeState(const SpeculationOptions& options, bool enabled, int32_t num_tokens);

  // Drafts wanted for the next decode step while `n_decoding` sequences decode.
  int32_t DraftTokens(int n_decoding) const;
  // A verify step with `n_drafted` drafts emitted `n_emitted` tokens (accepted + 1).
  void OnVerified(int32_t n_drafted, int32_t n_emitted, double verify_s);
  // A decode step without drafts.
  void OnPlainStep() {
    if (skip_ > 0) --skip_;
  }
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
  int32_t skip_ = 0;          // Decode steps left without drafting (back-off).
  int32_t backoff_ = 16;      // The next back-off.
  int32_t since_backoff_ = 0; // Verify steps since the last back-off.
  v1::SpeculativeStats stats_;
};

// Adds `one` to `total` and recomputes the rates.
void AccumulateStats(const v1::SpeculativeStats& one, v1::SpeculativeStats* total);

}  // namespace cascade::coordinator
