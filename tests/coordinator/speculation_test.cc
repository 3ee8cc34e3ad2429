// The choice of k (coordinator/serving/speculation.h): the step cost fit against synthetic step
// times, the expected-tokens-per-cost optimum against values worked by hand, and the
// per-sequence state that feeds them.
#include "coordinator/serving/speculation.h"

#include <gtest/gtest.h>

namespace cascade::coordinator {
namespace {

TEST(StepCostModelTest, RecoversTheCostOfARowFromStepTimes) {
  StepCostModel m;
  m.Observe(1, 2.5);
  EXPECT_FALSE(m.RowCost().has_value()) << "one step size says nothing about the slope";
  // t = 2 + 0.5 rows: one more row costs 0.5 / (2 + 0.5) = 0.2 of a one-row step.
  for (int i = 0; i < 20; ++i) {
    const int64_t rows = i % 3 == 0 ? 1 : 4;
    m.Observe(rows, 2.0 + 0.5 * static_cast<double>(rows));
  }
  ASSERT_TRUE(m.RowCost().has_value());
  EXPECT_NEAR(*m.RowCost(), 0.2, 1e-9);
  // Four sequences: a step costs 2 + 0.5 * 4, one draft each adds 0.5 * 4: r = 0.5.
  EXPECT_NEAR(*m.RowCost(4), 0.5, 1e-9);
  // A drafter worker taking 0.5 s per proposed token adds 0.5 / 2.5 per draft.
  StepCostModel with_drafter = m;
  with_drafter.ObserveDraft(3, 1.5);
  EXPECT_NEAR(*with_drafter.RowCost(), 0.2 + 0.2, 1e-9);
  // A settled k (every step the same size) keeps the estimate instead of dropping it.
  for (int i = 0; i < 200; ++i) m.Observe(3, 2.0 + 0.5 * 3);
  ASSERT_TRUE(m.RowCost().has_value());
  EXPECT_NEAR(*m.RowCost(), 0.2, 1e-6);
}

TEST(StepCostModelTest, FreeRowsGiveZeroCost) {
  StepCostModel m;
  for (int i = 0; i < 10; ++i) m.Observe(1 + i % 5, 1.0);  // A memory-bound device.
  ASSERT_TRUE(m.RowCost().has_value());
  EXPECT_NEAR(*m.RowCost(), 0.0, 1e-9);
}

TEST(BestDraftTokensTest, MaximisesExpectedTokensPerCost) {
  // Worked by hand: (1 + a + ... + a^k) / (1 + r k).
  // a = 0.73, r = 0.29: k=1 1.338, k=2 1.432, k=3 1.418.
  EXPECT_EQ(BestDraftTokens(0.73, 0.29, 8), 2);
  // a = 0.9, r = 0.29: k=4 1.896, k=5 1.913, k=6 1.904.
  EXPECT_EQ(BestDraftTokens(0.9, 0.29, 8), 5);
  EXPECT_EQ(BestDraftTokens(0.9, 0.0, 8), 8) << "free verify rows: as many drafts as allowed";
  EXPECT_EQ(BestDraftTokens(0.5, 0.0, 8), 8);
  // One draft pays only while a > r: (1 + a) / (1 + r) > 1.
  EXPECT_EQ(BestDraftTokens(0.5, 0.45, 8), 1);
  EXPECT_EQ(BestDraftTokens(0.5, 0.55, 8), 0) << "speculation off: no k beats plain decoding";
  EXPECT_EQ(BestDraftTokens(0.0, 0.0, 8), 0);
  EXPECT_EQ(BestDraftTokens(1.0, 0.29, 6), 6);
}

TEST(SpeculativeStateTest, CostAwareKFollowsAcceptance) {
  SpeculationOptions o;
  o.kind = DraftKind::kNgram;
  o.num_tokens = 8;
  o.max_batch = 4;
  SpeculativeState s(o, true, 0);
  for (int i = 0; i < 10; ++i) s.OnVerified(4, 5, 0.01);  // Every draft passes.
  EXPECT_EQ(s.DraftTokens(1, 0.0), 8);
  EXPECT_EQ(s.DraftTokens(1, 0.29), 8) << "a -> 1: longer is always better";
  // Now one in two drafts passes: a falls towards 0.5, so k shrinks, and a row as
  // costly as a whole step switches drafting off.
  for (int i = 0; i < 3; ++i) s.OnVerified(2, 2, 0.01);
  EXPECT_LT(s.DraftTokens(1, 0.29), 8);
  EXPECT_GE(s.DraftTokens(1, 0.29), 1);
  EXPECT_EQ(s.DraftTokens(1, 1.0), 0);
  EXPECT_EQ(s.DraftTokens(5, 0.0), 0) << "above max_batch speculation is off";
}

TEST(SpeculativeStateTest, SwitchedOffByCostItProbesAgainLater) {
  SpeculationOptions o;
  o.kind = DraftKind::kNgram;
  o.num_tokens = 4;
  SpeculativeState s(o, true, 0);
  for (int i = 0; i < 3; ++i) s.OnVerified(4, 3, 0.01);  // 2 of 4 pass, then a rejection.
  EXPECT_EQ(s.DraftTokens(16, 0.8), 0) << "a row this costly never pays at a ~ 0.67";
  int plain = 0;
  while (s.DraftTokens(16, 0.8) == 0 && plain < 1000) {
    s.OnPlainStep();
    ++plain;
  }
  EXPECT_GT(plain, 5);
  EXPECT_LT(plain, 1000) << "never drafts again";
}

}  // namespace
}  // namespace cascade::coordinator
