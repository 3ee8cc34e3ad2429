// The Quark MXFP4 source (model/format/mxfp4_checkpoint.h) at the tensor level: packed
// E2M1 codes with their E8M0 exponents read back as GGUF MXFP4 rows whose every element is
// E2M1(code) x 2^(exponent - 127) (the codes' values by the OCP definition, OcpE2M1), the
// even element of a byte in its low nibble; row ranges read alone give the same bytes;
// what the export left unquantized passes through; and what Cascade cannot read is refused
// naming why.
#include "model/format/mxfp4_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/cpu/quantize.h"
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

const Json kFp4 = {{"dtype", "fp4"}, {"qscheme", "per_group"}, {"group_size", 32}, {"scale_format", "e8m0"}};

Json QuarkConfig(const Json& weight) {
  return {{"quant_method", "quark"},
          {"global_quant_config", {{"weight", weight}, {"input_tensors", kFp4}}},
          {"exclude", {"lm_head"}},
          {"layer_quant_config", Json::object()}};
}

TEST(QuarkMxfp4Test, CodesAndExponentsReachEveryElement) {
  constexpr int64_t n_out = 6, n_in = 96;  // Three groups a row.
  std::mt19937 rng(7);
  std::vector<uint8_t> codes(n_out * n_in / 2), exponents(n_out * n_in / 32);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  for (uint8_t& e : exponents) e = static_cast<uint8_t>(110 + rng() % 30);
  TempDir dir;
  const std::string d = WriteCheckpoint(dir, "quark", QuarkConfig(kFp4),
                                        {{"p.weight", "U8", {n_out, n_in / 2}, RawBytes(codes)},
                                         {"p.weight_scale", "U8", {n_out, n_in / 32}, RawBytes(exponents)},
                                         {"lm_head.weight", "BF16", {4, 2}, RawBytes(std::vector<uint16_t>(8))}});
  auto w = OpenHfWeights(d);
  ASSERT_TRUE(w.ok()) << w.status();
  const TensorInfo* info = (*w)->FindTensor("p.weight");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, DType::kMXFP4);
  EXPECT_EQ(info->shape[0], n_out);
  EXPECT_EQ(info->shape[1], n_in);
  EXPECT_EQ((*w)->FindTensor("p.weight_scale"), nullptr);
  ASSERT_NE((*w)->FindTensor("lm_head.weight"), nullptr);  // Excluded: passes through.
  EXPECT_EQ((*w)->FindTensor("lm_head.weight")->dtype, DType::kBF16);
  auto all = (*w)->Read("p.weight");
  ASSERT_TRUE(all.ok()) << all.status();
  const int64_t row_bytes = RowBytes(DType::kMXFP4, n_in);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    const auto* bytes = static_cast<const uint8_t*>(all->data) + r * row_bytes;
    ASSERT_TRUE(kernels::cpu::DequantizeRow(DType::kMXFP4, bytes, row.data(), n_in).ok());
    for (int64_t c = 0; c < n_in; ++c) {
      const uint8_t b = codes[(r * n_in + c) / 2];
      const double want =
          std::ldexp(testing::OcpE2M1(c % 2 == 0 ? b & 15 : b >> 4), exponents[(r * n_in + c) / 32] - 127);
      ASSERT_EQ(row[c], want) << "[" << r << ", " << c << "]";
    }
    auto one = (*w)->ReadRows("p.weight", r, r + 1);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(std::memcmp(one->data, bytes, row_bytes), 0) << "row " << r << " read alone";
  }
}

TEST(QuarkMxfp4Test, WhatCascadeCannotReadIsRefusedWithTheReason) {
  TempDir dir;
  const SafetensorsEntry weight{"p.weight", "U8", {2, 32}, RawBytes(std::vector<uint8_t>(64, 0x22))};
  const SafetensorsEntry scale{"p.weight_scale", "U8", {2, 2}, RawBytes(std::vector<uint8_t>(4, 127))};
  using absl::StatusCode;
  ExpectRefused(WriteCheckpoint(dir, "noscale", QuarkConfig(kFp4), {weight}), StatusCode::kDataLoss,
                "without p.weight_scale");
  ExpectRefused(WriteCheckpoint(dir, "shape", QuarkConfig(kFp4),
                                {weight, {"p.weight_scale", "U8", {2, 3}, RawBytes(std::vector<uint8_t>(6, 127))}}),
                StatusCode::kDataLoss, "one exponent per 32 inputs");
  Json int4 = kFp4;
  int4["dtype"] = "int4";
  ExpectRefused(WriteCheckpoint(dir, "int4", QuarkConfig(int4), {weight, scale}), StatusCode::kUnimplemented,
                "Quark's MXFP4");
  Json group16 = kFp4;
  group16["group_size"] = 16;
  ExpectRefused(WriteCheckpoint(dir, "g16", QuarkConfig(group16), {weight, scale}), StatusCode::kUnimplemented,
                "group_size 32");
  ExpectRefused(WriteCheckpoint(dir, "list", QuarkConfig(Json::array({kFp4})), {weight, scale}),
                StatusCode::kUnimplemented, "a list of specs");
  Json per_layer = QuarkConfig(kFp4);
  per_layer["layer_quant_config"] = {{"*.q_proj", {{"weight", kFp4}}}};
  ExpectRefused(WriteCheckpoint(dir, "perlayer", per_layer, {weight, scale}), StatusCode::kUnimplemented,
                "layer_quant_config");
}

}  // namespace
}  // namespace cascade::model
