// A checkpoint's FP8 KV-cache scales (model/format/kv_cache_scales.h), read from safetensors
// written here: per tensor (shape [] and [1]) every KV head gets the layer's scale, per head
// ([n_kv_heads]) each TP rank gets its own heads', BF16 widens exactly; a GGUF-named or
// scale-less checkpoint has none; half-present or malformed scales are refused naming the
// tensor.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/half.h"
#include "model/format/kv_cache_scales.h"
#include "model/format/safetensors.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using testing::RawBytes;
using testing::SafetensorsEntry;

// Two layers, 4 KV heads, the safetensors bytes of `entries` (kept alive in `bytes`).
ModelFiles Files(const std::vector<SafetensorsEntry>& entries, std::string& bytes) {
  bytes = testing::SafetensorsBytes(entries);
  ModelFiles f;
  f.format = ModelFormat::kHuggingFace;
  f.config.n_layers = 2;
  f.config.n_kv_heads = 4;
  auto src = SafetensorsSource::OpenBytes(bytes, "scales");
  EXPECT_TRUE(src.ok()) << src.status();
  if (src.ok()) f.weights = *std::move(src);
  return f;
}

TpShard Heads(int64_t begin, int64_t end) {
  TpShard s;
  s.kv_head_begin = begin;
  s.kv_head_end = end;
  return s;
}

SafetensorsEntry F32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return {name, "F32", std::move(shape), RawBytes(v)};
}

TEST(KvCacheScalesTest, PerTensorScalesGoToEveryHead) {
  std::string bytes;
  const ModelFiles f =
      Files({F32("model.layers.0.self_attn.k_scale", {}, {0.5f}), F32("model.layers.0.self_attn.v_scale", {1}, {0.25f}),
             F32("model.layers.1.self_attn.k_scale", {}, {2.0f}), F32("model.layers.1.self_attn.v_scale", {}, {4.0f})},
            bytes);
  auto s = ReadKvCacheScales(f, 0, 2, Heads(0, 4));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->k, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 2, 2, 2, 2}));
  EXPECT_EQ(s->v, (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f, 4, 4, 4, 4}));
  // A stage of layer 1 only, the second TP rank of two.
  s = ReadKvCacheScales(f, 1, 2, Heads(2, 4));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->k, (std::vector<float>{2, 2}));
}

TEST(KvCacheScalesTest, PerHeadScalesAreSlicedByTheShard) {
  std::string bytes;
  const std::vector<uint16_t> bf16 = {F32ToBf16(0.125f), F32ToBf16(0.25f), F32ToBf16(0.5f), F32ToBf16(1.0f)};
  const ModelFiles f = Files({F32("model.layers.0.self_attn.k_scale", {4}, {1, 2, 3, 4}),
                              F32("model.layers.0.self_attn.v_scale", {4}, {5, 6, 7, 8}),
                              F32("model.layers.1.self_attn.k_scale", {4}, {9, 10, 11, 12}),
                              {"model.layers.1.self_attn.v_scale", "BF16", {4}, RawBytes(bf16)}},
                             bytes);
  auto s = ReadKvCacheScales(f, 0, 2, Heads(1, 3));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->k, (std::vector<float>{2, 3, 10, 11}));
  EXPECT_EQ(s->v, (std::vector<float>{6, 7, 0.25f, 0.5f}));
}

TEST(KvCacheScalesTest, NoneWhenTheCheckpointHasNone) {
  std::string bytes;
  ModelFiles f = Files({F32("model.layers.0.self_attn.q_norm.weight", {4}, {1, 1, 1, 1})}, bytes);
  auto s = ReadKvCacheScales(f, 0, 2, Heads(0, 4));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->empty());
  f.format = ModelFormat::kGguf;  // GGUF has no such tensors.
  s = ReadKvCacheScales(f, 0, 2, Heads(0, 4));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->empty());
}

TEST(KvCacheScalesTest, MalformedScalesAreRefusedNamingTheTensor) {
  const struct {
    std::vector<SafetensorsEntry> entries;
    std::string says;
  } cases[] = {
      {{F32("model.layers.0.self_attn.k_scale", {}, {1}), F32("model.layers.0.self_attn.v_scale", {}, {1})},
       "1 of layers [0, 2)"},
      {{F32("model.layers.0.self_attn.k_scale", {}, {1}), F32("model.layers.1.self_attn.k_scale", {}, {1}),
        F32("model.layers.1.self_attn.v_scale", {}, {1})},
       "model.layers.0.self_attn.v_scale"},
      {{F32("model.layers.0.self_attn.k_scale", {3}, {1, 2, 3}), F32("model.layers.0.self_attn.v_scale", {}, {1}),
        F32("model.layers.1.self_attn.k_scale", {}, {1}), F32("model.layers.1.self_attn.v_scale", {}, {1})},
       "'model.layers.0.self_attn.k_scale' [3]"},
      {{F32("model.layers.0.self_attn.k_scale", {}, {0}), F32("model.layers.0.self_attn.v_scale", {}, {1}),
        F32("model.layers.1.self_attn.k_scale", {}, {1}), F32("model.layers.1.self_attn.v_scale", {}, {1})},
       "not positive"},
  };
  for (const auto& c : cases) {
    std::string bytes;
    const ModelFiles f = Files(c.entries, bytes);
    const auto s = ReadKvCacheScales(f, 0, 2, Heads(0, 4));
    EXPECT_STATUS_CODE(s.status(), kDataLoss);
    EXPECT_NE(testing::StatusMessage(s.status()).find(c.says), std::string::npos) << s.status();
  }
}

}  // namespace
}  // namespace cascade::model
