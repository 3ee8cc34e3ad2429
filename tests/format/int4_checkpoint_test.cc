// GPTQ and AWQ checkpoints through model/format/int4_checkpoint.h. The packers
// (tests/int4_writer.h) follow the formats as AutoGPTQ and AutoAWQ write them, independently
// of the loader: every repacked weight must decode to
// exactly scale * (q - zero), and a real model quantized here must run through both
// formats to identical greedy ids, close to the same quants run as F32.
#include "model/format/int4_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <tuple>

#include "core/half.h"
#include "kernels/cpu/quantize.h"
#include "model/format/hf_model.h"
#include "model/format/model_files.h"
#include "model/format/safetensors.h"
#include "model/layers/linear.h"
#include "model/layers/weight_loader.h"
#include "model/transformer.h"
#include "tests/format/checkpoint_dir.h"
#include "tests/greedy_trace.h"
#include "tests/int4_writer.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;
using testing::ActOrderGptq;
using testing::AwqConfig;
using testing::ExpectRefused;
using testing::GptqConfig;
using ::testing::HasSubstr;
using testing::PackActOrderGptq;
using testing::PackAwq;
using testing::PackGptq;
using testing::QuantMatrix;
using testing::RandomQuant;
using testing::RawBytes;
using testing::Rtn;
using testing::SafetensorsEntry;
using testing::TempDir;
using testing::WriteCheckpoint;

// Every row of `name` read through the loader decodes to exactly m's values.
void ExpectDecodesExactly(const WeightSource& w, const std::string& name, const QuantMatrix& m) {
  const TensorInfo* info = w.FindTensor(name);
  ASSERT_NE(info, nullptr) << name;
  EXPECT_EQ(info->dtype, DType::kI4_G128);
  EXPECT_EQ(info->shape[0], m.n_out);
  EXPECT_EQ(info->shape[1], m.n_in);
  // Rows read whole, and a slice starting mid-matrix (a tensor-parallel shard).
  for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, m.n_out}, {m.n_out / 2 + 3, m.n_out}}) {
    absl::StatusOr<TensorView> v = w.ReadRows(name, r0, r1);
    ASSERT_TRUE(v.ok()) << v.status();
    std::vector<float> row(m.n_in);
    for (int64_t o = r0; o < r1; ++o) {
      ASSERT_TRUE(kernels::cpu::DequantizeRow(
                      DType::kI4_G128,
                      static_cast<const uint8_t*>(v->data) + (o - r0) * RowBytes(DType::kI4_G128, m.n_in), row.data(),
                      m.n_in)
                      .ok());
      for (int64_t i = 0; i < m.n_in; ++i) ASSERT_EQ(row[i], m.Value(o, i)) << name << " row " << o << " input " << i;
    }
  }
}

TEST(Int4CheckpointTest, GptqAndAwqRepackExactly) {
  TempDir dir;
  struct Case {
    const char* name;
    int64_t n_out, n_in, group, config_group;
  };
  // 128-groups, a 256-group (each 128-block repeats its scale) and per-channel (-1).
  for (const Case& c :
       {Case{"g128", 40, 384, 128, 128}, Case{"g256", 24, 512, 256, 256}, Case{"gm1", 16, 256, 256, -1}}) {
    SCOPED_TRACE(c.name);
    const QuantMatrix m = RandomQuant(c.n_out, c.n_in, c.group, 7);
    for (bool v1 : {true, false}) {
      std::vector<SafetensorsEntry> e = PackGptq("layer.proj", m, v1);
      e.push_back({"layer.bias", "F32", {c.n_out}, RawBytes(std::vector<float>(c.n_out, 0.5f))});
      const std::string d =
          WriteCheckpoint(dir, std::string("gptq_") + c.name + (v1 ? "v1" : "v2"), GptqConfig(c.config_group, v1), e);
      absl::StatusOr<std::unique_ptr<WeightSource>> w = OpenHfWeights(d);
      ASSERT_TRUE(w.ok()) << w.status();
      ExpectDecodesExactly(**w, "layer.proj.weight", m);
      EXPECT_NE((*w)->FindTensor("layer.bias"), nullptr);  // Other tensors pass through.
      EXPECT_EQ((*w)->FindTensor("layer.proj.qweight"), nullptr);
      EXPECT_EQ((*w)->tensors().size(), 2u);
    }
    const std::string d =
        WriteCheckpoint(dir, std::string("awq_") + c.name, AwqConfig(c.config_group), PackAwq("layer.proj", m));
    absl::StatusOr<std::unique_ptr<WeightSource>> w = OpenHfWeights(d);
    ASSERT_TRUE(w.ok()) << w.status();
    ExpectDecodesExactly(**w, "layer.proj.weight", m);
  }
}

TEST(Int4CheckpointTest, UnsupportedSchemesAreRefusedWithTheReason) {
  TempDir dir;
  const QuantMatrix m = RandomQuant(16, 128, 128, 3);
  const auto e = PackGptq("p", m, true);
  using absl::StatusCode;
  Json bits8 = GptqConfig(128);
  bits8["bits"] = 8;
  ExpectRefused(WriteCheckpoint(dir, "bits8", bits8, e), StatusCode::kUnimplemented, "bits 8");
  ExpectRefused(WriteCheckpoint(dir, "g64", GptqConfig(64), e), StatusCode::kUnimplemented, "group_size 64");
  ExpectRefused(WriteCheckpoint(dir, "bnb", Json{{"quant_method", "bitsandbytes"}}, e), StatusCode::kUnimplemented,
                "quant_method 'bitsandbytes'");
  Json gemv = AwqConfig(128);
  gemv["version"] = "gemv";
  ExpectRefused(WriteCheckpoint(dir, "gemv", gemv, PackAwq("p", m)), StatusCode::kUnimplemented, "AWQ version 'gemv'");
  ExpectRefused(WriteCheckpoint(dir, "notobj", Json::array({1}), e), StatusCode::kInvalidArgument, "must be an object");
}

// Act-order GPTQ (desc_act): g_idx puts inputs in groups out of order. The weight reads
// back with its inputs sorted by group (stably), `p.input_order` naming the input of each
// column, and every element the format's value scale[g_idx[i]] * (q - zero[g_idx[i]]),
// computed here from the writer's quants; a Linear over it gathers its input in that order
// and equals the double product in the file's order; it cannot be split by inputs.
TEST(Int4CheckpointTest, ActOrderReadsInGroupOrderAndLinearGathersItsInput) {
  TempDir dir;
  constexpr int64_t n_out = 16, n_in = 256;
  const QuantMatrix m = RandomQuant(n_out, n_in, 128, 6);
  auto e = PackGptq("p", m, true);
  std::vector<int32_t> g(n_in);
  for (int64_t i = 0; i < n_in; ++i) g[i] = i % 4 == 0 || i % 4 == 3 ? 1 : 0;  // 128 each, interleaved.
  e[2].data = RawBytes(g);
  auto w = OpenHfWeights(WriteCheckpoint(dir, "actorder", GptqConfig(128), e));
  ASSERT_TRUE(w.ok()) << w.status();
  const auto value = [&](int64_t o, int64_t i) {  // The format's definition.
    const float d = F16ToF32(m.s[o * 2 + g[i]]);
    return d * (static_cast<float>(m.q[o * n_in + i]) - static_cast<float>(m.z[o * 2 + g[i]]));
  };
  auto order = (*w)->Read("p.input_order");
  ASSERT_TRUE(order.ok()) << order.status();
  ASSERT_EQ(order->NumElements(), n_in);
  const int32_t* col = order->As<int32_t>();
  for (int64_t j = 0; j < n_in; ++j) {
    EXPECT_EQ(g[col[j]], j / 128) << "column " << j;
    if (j % 128 != 0) {
      EXPECT_LT(col[j - 1], col[j]) << "stable within a group";
    }
  }
  auto rows = (*w)->ReadRows("p.weight", 0, n_out);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    ASSERT_TRUE(kernels::cpu::DequantizeRow(
                    DType::kI4_G128, static_cast<const uint8_t*>(rows->data) + o * RowBytes(DType::kI4_G128, n_in),
                    row.data(), n_in)
                    .ok());
    for (int64_t j = 0; j < n_in; ++j) ASSERT_EQ(row[j], value(o, col[j])) << "row " << o << " column " << j;
  }
  auto backend = kernels::MakeCpuBackend({.n_threads = 1});
  WeightLoader loader(w->get(), backend.get());
  auto linear = Linear::LoadColumn(loader, "p.weight", n_out, n_in, {0, n_out});
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_TRUE(linear->reorders_input());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(2 * n_in), y(2 * n_out);
  for (float& v : x) v = normal(rng);
  ASSERT_TRUE(
      linear->Forward(TensorView(y.data(), DType::kF32, {2, n_out}), TensorView(x.data(), DType::kF32, {2, n_in}))
          .ok());
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      double want = 0, scale = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        want += static_cast<double>(value(o, i)) * x[t * n_in + i];
        scale += std::fabs(value(o, i) * x[t * n_in + i]);
      }
      // The CPU's int8 activation rounding: 1/254 of each block's largest, as linear_test.cc bounds it.
      EXPECT_NEAR(y[t * n_out + o], want, 2e-2 * scale) << "token " << t << " output " << o;
    }
  }
  EXPECT_THAT(Linear::LoadRow(loader, "p.weight", n_out, n_in, {0, 128}, nullptr).status(),
              testing::StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("act-order")));
}

TEST(Int4CheckpointTest, BadTensorsNameTheTensor) {
  TempDir dir;
  const QuantMatrix m = RandomQuant(16, 256, 128, 4);
  using absl::StatusCode;
  {  // Act-order groups of unequal sizes (200 and 56 inputs).
    auto e = PackGptq("p", m, true);
    std::vector<int32_t> g(256);
    for (int i = 0; i < 256; ++i) g[i] = i % 9 == 0 && i < 200 ? 1 : i < 200 ? 0 : 1;
    e[2].data = RawBytes(g);
    ExpectRefused(WriteCheckpoint(dir, "uneven", GptqConfig(128), e), StatusCode::kUnimplemented, "act-order group");
  }
  {  // No qzeros.
    auto e = PackGptq("p", m, true);
    e.erase(e.begin() + 1);
    ExpectRefused(WriteCheckpoint(dir, "nozeros", GptqConfig(128), e), StatusCode::kDataLoss, "p.qzeros");
  }
  {  // Scales of the wrong shape.
    auto e = PackGptq("p", m, true);
    e[3].shape = {1, 32};
    e[3].data.resize(64);
    ExpectRefused(WriteCheckpoint(dir, "shape", GptqConfig(128), e), StatusCode::kDataLoss, "needs scales [2, 16]");
  }
  {  // F32 scales.
    auto e = PackGptq("p", m, true);
    e[3].dtype = "F32";
    e[3].data.append(e[3].data);
    ExpectRefused(WriteCheckpoint(dir, "f32", GptqConfig(128), e), StatusCode::kDataLoss, "must be 2-D F16");
  }
  {  // An input width the 128-groups cannot cover.
    const QuantMatrix narrow = RandomQuant(16, 64, 64, 5);
    ExpectRefused(WriteCheckpoint(dir, "narrow", GptqConfig(-1), PackGptq("p", narrow, true)),
                  StatusCode::kUnimplemented, "not a multiple of 128");
  }
}

// tinystories-656k quantized here (round to nearest, groups of 128) and written three
// ways: GPTQ, AWQ, and the same quants decoded to F32. GPTQ and AWQ repack to the same
// blocks, so they must agree exactly; against F32 the INT4 path only adds the CPU's 8-bit
// activation rounding (about 1% of the logits over two layers).
TEST(Int4CheckpointTest, TinyStoriesRunsFromGptqAndAwq) {
  CASCADE_REQUIRE_FILE(src, testing::TestDataPath("models/tinystories-656k"));
  auto st = SafetensorsSource::OpenFile(src + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  Json config = Json::parse(testing::ReadFileOrDie(src + "/config.json"));
  TempDir dir;
  std::vector<SafetensorsEntry> gptq, awq, f32;
  for (const TensorInfo& t : (*st)->tensors()) {
    absl::StatusOr<TensorView> v = (*st)->Read(t.name);
    ASSERT_TRUE(v.ok() && v->dtype == DType::kF32) << t.name;
    const std::string bytes(static_cast<const char*>(v->data), v->NumBytes());
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
    const bool linear = t.name.find("_proj.weight") != std::string::npos;
    if (!linear) {
      for (auto* e : {&gptq, &awq, &f32}) e->push_back({t.name, "F32", shape, bytes});
      continue;
    }
    std::vector<float> w(t.NumElements());
    std::memcpy(w.data(), bytes.data(), bytes.size());
    const QuantMatrix m = Rtn(w.data(), t.shape[0], t.shape[1], 128);
    const std::string p = t.name.substr(0, t.name.size() - std::string(".weight").size());
    for (auto& e : PackGptq(p, m, true)) gptq.push_back(e);
    for (auto& e : PackAwq(p, m)) awq.push_back(e);
    std::vector<float> decoded(t.NumElements());
    for (int64_t o = 0; o < m.n_out; ++o)
      for (int64_t i = 0; i < m.n_in; ++i) decoded[o * m.n_in + i] = static_cast<float>(m.Value(o, i));
    f32.push_back({t.name, "F32", shape, RawBytes(decoded)});
  }
  const auto write = [&](const std::string& name, const Json& q, const std::vector<SafetensorsEntry>& e) {
    const std::string d = dir.path() + "/" + name;
    std::filesystem::create_directories(d);
    Json c = config;
    if (!q.is_null()) c["quantization_config"] = q;
    std::ofstream(d + "/config.json") << c.dump();
    std::ofstream(d + "/model.safetensors", std::ios::binary) << testing::SafetensorsBytes(e);
    return d;
  };
  std::vector<testing::Trace> traces;
  for (const std::string& d :
       {write("gptq", GptqConfig(128), gptq), write("awq", AwqConfig(128), awq), write("f32", nullptr, f32)}) {
    absl::StatusOr<ModelFiles> files = OpenModelFiles(d);
    ASSERT_TRUE(files.ok()) << files.status();
    auto backend = kernels::MakeCpuBackend({});
    auto t = Transformer::Load(*files, backend.get(), {});
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<testing::Trace> trace = testing::Generate(**t, {1}, 24);
    ASSERT_TRUE(trace.ok()) << trace.status();
    traces.push_back(*std::move(trace));
  }
  EXPECT_EQ(traces[0].ids, traces[1].ids);
  for (size_t s = 0; s < traces[0].logits.size(); ++s)
    EXPECT_EQ(traces[0].logits[s], traces[1].logits[s]) << "step " << s;
  EXPECT_EQ(traces[0].ids, traces[2].ids);
  for (size_t s = 0; s < traces[0].logits.size(); ++s) {
    EXPECT_LT(testing::RelL2(traces[2].logits[s], traces[0].logits[s]), 3e-2) << "step " << s;
  }
}

// tinystories-656k with every projection quantized act-order: the inputs of each matrix
// shuffled into groups of 128 (a fixed permutation), rounded to nearest per group, and
// written as AutoGPTQ stores desc_act checkpoints (quants in the file's input order, g_idx
// naming each input's group); and the same quants decoded to F32 by the format's
// definition. Cascade reorders the inputs at load and gathers each layer's input: the
// greedy ids equal the F32 twin's, the logits within the CPU's 8-bit activation rounding.
TEST(Int4CheckpointTest, TinyStoriesRunsFromActOrderGptq) {
  CASCADE_REQUIRE_FILE(src, testing::TestDataPath("models/tinystories-656k"));
  auto st = SafetensorsSource::OpenFile(src + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  Json config = Json::parse(testing::ReadFileOrDie(src + "/config.json"));
  TempDir dir;
  std::vector<SafetensorsEntry> gptq, f32;
  for (const TensorInfo& t : (*st)->tensors()) {
    absl::StatusOr<TensorView> v = (*st)->Read(t.name);
    ASSERT_TRUE(v.ok() && v->dtype == DType::kF32) << t.name;
    const std::string bytes(static_cast<const char*>(v->data), v->NumBytes());
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
    if (t.name.find("_proj.weight") == std::string::npos) {
      for (auto* e : {&gptq, &f32}) e->push_back({t.name, "F32", shape, bytes});
      continue;
    }
    const int64_t n_out = t.shape[0], n_in = t.shape[1];
    const int64_t a = std::gcd(int64_t{97}, n_in) == 1 ? 97 : 101;
    std::vector<int64_t> perm(n_in);  // Column j of the sorted matrix is input perm[j].
    for (int64_t j = 0; j < n_in; ++j) perm[j] = (j * a + 5) % n_in;
    std::vector<float> values(n_out * n_in);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    ActOrderGptq q = PackActOrderGptq(t.name.substr(0, t.name.size() - std::string(".weight").size()), values.data(),
                                      n_out, n_in, 128, perm);
    for (auto& x : q.entries) gptq.push_back(std::move(x));
    f32.push_back({t.name, "F32", shape, RawBytes(q.decoded)});
  }
  std::vector<testing::Trace> traces;
  for (const auto& [name, q, e] : {std::tuple{"gptq", GptqConfig(128), &gptq}, {"f32", Json(nullptr), &f32}}) {
    Json c = config;
    if (!q.is_null()) c["quantization_config"] = q;
    absl::StatusOr<ModelFiles> files = OpenModelFiles(testing::WriteHfDirectory(dir.path() + "/" + name, c.dump(), *e));
    ASSERT_TRUE(files.ok()) << files.status();
    auto backend = kernels::MakeCpuBackend({});
    auto tr = Transformer::Load(*files, backend.get(), {});
    ASSERT_TRUE(tr.ok()) << tr.status();
    absl::StatusOr<testing::Trace> trace = testing::Generate(**tr, {1}, 24);
    ASSERT_TRUE(trace.ok()) << trace.status();
    traces.push_back(*std::move(trace));
  }
  EXPECT_EQ(traces[0].ids, traces[1].ids);
  for (size_t s = 0; s < traces[0].logits.size(); ++s) {
    EXPECT_LT(testing::RelL2(traces[1].logits[s], traces[0].logits[s]), 3e-2) << "step " << s;
  }
}

}  // namespace
}  // namespace cascade::model
