// Tests for PrefixCache (coordinator/serving/prefix_cache.cc): matches over full blocks only, chain
// semantics (a block's content after another prefix is no hit), the first identical
// registration kept, exactness under forced hash collisions, stale parents, and the
// cached-free LRU (order, unpark, eviction unregisters, clear), and the host tier (an
// eviction moves the registration to a host slot, a hit brings it back, the copies are
// recorded in order, the host's own LRU drops its oldest, pinned slots are never dropped).
// To add a case: register blocks of 4 tokens with `Chain` and look them up with `Match`.

#include <vector>

#include "coordinator/serving/prefix_cache.h"
#include "tests/test_support.h"

namespace cascade::coordinator {

// Readable failures (gtest finds it by argument-dependent lookup).
void PrintTo(const KvBlockMove& m, std::ostream* os) {
  *os << (m.to_host ? "block " : "slot ") << (m.to_host ? m.block : m.slot) << (m.to_host ? " -> slot " : " -> block ")
      << (m.to_host ? m.slot : m.block);
}

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

// Host slots are named n_blocks + slot in links.
constexpr int32_t kHost = 4;

KvBlockMove Out(int32_t block, int32_t slot) { return {.to_host = true, .block = block, .slot = slot}; }
KvBlockMove In(int32_t slot, int32_t block) { return {.to_host = false, .block = block, .slot = slot}; }

TEST(PrefixCacheTest, AnEvictedBlockMovesToTheHostTierAndStaysMatchable) {
  PrefixCache c(kHost, kBs, PrefixCache::ChainHash, /*n_host_slots=*/2);
  const std::vector<int32_t> t = Toks({10, 20});
  std::vector<PrefixLink> chain = Chain(c, t, {0, 1});
  c.Park(1);
  c.Park(0);
  EXPECT_EQ(c.EvictLru(), 1);  // Device block 1 is free for reuse: its KV went to a host slot first.
  EXPECT_EQ(c.TakeMoves(), (std::vector<KvBlockMove>{Out(1, 0)}));
  EXPECT_EQ(c.n_on_host(), 1);
  EXPECT_EQ(c.n_offloaded(), 1);
  EXPECT_EQ(c.n_registered(), 2);
  std::vector<PrefixLink> hit = c.Match(t, 8);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], chain[0]);
  EXPECT_EQ(hit[1].generation, chain[1].generation);  // The same registration...
  EXPECT_TRUE(c.on_host(hit[1].block));               // ...in slot 0.
  EXPECT_EQ(hit[1].block, kHost + 0);
  EXPECT_FALSE(c.Valid(chain[1]));  // Its old place is gone.
  // Its parent moves too, under it: the child still matches through the generation.
  EXPECT_EQ(c.EvictLru(), 0);
  EXPECT_EQ(c.TakeMoves(), (std::vector<KvBlockMove>{Out(0, 1)}));
  hit = c.Match(t, 8);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0].block, kHost + 1);
  EXPECT_EQ(hit[1].block, kHost + 0);
  // A hit brings them back, into blocks the caller took.
  c.Pin(hit[0]);
  c.Pin(hit[1]);
  c.Onload(hit[0], 2);
  c.Onload(hit[1], 3);
  EXPECT_EQ(Blocks(hit), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(c.TakeMoves(), (std::vector<KvBlockMove>{In(1, 2), In(0, 3)}));
  EXPECT_TRUE(c.TakeMoves().empty());
  EXPECT_EQ(c.n_on_host(), 0);
  EXPECT_EQ(c.n_onloaded(), 2);
  EXPECT_EQ(Blocks(c.Match(t, 8)), (std::vector<int32_t>{2, 3}));
  // The moved links are good parents.
  EXPECT_TRUE(c.Register(hit[1], Toks({30}), 1).has_value());
  EXPECT_EQ(c.Match(Toks({10, 20, 30}), 8).size(), 3u);
}

TEST(PrefixCacheTest, TheHostTierDropsItsOldestAndNeverAPinnedSlot) {
  PrefixCache c(kHost, kBs, PrefixCache::ChainHash, /*n_host_slots=*/1);
  Chain(c, Toks({10}), {0});
  Chain(c, Toks({20}), {1});
  Chain(c, Toks({30}), {2});
  c.Park(0);
  c.Park(1);
  c.Park(2);
  EXPECT_EQ(c.EvictLru(), 0);  // -> slot 0.
  EXPECT_EQ(c.EvictLru(), 1);  // -> slot 0, dropping [10]: the host's oldest.
  EXPECT_EQ(c.TakeMoves(), (std::vector<KvBlockMove>{Out(0, 0), Out(1, 0)}));
  EXPECT_TRUE(c.Match(Toks({10}), 8).empty());
  std::vector<PrefixLink> hit = c.Match(Toks({20}), 8);
  ASSERT_EQ(hit.size(), 1u);
  c.Pin(hit[0]);
  // Every slot pinned: the next eviction drops its block's KV instead.
  EXPECT_EQ(c.EvictLru(), 2);
  EXPECT_TRUE(c.TakeMoves().empty());
  EXPECT_TRUE(c.Match(Toks({30}), 8).empty());
  c.Onload(hit[0], 3);
  EXPECT_EQ(c.TakeMoves(), (std::vector<KvBlockMove>{In(0, 3)}));
  // Clear forgets both tiers and the copies not yet taken.
  c.Park(3);
  EXPECT_EQ(c.EvictLru(), 3);
  EXPECT_EQ(c.Clear(), (std::vector<int32_t>{}));
  EXPECT_TRUE(c.TakeMoves().empty());
  EXPECT_EQ(c.n_registered(), 0);
  EXPECT_EQ(c.n_on_host(), 0);
}

}  // namespace
}  // namespace cascade::coordinator
