#include "model/format/hf_defaults.h"

#include <algorithm>
#include <iterator>

namespace cascade::model {
namespace {

struct Default {
  std::string_view model_type, key, json;
};

// One row per parameter of each class's __init__ that a served model reads. Shape keys are
// listed too: transformers takes them, so a file without them is the class's model.
constexpr Default kDefaults[] = {
    // LlamaConfig.
    {"llama", "hidden_size", "4096"},
    {"llama", "num_hidden_layers", "32"},
    {"llama", "num_attention_heads", "32"},
    {"llama", "num_key_value_heads", "null"},
    {"llama", "head_dim", "null"},
    {"llama", "intermediate_size", "11008"},
    {"llama", "vocab_size", "32000"},
    {"llama", "max_position_embeddings", "2048"},
    {"llama", "rope_theta", "10000.0"},
    {"llama", "rms_norm_eps", "1e-06"},
    {"llama", "hidden_act", "\"silu\""},
    {"llama", "tie_word_embeddings", "false"},
    {"llama", "attention_bias", "false"},
    {"llama", "mlp_bias", "false"},
    // MistralConfig.
    {"mistral", "hidden_size", "4096"},
    {"mistral", "num_hidden_layers", "32"},
    {"mistral", "num_attention_heads", "32"},
    {"mistral", "num_key_value_heads", "8"},
    {"mistral", "head_dim", "null"},
    {"mistral", "intermediate_size", "14336"},
    {"mistral", "vocab_size", "32000"},
    {"mistral", "max_position_embeddings", "131072"},
    {"mistral", "rope_theta", "10000.0"},
    {"mistral", "rms_norm_eps", "1e-06"},
    {"mistral", "hidden_act", "\"silu\""},
    {"mistral", "tie_word_embeddings", "false"},
    {"mistral", "sliding_window", "4096"},
    // MixtralConfig.
    {"mixtral", "hidden_size", "4096"},
    {"mixtral", "num_hidden_layers", "32"},
    {"mixtral", "num_attention_heads", "32"},
    {"mixtral", "num_key_value_heads", "8"},
    {"mixtral", "head_dim", "null"},
    {"mixtral", "intermediate_size", "14336"},
    {"mixtral", "vocab_size", "32000"},
    {"mixtral", "max_position_embeddings", "131072"},
    {"mixtral", "rope_theta", "1000000.0"},
    {"mixtral", "rms_norm_eps", "1e-05"},
    {"mixtral", "hidden_act", "\"silu\""},
    {"mixtral", "tie_word_embeddings", "false"},
    {"mixtral", "sliding_window", "null"},
    {"mixtral", "num_local_experts", "8"},
    {"mixtral", "num_experts_per_tok", "2"},
    // Qwen2Config.
    {"qwen2", "hidden_size", "4096"},
    {"qwen2", "num_hidden_layers", "32"},
    {"qwen2", "num_attention_heads", "32"},
    {"qwen2", "num_key_value_heads", "32"},
    {"qwen2", "intermediate_size", "22016"},
    {"qwen2", "vocab_size", "151936"},
    {"qwen2", "max_position_embeddings", "32768"},
    {"qwen2", "rope_theta", "10000.0"},
    {"qwen2", "rms_norm_eps", "1e-06"},
    {"qwen2", "hidden_act", "\"silu\""},
    {"qwen2", "tie_word_embeddings", "false"},
    {"qwen2", "use_sliding_window", "false"},
    {"qwen2", "sliding_window", "4096"},
    {"qwen2", "max_window_layers", "28"},
    // Qwen3Config.
    {"qwen3", "hidden_size", "4096"},
    {"qwen3", "num_hidden_layers", "32"},
    {"qwen3", "num_attention_heads", "32"},
    {"qwen3", "num_key_value_heads", "32"},
    {"qwen3", "head_dim", "128"},
    {"qwen3", "intermediate_size", "22016"},
    {"qwen3", "vocab_size", "151936"},
    {"qwen3", "max_position_embeddings", "32768"},
    {"qwen3", "rope_theta", "10000.0"},
    {"qwen3", "rms_norm_eps", "1e-06"},
    {"qwen3", "hidden_act", "\"silu\""},
    {"qwen3", "tie_word_embeddings", "false"},
    {"qwen3", "attention_bias", "false"},
    {"qwen3", "use_sliding_window", "false"},
    {"qwen3", "sliding_window", "4096"},
    {"qwen3", "max_window_layers", "28"},
    // Qwen2MoeConfig.
    {"qwen2_moe", "hidden_size", "2048"},
    {"qwen2_moe", "num_hidden_layers", "24"},
    {"qwen2_moe", "num_attention_heads", "16"},
    {"qwen2_moe", "num_key_value_heads", "16"},
    {"qwen2_moe", "intermediate_size", "5632"},
    {"qwen2_moe", "vocab_size", "151936"},
    {"qwen2_moe", "max_position_embeddings", "32768"},
    {"qwen2_moe", "rope_theta", "10000.0"},
    {"qwen2_moe", "rms_norm_eps", "1e-06"},
    {"qwen2_moe", "hidden_act", "\"silu\""},
    {"qwen2_moe", "tie_word_embeddings", "false"},
    {"qwen2_moe", "qkv_bias", "true"},
    {"qwen2_moe", "use_sliding_window", "false"},
    {"qwen2_moe", "sliding_window", "4096"},
    {"qwen2_moe", "max_window_layers", "28"},
    {"qwen2_moe", "num_experts", "60"},
    {"qwen2_moe", "num_experts_per_tok", "4"},
    {"qwen2_moe", "moe_intermediate_size", "1408"},
    {"qwen2_moe", "shared_expert_intermediate_size", "5632"},
    {"qwen2_moe", "norm_topk_prob", "false"},
    {"qwen2_moe", "decoder_sparse_step", "1"},
    {"qwen2_moe", "mlp_only_layers", "null"},
    // Qwen3MoeConfig.
    {"qwen3_moe", "hidden_size", "2048"},
    {"qwen3_moe", "num_hidden_layers", "24"},
    {"qwen3_moe", "num_attention_heads", "32"},
    {"qwen3_moe", "num_key_value_heads", "4"},
    {"qwen3_moe", "intermediate_size", "6144"},
    {"qwen3_moe", "vocab_size", "151936"},
    {"qwen3_moe", "max_position_embeddings", "32768"},
    {"qwen3_moe", "rope_theta", "10000.0"},
    {"qwen3_moe", "rms_norm_eps", "1e-06"},
    {"qwen3_moe", "hidden_act", "\"silu\""},
    {"qwen3_moe", "tie_word_embeddings", "false"},
    {"qwen3_moe", "attention_bias", "false"},
    {"qwen3_moe", "use_sliding_window", "false"},
    {"qwen3_moe", "sliding_window", "4096"},
    {"qwen3_moe", "num_experts", "128"},
    {"qwen3_moe", "num_experts_per_tok", "8"},
    {"qwen3_moe", "moe_intermediate_size", "768"},
    {"qwen3_moe", "norm_topk_prob", "false"},
    {"qwen3_moe", "decoder_sparse_step", "1"},
    {"qwen3_moe", "mlp_only_layers", "null"},
    // GptOssConfig.
    {"gpt_oss", "hidden_size", "2880"},
    {"gpt_oss", "num_hidden_layers", "36"},
    {"gpt_oss", "num_attention_heads", "64"},
    {"gpt_oss", "num_key_value_heads", "8"},
    {"gpt_oss", "head_dim", "64"},
    {"gpt_oss", "intermediate_size", "2880"},
    {"gpt_oss", "vocab_size", "201088"},
    {"gpt_oss", "max_position_embeddings", "131072"},
    {"gpt_oss", "rope_theta", "150000.0"},
    {"gpt_oss", "rms_norm_eps", "1e-05"},
    {"gpt_oss", "hidden_act", "\"silu\""},
    {"gpt_oss", "tie_word_embeddings", "false"},
    {"gpt_oss", "sliding_window", "128"},
    {"gpt_oss", "num_local_experts", "128"},
    {"gpt_oss", "num_experts_per_tok", "4"},
};

}  // namespace

std::optional<std::string_view> HfClassDefault(std::string_view model_type, std::string_view key) {
  const auto it = std::find_if(std::begin(kDefaults), std::end(kDefaults),
                               [&](const Default& d) { return d.model_type == model_type && d.key == key; });
  if (it == std::end(kDefaults)) return std::nullopt;
  return it->json;
}

std::vector<std::pair<std::string_view, std::string_view>> HfClassDefaults(std::string_view model_type) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (const Default& d : kDefaults) {
    if (d.model_type == model_type) out.emplace_back(d.key, d.json);
  }
  return out;
}

std::string_view HfConfigClassName(std::string_view model_type) {
  static constexpr std::pair<std::string_view, std::string_view> kClasses[] = {
      {"llama", "LlamaConfig"},        {"mistral", "MistralConfig"}, {"mixtral", "MixtralConfig"},
      {"qwen2", "Qwen2Config"},        {"qwen3", "Qwen3Config"},     {"qwen2_moe", "Qwen2MoeConfig"},
      {"qwen3_moe", "Qwen3MoeConfig"}, {"gpt_oss", "GptOssConfig"}};
  for (const auto& [type, cls] : kClasses) {
    if (type == model_type) return cls;
  }
  return {};
}

}  // namespace cascade::model
