// The FP8 checkpoint source (model/format/fp8_checkpoint.h) at the tensor level: a weight
// whose block grid does not divide its shape evenly (the last row and column blocks
// partial), with BF16 scales, reads back as F8_E4M3_B128 rows whose every element is
// code x the scale of its block (the codes' values by the OCP definition, OcpE4M3); row ranges
// read alone give the same bytes; and what Cascade cannot read is refused naming why.
#include "model/format/fp8_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/half.h"
#include "model/format/hf_model.h"
#include "tests/format/checkpoint_dir.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;
using testing::ExpectRefused;
using testing::RawBytes;
using testing::SafetensorsEntry;
using testing::TempDir;
using testing::WriteCheckpoint;

const Json kBlockConfig = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};

TEST(Fp8CheckpointTest, BlockScalesReachEveryElementOfTheirBlock) {
  constexpr int64_t n_out = 200, n_in = 384;  // Row blocks 128 + 72; column blocks 3.
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(n_out * n_in);
  for (uint8_t& c : codes) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7f) == 0x7f) c ^= 1;  // Not NaN.
  }
  std::vector<uint16_t> scales(2 * 3);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = F32ToBf16(0.001f * static_cast<float>(i + 1));
  TempDir dir;
  const std::string d = WriteCheckpoint(dir, "block", kBlockConfig,
                                        {{"p.weight", "F8_E4M3", {n_out, n_in}, RawBytes(codes)},
                                         {"p.weight_scale_inv", "BF16", {2, 3}, RawBytes(scales)},
                                         {"p.input_scale", "F32", {1}, RawBytes(std::vector<float>{1.0f})},
                                         {"norm.weight", "F32", {4}, RawBytes(std::vector<float>(4, 1.0f))}});
  auto w = OpenHfWeights(d);
  ASSERT_TRUE(w.ok()) << w.status();
  const TensorInfo* info = (*w)->FindTensor("p.weight");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, DType::kF8_E4M3_B128);
  EXPECT_EQ((*w)->FindTensor("p.weight_scale_inv"), nullptr);
  EXPECT_EQ((*w)->FindTensor("p.input_scale"), nullptr);
  EXPECT_NE((*w)->FindTensor("norm.weight"), nullptr);
  auto all = (*w)->ReadRows("p.weight", 0, n_out);
  ASSERT_TRUE(all.ok()) << all.status();
  const auto* bytes = static_cast<const uint8_t*>(all->data);
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t c = 0; c < n_in; ++c) {
      const uint8_t* block = bytes + r * RowBytes(DType::kF8_E4M3_B128, n_in) + (c / 128) * 132;
      float d_got;
      std::memcpy(&d_got, block, 4);
      const double want = Bf16ToF32(scales[(r / 128) * 3 + c / 128]) * testing::OcpE4M3(codes[r * n_in + c]);
      ASSERT_EQ(d_got * testing::OcpE4M3(block[4 + c % 128]), want) << r << ", " << c;
    }
  }
  auto part = (*w)->ReadRows("p.weight", 120, 140);  // Across the row-block boundary.
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(std::memcmp(part->data, bytes + 120 * RowBytes(DType::kF8_E4M3_B128, n_in),
                        20 * RowBytes(DType::kF8_E4M3_B128, n_in)),
            0);
}

TEST(Fp8CheckpointTest, WhatCascadeCannotReadIsRefusedWithTheReason) {
  TempDir dir;
  const std::vector<uint8_t> codes(128 * 128, 0x38);
  const SafetensorsEntry weight{"p.weight", "F8_E4M3", {128, 128}, RawBytes(codes)};
  const SafetensorsEntry scale{"p.weight_scale_inv", "F32", {1, 1}, RawBytes(std::vector<float>{1.0f})};
  using absl::StatusCode;
  ExpectRefused(WriteCheckpoint(dir, "noscale", kBlockConfig, {weight}), StatusCode::kDataLoss,
                "has no weight_scale_inv or weight_scale");
  ExpectRefused(WriteCheckpoint(dir, "shape", kBlockConfig,
                                {weight, {"p.weight_scale_inv", "F32", {3}, RawBytes(std::vector<float>{1, 2, 3})}}),
                StatusCode::kDataLoss, "fits no FP8 scheme");
  Json e5m2 = kBlockConfig;
  e5m2["fmt"] = "e5m2";
  ExpectRefused(WriteCheckpoint(dir, "e5m2", e5m2, {weight, scale}), StatusCode::kUnimplemented, "'e5m2'");
  Json narrow = kBlockConfig;
  narrow["weight_block_size"] = {128, 64};
  ExpectRefused(WriteCheckpoint(dir, "narrow", narrow, {weight, scale}), StatusCode::kUnimplemented, "128 x 64");
  const Json int8 = {{"quant_method", "compressed-tensors"},
                     {"config_groups", {{"g", {{"weights", {{"num_bits", 8}, {"type", "int"}}}}}}}};
  ExpectRefused(WriteCheckpoint(dir, "int8", int8, {weight, scale}), StatusCode::kUnimplemented,
                "weights of type 'int'");
  const std::vector<uint8_t> odd(4 * 96, 0x38);
  ExpectRefused(WriteCheckpoint(dir, "odd", kBlockConfig,
                                {{"p.weight", "F8_E4M3", {4, 96}, RawBytes(odd)},
                                 {"p.weight_scale_inv", "F32", {1, 1}, RawBytes(std::vector<float>{1.0f})}}),
                StatusCode::kUnimplemented, "96 inputs are not a multiple of 128");
}

}  // namespace
}  // namespace cascade::model
