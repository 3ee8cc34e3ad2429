// Tests for ModelConfigFromHfJson / ModelConfigFromHfDir (model/hf_config.cc): the real
// TinyStories config.json, the defaults transformers applies, RoPE scaling variants, and
// every malformed-config error (code plus a message naming the key and the file).
// To add a case: start from `Base()` (a minimal valid Llama config), edit the JSON, and
// parse it with `Parse()`.

#include <nlohmann/json.hpp>
#include <string>

#include "model/format/hf_model.h"
#include "model/format/model_config.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using ::cascade::testing::TempDir;
using ::cascade::testing::TestDataPath;
using ::testing::HasSubstr;
using Json = nlohmann::json;

using ::cascade::testing::StatusMessage;

constexpr char kSource[] = "/models/x/config.json";

Json Base() {
  return {{"model_type", "llama"},          {"hidden_size", 256},       {"num_hidden_layers", 4},
          {"num_attention_heads", 8},       {"intermediate_size", 512}, {"vocab_size", 1000},
          {"max_position_embeddings", 2048}};
}

absl::StatusOr<ModelConfig> Parse(const Json& j) { return ModelConfigFromHfJson(j.dump(), kSource); }

void ExpectInvalid(const absl::StatusOr<ModelConfig>& c, const std::string& key,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  EXPECT_THAT(c, testing::StatusIs(code, HasSubstr(key))) << "expected an error about " << key;
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(kSource));
}

// Mistral v0.1 attends over the last 4096 positions of 32768: Cascade serves 4096, where
// its full attention is exactly the sliding one; a window as long as the context, or null
// (Mistral v0.2+), changes nothing; Qwen2 ignores the key unless use_sliding_window.
TEST(HfConfigTest, SlidingWindowCapsTheContext) {
  Json j = Base();
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->n_ctx_train, 4096);
  EXPECT_THAT(c->ToString(), HasSubstr("sliding_window  4096"));
  j["sliding_window"] = 32768;
  EXPECT_EQ(Parse(j)->n_ctx_train, 32768);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(Parse(j)->sliding_window, 0);
  j["model_type"] = "qwen2";
  j["sliding_window"] = 4096;
  EXPECT_EQ(Parse(j)->n_ctx_train, 32768);  // use_sliding_window defaults to false.
  j["use_sliding_window"] = true;
  EXPECT_EQ(Parse(j)->n_ctx_train, 4096);
  j["sliding_window"] = -1;
  ExpectInvalid(Parse(j), "sliding_window");
}

TEST(HfConfigTest, TinyStoriesDirectory) {
  CASCADE_REQUIRE_FILE(dir, TestDataPath("models/tinystories-656k"));
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfDir(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, "llama");
  EXPECT_EQ(c->name, "tinystories-656k");
  EXPECT_EQ(c->n_embd, 128);
  EXPECT_EQ(c->n_layers, 2);
  EXPECT_EQ(c->n_heads, 8);
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->n_ff, 384);
  EXPECT_EQ(c->n_vocab, 2048);
  EXPECT_EQ(c->n_ctx_train, 512);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);  // "rope_scaling": null.
  EXPECT_EQ(c->kv_dim(), 64);
  EXPECT_TRUE(c->Validate().ok());

  // A trailing slash still gives the directory's name.
  absl::StatusOr<ModelConfig> slash = ModelConfigFromHfDir(dir + "/");
  ASSERT_TRUE(slash.ok()) << slash.status();
  EXPECT_EQ(slash->name, "tinystories-656k");
}

TEST(HfConfigTest, Defaults) {
  absl::StatusOr<ModelConfig> c = Parse(Base());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, 8);  // = heads.
  EXPECT_EQ(c->head_dim, 32);   // = hidden / heads.
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
}

TEST(HfConfigTest, ExplicitValuesAndNulls) {
  Json j = Base();
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 64;
  j["rope_theta"] = 500000.0;
  j["rms_norm_eps"] = 1e-5;
  j["tie_word_embeddings"] = true;
  j["hidden_size"] = 256.0;  // Integral floats are accepted.
  j["_name_or_path"] = "org/model";
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->n_embd, 256);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->name, "org/model");

  j["head_dim"] = nullptr;
  j["num_key_value_heads"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->n_kv_heads, 8);
}

TEST(HfConfigTest, ModelTypes) {
  Json j = Base();
  j["model_type"] = "qwen2";
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, "qwen2");
  EXPECT_TRUE(c->qkv_bias);

  j["model_type"] = "qwen3";  // Per-head q/k norms, no biases, halves rotate.
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, "qwen3");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);

  j["model_type"] = "mistral";
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, "mistral");
  EXPECT_FALSE(c->qkv_bias);

  j["model_type"] = "llama";
  j["attention_bias"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);

  j["model_type"] = "gpt2";
  ExpectInvalid(Parse(j), "gpt2", absl::StatusCode::kUnimplemented);
}

TEST(HfConfigTest, RopeScalingLlama3) {
  Json j = Base();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling_factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_original_ctx, 8192);

  j["rope_scaling"].erase("original_max_position_embeddings");
  ExpectInvalid(Parse(j), "rope_scaling.original_max_position_embeddings");
  j["rope_scaling"].erase("factor");
  ExpectInvalid(Parse(j), "rope_scaling.factor");
}

TEST(HfConfigTest, RopeScalingLinearYarnDefault) {
  Json j = Base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling_factor, 2.0);

  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kYarn);
  EXPECT_EQ(c->rope_original_ctx, 2048);  // max_position_embeddings.
  j["rope_scaling"]["original_max_position_embeddings"] = 4096;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_original_ctx, 4096);

  j["rope_scaling"] = {{"rope_type", "default"}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);

  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  ExpectInvalid(Parse(j), "dynamic", absl::StatusCode::kUnimplemented);
  j["rope_scaling"] = {{"factor", 2.0}};
  ExpectInvalid(Parse(j), "rope_scaling.rope_type");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  ExpectInvalid(Parse(j), "rope_scaling.factor");
  j["rope_scaling"] = "linear";
  ExpectInvalid(Parse(j), "rope_scaling");
}

TEST(HfConfigTest, MissingRequiredKeys) {
  for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "vocab_size", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    Json j = Base();
    j.erase(key);
    ExpectInvalid(Parse(j), std::string("\"") + key + "\"");
  }
}

TEST(HfConfigTest, WrongTypes) {
  Json j = Base();
  j["hidden_size"] = "256";
  ExpectInvalid(Parse(j), "hidden_size");
  j = Base();
  j["vocab_size"] = 1000.5;
  ExpectInvalid(Parse(j), "vocab_size");
  j = Base();
  j["rope_theta"] = "big";
  ExpectInvalid(Parse(j), "rope_theta");
  j = Base();
  j["tie_word_embeddings"] = 1;
  ExpectInvalid(Parse(j), "tie_word_embeddings");
  j = Base();
  j["model_type"] = 3;
  ExpectInvalid(Parse(j), "model_type");
  // A whole float beyond int64_t: refused before the conversion, which would be undefined
  // behaviour (found reviewing the readers while fuzzing tokenizer.json's).
  j = Base();
  j["hidden_size"] = 1e300;
  ExpectInvalid(Parse(j), "hidden_size");
}

TEST(HfConfigTest, InconsistentNumbers) {
  Json j = Base();
  j["num_key_value_heads"] = 3;  // Does not divide 8 heads.
  ExpectInvalid(Parse(j), "n_kv_heads");
  j = Base();
  j["num_attention_heads"] = 0;
  ExpectInvalid(Parse(j), "num_attention_heads");
  j = Base();
  j["max_position_embeddings"] = -5;
  ExpectInvalid(Parse(j), "max_position_embeddings");
}

// The MoE families: transformers' defaults and field names, which layers are MoE, and a
// message naming the key for each bad value.
TEST(HfConfigTest, MixtureOfExperts) {
  Json j = Base();
  j["model_type"] = "mixtral";  // Defaults: 8 experts, top 2, intermediate_size is each expert's.
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_experts, 8);
  EXPECT_EQ(c->n_experts_used, 2);
  EXPECT_EQ(c->n_ff_expert, 512);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->IsMoeLayer(0) && c->IsMoeLayer(3));

  j = Base();
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 768;
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->n_ff_expert, 768);
  EXPECT_EQ(c->n_ff_shared_expert, 0);
  // (l + 1) % 2 == 0 and not in mlp_only_layers: only layer 1.
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_FALSE(c->IsMoeLayer(3));

  j["model_type"] = "qwen2_moe";  // Q/K/V biases, a shared expert, norm_topk_prob false by default.
  j.erase("norm_topk_prob");
  j["shared_expert_intermediate_size"] = 1024;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->n_ff_shared_expert, 1024);

  const auto bad = [&](const char* key, Json value, const std::string& named) {
    Json k = j;
    k[key] = value;
    ExpectInvalid(Parse(k), named);
  };
  bad("num_experts_per_tok", 200, "n_experts_used");
  bad("num_experts_per_tok", 0, "n_experts_used");
  bad("moe_intermediate_size", 0, "n_ff_expert");
  bad("decoder_sparse_step", 0, "decoder_sparse_step");
  bad("mlp_only_layers", {9}, "mlp_only_layers");
  bad("mlp_only_layers", "all", "mlp_only_layers");
  Json missing = j;
  missing.erase("num_experts");
  ExpectInvalid(Parse(missing), "num_experts");
}

TEST(HfConfigTest, NotJsonOrNotObject) {
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfJson("{\"model_type\": ", kSource);
  EXPECT_STATUS_CODE(c, kInvalidArgument);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(kSource));
  c = ModelConfigFromHfJson("[1, 2]", kSource);
  EXPECT_STATUS_CODE(c, kInvalidArgument);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(kSource));
  EXPECT_STATUS_CODE(ModelConfigFromHfJson("", kSource), kInvalidArgument);
  EXPECT_STATUS_CODE(ModelConfigFromHfJson("{\"a\xff\": 1}", kSource), kInvalidArgument);
}

TEST(HfConfigTest, DirectoryWithoutConfigIsNotFound) {
  TempDir dir;
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfDir(dir.path());
  EXPECT_STATUS_CODE(c, kNotFound);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(dir.path()));
}

TEST(HfConfigTest, DirectoryConfigErrorsNameTheFile) {
  TempDir dir;
  Json j = Base();
  j.erase("vocab_size");
  const std::string path = dir.WriteFile("config.json", j.dump());
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfDir(dir.path());
  EXPECT_STATUS_CODE(c, kInvalidArgument);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(path));
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr("vocab_size"));
}

}  // namespace
}  // namespace cascade::model
