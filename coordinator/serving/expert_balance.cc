#include "coordinator/serving/expert_balance.h"

#include <algorithm>

#include "core/load_balance.h"

namespace cascade::coordinator {
namespace {

// One layer's holders: each expert's ranks (its own first) and each rank's load.
struct LayerState {
  std::vector<std::vector<int32_t>> holders;
  std::vector<double> rank_load;
};

LayerState Place(const std::vector<int64_t>& tokens, int n_ranks, const std::vector<ExpertReplicaSlot>& replicas,
                 int64_t layer) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  LayerState s;
  s.holders.resize(n);
  for (int64_t e = 0; e < n; ++e) s.holders[e] = {static_cast<int32_t>(EvenSplitPart(n, n_ranks, e))};
  for (const ExpertReplicaSlot& r : replicas) {
    if (r.layer == layer && r.expert >= 0 && r.expert < n) s.holders[r.expert].push_back(r.rank);
  }
  s.rank_load.assign(n_ranks, 0.0);
  for (int64_t e = 0; e < n; ++e) {
    for (int32_t r : s.holders[e]) s.rank_load[r] += static_cast<double>(tokens[e]) / s.holders[e].size();
  }
  return s;
}

double Imbalance(const std::vector<double>& rank_load) {
  double sum = 0, max = 0;
  for (double l : rank_load) sum += l, max = std::max(max, l);
  return sum > 0 ? max * static_cast<double>(rank_load.size()) / sum : 1.0;
}

}  // namespace

double RankImbalance(const std::vector<int64_t>& tokens, int n_ranks, const std::vector<ExpertReplicaSlot>& replicas,
                     int64_t layer) {
  return Imbalance(Place(tokens, n_ranks, replicas, layer).rank_load);
}

ExpertPlacementPlan PlanRedundantExperts(const std::map<int64_t, std::vector<int64_t>>& loads, int n_ranks, int slots) {
  ExpertPlacementPlan plan;
  for (const auto& [layer, tokens] : loads) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const LayerState own = Place(tokens, n_ranks, {}, layer);
    LayerBalance balance{layer, Imbalance(own.rank_load), Imbalance(own.rank_load), 0};
    // 1. How many holders each expert gets: one more to the largest share per holder while
    //    it exceeds the mean expert's load, up to every rank, within the slots.
    double total = 0;
    for (int64_t t : tokens) total += static_cast<double>(t);
    const double mean = n > 0 ? total / n : 0;
    std::vector<int> count(n, 1);
    for (int extra = 0; extra < slots * n_ranks; ++extra) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (count[e] == n_ranks) continue;
        if (best < 0 || tokens[e] * count[best] > tokens[best] * count[e]) best = e;
      }
      if (best < 0 || static_cast<double>(tokens[best]) / count[best] <= mean) break;
      ++count[best];
    }
    // 2. Pack the extra holders, largest share first, each on the least loaded rank with a
    //    free slot that does not hold that expert yet.
    std::vector<std::pair<double, int64_t>> units;
    for (int64_t e = 0; e < n; ++e) {
      for (int c = 1; c < count[e]; ++c) units.push_back({static_cast<double>(tokens[e]) / count[e], e});
    }
    std::stable_sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::vector<int32_t>> holders = own.holders;
    std::vector<double> load(n_ranks, 0.0);
    for (int64_t e = 0; e < n; ++e) load[holders[e][0]] += static_cast<double>(tokens[e]) / count[e];
    std::vector<int> free(n_ranks, slots);
    std::vector<ExpertReplicaSlot> placed;
    for (const auto& [share, e] : units) {
      int32_t target = -1;
      for (int32_t r = 0; r < n_ranks; ++r) {
        if (free[r] == 0 || std::find(holders[e].begin(), holders[e].end(), r) != holders[e].end()) continue;
        if (target < 0 || load[r] < load[target]) target = r;
      }
      if (target < 0) continue;
      holders[e].push_back(target);
      load[target] += share;
      --free[target];
      placed.push_back({layer, static_cast<int32_t>(e), target});
    }
    // Holders a packing left out give their share back to the others: measure as placed,
    // and keep the placement only where it helps.
    const double after = RankImbalance(tokens, n_ranks, placed, layer);
    if (after < balance.imbalance_before) {
      balance.imbalance_after = after;
      balance.n_replicas = static_cast<int>(placed.size());
      plan.replicas.insert(plan.replicas.end(), placed.begin(), placed.end());
    }
    plan.layers.push_back(balance);
  }
  return plan;
}

const ExpertPlacementPlan* ExpertBalancer::Next(const std::map<int64_t, std::vector<int64_t>>& cumulative) {
  if (slots_ == 0) return nullptr;
  if (resend_) {
    resend_ = false;
    return &current_;
  }
  if (++steps_ < interval_) return nullptr;
  steps_ = 0;
  std::map<int64_t, std::vector<int64_t>> recent;
  for (const auto& [layer, tokens] : cumulative) {
    std::vector<int64_t>& r = recent[layer];
    const std::vector<int64_t>* before = last_reading_.contains(layer) ? &last_reading_.at(layer) : nullptr;
    for (size_t e = 0; e < tokens.size(); ++e) {
      r.push_back(tokens[e] - (before != nullptr && e < before->size() ? (*before)[e] : 0));
    }
  }
  last_reading_ = cumulative;
  ExpertPlacementPlan plan = PlanRedundantExperts(recent, n_ranks_, slots_);
  if (placed_ && plan.replicas == current_.replicas) {
    current_.layers = std::move(plan.layers);  // The same placement: the balance is news.
    return nullptr;
  }
  current_ = std::move(plan);
  placed_ = true;
  return &current_;
}

}  // namespace cascade::coordinator
