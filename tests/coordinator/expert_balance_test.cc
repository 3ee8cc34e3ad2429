// Tests of coordinator/serving/expert_balance.h: the greedy EPLB placement against the rank
// loads a brute force over every placement of the same slots finds, its refusals to move
// load for nothing, and the balancer's cadence (from the tokens since the last placement,
// not sent again when unchanged, sent again after a restart).
#include "coordinator/serving/expert_balance.h"

#include <algorithm>
#include <functional>
#include <random>

#include "core/load_balance.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

// Busiest rank's load when replicas[i] puts one more holder of its expert on its rank.
double MaxRankLoad(const std::vector<int64_t>& tokens, int n_ranks, const std::vector<ExpertReplicaSlot>& replicas) {
  const double imbalance = RankImbalance(tokens, n_ranks, replicas, 0);
  double sum = 0;
  for (int64_t t : tokens) sum += static_cast<double>(t);
  return imbalance * sum / n_ranks;
}

// The best busiest-rank load over every placement of up to `slots` replicas per rank.
double BruteForceBest(const std::vector<int64_t>& tokens, int n_ranks, int slots) {
  const int n = static_cast<int>(tokens.size());
  double best = MaxRankLoad(tokens, n_ranks, {});
  std::vector<ExpertReplicaSlot> chosen;
  std::vector<int> used(n_ranks, 0);
  std::function<void(int)> walk = [&](int from) {
    best = std::min(best, MaxRankLoad(tokens, n_ranks, chosen));
    for (int i = from; i < n * n_ranks; ++i) {
      const int e = i / n_ranks, r = i % n_ranks;
      if (used[r] == slots || r == EvenSplitPart(n, n_ranks, e)) continue;
      bool dup = false;
      for (const ExpertReplicaSlot& c : chosen) dup = dup || (c.expert == e && c.rank == r);
      if (dup) continue;
      chosen.push_back({0, e, r});
      ++used[r];
      walk(i + 1);
      chosen.pop_back();
      --used[r];
    }
  };
  walk(0);
  return best;
}

// A skewed router's loads (one or two hot experts, as trained routers show): the heuristic
// placement comes within 20% of the best busiest rank a search over every placement finds
// (measured: within 17% over these 40; it stops replicating at the mean expert's load),
// never raises it, and the balance it reports is the one RankImbalance computes.
TEST(ExpertBalanceTest, GreedyPlacementNearTheBestOnSkewedLoads) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int n_ranks = 2 + trial % 2, n_experts = 6, slots = 1 + trial % 2;
    std::vector<int64_t> tokens(n_experts);
    for (int64_t& t : tokens) t = 10 + static_cast<int64_t>(rng() % 40);
    tokens[rng() % n_experts] += 400;  // A hot expert.
    if (trial % 3 == 0) tokens[rng() % n_experts] += 200;
    const ExpertPlacementPlan plan = PlanRedundantExperts({{0, tokens}}, n_ranks, slots);
    ASSERT_EQ(plan.layers.size(), 1u);
    const LayerBalance& b = plan.layers[0];
    EXPECT_DOUBLE_EQ(b.imbalance_before, RankImbalance(tokens, n_ranks, {}, 0));
    EXPECT_DOUBLE_EQ(b.imbalance_after, RankImbalance(tokens, n_ranks, plan.replicas, 0));
    EXPECT_LE(b.imbalance_after, b.imbalance_before);
    EXPECT_GT(b.n_replicas, 0);
    std::vector<int> per_rank(n_ranks, 0);
    for (const ExpertReplicaSlot& r : plan.replicas) ++per_rank[r.rank];
    for (int r = 0; r < n_ranks; ++r) EXPECT_LE(per_rank[r], slots);
    const double greedy = MaxRankLoad(tokens, n_ranks, plan.replicas);
    const double best = BruteForceBest(tokens, n_ranks, slots);
    EXPECT_LE(greedy, best * 1.2) << "trial " << trial << " ranks " << n_ranks << " slots " << slots << " tokens "
                                  << ::testing::PrintToString(tokens) << " replicas " << plan.replicas.size();
  }
}

// Balanced loads need no replica; layers are planned apart; no slot, no replica.
TEST(ExpertBalanceTest, NothingToGainPlacesNothing) {
  const ExpertPlacementPlan even = PlanRedundantExperts({{3, {50, 50, 50, 50}}, {5, {400, 10, 10, 10}}}, 2, 2);
  ASSERT_EQ(even.layers.size(), 2u);
  EXPECT_EQ(even.layers[0].n_replicas, 0);
  EXPECT_DOUBLE_EQ(even.layers[0].imbalance_after, 1.0);
  EXPECT_GT(even.layers[1].n_replicas, 0);
  for (const ExpertReplicaSlot& r : even.replicas) EXPECT_EQ(r.layer, 5);
  EXPECT_EQ(even.replicas.front(), (ExpertReplicaSlot{5, 0, 1}));  // The hot expert onto the other rank.
  EXPECT_TRUE(PlanRedundantExperts({{0, {400, 10, 10, 10}}}, 2, 0).replicas.empty());
}

// The balancer plans every `interval` steps from the tokens routed since its last reading,
// sends a placement only when it changed, and again after Resend.
TEST(ExpertBalanceTest, BalancerCadence) {
  ExpertBalancer b(/*slots=*/1, /*interval=*/3, /*n_ranks=*/2);
  std::map<int64_t, std::vector<int64_t>> tokens = {{0, {400, 10, 10, 10}}};
  EXPECT_EQ(b.Next(tokens), nullptr);
  EXPECT_EQ(b.Next(tokens), nullptr);
  const ExpertPlacementPlan* first = b.Next(tokens);
  ASSERT_NE(first, nullptr);
  ASSERT_FALSE(first->replicas.empty());
  EXPECT_EQ(first->replicas.front(), (ExpertReplicaSlot{0, 0, 1}));  // The hot expert 0 onto rank 1.
  // The same skew again: the same placement, not sent.
  tokens[0] = {800, 20, 20, 20};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.Next(tokens), nullptr);
  // Now expert 3 is the hot one, measured on the tokens since the last reading only.
  tokens[0] = {810, 30, 30, 830};
  EXPECT_EQ(b.Next(tokens), nullptr);
  EXPECT_EQ(b.Next(tokens), nullptr);
  const ExpertPlacementPlan* moved = b.Next(tokens);
  ASSERT_NE(moved, nullptr);
  ASSERT_FALSE(moved->replicas.empty());
  EXPECT_EQ(moved->replicas.front(), (ExpertReplicaSlot{0, 3, 0}));
  b.Resend();
  const ExpertPlacementPlan* again = b.Next(tokens);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->replicas, moved->replicas);
  // Without slots nothing is ever placed.
  ExpertBalancer none(0, 1, 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(none.Next(tokens), nullptr);
}

}  // namespace
}  // namespace cascade::coordinator
