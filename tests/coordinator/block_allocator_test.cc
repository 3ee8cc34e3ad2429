// Tests for BlockAllocator (coordinator/block_allocator.cc): allocation, exhaustion that
// allocates nothing, reuse, block arithmetic, and the death of double/foreign frees.
// To add a case: make a small pool and assert n_free() around the calls.

#include <algorithm>
#include <set>
#include <vector>

#include "coordinator/block_allocator.h"
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
