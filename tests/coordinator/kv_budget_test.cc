// KV pool sizing on GPU workers (coordinator/control/kv_budget.h), with the arithmetic written out.
#include "coordinator/control/kv_budget.h"

#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(KvBudgetTest, BlockBytesCountKAndVInTheirDType) {
  // SmolLM2-135M: 30 layers, 3 KV heads of 64, blocks of 16: 2 * 30 * 16 * 3 * 64 * 4.
  EXPECT_EQ(KvBlockBytes(30, 16, 3, 64, DType::kF32), 737280);
  EXPECT_EQ(KvBlockBytes(30, 16, 3, 64, DType::kF16), 737280 / 2);
  // q8_0: 34 bytes per 32 elements, 6 blocks per position row of 192.
  EXPECT_EQ(KvBlockBytes(30, 16, 3, 64, DType::kQ8_0), 2 * 30 * 16 * 6 * 34);
}

TEST(KvBudgetTest, FreeMemoryAfterWeightsOverBlockBytes) {
  constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;
  // An H200's 140 GiB free, 90% usable, 16 GiB of Llama-3-8B BF16 weights, 2 MiB blocks
  // (32 layers x 8 KV heads x 128 x 16 positions x K and V x 4 bytes = 4 MiB: use that).
  const int64_t block = KvBlockBytes(32, 16, 8, 128, DType::kF32);
  ASSERT_EQ(block, 4 * kMiB);
  absl::StatusOr<int64_t> n = GpuKvBlocks(140 * kGiB, 16 * kGiB, block, 0.9, "stage 0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, static_cast<int64_t>((0.9 * 140 - 16) * 1024 / 4));  // 27545 blocks.
  // Half the fraction leaves (63 - 16) GiB.
  EXPECT_EQ(*GpuKvBlocks(140 * kGiB, 16 * kGiB, block, 0.45, "stage 0"), static_cast<int64_t>((63.0 - 16) * 256));
}

TEST(KvBudgetTest, WeightsThatDoNotFitNameTheWorkerAndTheFix) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  absl::StatusOr<int64_t> n = GpuKvBlocks(20 * kGiB, 19 * kGiB, 4 << 20, 0.9, "stage 1 tp 0 on node a, cuda:1");
  ASSERT_THAT(n, testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(testing::StatusMessage(n.status()), HasSubstr("stage 1 tp 0 on node a, cuda:1: 19456 MiB of weights"));
  EXPECT_THAT(testing::StatusMessage(n.status()), HasSubstr("scheduler.gpu_memory_fraction"));
  // Nothing free: not one block.
  EXPECT_THAT(GpuKvBlocks(0, 0, 1024, 0.9, "x"), testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace cascade::coordinator
