// Tests for PrefixCache (coordinator/serving/prefix_cache.cc): matches over full blocks only, chain
// semantics (a block's content after another prefix is no hit), the first identical
// registration kept, exactness under forced hash collisions, stale parents, and the
// cached-free LRU (order, unpark, eviction unregisters, clear).
// To add a case: register blocks of 4 tokens with `Chain` and look them up with `Match`.

#include <vector>

#include "coordinator/serving/prefix_cache.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> Toks(std::initializer_list<int32_t> starts) {
  std::vector<int32_t> v;
  for (int32_t s : starts) {
    for (int32_t i = 0; i < kBs; ++i) v.push_back(s + i);
  }
  return v;
}

// Registers blocks[i] as block i of `tokens`' chain; returns the links.
std::vector<PrefixLink> Chain(PrefixCache& c, const std::vector<int32_t>& tokens, const std::vector<int32_t>& blocks) {
  std::vector<PrefixLink> chain;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::optional<PrefixLink> link =
        c.Register(chain.empty() ? PrefixLink{} : chain.back(), std::span(tokens).subspan(i * kBs, kBs), blocks[i]);
    EXPECT_TRUE(link.has_value()) << "block " << i;
    if (!link) break;
    chain.push_back(*link);
  }
  return chain;
}

std::vector<int32_t> Blocks(const std::vector<PrefixLink>& chain) {
  std::vector<int32_t> out;
  for (const PrefixLink& l : chain) out.push_back(l.block);
  return out;
}

TEST(PrefixCacheTest, MatchesTheLongestChainOfFullBlocks) {
  PrefixCache c(8, kBs);
  const std::vector<int32_t> t = Toks({10, 20, 30});
  Chain(c, t, {5, 2, 7});
  EXPECT_EQ(c.n_registered(), 3);
  EXPECT_EQ(Blocks(c.Match(t, 8)), (std::vector<int32_t>{5, 2, 7}));
  EXPECT_EQ(Blocks(c.Match(t, 2)), (std::vector<int32_t>{5, 2}));  // max_blocks.
  std::vector<int32_t> partial(t.begin(), t.begin() + 11);         // 2 full blocks and 3 tokens.
  EXPECT_EQ(Blocks(c.Match(partial, 8)), (std::vector<int32_t>{5, 2}));
  std::vector<int32_t> diverging = t;
  diverging[9] = 0;  // Block 2 differs.
  EXPECT_EQ(Blocks(c.Match(diverging, 8)), (std::vector<int32_t>{5, 2}));
  diverging[1] = 0;  // Block 0 differs: nothing.
  EXPECT_TRUE(c.Match(diverging, 8).empty());
}

TEST(PrefixCacheTest, SameBlockAfterAnotherPrefixIsNoHit) {
  PrefixCache c(8, kBs);
  Chain(c, Toks({10, 20}), {0, 1});
  EXPECT_TRUE(c.Match(Toks({20}), 8).empty());       // Block 1's content, at the root.
  EXPECT_EQ(c.Match(Toks({30, 20}), 8).size(), 0u);  // Or after another first block.
  Chain(c, Toks({30, 20}), {2, 3});                  // Its own registration.
  EXPECT_EQ(Blocks(c.Match(Toks({30, 20}), 8)), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(Blocks(c.Match(Toks({10, 20}), 8)), (std::vector<int32_t>{0, 1}));
}

TEST(PrefixCacheTest, AnIdenticalBlockKeepsTheFirstRegistration) {
  PrefixCache c(8, kBs);
  const std::vector<PrefixLink> first = Chain(c, Toks({10, 20}), {0, 1});
  // Computed again by a sequence admitted before the first was registered.
  std::optional<PrefixLink> again = c.Register({}, Toks({10}), 4);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, first[0]);
  EXPECT_FALSE(c.registered(4));
  EXPECT_EQ(c.n_registered(), 2);
}

uint64_t TokensOnlyHash(uint64_t, std::span<const int32_t> tokens) {
  uint64_t h = 0;
  for (int32_t t : tokens) h = h * 31 + static_cast<uint32_t>(t);
  return h;
}

uint64_t ConstantHash(uint64_t, std::span<const int32_t>) { return 42; }

TEST(PrefixCacheTest, HashCollisionsNeverGiveAWrongChain) {
  {
    // A hash blind to the parent: block 1 of [10, 20] and of [30, 20] collide.
    PrefixCache c(8, kBs, TokensOnlyHash);
    Chain(c, Toks({10, 20}), {0, 1});
    std::optional<PrefixLink> b0 = c.Register({}, Toks({30}), 2);
    ASSERT_TRUE(b0.has_value());
    EXPECT_FALSE(c.Register(*b0, Toks({20}), 3).has_value());                  // The slot is 0's child's.
    EXPECT_EQ(Blocks(c.Match(Toks({30, 20}), 8)), (std::vector<int32_t>{2}));  // Not block 1.
  }
  {
    // Every block collides: only the first registration gets in, and only its content matches.
    PrefixCache c(8, kBs, ConstantHash);
    Chain(c, Toks({10}), {0});
    EXPECT_FALSE(c.Register({}, Toks({30}), 1).has_value());
    EXPECT_TRUE(c.Match(Toks({30}), 8).empty());
    EXPECT_EQ(Blocks(c.Match(Toks({10}), 8)), (std::vector<int32_t>{0}));
  }
}

TEST(PrefixCacheTest, AChildOfAnEvictedParentIsNotRegistered) {
  PrefixCache c(4, kBs);
  const std::vector<PrefixLink> chain = Chain(c, Toks({10}), {0});
  c.Park(0);
  EXPECT_EQ(c.EvictLru(), 0);
  EXPECT_FALSE(c.Valid(chain[0]));
  EXPECT_FALSE(c.Register(chain[0], Toks({20}), 1).has_value());
  // Block 0 registered anew with other content: the old link stays stale.
  Chain(c, Toks({50}), {0});
  EXPECT_FALSE(c.Valid(chain[0]));
  EXPECT_FALSE(c.Register(chain[0], Toks({20}), 1).has_value());
}

TEST(PrefixCacheTest, LeastRecentlyParkedIsEvictedFirst) {
  PrefixCache c(4, kBs);
  Chain(c, Toks({10, 20}), {0, 1});
  Chain(c, Toks({30}), {2});
  c.Park(1);
  c.Park(0);
  c.Park(2);
  EXPECT_EQ(c.n_parked(), 3);
  c.Unpark(0);  // Revived by a hit.
  c.Park(0);    // And released again: now the most recent.
  EXPECT_EQ(c.EvictLru(), 1);
  EXPECT_FALSE(c.registered(1));
  EXPECT_EQ(c.Match(Toks({10, 20}), 8).size(), 1u);
  EXPECT_EQ(c.EvictLru(), 2);
  EXPECT_EQ(c.n_parked(), 1);
  EXPECT_EQ(c.Clear(), (std::vector<int32_t>{0}));
  EXPECT_EQ(c.n_registered(), 0);
  EXPECT_EQ(c.n_parked(), 0);
  EXPECT_TRUE(c.Match(Toks({10}), 8).empty());
}

}  // namespace
}  // namespace cascade::coordinator
