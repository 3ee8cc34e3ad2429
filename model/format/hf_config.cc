// ModelConfig from a Hugging Face `config.json` (transformers' LlamaConfig,
// MistralConfig, Qwen2Config field names and defaults).

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/hf_model.h"
#include "model/format/model_config.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

// Typed access to the keys of one JSON object; every error names the key and `source`.
// A key whose value is `null` counts as absent (transformers writes `"head_dim": null`).
class HfKeys {
 public:
  HfKeys(const Json& obj, const std::string& source, std::string prefix = "")
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  const Json* Find(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::StatusOr<int64_t> Int(const char* key) const {
    const Json* v = Find(key);
    if (v == nullptr) return Missing(key);
    return AsInt(key, *v);
  }
  absl::StatusOr<int64_t> Int(const char* key, int64_t fallback) const {
    const Json* v = Find(key);
    return v == nullptr ? fallback : AsInt(key, *v);
  }
  absl::StatusOr<double> Double(const char* key, double fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Bad(key, *v, "expected a number");
    return v->get<double>();
  }
  absl::StatusOr<double> Double(const char* key) const {
    if (Find(key) == nullptr) return Missing(key);
    return Double(key, 0.0);
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Bad(key, *v, "expected true or false");
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key) const {
    const Json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_string()) return Bad(key, *v, "expected a string");
    return v->get<std::string>();
  }

  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(cascade::StrCat(source_, ": required key \"", prefix_, key, "\" is missing"));
  }
  absl::Status Bad(const char* key, const Json& v, std::string_view why) const {
    std::string shown = v.dump();
    if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
    return absl::InvalidArgumentError(cascade::StrCat(source_, ": key \"", prefix_, key, "\" = ", shown, ": ", why));
  }

 private:
  absl::StatusOr<int64_t> AsInt(const char* key, const Json& v) const {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 62)) {
        return Bad(key, v, "out of range");
      }
      return v.get<int64_t>();
    }
    if (v.is_number_float()) {  // Accept 4096.0, not 4096.5.
      const double d = v.get<double>();
      // Range first: converting a double outside int64_t is undefined behaviour.
      if (d >= -1e15 && d <= 1e15 && d == static_cast<double>(static_cast<int64_t>(d))) {
        return static_cast<int64_t>(d);
      }
    }
    return Bad(key, v, "expected an integer");
  }

  const Json& obj_;
  const std::string& source_;
  std::string prefix_;
};

absl::Status ParseRopeScaling(const Json& rs, const std::string& source, ModelConfig& c) {
  if (!rs.is_object()) {
    return absl::InvalidArgumentError(cascade::StrCat(source, ": key \"rope_scaling\" must be an object or null"));
  }
  const HfKeys keys(rs, source, "rope_scaling.");
  // Newer transformers write `rope_type`, older ones `type`.
  std::string type;
  if (keys.Find("rope_type") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(type, keys.String("rope_type"));
  } else if (keys.Find("type") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(type, keys.String("type"));
  } else {
    return absl::InvalidArgumentError(
        cascade::StrCat(source, ": required key \"rope_scaling.rope_type\" (or \"rope_scaling.type\") is missing"));
  }
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (type == "llama3") {
    c.rope_scaling = RopeScaling::kLlama3;
  } else if (type == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
  } else {
    return absl::UnimplementedError(
        cascade::StrCat(source, ": rope_scaling type '", type, "' is not supported (linear, llama3, yarn)"));
  }
  CASCADE_ASSIGN_OR_RETURN(c.rope_scaling_factor, keys.Double("factor"));
  if (!(c.rope_scaling_factor > 0)) {
    return keys.Bad("factor", rs["factor"], "must be positive");
  }
  if (c.rope_scaling == RopeScaling::kLlama3) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_low_freq_factor, keys.Double("low_freq_factor", 1.0));
    CASCADE_ASSIGN_OR_RETURN(c.rope_high_freq_factor, keys.Double("high_freq_factor", 4.0));
    CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, keys.Int("original_max_position_embeddings"));
  } else if (c.rope_scaling == RopeScaling::kYarn) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, keys.Int("original_max_position_embeddings", c.n_ctx_train));
  }
  return absl::OkStatus();
}

// `sliding_window` (Mistral; Qwen2/3 only with `use_sliding_window`), then the context cap
// of CapContextToSlidingWindow.
absl::Status ParseSlidingWindow(const HfKeys& keys, const Json& root, ModelConfig& c) {
  CASCADE_ASSIGN_OR_RETURN(c.sliding_window, keys.Int("sliding_window", 0));
  if (c.sliding_window < 0) return keys.Bad("sliding_window", root["sliding_window"], "must be positive or null");
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "mixtral") {
    CASCADE_ASSIGN_OR_RETURN(const bool used, keys.Bool("use_sliding_window", false));
    if (!used) c.sliding_window = 0;
  }
  CapContextToSlidingWindow(c);
  return absl::OkStatus();
}

// The experts of transformers' MixtralConfig (num_local_experts, intermediate_size is each
// expert's, every layer MoE, top-k renormalised), Qwen2MoeConfig and Qwen3MoeConfig
// (num_experts, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
// mlp_only_layers; Qwen2-MoE's shared_expert_intermediate_size).
absl::Status ParseExperts(const HfKeys& keys, ModelConfig& c) {
  if (c.arch == "mixtral") {
    CASCADE_ASSIGN_OR_RETURN(c.n_experts, keys.Int("num_local_experts", 8));
    CASCADE_ASSIGN_OR_RETURN(c.n_experts_used, keys.Int("num_experts_per_tok", 2));
    c.n_ff_expert = c.n_ff;
    c.norm_topk_prob = true;
    return absl::OkStatus();
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_experts, keys.Int("num_experts"));
  CASCADE_ASSIGN_OR_RETURN(c.n_experts_used, keys.Int("num_experts_per_tok"));
  CASCADE_ASSIGN_OR_RETURN(c.n_ff_expert, keys.Int("moe_intermediate_size"));
  CASCADE_ASSIGN_OR_RETURN(c.norm_topk_prob, keys.Bool("norm_topk_prob", false));
  CASCADE_ASSIGN_OR_RETURN(c.decoder_sparse_step, keys.Int("decoder_sparse_step", 1));  // Validate checks it.
  if (const Json* only = keys.Find("mlp_only_layers"); only != nullptr) {
    if (!only->is_array()) return keys.Bad("mlp_only_layers", *only, "expected a list of layer indices");
    for (const Json& l : *only) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.n_layers) {
        return keys.Bad("mlp_only_layers", *only,
                        cascade::StrCat("every entry must be a layer in [0, ", c.n_layers, ")"));
      }
      c.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
  if (c.arch == "qwen2_moe") {
    CASCADE_ASSIGN_OR_RETURN(c.n_ff_shared_expert, keys.Int("shared_expert_intermediate_size", 0));
  }
  return absl::OkStatus();
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
  const HfKeys keys(root, source);
  ModelConfig c;
  CASCADE_ASSIGN_OR_RETURN(c.arch, keys.String("model_type"));
  static constexpr std::string_view kTypes[] = {"llama", "mistral",   "mixtral",  "qwen2",
                                                "qwen3", "qwen2_moe", "qwen3_moe"};
  if (std::find(std::begin(kTypes), std::end(kTypes), c.arch) == std::end(kTypes)) {
    return absl::UnimplementedError(
        cascade::StrCat(source, ": model_type '", c.arch,
                        "' is not supported (llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe)"));
  }
  if (const Json* n = keys.Find("_name_or_path"); n != nullptr && n->is_string()) {
    c.name = n->get<std::string>();
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_embd, keys.Int("hidden_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_layers, keys.Int("num_hidden_layers"));
  CASCADE_ASSIGN_OR_RETURN(c.n_heads, keys.Int("num_attention_heads"));
  CASCADE_ASSIGN_OR_RETURN(c.n_kv_heads, keys.Int("num_key_value_heads", c.n_heads));
  if (c.n_heads <= 0) {
    return keys.Bad("num_attention_heads", root["num_attention_heads"], "must be positive");
  }
  CASCADE_ASSIGN_OR_RETURN(c.head_dim, keys.Int("head_dim", c.n_embd / c.n_heads));
  CASCADE_ASSIGN_OR_RETURN(c.n_ff, keys.Int("intermediate_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_vocab, keys.Int("vocab_size"));
  CASCADE_ASSIGN_OR_RETURN(c.n_ctx_train, keys.Int("max_position_embeddings"));
  CASCADE_ASSIGN_OR_RETURN(c.rope_theta, keys.Double("rope_theta", 10000.0));
  CASCADE_ASSIGN_OR_RETURN(c.norm_eps, keys.Double("rms_norm_eps", 1e-6));
  CASCADE_ASSIGN_OR_RETURN(c.tied_embeddings, keys.Bool("tie_word_embeddings", false));
  // Qwen2 always has Q/K/V biases; Llama has them when `attention_bias` is set.
  CASCADE_ASSIGN_OR_RETURN(c.qkv_bias, keys.Bool("attention_bias", false));
  if (c.arch == "qwen2" || c.arch == "qwen2_moe") c.qkv_bias = true;
  // Qwen3Attention's q_norm / k_norm (RMSNorm over head_dim).
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3_moe";
  if (c.arch == "mixtral" || c.arch == "qwen2_moe" || c.arch == "qwen3_moe") {
    CASCADE_RETURN_IF_ERROR(ParseExperts(keys, c));
  }
  c.rope_layout = RopeLayout::kRotateHalf;
  if (const Json* rs = keys.Find("rope_scaling"); rs != nullptr) {
    CASCADE_RETURN_IF_ERROR(ParseRopeScaling(*rs, source, c));
  }
  if (c.n_ctx_train <= 0) {
    return keys.Bad("max_position_embeddings", root["max_position_embeddings"], "must be positive");
  }
  CASCADE_RETURN_IF_ERROR(ParseSlidingWindow(keys, root, c));
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
