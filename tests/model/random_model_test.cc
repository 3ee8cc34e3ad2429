// The random-model writer's shortcut for values that repeat (RandomModelSpec::
// distinct_values, what the GPU benchmark's 8B shapes use): one period of blocks is
// quantized and tiled, so the file's decoded tensor repeats with the same period, in every
// block type the benchmark writes.
#include <gtest/gtest.h>

#include "kernels/cpu/quantize.h"
#include "model/format/gguf.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::testing {
namespace {

TEST(RandomModelTest, RepeatingValuesTileTheirQuantizedBlocks) {
  TempDir dir;
  constexpr int64_t kPeriod = 8192;
  for (DType type : {DType::kBF16, DType::kQ8_0, DType::kQ4_K}) {
    const std::string path = dir.path() + "/m.gguf";
    WriteRandomModel({.weight_type = type, .n_ff = 512, .distinct_values = kPeriod}, path);
    auto file = model::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    const model::TensorInfo* info = (*file)->FindTensor("blk.0.ffn_up.weight");
    ASSERT_NE(info, nullptr);
    auto view = (*file)->ReadRows(info->name, 0, info->Rows());
    ASSERT_TRUE(view.ok()) << view.status();
    std::vector<float> v(info->NumElements());
    ASSERT_TRUE(kernels::cpu::DequantizeRow(type, view->data, v.data(), static_cast<int64_t>(v.size())).ok());
    ASSERT_GT(v.size(), static_cast<size_t>(2 * kPeriod));
    for (size_t i = kPeriod; i < v.size(); ++i) ASSERT_EQ(v[i], v[i % kPeriod]) << DTypeName(type) << " at " << i;
    double sq = 0;
    for (int64_t i = 0; i < kPeriod; ++i) sq += double{v[i]} * v[i];
    // N(0, 1/fan_in) weights, fan_in 256: a variance near 1/256, not zeros or garbage.
    EXPECT_NEAR(sq / kPeriod, 1.0 / 256, 0.25 / 256) << DTypeName(type);
  }
}

}  // namespace
}  // namespace cascade::testing
