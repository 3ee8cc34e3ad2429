// ModelConfig from a Hugging Face `config.json` as transformers 4.x and 5.x write it
// (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig,
// Qwen3MoeConfig field names), every missing key defaulted as transformers' own class does
// and recorded (hf_keys.h), every key that would change the computation in a way Cascade
// does not implement refused by name.

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/hf_keys.h"
#include "model/format/hf_model.h"
#include "model/format/hf_rope.h"
#include "model/format/model_config.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

bool IsQwen(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" || arch == "qwen2_moe" || arch == "qwen3_moe";
}

// The expert count: MixtralConfig says num_local_experts, Qwen2MoeConfig num_experts, and
// Qwen3MoeConfig num_experts in 4.x but num_local_experts in 5.x (each class maps the other
// name to it); a file may carry either, or both when they agree.
absl::StatusOr<int64_t> ExpertCount(const HfKeys& keys, const std::string& arch) {
  const Json* local = keys.Find("num_local_experts");
  const Json* plain = keys.Find("num_experts");
  if (local != nullptr && plain != nullptr && *local != *plain) {
    return keys.Bad("num_experts", *plain, cascade::StrCat("disagrees with \"num_local_experts\" = ", local->dump()));
  }
  if (local != nullptr) return keys.Int("num_local_experts");
  if (plain != nullptr) return keys.Int("num_experts");
  return keys.Int(arch == "mixtral" || arch == "gpt_oss" ? "num_local_experts" : "num_experts");
}

// The experts of transformers' MixtralConfig (intermediate_size is each expert's, every
// layer MoE, top-k renormalised), Qwen2MoeConfig and Qwen3MoeConfig (moe_intermediate_size,
// norm_topk_prob, decoder_sparse_step, mlp_only_layers; Qwen2-MoE's shared expert).
absl::Status ParseExperts(const HfKeys& keys, ModelConfig& c) {
  CASCADE_ASSIGN_OR_RETURN(c.n_experts, ExpertCount(keys, c.arch));
  CASCADE_ASSIGN_OR_RETURN(c.n_experts_used, keys.Int("num_experts_per_tok"));
  if (c.arch == "mixtral" || c.arch == "gpt_oss") {
    c.n_ff_expert = c.n_ff;
    // MixtralSparseMoeBlock renormalises; GptOssTopKRouter takes the softmax of the top k
    // logits, which is the same.
    c.norm_topk_prob = true;
    return absl::OkStatus();
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_ff_expert, keys.Int("moe_intermediate_size"));
  CASCADE_ASSIGN_OR_RETURN(c.norm_topk_prob, keys.Bool("norm_topk_prob"));
  CASCADE_ASSIGN_OR_RETURN(c.decoder_sparse_step, keys.Int("decoder_sparse_step"));  // Validate checks it.
  if (const Json* only = keys.Find("mlp_only_layers"); only != nullptr) {
    if (!only->is_array()) return keys.Bad("mlp_only_layers", *only, "expected a list of layer indices");
    for (const Json& l : *only) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.n_layers) {
        return keys.Bad("mlp_only_layers", *only,
                        cascade::StrCat("every entry must be a layer in [0, ", c.n_layers, ")"));
      }
      c.mlp_only_layers.push_back(l.get<int64_t>());
    }
  } else if (!keys.Has("mlp_only_layers")) {
    keys.Record("mlp_only_layers", "[]", "the class default None: no dense-only layers");
  }
  if (c.arch == "qwen2_moe") {
    CASCADE_ASSIGN_OR_RETURN(c.n_ff_shared_expert, keys.Int("shared_expert_intermediate_size"));
  }
  return absl::OkStatus();
}

// Biases and the activation, which transformers' classes make configurable and Cascade's
// forward does not: Q/K/V biases are served (Qwen2 always has them; Qwen2-MoE's `qkv_bias`);
// an O-projection or MLP bias, or an activation other than SiLU, is refused by name.
absl::Status ParseBiasesAndActivation(const HfKeys& keys, ModelConfig& c) {
  CASCADE_ASSIGN_OR_RETURN(const std::string act, keys.String("hidden_act"));
  if (c.arch == "gpt_oss") {  // GptOssAttention and GptOssExperts: fixed, whatever hidden_act says.
    CASCADE_ASSIGN_OR_RETURN(
        const bool attention_bias,
        keys.Bool("attention_bias", true, "GptOssConfig: True (fixed in 4.x, the default in 5.x)"));
    if (!attention_bias) {
      return absl::UnimplementedError(
          cascade::StrCat(keys.Bad("attention_bias", false, "").message(), "gpt-oss is served with its biases"));
    }
    c.qkv_bias = c.attn_out_bias = c.attn_sinks = c.router_bias = c.expert_bias = true;
    CASCADE_ASSIGN_OR_RETURN(
        c.swiglu_limit, keys.Double("swiglu_limit", 7.0, "transformers' GptOssExperts.limit (4.x; 5.x's default)"));
    CASCADE_ASSIGN_OR_RETURN(
        c.swiglu_alpha, keys.Double("swiglu_alpha", 1.702, "transformers' GptOssExperts.alpha (4.x; 5.x's default)"));
    if (!(c.swiglu_limit > 0) || !(c.swiglu_alpha > 0)) {
      return keys.Bad("swiglu_limit", c.swiglu_limit, "swiglu_limit and swiglu_alpha must be positive");
    }
    return absl::OkStatus();
  }
  if (act != "silu") {
    return absl::UnimplementedError(
        cascade::StrCat(keys.Bad("hidden_act", act, "").message(), "only \"silu\" is supported"));
  }
  if (c.arch == "qwen2") c.qkv_bias = true;  // Qwen2Attention: q/k/v_proj with bias=True, not configurable.
  if (c.arch == "qwen2_moe") {
    CASCADE_ASSIGN_OR_RETURN(c.qkv_bias, keys.Bool("qkv_bias"));
  }
  if (c.arch == "llama" || c.arch == "qwen3" || c.arch == "qwen3_moe") {
    // attention_bias gives q, k, v *and* o_proj a bias.
    CASCADE_ASSIGN_OR_RETURN(const bool attention_bias, keys.Bool("attention_bias"));
    if (attention_bias) {
      return absl::UnimplementedError(
          cascade::StrCat(keys.Bad("attention_bias", true, "").message(), "an o_proj bias is not supported"));
    }
  }
  if (c.arch == "llama") {
    CASCADE_ASSIGN_OR_RETURN(const bool mlp_bias, keys.Bool("mlp_bias"));
    if (mlp_bias) {
      return absl::UnimplementedError(
          cascade::StrCat(keys.Bad("mlp_bias", true, "").message(), "MLP biases are not supported"));
    }
  }
  return absl::OkStatus();
}

// gpt-oss: sliding_window on the layers layer_types says (transformers' rule without it:
// the even layers), served exactly (ModelConfig::sliding_layers).
absl::StatusOr<std::vector<std::string>> ParseGptOssWindows(const HfKeys& keys, ModelConfig& c) {
  CASCADE_ASSIGN_OR_RETURN(c.sliding_window, keys.Int("sliding_window"));
  if (c.sliding_window <= 0) return keys.Bad("sliding_window", c.sliding_window, "must be positive");
  c.sliding_layers.assign(c.n_layers, false);
  const Json* lt = keys.Find("layer_types");
  if (lt == nullptr) keys.Record("layer_types", "sliding on even layers", "GptOssConfig's rule without it");
  if (lt != nullptr && (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layers)) {
    return keys.Bad("layer_types", *lt, cascade::StrCat("expected one entry per layer (", c.n_layers, ")"));
  }
  std::vector<std::string> types;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Json t = lt != nullptr ? (*lt)[l] : Json(l % 2 == 0 ? "sliding_attention" : "full_attention");
    if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
      return absl::UnimplementedError(cascade::StrCat(keys.Bad("layer_types", t, "").message(),
                                                      "only full_attention and sliding_attention are supported"));
    }
    c.sliding_layers[l] = t == "sliding_attention";
    if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end()) types.push_back(t);
  }
  return types;
}

// Which attention each layer uses: `layer_types` when the file gives it, else transformers'
// rule per class (Qwen: sliding from layer max_window_layers on, with use_sliding_window;
// Mistral and Mixtral: every layer, with a sliding_window; Llama: none). A sliding window
// narrower than the context then caps the context (CapContextToSlidingWindow), where full
// attention is exact. Returns the distinct layer types used.
absl::StatusOr<std::vector<std::string>> ParseAttentionWindows(const HfKeys& keys, ModelConfig& c) {
  int64_t window = 0;
  if (c.arch == "gpt_oss") return ParseGptOssWindows(keys, c);
  if (c.arch == "mistral" || c.arch == "mixtral") {
    CASCADE_ASSIGN_OR_RETURN(window, keys.Int("sliding_window", 0, "null: full attention"));
  } else if (IsQwen(c.arch)) {
    CASCADE_ASSIGN_OR_RETURN(const bool used, keys.Bool("use_sliding_window"));
    if (used) {
      CASCADE_ASSIGN_OR_RETURN(window, keys.Int("sliding_window", 0, "null: full attention"));
    }
  }
  if (window < 0) return keys.Bad("sliding_window", window, "must be positive or null");
  std::vector<std::string> types;
  if (const Json* lt = keys.Find("layer_types"); lt != nullptr) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layers) {
      return keys.Bad("layer_types", *lt, cascade::StrCat("expected one entry per layer (", c.n_layers, ")"));
    }
    for (const Json& t : *lt) {
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
        return absl::UnimplementedError(cascade::StrCat(keys.Bad("layer_types", t, "").message(),
                                                        "only full_attention and sliding_attention are supported"));
      }
      if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end()) types.push_back(t);
    }
  } else {
    bool sliding = window > 0;
    if (sliding && (c.arch == "qwen2" || c.arch == "qwen3")) {
      CASCADE_ASSIGN_OR_RETURN(const int64_t full_layers, keys.Int("max_window_layers"));
      sliding = c.n_layers > full_layers;
    }
    types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  const bool any_sliding = std::find(types.begin(), types.end(), "sliding_attention") != types.end();
  c.sliding_window = any_sliding ? window : 0;
  return types;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view json_text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(cascade::StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(cascade::StrCat(source, ": not a JSON object"));
  }
  ModelConfig c;
  {
    const HfKeys untyped(root, source, "", "", nullptr);
    CASCADE_ASSIGN_OR_RETURN(c.arch, untyped.String("model_type"));
  }
  static constexpr std::string_view kTypes[] = {"llama", "mistral",   "mixtral",   "qwen2",
                                                "qwen3", "qwen2_moe", "qwen3_moe", "gpt_oss"};
  if (std::find(std::begin(kTypes), std::end(kTypes), c.arch) == std::end(kTypes)) {
    return absl::UnimplementedError(
        cascade::StrCat(source, ": model_type '", c.arch,
                        "' is not supported (llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gpt_oss)"));
  }
  const HfKeys keys(root, source, "", c.arch, &c.defaulted);
  if (const Json* n = keys.Find("_name_or_path"); n != nullptr && n->is_string()) c.name = n->get<std::string>();
  for (const char* key : {"dtype", "torch_dtype"}) {  // 5.x and late 4.x write dtype, earlier 4.x torch_dtype.
    if (const Json* d = keys.Find(key); d != nullptr && d->is_string() && c.hf_dtype.empty()) c.hf_dtype = *d;
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_embd, keys.Int("hidden_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_layers, keys.Int("num_hidden_layers"));
  CASCADE_ASSIGN_OR_RETURN(c.n_heads, keys.Int("num_attention_heads"));
  if (c.n_heads <= 0) return keys.Bad("num_attention_heads", c.n_heads, "must be positive");
  CASCADE_ASSIGN_OR_RETURN(c.n_kv_heads,
                           keys.Int("num_key_value_heads", c.n_heads, "transformers' rule: num_attention_heads"));
  CASCADE_ASSIGN_OR_RETURN(
      c.head_dim, keys.Int("head_dim", c.n_embd / c.n_heads, "transformers' rule: hidden_size / num_attention_heads"));
  CASCADE_ASSIGN_OR_RETURN(c.n_ff, keys.Int("intermediate_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_vocab, keys.Int("vocab_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_ctx_train, keys.Int("max_position_embeddings"));
  if (c.n_ctx_train <= 0) return keys.Bad("max_position_embeddings", c.n_ctx_train, "must be positive");
  CASCADE_ASSIGN_OR_RETURN(c.norm_eps, keys.Double("rms_norm_eps"));
  CASCADE_ASSIGN_OR_RETURN(c.tied_embeddings, keys.Bool("tie_word_embeddings"));
  CASCADE_RETURN_IF_ERROR(ParseBiasesAndActivation(keys, c));
  // Qwen3Attention's q_norm / k_norm (RMSNorm over head_dim).
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3_moe";
  if (c.arch == "mixtral" || c.arch == "qwen2_moe" || c.arch == "qwen3_moe" || c.arch == "gpt_oss") {
    CASCADE_RETURN_IF_ERROR(ParseExperts(keys, c));
  }
  c.rope_layout = RopeLayout::kRotateHalf;
  CASCADE_ASSIGN_OR_RETURN(const std::vector<std::string> layer_types, ParseAttentionWindows(keys, c));
  CASCADE_RETURN_IF_ERROR(ParseHfRope(keys, layer_types, source, c));
  CapContextToSlidingWindow(c);
  CapContextToRopeScaling(c);
  CASCADE_RETURN_IF_ERROR(Annotate(c.Validate(), source));
  return c;
}

absl::StatusOr<ModelConfig> ModelConfigFromHfDir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(cascade::StrCat(dir,
                                               ": no config.json (not a Hugging Face model "
                                               "directory?)"));
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  CASCADE_ASSIGN_OR_RETURN(ModelConfig c, ModelConfigFromHfJson(text, path));
  fs::path p = fs::path(dir);
  if (!p.has_filename()) p = p.parent_path();  // "models/foo/" -> "models/foo".
  c.name = p.filename().string();
  return c;
}

}  // namespace cascade::model
