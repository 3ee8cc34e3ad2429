// Tests for ModelConfigFromHfJson / ModelConfigFromHfDir (model/format/hf_config.cc): the
// real TinyStories config.json, the defaults transformers' config classes apply (each one
// recorded in `defaulted`), both generations' RoPE layouts and every scaling type, and
// every malformed or unsupported config (code plus a message naming the key and the file).
// To add a case: start from `Base()` (a minimal valid Llama config), edit the JSON, and
// parse it with `Parse()`.

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/str_cat.h"
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
  return {{"model_type", "llama"},    {"hidden_size", 256},
          {"num_hidden_layers", 4},   {"num_attention_heads", 8},
          {"num_key_value_heads", 8}, {"intermediate_size", 512},
          {"vocab_size", 1000},       {"max_position_embeddings", 2048}};
}

// The value recorded for `key` in c.defaulted ("" when the file gave it).
std::string DefaultedValue(const ModelConfig& c, const std::string& key) {
  for (const DefaultedKey& d : c.defaulted) {
    if (d.key == key) return d.value;
  }
  return "";
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
  EXPECT_EQ(Parse(j)->n_ctx_train, 32768);  // The 4 layers are below max_window_layers (28): all full.
  j["max_window_layers"] = 0;
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
  Json j = Base();
  j.erase("num_key_value_heads");
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, 8);  // = heads.
  EXPECT_EQ(c->head_dim, 32);   // = hidden / heads.
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->rope_layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  // Each is said, with its rule.
  EXPECT_EQ(DefaultedValue(*c, "num_key_value_heads"), "8");
  EXPECT_EQ(DefaultedValue(*c, "head_dim"), "32");
  EXPECT_EQ(DefaultedValue(*c, "rope_theta"), "10000.0");
  EXPECT_EQ(DefaultedValue(*c, "rms_norm_eps"), "1e-06");
  EXPECT_EQ(DefaultedValue(*c, "tie_word_embeddings"), "false");
  EXPECT_EQ(DefaultedValue(*c, "hidden_size"), "");  // Given.
  EXPECT_THAT(c->ToString(), HasSubstr("rope_theta = 10000.0 (LlamaConfig default, transformers 4.57.6 and 5.25.0)"));
  EXPECT_THAT(c->ToString(), HasSubstr("head_dim = 32 (transformers' rule: hidden_size / num_attention_heads)"));
}

// Every served family's own defaults (transformers' config classes): a file that omits the
// RoPE base, the norm epsilon, the head size or the window gets its family's value.
TEST(HfConfigTest, EachFamilyTakesItsOwnClassDefaults) {
  struct Expected {
    const char* model_type;
    double rope_theta, norm_eps;
    int64_t head_dim, n_kv_heads, n_ctx;
  };
  // hidden 256 / 8 heads = 32; Mistral's 4096-position window caps its context; Qwen3's
  // head_dim is 128; num_key_value_heads comes from each class.
  for (const Expected& e : {Expected{"llama", 1e4, 1e-6, 32, 8, 2048}, Expected{"mistral", 1e4, 1e-6, 32, 8, 2048},
                            Expected{"mixtral", 1e6, 1e-5, 32, 8, 2048}, Expected{"qwen2", 1e4, 1e-6, 32, 32, 2048},
                            Expected{"qwen3", 1e4, 1e-6, 128, 32, 2048}, Expected{"qwen2_moe", 1e4, 1e-6, 32, 16, 2048},
                            Expected{"qwen3_moe", 1e4, 1e-6, 32, 4, 2048}}) {
    SCOPED_TRACE(e.model_type);
    Json j = Base();
    j.erase("num_key_value_heads");
    j["model_type"] = e.model_type;
    absl::StatusOr<ModelConfig> c = Parse(j);
    if (8 % e.n_kv_heads != 0) {  // More KV heads than heads: the class default is refused, by name.
      ExpectInvalid(c, cascade::StrCat("n_kv_heads = ", e.n_kv_heads));
      j["num_attention_heads"] = 32;
      j["hidden_size"] = 1024;
      c = Parse(j);
    }
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_DOUBLE_EQ(c->rope_theta, e.rope_theta);
    EXPECT_DOUBLE_EQ(c->norm_eps, e.norm_eps);
    EXPECT_EQ(c->head_dim, e.head_dim);
    EXPECT_EQ(c->n_kv_heads, e.n_kv_heads);
    EXPECT_EQ(c->n_ctx_train, e.n_ctx);
    EXPECT_NE(DefaultedValue(*c, "rope_theta"), "");
    EXPECT_NE(DefaultedValue(*c, "rms_norm_eps"), "");
  }
  Json j = Base();
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  absl::StatusOr<ModelConfig> c = Parse(j);  // MistralConfig's sliding_window is 4096.
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->n_ctx_train, 4096);
  EXPECT_EQ(DefaultedValue(*c, "sliding_window"), "4096");
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
  j["attention_bias"] = true;  // Biases on q, k, v *and* o_proj.
  ExpectInvalid(Parse(j), "attention_bias", absl::StatusCode::kUnimplemented);

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

  j["rope_scaling"].erase("original_max_position_embeddings");  // 5.x's rule: max_position_embeddings.
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_original_ctx, 2048);
  EXPECT_EQ(DefaultedValue(*c, "rope_scaling.original_max_position_embeddings"), "2048");
  Json k = j;
  k["rope_scaling"].erase("low_freq_factor");  // Required by transformers' validation.
  ExpectInvalid(Parse(k), "rope_scaling.low_freq_factor");
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

  j["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}};
  ExpectInvalid(Parse(j), "'su'", absl::StatusCode::kUnimplemented);
  j["rope_scaling"] = {{"factor", 2.0}};  // transformers' standardize_rope_params: type default.
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  EXPECT_EQ(DefaultedValue(*c, "rope_scaling.rope_type"), "\"default\"");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  ExpectInvalid(Parse(j), "rope_scaling.factor");
  j["rope_scaling"] = "linear";
  ExpectInvalid(Parse(j), "rope_scaling");
}

// model_type picks the class; every other key has a class default, taken and recorded.
TEST(HfConfigTest, MissingKeysTakeTheClassDefaultsExceptModelType) {
  Json j = Base();
  j.erase("model_type");
  ExpectInvalid(Parse(j), "\"model_type\"");
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    j = Base();
    j.erase(key);
    absl::StatusOr<ModelConfig> c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE(DefaultedValue(*c, key), "");
  }
  j = Base();
  j["model_type"] = "qwen2_moe";  // Nothing about the experts: Qwen2MoeConfig's 60, top 4.
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_experts, 60);
  EXPECT_EQ(c->n_experts_used, 4);
  EXPECT_EQ(c->n_ff_shared_expert, 5632);
  EXPECT_EQ(DefaultedValue(*c, "num_experts"), "60");
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
  // Qwen3-MoE's count is num_experts in 4.x, num_local_experts in 5.x: either, or both agreeing.
  j["model_type"] = "qwen3_moe";
  j.erase("num_experts");
  j["num_local_experts"] = 64;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_experts, 64);
  j["num_experts"] = 64;
  EXPECT_TRUE(Parse(j).ok());
  bad("num_experts", 32, "num_local_experts");
}

// transformers 5.x's layout: the base and the scaling together in rope_parameters, maybe
// one object per layer type; conflicting or unsupported settings are refused by name.
TEST(HfConfigTest, RopeParametersOfTransformers5) {
  Json j = Base();
  j["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
  EXPECT_EQ(c->rope_original_ctx, 1024);
  EXPECT_EQ(DefaultedValue(*c, "rope_theta"), "");

  Json k = j;
  k["rope_theta"] = 500000.0;  // Both places, agreeing (a 4.x file re-saved by hand).
  EXPECT_TRUE(Parse(k).ok());
  k["rope_theta"] = 10000.0;
  ExpectInvalid(Parse(k), "rope_theta");
  k = j;
  k["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  ExpectInvalid(Parse(k), "rope_scaling");

  // One object per layer type: the types the layers use must agree.
  j["model_type"] = "qwen3";
  j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
                          {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}};
  j["layer_types"] = {"full_attention", "full_attention", "full_attention", "full_attention"};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  j["layer_types"][1] = "sliding_attention";
  ExpectInvalid(Parse(j), "differ between layer types", absl::StatusCode::kUnimplemented);

  j = Base();
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  ExpectInvalid(Parse(j), "partial_rotary_factor", absl::StatusCode::kUnimplemented);
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "mrope"}};
  ExpectInvalid(Parse(j), "rope_parameters.rope_type\" = 'mrope'", absl::StatusCode::kUnimplemented);
}

// YaRN's fields and defaults (transformers' _compute_yarn_parameters).
TEST(HfConfigTest, RopeYarnFields) {
  Json j = Base();
  j["rope_parameters"] = {
      {"rope_theta", 1e6}, {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 512}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_attention_factor, 1 + 0.1 * std::log(4.0));
  EXPECT_DOUBLE_EQ(c->rope_beta_fast, 32);
  EXPECT_DOUBLE_EQ(c->rope_beta_slow, 1);
  EXPECT_TRUE(c->rope_yarn_truncate);
  EXPECT_NE(DefaultedValue(*c, "rope_parameters.attention_factor"), "");
  EXPECT_EQ(DefaultedValue(*c, "rope_parameters.beta_fast"), "32");
  EXPECT_EQ(c->n_ctx_train, 2048);         // YaRN is exact over the whole context.
  j["rope_parameters"]["mscale"] = 0.707;  // DeepSeek's ratio form.
  j["rope_parameters"]["mscale_all_dim"] = 0.707;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_attention_factor, 1.0);
  j["rope_parameters"]["attention_factor"] = 1.25;
  j["rope_parameters"]["beta_fast"] = 16;
  j["rope_parameters"]["truncate"] = false;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_attention_factor, 1.25);
  EXPECT_DOUBLE_EQ(c->rope_beta_fast, 16);
  EXPECT_FALSE(c->rope_yarn_truncate);
}

// Dynamic NTK and LongRoPE are exact up to their original context (dynamic is unscaled
// there, LongRoPE uses its short factors), so the context is capped there.
TEST(HfConfigTest, RopeDynamicAndLongRopeCapTheContext) {
  Json j = Base();
  j["max_position_embeddings"] = 4096;
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 1024}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kDynamic);
  EXPECT_EQ(c->n_ctx_train, 1024);
  const std::vector<float> unscaled = RopeInvFreq(*c);
  EXPECT_FLOAT_EQ(unscaled[1], static_cast<float>(std::pow(1e4, -2.0 / 32)));

  std::vector<double> short_factor(16, 1.0), long_factor(16, 4.0);
  short_factor[15] = 2.0;
  j["rope_scaling"] = {{"rope_type", "longrope"},
                       {"short_factor", short_factor},
                       {"long_factor", long_factor},
                       {"original_max_position_embeddings", 1024}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLongRope);
  EXPECT_EQ(c->n_ctx_train, 1024);
  EXPECT_DOUBLE_EQ(c->rope_scaling_factor, 4.0);  // max_position_embeddings / original.
  EXPECT_DOUBLE_EQ(c->rope_attention_factor, std::sqrt(1 + std::log(4.0) / std::log(1024.0)));
  const std::vector<float> inv = RopeInvFreq(*c);
  EXPECT_FLOAT_EQ(inv[15], static_cast<float>(std::pow(1e4, -30.0 / 32) / 2));
  EXPECT_FLOAT_EQ(inv[14], static_cast<float>(std::pow(1e4, -28.0 / 32)));
  j["rope_scaling"]["short_factor"] = {1.0, 2.0};
  ExpectInvalid(Parse(j), "rope_scaling.short_factor");
}

// layer_types (5.x; Qwen derives it from use_sliding_window and max_window_layers): a
// sliding layer with a window narrower than the context caps the context.
TEST(HfConfigTest, LayerTypes) {
  Json j = Base();
  j["model_type"] = "qwen3";
  j["use_sliding_window"] = true;
  j["sliding_window"] = 512;
  j["max_window_layers"] = 4;  // Layers 0-3 full: no layer slides.
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->n_ctx_train, 2048);
  j["max_window_layers"] = 2;
  EXPECT_EQ(Parse(j)->n_ctx_train, 512);
  j["layer_types"] = {"full_attention", "full_attention", "full_attention", "full_attention"};
  EXPECT_EQ(Parse(j)->n_ctx_train, 2048);  // The file's layer_types rule.
  j["layer_types"][3] = "sliding_attention";
  EXPECT_EQ(Parse(j)->n_ctx_train, 512);
  j["layer_types"][3] = "chunked_attention";
  ExpectInvalid(Parse(j), "layer_types", absl::StatusCode::kUnimplemented);
  j["layer_types"] = {"full_attention"};
  ExpectInvalid(Parse(j), "layer_types");
}

// What changes the computation in a way Cascade does not implement is refused by name.
TEST(HfConfigTest, UnsupportedComputationIsRefused) {
  Json j = Base();
  j["hidden_act"] = "gelu";
  ExpectInvalid(Parse(j), "hidden_act", absl::StatusCode::kUnimplemented);
  j = Base();
  j["mlp_bias"] = true;
  ExpectInvalid(Parse(j), "mlp_bias", absl::StatusCode::kUnimplemented);
  j = Base();
  j["model_type"] = "qwen3";
  j["attention_bias"] = true;
  ExpectInvalid(Parse(j), "attention_bias", absl::StatusCode::kUnimplemented);
  j = Base();
  j["partial_rotary_factor"] = 0.5;
  ExpectInvalid(Parse(j), "partial_rotary_factor", absl::StatusCode::kUnimplemented);
}

TEST(HfConfigTest, DtypeOfEitherGeneration) {
  Json j = Base();
  j["torch_dtype"] = "bfloat16";
  EXPECT_EQ(Parse(j)->hf_dtype, "bfloat16");
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  EXPECT_EQ(Parse(j)->hf_dtype, "float16");
  EXPECT_THAT(Parse(j)->ToString(), HasSubstr("dtype           float16"));
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
  j["vocab_size"] = "many";
  const std::string path = dir.WriteFile("config.json", j.dump());
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfDir(dir.path());
  EXPECT_STATUS_CODE(c, kInvalidArgument);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr(path));
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr("vocab_size"));
}

}  // namespace
}  // namespace cascade::model

namespace cascade::model {
namespace {

// gpt-oss-20b's config.json as OpenAI published it (model_type gpt_oss): 32 experts, top 4,
// sliding window 128 on the even layers (layer_types), YaRN without truncation, and the
// architecture's fixed parts (biases everywhere, sinks, the clamped SwiGLU). The window is
// masked per layer, so the 131072-token context is not capped to it.
TEST(HfConfigTest, GptOss20b) {
  Json types = Json::array();
  for (int l = 0; l < 24; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  const Json j = {{"architectures", {"GptOssForCausalLM"}},
                  {"attention_bias", true},
                  {"experts_per_token", 4},
                  {"head_dim", 64},
                  {"hidden_act", "silu"},
                  {"hidden_size", 2880},
                  {"initial_context_length", 4096},
                  {"intermediate_size", 2880},
                  {"layer_types", types},
                  {"max_position_embeddings", 131072},
                  {"model_type", "gpt_oss"},
                  {"num_attention_heads", 64},
                  {"num_experts_per_tok", 4},
                  {"num_hidden_layers", 24},
                  {"num_key_value_heads", 8},
                  {"num_local_experts", 32},
                  {"rms_norm_eps", 1e-05},
                  {"rope_scaling",
                   {{"beta_fast", 32.0},
                    {"beta_slow", 1.0},
                    {"factor", 32.0},
                    {"original_max_position_embeddings", 4096},
                    {"rope_type", "yarn"},
                    {"truncate", false}}},
                  {"rope_theta", 150000},
                  {"sliding_window", 128},
                  {"swiglu_limit", 7.0},
                  {"tie_word_embeddings", false},
                  {"vocab_size", 201088}};
  absl::StatusOr<ModelConfig> c = ModelConfigFromHfJson(j.dump(), "gpt-oss-20b/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_experts, 32);
  EXPECT_EQ(c->n_experts_used, 4);
  EXPECT_EQ(c->n_ff_expert, 2880);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->n_moe_layers(), 24);
  EXPECT_EQ(c->n_ctx_train, 131072);
  EXPECT_EQ(c->sliding_window, 128);
  for (int l = 0; l < 24; ++l) EXPECT_EQ(c->WindowOf(l), l % 2 == 0 ? 128 : 0) << l;
  EXPECT_EQ(c->rope_scaling, RopeScaling::kYarn);
  EXPECT_FALSE(c->rope_yarn_truncate);
  EXPECT_TRUE(c->qkv_bias && c->attn_out_bias && c->attn_sinks && c->router_bias && c->expert_bias);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->swiglu_alpha, 1.702);  // Not in this file: transformers' constant, recorded.
  bool recorded = false;
  for (const DefaultedKey& d : c->defaulted) recorded |= d.key == "swiglu_alpha";
  EXPECT_TRUE(recorded);
  EXPECT_THAT(c->ToString(), ::testing::HasSubstr("sliding_window  128 in 12 of 24 layers"));

  Json no_types = j;
  no_types.erase("layer_types");  // GptOssConfig's rule: the even layers slide.
  c = ModelConfigFromHfJson(no_types.dump(), "x");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->WindowOf(0), 128);
  EXPECT_EQ(c->WindowOf(1), 0);
  Json no_rope = j;
  no_rope.erase("rope_scaling");
  EXPECT_FALSE(ModelConfigFromHfJson(no_rope.dump(), "x").ok()) << "GptOssConfig's YaRN default is not guessed";
}

}  // namespace
}  // namespace cascade::model
