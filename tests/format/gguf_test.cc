// GGUF reader tests: real files from ../shared/testdata and the default model, files
// written by GgufWriter, and one test per kind of damaged file. To add a bad-file case,
// build the bytes (usually by patching a written file) and assert the code and message.
#include "model/format/gguf.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "model/format/gguf_writer.h"
#include "model/format/model_config.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using ::testing::HasSubstr;

// A small valid file: a few metadata types, one F32 matrix [3, 32], one Q8_0 [2, 64].
GgufWriter SmallWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 1);
  w.SetF32("some.float", 0.5f);
  w.SetBool("some.bool", true);
  w.SetI32Array("some.ints", {1, -2, 3});
  w.SetStringArray("some.strings", {"a", "bc", ""});
  std::string f32(3 * 32 * 4, '\0');
  for (int i = 0; i < 3 * 32; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(&f32[4 * i], &v, 4);
  }
  w.AddTensor("matrix", DType::kF32, {3, 32}, f32);
  w.AddTensor("quant", DType::kQ8_0, {2, 64}, std::string(2 * 2 * 34, '\x01'));
  return w;
}

// Offset of the first byte after the (unique) occurrence of `needle` in `bytes`.
size_t After(const std::string& bytes, const std::string& needle) {
  const size_t p = bytes.find(needle);
  EXPECT_NE(p, std::string::npos) << needle;
  return p + needle.size();
}

template <typename T>
void Patch(std::string& bytes, size_t at, T v) {
  std::memcpy(&bytes[at], &v, sizeof(T));
}

TEST(GgufTest, ReadsWrittenFile) {
  const std::string bytes = SmallWriter().Serialize();
  auto f = GgufFile::OpenBytes(bytes, "small.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetInt("llama.block_count"), 1);
  EXPECT_DOUBLE_EQ(*(*f)->GetFloat("some.float"), 0.5);
  EXPECT_TRUE(*(*f)->GetBool("some.bool"));
  EXPECT_EQ(*(*f)->GetIntArray("some.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*(*f)->GetStringArray("some.strings"), (std::vector<std::string_view>{"a", "bc", ""}));
  EXPECT_STATUS_CODE((*f)->GetString("missing.key"), kNotFound);
  EXPECT_STATUS_CODE((*f)->GetString("llama.block_count"), kInvalidArgument);

  ASSERT_EQ((*f)->tensors().size(), 2u);
  const TensorInfo* m = (*f)->FindTensor("matrix");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->n_dims, 2);
  EXPECT_EQ(m->shape[0], 3);
  EXPECT_EQ(m->shape[1], 32);
  EXPECT_EQ(m->file_offset % 32, 0u);
  auto rows = (*f)->ReadRows("matrix", 1, 3);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->Rows(), 2);
  EXPECT_EQ(rows->As<float>()[0], 32.0f);   // First element of row 1.
  EXPECT_EQ(rows->As<float>()[63], 95.0f);  // Last element of row 2.
  EXPECT_STATUS_CODE((*f)->ReadRows("matrix", 2, 4), kOutOfRange);
  EXPECT_STATUS_CODE((*f)->ReadRows("nope", 0, 1), kNotFound);
  EXPECT_EQ((*f)->FindTensor("quant")->n_bytes, 2u * 2 * 34);
}

TEST(GgufTest, EveryTruncationIsDataLoss) {
  const std::string bytes = SmallWriter().Serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    auto f = GgufFile::OpenBytes(cut, "cut.gguf");
    // The padding after the last tensor is optional; everything shorter must fail.
    const TensorInfo* last = nullptr;
    if (f.ok()) last = (*f)->FindTensor("quant");
    if (f.ok() && last != nullptr && last->file_offset + last->n_bytes <= n) continue;
    ASSERT_THAT(f, testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.gguf")))
        << "prefix of " << n << " bytes";
  }
}

TEST(GgufTest, WrongMagic) {
  std::string bytes = SmallWriter().Serialize();
  bytes[0] = 'X';
  auto f = GgufFile::OpenBytes(bytes, "magic.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("not a GGUF file"));
}

TEST(GgufTest, UnsupportedVersion) {
  for (uint32_t version : {1u, 4u}) {
    std::string bytes = SmallWriter().Serialize();
    Patch<uint32_t>(bytes, 4, version);
    auto f = GgufFile::OpenBytes(bytes, "version.gguf");
    EXPECT_STATUS_CODE(f, kUnimplemented);
    EXPECT_THAT(f.status().message(), HasSubstr("unsupported GGUF version"));
  }
}

TEST(GgufTest, UnsupportedTensorType) {
  std::string bytes = SmallWriter().Serialize();
  // The tensor table entry of "matrix": name, n_dims, ne[2], type, offset.
  const size_t type_at = After(bytes, "matrix") + 4 + 2 * 8;
  Patch<uint32_t>(bytes, type_at, 16);  // IQ2_XXS: not read.
  auto f = GgufFile::OpenBytes(bytes, "type.gguf");
  EXPECT_STATUS_CODE(f, kUnimplemented);
  EXPECT_THAT(f.status().message(), HasSubstr("'matrix'"));
  EXPECT_THAT(f.status().message(), HasSubstr("IQ2_XXS"));
}

TEST(GgufTest, ShapeNotMatchingBlockSize) {
  std::string bytes = SmallWriter().Serialize();
  const size_t ne0_at = After(bytes, "quant") + 4;
  Patch<uint64_t>(bytes, ne0_at, 48);  // Not a multiple of the Q8_0 block of 32.
  auto f = GgufFile::OpenBytes(bytes, "shape.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("'quant'"));
  EXPECT_THAT(f.status().message(), HasSubstr("not a multiple"));
}

TEST(GgufTest, OffsetPastEnd) {
  std::string bytes = SmallWriter().Serialize();
  const size_t offset_at = After(bytes, "quant") + 4 + 2 * 8 + 4;
  Patch<uint64_t>(bytes, offset_at, 1 << 20);
  auto f = GgufFile::OpenBytes(bytes, "offset.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("'quant'"));
  EXPECT_THAT(f.status().message(), HasSubstr("past the end"));
}

TEST(GgufTest, MisalignedOffset) {
  std::string bytes = SmallWriter().Serialize();
  const size_t offset_at = After(bytes, "quant") + 4 + 2 * 8 + 4;
  Patch<uint64_t>(bytes, offset_at, 3);
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(bytes, "align.gguf"), kDataLoss);
}

TEST(GgufTest, AbsurdArrayCount) {
  std::string bytes = SmallWriter().Serialize();
  const size_t count_at = After(bytes, "some.ints") + 4 + 4;  // value type, elem type.
  Patch<uint64_t>(bytes, count_at, uint64_t{1} << 60);
  auto f = GgufFile::OpenBytes(bytes, "absurd.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("some.ints"));
  EXPECT_THAT(f.status().message(), HasSubstr("does not fit"));
}

TEST(GgufTest, AbsurdTensorAndKeyCounts) {
  std::string bytes = SmallWriter().Serialize();
  Patch<uint64_t>(bytes, 8, uint64_t{1} << 60);
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(bytes, "count.gguf"), kDataLoss);
  bytes = SmallWriter().Serialize();
  Patch<uint64_t>(bytes, 16, uint64_t{1} << 60);
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(bytes, "count.gguf"), kDataLoss);
}

TEST(GgufTest, AbsurdTensorDimension) {
  std::string bytes = SmallWriter().Serialize();
  const size_t ne1_at = After(bytes, "matrix") + 4 + 8;
  Patch<uint64_t>(bytes, ne1_at, uint64_t{1} << 60);
  auto f = GgufFile::OpenBytes(bytes, "dim.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("'matrix'"));
}

TEST(GgufTest, InvalidUtf8Key) {
  std::string bytes = SmallWriter().Serialize();
  const size_t at = bytes.find("some.float");
  bytes[at] = '\xff';
  auto f = GgufFile::OpenBytes(bytes, "utf8.gguf");
  EXPECT_STATUS_CODE(f, kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("not valid UTF-8"));
}

TEST(GgufTest, DuplicateKeyAndTensor) {
  GgufWriter w = SmallWriter();
  w.SetU32("llama.block_count", 2);
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(w.Serialize(), "dup.gguf"), kDataLoss);
  GgufWriter t = SmallWriter();
  t.AddTensor("matrix", DType::kF32, {1, 32}, std::string(128, '\0'));
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(t.Serialize(), "dup.gguf"), kDataLoss);
}

TEST(GgufTest, BadBoolAndUnknownValueType) {
  std::string bytes = SmallWriter().Serialize();
  bytes[After(bytes, "some.bool") + 4] = 7;
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(bytes, "bool.gguf"), kDataLoss);
  bytes = SmallWriter().Serialize();
  Patch<uint32_t>(bytes, After(bytes, "some.float"), 99);
  EXPECT_STATUS_CODE(GgufFile::OpenBytes(bytes, "type.gguf"), kDataLoss);
}

TEST(GgufTest, MissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_STATUS_CODE(f, kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr("/nonexistent/model.gguf"));
}

TEST(GgufTest, MissingRequiredMetadataNamesTheKey) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  const std::string bytes = w.Serialize();  // OpenBytes borrows it.
  auto f = GgufFile::OpenBytes(bytes, "hparams.gguf");
  ASSERT_TRUE(f.ok());
  auto c = ModelConfigFromGguf(**f);
  EXPECT_STATUS_CODE(c, kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("llama.block_count"));
}

// The config of a GGUF file holding the hyperparameters every architecture requires (2
// layers of 64, FFN 128, 100 tokens; `heads` and `context`) and what `edit` adds (a key
// may be written once).
struct Hparams {
  uint32_t heads = 8;
  uint32_t context = 256;
};
absl::StatusOr<ModelConfig> ParseHparams(const std::string& arch, const std::function<void(GgufWriter&)>& edit,
                                         Hparams h = {}) {
  GgufWriter w;
  w.SetString("general.architecture", arch);
  w.SetU32(arch + ".block_count", 2);
  w.SetU32(arch + ".embedding_length", 64);
  w.SetU32(arch + ".attention.head_count", h.heads);
  w.SetU32(arch + ".feed_forward_length", 128);
  w.SetF32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetU32(arch + ".vocab_size", 100);
  w.SetU32(arch + ".context_length", h.context);
  edit(w);
  const std::string bytes = w.Serialize();  // OpenBytes borrows it.
  auto f = GgufFile::OpenBytes(bytes, arch + ".gguf");
  if (!f.ok()) return f.status();
  return ModelConfigFromGguf(**f);
}

// `<arch>.attention.sliding_window` narrower than the context caps it, as in config.json.
TEST(GgufTest, SlidingWindowCapsTheContext) {
  auto c =
      ParseHparams("llama", [](GgufWriter& w) { w.SetU32("llama.attention.sliding_window", 1024); }, {.context = 8192});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->n_ctx_train, 1024);
}

// gpt-oss as llama.cpp's converter writes it (arch `gpt-oss`): the window on the even
// layers (llama.cpp's swa pattern 2) without capping the context, NEOX RoPE, sinks and the
// biases, the clamped SwiGLU's constants recorded as llama.cpp's, renormalised top-k.
TEST(GgufTest, GptOssHparams) {
  auto c = ParseHparams("gpt-oss",
                        [](GgufWriter& w) {
                          w.SetU32("gpt-oss.attention.sliding_window", 128);
                          w.SetU32("gpt-oss.expert_count", 32);
                          w.SetU32("gpt-oss.expert_used_count", 4);
                          w.SetU32("gpt-oss.expert_feed_forward_length", 96);
                        },
                        {.context = 131072});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_ctx_train, 131072);
  EXPECT_EQ(c->WindowOf(0), 128);
  EXPECT_EQ(c->WindowOf(1), 0);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);
  EXPECT_TRUE(c->attn_out_bias && c->attn_sinks && c->router_bias && c->expert_bias);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->n_ff_expert, 96);
  EXPECT_TRUE(c->norm_topk_prob);
  bool recorded = false;
  for (const DefaultedKey& d : c->defaulted) recorded |= d.key == "swiglu_limit";
  EXPECT_TRUE(recorded);
}

// llama.cpp's MoE keys: qwen3moe's expert_count / expert_used_count /
// expert_feed_forward_length, renormalised top-k by default (Qwen2-MoE's default is not,
// `expert_weights_norm` overrides); Mixtral is `llama` with expert_count and its experts'
// FFN is feed_forward_length; bad counts name the field.
TEST(GgufTest, MixtureOfExpertsKeys) {
  const auto parse = [](const std::string& arch, const std::function<void(GgufWriter&)>& edit, uint32_t used = 4) {
    return ParseHparams(arch, [&](GgufWriter& w) {
      w.SetU32(arch + ".expert_count", 16);
      w.SetU32(arch + ".expert_used_count", used);
      edit(w);
    });
  };
  auto c = parse("qwen3moe", [](GgufWriter& w) { w.SetU32("qwen3moe.expert_feed_forward_length", 32); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_experts, 16);
  EXPECT_EQ(c->n_experts_used, 4);
  EXPECT_EQ(c->n_ff_expert, 32);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);
  EXPECT_TRUE(c->IsMoeLayer(0) && c->IsMoeLayer(1));
  c = parse("qwen2moe", [](GgufWriter& w) { w.SetU32("qwen2moe.expert_feed_forward_length", 32); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->norm_topk_prob);
  c = parse("qwen2moe", [](GgufWriter& w) {
    w.SetU32("qwen2moe.expert_feed_forward_length", 32);
    w.SetBool("qwen2moe.expert_weights_norm", true);
  });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->norm_topk_prob);
  c = parse("llama", [](GgufWriter&) {});  // Mixtral.
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_ff_expert, 128);
  EXPECT_EQ(c->rope_layout, RopeLayout::kAdjacentPairs);
  // Refusals naming what to fix.
  EXPECT_THAT(parse("qwen3moe", [](GgufWriter&) {}),
              testing::StatusIs(absl::StatusCode::kNotFound, HasSubstr("qwen3moe.expert_feed_forward_length")));
  EXPECT_THAT(parse(
                  "qwen3moe", [](GgufWriter& w) { w.SetU32("qwen3moe.expert_feed_forward_length", 32); }, 17),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_experts_used")));
}

// Keys llama.cpp defaults (llama-model.cpp, load_hparams) take its default, named in
// `defaulted`; keys it requires are required here; what Cascade cannot compute is refused.
TEST(GgufTest, DefaultsAreLlamaCppsAndNamed) {
  const auto parse = [](const std::function<void(GgufWriter&)>& edit) {
    return ParseHparams("qwen3", edit, {.heads = 4, .context = 4096});
  };
  const auto defaulted = [](const ModelConfig& c, const std::string& key) {
    for (const DefaultedKey& d : c.defaulted) {
      if (d.key == key) return d.value + " (" + d.rule + ")";
    }
    return std::string();
  };
  auto c = parse([](GgufWriter&) {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(defaulted(*c, "qwen3.rope.freq_base"), "10000 (llama.cpp's default)");
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_THAT(defaulted(*c, "qwen3.attention.head_count_kv"), HasSubstr("head_count"));
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_THAT(defaulted(*c, "qwen3.attention.key_length"), HasSubstr("embedding_length / head_count"));
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  EXPECT_THAT(c->ToString(), HasSubstr("qwen3.rope.freq_base = 10000 (llama.cpp's default)"));

  c = parse([](GgufWriter& w) { w.SetF32("qwen3.rope.freq_base", 1e6f); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(defaulted(*c, "qwen3.rope.freq_base"), "");

  // A factor without a type is llama.cpp's default type, linear; the older key too.
  c = parse([](GgufWriter& w) { w.SetF32("qwen3.rope.scaling.factor", 4.0f); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling_factor, 4.0);
  EXPECT_EQ(defaulted(*c, "qwen3.rope.scaling.type"), "linear (llama.cpp's default)");
  c = parse([](GgufWriter& w) { w.SetF32("qwen3.rope.scale_linear", 2.0f); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_scaling_factor, 2.0);

  // YaRN: the original context defaults to the trained one, the attention factor is ggml's.
  c = parse([](GgufWriter& w) {
    w.SetString("qwen3.rope.scaling.type", "yarn");
    w.SetF32("qwen3.rope.scaling.factor", 4.0f);
  });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kYarn);
  EXPECT_EQ(c->rope_original_ctx, 4096);
  EXPECT_THAT(defaulted(*c, "qwen3.rope.scaling.original_context_length"), HasSubstr("4096"));
  EXPECT_NEAR(c->rope_attention_factor, 1 + 0.1 * std::log(4.0), 1e-7);
  EXPECT_EQ(defaulted(*c, "qwen3.rope.scaling.yarn_beta_fast"), "32 (llama.cpp's default)");

  const auto refused = [&](const std::function<void(GgufWriter&)>& edit, const std::string& key) {
    auto r = parse(edit);
    EXPECT_FALSE(r.ok()) << key;
    EXPECT_THAT(r.status().message(), HasSubstr(key));
  };
  refused([](GgufWriter& w) { w.SetString("qwen3.rope.scaling.type", "longrope"); }, "qwen3.rope.scaling.type");
  refused([](GgufWriter& w) { w.SetU32("qwen3.rope.dimension_count", 8); }, "qwen3.rope.dimension_count");
  refused([](GgufWriter& w) { w.SetU32("qwen3.attention.value_length", 8); }, "qwen3.attention.value_length");
  refused([](GgufWriter& w) { w.SetString("qwen3.rope.freq_base", "big"); }, "qwen3.rope.freq_base");
  refused([](GgufWriter& w) { w.SetBool("qwen3.attention.causal", false); }, "qwen3.attention.causal");
  refused(
      [](GgufWriter& w) {
        w.SetString("qwen3.rope.scaling.type", "yarn");
        w.SetF32("qwen3.rope.scaling.factor", 4.0f);
        w.SetF32("qwen3.rope.scaling.yarn_log_multiplier", 0.1f);
      },
      "yarn_log_multiplier");
  // context_length is required, as llama.cpp requires it.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 1);
  w.SetU32("llama.embedding_length", 64);
  w.SetU32("llama.attention.head_count", 4);
  w.SetU32("llama.feed_forward_length", 128);
  const std::string bytes = w.Serialize();  // OpenBytes borrows it.
  auto f = GgufFile::OpenBytes(bytes, "noctx.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(ModelConfigFromGguf(**f).status().message(), HasSubstr("llama.context_length"));
}

TEST(GgufTest, Stories260K) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = ModelConfigFromGguf(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  // Values from ../shared/testdata/README.md.
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->n_layers, 5);
  EXPECT_EQ(c->n_heads, 8);
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->n_ff, 172);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->n_vocab, 512);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->rope_layout, RopeLayout::kAdjacentPairs);
  for (const TensorInfo& t : (*f)->tensors()) EXPECT_EQ(t.dtype, DType::kF32) << t.name;
}

TEST(GgufTest, SmolLM2) {
  CASCADE_REQUIRE_FILE(path, testing::DefaultModelPath());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = ModelConfigFromGguf(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_embd, 576);
  EXPECT_EQ(c->n_layers, 30);
  EXPECT_EQ(c->n_heads, 9);
  EXPECT_EQ(c->n_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->n_ff, 1536);
  EXPECT_EQ(c->n_vocab, 49152);
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000.0);
  EXPECT_NEAR(c->norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c->tied_embeddings);
  int n_q4_1 = 0;
  for (const TensorInfo& t : (*f)->tensors()) n_q4_1 += t.dtype == DType::kQ4_1;
  EXPECT_GT(n_q4_1, 100);
  // A shard read touches only its rows: the view points at the right offset.
  const TensorInfo* emb = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  auto rows = (*f)->ReadRows("token_embd.weight", 100, 200);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->Rows(), 100);
  auto whole = (*f)->Read("token_embd.weight");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(static_cast<const uint8_t*>(rows->data) - static_cast<const uint8_t*>(whole->data),
            100 * RowBytes(emb->dtype, emb->Cols()));
}

}  // namespace
}  // namespace cascade::model
