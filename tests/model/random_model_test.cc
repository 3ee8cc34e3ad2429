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

// The Q4_K_M mix as llama.cpp's llama-quantize picks it: Q6_K for the output and for
// attn_v and ffn_down of layers 0 and 7 of 8 (the first and last eighth) and 3 and 6
// (every third after the first eighth), Q4_K elsewhere. (llama-quantize 0.3.36 on
// bench_step.sh's 16-layer model chose Q6_K for exactly layers 0, 1, 4, 7, 10, 13, 14, 15,
// the same rule.)
TEST(RandomModelTest, Q4KMMixIsLlamaCpps) {
  TempDir dir;
  const std::string path = dir.path() + "/m.gguf";
  WriteRandomModel({.weight_type = DType::kQ4_K, .n_layers = 8, .q4_k_m = true}, path);
  auto file = model::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto type = [&](const std::string& name) { return (*file)->FindTensor(name)->dtype; };
  EXPECT_EQ(type("output.weight"), DType::kQ6_K);
  EXPECT_EQ(type("token_embd.weight"), DType::kQ4_K);
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 7 || l == 3 || l == 6;
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(type(b + "attn_v.weight"), more ? DType::kQ6_K : DType::kQ4_K) << l;
    EXPECT_EQ(type(b + "ffn_down.weight"), more ? DType::kQ6_K : DType::kQ4_K) << l;
    EXPECT_EQ(type(b + "attn_q.weight"), DType::kQ4_K) << l;
  }
}

}  // namespace
}  // namespace cascade::testing
