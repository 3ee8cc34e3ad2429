// Expert-parallel load balancing with redundant experts (EPLB; DeepSeek-V3's, as vLLM and
// SGLang run it): from the tokens each expert of a MoE layer was routed since the last
// placement, place replicas of the hottest experts on the least loaded ranks of the
// layer's expert-parallel group, `slots` per rank. A worker splits an expert's tokens among
// its holders in turn (model::MoeBlock::SetReplicas), so a rank's load is the sum of its
// experts' loads, each over its number of holders.
//
// Per layer, as DeepSeek's EPLB: first how many holders each expert gets (one more to the
// largest share per holder while it exceeds the mean expert's load, within the slots), then
// the extra holders packed largest share first, each on the least loaded rank with a free
// slot that does not hold that expert (the own experts stay where they are: their weights
// are there). A layer keeps the placement only where it lowers the busiest rank.
// Deterministic (ties to the lower expert and rank).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace cascade::coordinator {

struct ExpertReplicaSlot {
  int64_t layer = 0;
  int32_t expert = 0;
  int32_t rank = 0;
  bool operator==(const ExpertReplicaSlot&) const = default;
};

// One layer's placement and what it does to the ranks' loads.
struct LayerBalance {
  int64_t layer = 0;
  double imbalance_before = 1;  // Busiest rank's load over the mean, each expert on its own rank.
  double imbalance_after = 1;   // The same with the replicas placed.
  int n_replicas = 0;
};

struct ExpertPlacementPlan {
  std::vector<ExpertReplicaSlot> replicas;  // Layer by layer, in placement order.
  std::vector<LayerBalance> layers;
};

// The placement for `loads` (layer -> tokens per expert) over `n_ranks` expert-parallel
// ranks with `slots` replica slots per rank and layer. REQUIRES n_ranks >= 1, slots >= 0.
ExpertPlacementPlan PlanRedundantExperts(const std::map<int64_t, std::vector<int64_t>>& loads, int n_ranks, int slots);

// When to place: every `interval` steps, from the tokens routed since the previous
// placement (the counters are cumulative; this keeps the last reading). A placement that
// changes nothing is not sent again; `Resend` (a worker restarted and holds none) sends the
// current one with the next step. Single owner (the serving loop's thread).
class ExpertBalancer {
 public:
  // slots 0: never places anything.
  ExpertBalancer(int slots, int interval, int n_ranks) : slots_(slots), interval_(interval), n_ranks_(n_ranks) {}
  // Called once per target step with the cumulative tokens per expert of every MoE layer:
  // the placement to send with this step, or null.
  const ExpertPlacementPlan* Next(const std::map<int64_t, std::vector<int64_t>>& cumulative);
  void Resend() { resend_ = slots_ > 0 && placed_; }
  const ExpertPlacementPlan& current() const { return current_; }

 private:
  int slots_, interval_, n_ranks_;
  int steps_ = 0;
  bool placed_ = false, resend_ = false;
  std::map<int64_t, std::vector<int64_t>> last_reading_;
  ExpertPlacementPlan current_;
};

// The busiest rank's load over the mean for `tokens` per expert of one layer, expert e on
// its own rank (model::TpShard::ExpertRank) and on the ranks `replicas` name for this layer;
// 1 when nothing was routed.
double RankImbalance(const std::vector<int64_t>& tokens, int n_ranks, const std::vector<ExpertReplicaSlot>& replicas,
                     int64_t layer);

}  // namespace cascade::coordinator
