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

TEST(BlockAllocatorTest, SharedBlocksReturnWhenTheLastReferenceGoes) {
  BlockAllocator a(4, 4);
  std::vector<int32_t> x = *a.Allocate(2);
  const std::vector<PrefixLink> chain = RegisterChain(a, x, 100);
  EXPECT_EQ(a.n_registered(), 2);
  std::vector<int32_t> y;
  a.Share(a.Match(Tokens(9, 100), 8), &y);  // A second sharer: 2 full blocks of 9 tokens.
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
  a.Share(chain, &z);  // A hit revives them: they leave the free pool.
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
  a.Share(a.Match(Tokens(9, 200), 8), &revived);            // y's blocks are in use again...
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

TEST(BlockAllocatorDeathTest, SharingOrRegisteringWhatIsNotHeldAborts) {
  BlockAllocator a(2, 4);
  std::vector<int32_t> x = *a.Allocate(1);
  const std::vector<int32_t> tokens = Tokens(4, 0);
  EXPECT_DEATH(a.Register({}, tokens, 1), "registering unheld KV block 1");
  std::vector<int32_t> table;
  EXPECT_DEATH(a.Share(std::vector<PrefixLink>{{x[0], 1}}, &table), "sharing unregistered KV block");
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
