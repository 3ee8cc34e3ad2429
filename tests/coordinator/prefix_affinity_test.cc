#include "coordinator/serving/prefix_affinity.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace cascade::coordinator {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixAffinityTest, CountsLeadingFullBlocksSentToThatReplica) {
  PrefixAffinity a(/*n_replicas=*/2, /*block_size=*/4, /*capacity=*/100);
  const std::vector<int32_t> turn1 = Tokens(10);  // Two full blocks and a partial one.
  a.Record(1, turn1);
  EXPECT_EQ(a.size(1), 2u);
  EXPECT_EQ(a.Matched(1, turn1), 2);
  EXPECT_EQ(a.Matched(0, turn1), 0);   // Sent elsewhere.
  std::vector<int32_t> turn2 = turn1;  // The next turn extends the conversation.
  for (int32_t t : Tokens(9, 100)) turn2.push_back(t);
  EXPECT_EQ(a.Matched(1, turn2), 2);
  // A different first block shares no prefix, even with equal later blocks.
  std::vector<int32_t> other = turn1;
  other[0] = 99;
  EXPECT_EQ(a.Matched(1, other), 0);
  // Equal second block after a different first is a different chain.
  a.Record(0, other);
  EXPECT_EQ(a.Matched(0, turn1), 0);
}

TEST(PrefixAffinityTest, ShortPromptsHoldNoBlock) {
  PrefixAffinity a(1, 16, 100);
  a.Record(0, Tokens(15));
  EXPECT_EQ(a.size(0), 0u);
  EXPECT_EQ(a.Matched(0, Tokens(15)), 0);
}

TEST(PrefixAffinityTest, ForgetsTheLeastRecentPastCapacity) {
  PrefixAffinity a(1, 2, /*capacity=*/4);
  const std::vector<int32_t> old_prompt = Tokens(4, 1), new_prompt = Tokens(6, 50);
  a.Record(0, old_prompt);  // 2 blocks.
  a.Record(0, new_prompt);  // 3 more: the oldest block goes.
  EXPECT_EQ(a.size(0), 4u);
  EXPECT_EQ(a.Matched(0, new_prompt), 3);
  EXPECT_EQ(a.Matched(0, old_prompt), 0);  // Its first block went first, so no prefix.
  a.Record(0, Tokens(2, 1));               // Sent again: the most recent now.
  a.Record(0, Tokens(4, 200));             // Two more: new_prompt's two oldest go.
  EXPECT_EQ(a.Matched(0, Tokens(2, 1)), 1);
  EXPECT_EQ(a.Matched(0, new_prompt), 0);
}

TEST(PrefixAffinityTest, ForgetEmptiesOneReplica) {
  PrefixAffinity a(2, 4, 100);
  a.Record(0, Tokens(8));
  a.Record(1, Tokens(8));
  a.Forget(0);
  EXPECT_EQ(a.Matched(0, Tokens(8)), 0);
  EXPECT_EQ(a.Matched(1, Tokens(8)), 2);
}

}  // namespace
}  // namespace cascade::coordinator
