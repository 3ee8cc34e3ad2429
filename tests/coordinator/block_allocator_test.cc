// Tests for BlockAllocator (coordinator/serving/block_allocator.cc): allocation, exhaustion that
// allocates nothing, reuse, block arithmetic, the death of double/foreign frees, and the
// reference counts and cached-free blocks of prefix caching (sharing, revival, LRU
// eviction after the plain free blocks).
// To add a case: make a small pool and assert n_free() around the calls.

#include <algorithm>
#include <set>
#include <vector>

#include "coordinator/serving/block_allocator.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

TEST(BlockAllocatorTest, AllocatesDistinctIdsUntilExhausted) {
  BlockAllocator a(8, 16);
  EXPECT_EQ(a.n_total(), 8);
  EXPECT_EQ(a.n_free(), 8);
  EXPECT_EQ(a.block_size(), 16);
  absl::StatusOr<std::vector<int32_t>> x = a.Allocate(3);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(*x, (std::vector<int32_t>{0, 1, 2}));  // A fresh pool hands out low ids first.
  absl::StatusOr<std::vector<int32_t>> y = a.Allocate(5);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(a.n_free(), 0);
  EXPECT_EQ(a.n_used(), 8);
  std::set<int32_t> all(x->begin(), x->end());
  all.insert(y->begin(), y->end());
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 7);
}

TEST(BlockAllocatorTest, ExhaustionAllocatesNothing) {
  BlockAllocator a(4, 16);
  ASSERT_TRUE(a.Allocate(3).ok());
  absl::StatusOr<std::vector<int32_t>> r = a.Allocate(2);
  EXPECT_STATUS_CODE(r, kResourceExhausted);
  EXPECT_EQ(a.n_free(), 1);
  std::vector<int32_t> table = {42};
  EXPECT_STATUS_CODE(a.AllocateInto(2, &table), kResourceExhausted);
  EXPECT_EQ(table, (std::vector<int32_t>{42}));
  EXPECT_EQ(a.n_free(), 1);
  ASSERT_TRUE(a.AllocateInto(1, &table).ok());
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(a.n_free(), 0);
}

TEST(BlockAllocatorTest, ZeroIsFineAndEmptyPoolWorks) {
  BlockAllocator empty(0, 16);
  absl::StatusOr<std::vector<int32_t>> r = empty.Allocate(0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  EXPECT_STATUS_CODE(empty.Allocate(1), kResourceExhausted);
}

TEST(BlockAllocatorTest, FreeReturnsBlocksForReuse) {
  BlockAllocator a(4, 8);
  std::vector<int32_t> x = *a.Allocate(4);
  a.Free(std::span<const int32_t>(x).subspan(1, 2));
  EXPECT_EQ(a.n_free(), 2);
  std::vector<int32_t> y = *a.Allocate(2);
  std::sort(y.begin(), y.end());
  EXPECT_EQ(y, (std::vector<int32_t>{x[1], x[2]}));
  a.Free(y);
  a.Free(std::vector<int32_t>{x[0], x[3]});
  EXPECT_EQ(a.n_free(), 4);
}

TEST(BlockAllocatorTest, BlocksForTokens) {
  BlockAllocator a(1, 16);
  EXPECT_EQ(a.BlocksForTokens(0), 0);
  EXPECT_EQ(a.BlocksForTokens(1), 1);
  EXPECT_EQ(a.BlocksForTokens(16), 1);
  EXPECT_EQ(a.BlocksForTokens(17), 2);
  EXPECT_EQ(a.BlocksForTokens(32), 2);
  EXPECT_EQ(a.BlocksForTokens(33), 3);
}

// Registers `blocks` (held) as one chain, block i holding tokens [base + 4i, base + 4i + 4).
std::vector<PrefixLink> RegisterChain(BlockAllocator& a, const std::vector<int32_t>& blocks, int32_t base) {
  std::vector<PrefixLink> chain;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t t = base + 4 * static_cast<int32_t>(i);
    const std::vector<int32_t> tokens = {t, t + 1, t + 2, t + 3};
    std::optional<PrefixLink> link = a.Register(chain.empty() ? PrefixLink{} : chain.back(), tokens, blocks[i]);
    EXPECT_TRUE(link.has_value());
    if (link) chain.push_back(*link);
  }
  return chain;
}

std::vector<int32_t> Tokens(int n, int32_t base) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + i;
  return v;
}

std::vector<int32_t> Blocks(const std::vector<PrefixLink>& chain) {
  std::vector<int32_t> out;
  for (const PrefixLink& l : chain) out.push_back(l.block);
  return out;
}

TEST(BlockAllocatorTest, SharedBlocksReturnWhenTheLastReferenceGoes) {
  BlockAllocator a(4, 4);
  std::vector<int32_t> x = *a.Allocate(2);
  const std::vector<PrefixLink> chain = RegisterChain(a, x, 100);
  EXPECT_EQ(a.n_registered(), 2);
  std::vector<int32_t> y;
  std::vector<PrefixLink> hit = a.Match(Tokens(9, 100), 8);  // A second sharer: 2 full blocks of 9 tokens.
  a.Share(hit, &y);
  EXPECT_EQ(y, x);
  EXPECT_EQ(a.ref_count(x[0]), 2);
  EXPECT_EQ(a.n_free(), 2);
  a.Free(x);
  EXPECT_EQ(a.n_free(), 2);  // Still held by the sharer.
  EXPECT_EQ(a.ref_count(x[0]), 1);
  a.Free(y);
  EXPECT_EQ(a.n_free(), 4);  // Registered blocks come back cached-free: free, and matchable.
  EXPECT_EQ(a.n_cached_free(), 2);
  EXPECT_EQ(a.Match(Tokens(8, 100), 8), chain);
  std::vector<int32_t> z;
  hit = chain;
  a.Share(hit, &z);  // A hit revives them: they leave the free pool.
  EXPECT_EQ(a.n_free(), 2);
  EXPECT_EQ(a.n_cached_free(), 0);
  a.Free(z);
  EXPECT_DEATH(a.Free(z), "double free of KV block");
}

TEST(BlockAllocatorTest, AllocationTakesPlainFreeBlocksThenTheLeastRecentlyUsed) {
  BlockAllocator a(5, 4);
  std::vector<int32_t> x = *a.Allocate(2);
  std::vector<int32_t> y = *a.Allocate(2);
  RegisterChain(a, x, 100);
  RegisterChain(a, y, 200);
  a.Free(std::vector<int32_t>{x[1], x[0]});  // Tail first: x[1] is evicted before x[0].
  a.Free(std::vector<int32_t>{y[1], y[0]});
  EXPECT_EQ(a.n_free(), 5);
  EXPECT_EQ(a.n_cached_free(), 4);
  EXPECT_EQ(*a.Allocate(1), (std::vector<int32_t>{4}));  // The plain free one first.
  EXPECT_EQ(*a.Allocate(1), (std::vector<int32_t>{x[1]}));
  EXPECT_EQ(a.n_registered(), 3);                    // Evicted: unregistered.
  EXPECT_EQ(a.Match(Tokens(9, 100), 8).size(), 1u);  // x[0] is left of that chain.
  EXPECT_EQ(a.Match(Tokens(9, 200), 8).size(), 2u);
  std::vector<int32_t> revived;
  std::vector<PrefixLink> hit = a.Match(Tokens(9, 200), 8);
  a.Share(hit, &revived);                                   // y's blocks are in use again...
  EXPECT_EQ(*a.Allocate(1), (std::vector<int32_t>{x[0]}));  // ...so x[0] goes next.
  EXPECT_STATUS_CODE(a.Allocate(1), kResourceExhausted);
}

TEST(BlockAllocatorTest, UnregisteredBlocksAndClearGoToThePlainFreeList) {
  BlockAllocator a(3, 4);
  std::vector<int32_t> x = *a.Allocate(3);
  RegisterChain(a, {x[0]}, 100);
  a.Free(x);
  EXPECT_EQ(a.n_free(), 3);
  EXPECT_EQ(a.n_cached_free(), 1);
  a.ClearPrefixCache();
  EXPECT_EQ(a.n_free(), 3);
  EXPECT_EQ(a.n_cached_free(), 0);
  EXPECT_EQ(a.n_registered(), 0);
  EXPECT_TRUE(a.Match(Tokens(8, 100), 8).empty());
}

// A chain half on the device and half in the host tier: the device block is revived and
// the host ones come back into blocks in chain order. Making room for them moves the
// least recently used blocks out first, and a slot a hit just read can take the next
// eviction: the copies are recorded in the one order that keeps every byte.
TEST(BlockAllocatorTest, AHostHitComesBackAfterTheEvictionsItCauses) {
  BlockAllocator a(3, 4, /*n_host_slots=*/3);
  std::vector<int32_t> x = *a.Allocate(3);
  RegisterChain(a, x, 100);  // 3 full blocks.
  a.Free(std::vector<int32_t>{x[2], x[1], x[0]});
  std::vector<int32_t> other = *a.Allocate(2);  // Evicts x[2], then x[1], to the host.
  EXPECT_EQ(other, (std::vector<int32_t>{x[2], x[1]}));
  EXPECT_EQ(a.TakeMoves(), (std::vector<KvBlockMove>{{true, x[2], 0}, {true, x[1], 1}}));
  RegisterChain(a, other, 200);
  a.Free(std::vector<int32_t>{other[1], other[0]});
  std::vector<PrefixLink> hit = a.Match(Tokens(13, 100), 8);
  ASSERT_EQ(hit.size(), 3u);
  EXPECT_FALSE(a.on_host(hit[0]));
  EXPECT_TRUE(a.on_host(hit[1]) && a.on_host(hit[2]));
  EXPECT_EQ(a.BlocksTakenBy(hit), 3);  // x[0] revived, two brought back.
  EXPECT_EQ(a.n_free(), 3);
  std::vector<int32_t> table = {7};
  a.Share(hit, &table);
  EXPECT_EQ(table, (std::vector<int32_t>{7, x[0], other[1], other[0]}));
  EXPECT_EQ(a.TakeMoves(), (std::vector<KvBlockMove>{{true, other[1], 2},      // LRU out to the free slot,
                                                     {false, other[1], 1},     // block 1 of 100 in,
                                                     {true, other[0], 1},      // the next out to the slot just read,
                                                     {false, other[0], 0}}));  // block 2 of 100 in.
  EXPECT_EQ(Blocks(hit), table.size() == 4 ? std::vector<int32_t>(table.begin() + 1, table.end()) : table);
  EXPECT_EQ(a.n_free(), 0);
  EXPECT_EQ(a.prefix_cache().n_on_host(), 2);  // Chain 200, all of it.
  std::vector<PrefixLink> moved = a.Match(Tokens(9, 200), 8);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_TRUE(a.on_host(moved[0]) && a.on_host(moved[1]));
  EXPECT_EQ(a.prefix_cache().n_offloaded(), 4);
  EXPECT_EQ(a.prefix_cache().n_onloaded(), 2);
}

TEST(BlockAllocatorDeathTest, SharingOrRegisteringWhatIsNotHeldAborts) {
  BlockAllocator a(2, 4);
  std::vector<int32_t> x = *a.Allocate(1);
  const std::vector<int32_t> tokens = Tokens(4, 0);
  EXPECT_DEATH(a.Register({}, tokens, 1), "registering unheld KV block 1");
  std::vector<int32_t> table;
  std::vector<PrefixLink> stale = {{x[0], 1}};
  EXPECT_DEATH(a.Share(stale, &table), "sharing unregistered KV block");
}

TEST(BlockAllocatorDeathTest, DoubleFreeAborts) {
  BlockAllocator a(4, 16);
  std::vector<int32_t> x = *a.Allocate(2);
  a.Free(x);
  EXPECT_DEATH(a.Free(x), "double free of KV block");
}

TEST(BlockAllocatorDeathTest, DuplicateInOneFreeAborts) {
  BlockAllocator a(4, 16);
  std::vector<int32_t> x = *a.Allocate(1);
  EXPECT_DEATH(a.Free(std::vector<int32_t>{x[0], x[0]}), "double free of KV block");
}

TEST(BlockAllocatorDeathTest, ForeignIdAborts) {
  BlockAllocator a(4, 16);
  EXPECT_DEATH(a.Free(std::vector<int32_t>{4}), "foreign KV block 4");
  EXPECT_DEATH(a.Free(std::vector<int32_t>{-1}), "foreign KV block");
  EXPECT_DEATH(a.Free(std::vector<int32_t>{2}), "double free of KV block 2");  // Never allocated.
}

}  // namespace
}  // namespace cascade::coordinator
