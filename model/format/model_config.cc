#include "model/format/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/gguf.h"

namespace cascade::model {

std::string_view RopeLayoutName(RopeLayout layout) {
  return layout == RopeLayout::kAdjacentPairs ? "adjacent-pairs (GGUF)" : "rotate-half (HF)";
}

std::string_view RopeScalingName(RopeScaling scaling) {
  switch (scaling) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kDynamic: return "dynamic";
    case RopeScaling::kLlama3: return "llama3";
    case RopeScaling::kYarn: return "yarn";
    case RopeScaling::kLongRope: return "longrope";
  }
  return "?";
}

absl::Status ModelConfig::Validate() const {
  const auto bad = [&](std::string_view field, int64_t v, std::string_view why) {
    return absl::InvalidArgumentError(cascade::StrCat("model '", name, "': ", field, " = ", v, ": ", why));
  };
  if (n_layers <= 0) return bad("n_layers", n_layers, "must be positive");
  if (n_embd <= 0) return bad("n_embd", n_embd, "must be positive");
  if (n_heads <= 0) return bad("n_heads", n_heads, "must be positive");
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    return bad("n_kv_heads", n_kv_heads, cascade::StrCat("must divide n_heads = ", n_heads));
  }
  if (head_dim <= 0 || head_dim % 2 != 0) return bad("head_dim", head_dim, "must be positive and even");
  if (n_ff <= 0) return bad("n_ff", n_ff, "must be positive");
  if (n_vocab <= 0) return bad("n_vocab", n_vocab, "must be positive");
  if (n_experts < 0 || n_experts_used < 0 || n_ff_expert < 0 || n_ff_shared_expert < 0) {
    return bad("n_experts", n_experts, "expert counts and sizes must not be negative");
  }
  if (n_experts > 0) {
    if (n_experts_used <= 0 || n_experts_used > n_experts) {
      return bad("n_experts_used", n_experts_used, cascade::StrCat("must be in [1, n_experts = ", n_experts, "]"));
    }
    if (n_ff_expert <= 0) return bad("n_ff_expert", n_ff_expert, "must be positive in a MoE model");
    if (decoder_sparse_step <= 0) return bad("decoder_sparse_step", decoder_sparse_step, "must be positive");
  }
  if (!(rope_theta > 0))
    return absl::InvalidArgumentError(cascade::StrCat("model '", name, "': rope_theta must be positive"));
  if (!(norm_eps > 0 && norm_eps < 1))
    return absl::InvalidArgumentError(cascade::StrCat("model '", name, "': norm_eps must be in (0, 1)"));
  return ValidateRope();
}

absl::Status ModelConfig::ValidateRope() const {
  const auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        cascade::StrCat("model '", name, "': RoPE scaling ", RopeScalingName(rope_scaling), ": ", what));
  };
  if (rope_scaling == RopeScaling::kNone) return absl::OkStatus();
  if (!(rope_scaling_factor > 0)) return bad("factor must be positive");
  if (rope_scaling != RopeScaling::kLinear && rope_original_ctx <= 0) {
    return bad("original_max_position_embeddings must be positive");
  }
  if (!(rope_attention_factor > 0)) return bad("attention_factor must be positive");
  if (rope_scaling == RopeScaling::kLlama3 && !(rope_high_freq_factor > rope_low_freq_factor)) {
    return bad("high_freq_factor must exceed low_freq_factor");
  }
  if (rope_scaling == RopeScaling::kYarn && !(rope_beta_fast > 0 && rope_beta_slow > 0)) {
    return bad("beta_fast and beta_slow must be positive");
  }
  if (rope_scaling == RopeScaling::kLongRope) {
    if (static_cast<int64_t>(rope_ext_factors.size()) != head_dim / 2) {
      return bad(
          cascade::StrCat("short_factor has ", rope_ext_factors.size(), " values, head_dim / 2 = ", head_dim / 2));
    }
    for (double f : rope_ext_factors) {
      if (!(f > 0)) return bad("every short_factor value must be positive");
    }
  }
  return absl::OkStatus();
}

std::string ModelConfig::ToString() const {
  std::string s;
  absl::StrAppendFormat(&s, "arch            %s\n", arch);
  absl::StrAppendFormat(&s, "name            %s\n", name);
  absl::StrAppendFormat(&s, "n_layers        %d\n", n_layers);
  absl::StrAppendFormat(&s, "n_embd          %d\n", n_embd);
  absl::StrAppendFormat(&s, "n_heads         %d\n", n_heads);
  absl::StrAppendFormat(&s, "n_kv_heads      %d\n", n_kv_heads);
  absl::StrAppendFormat(&s, "head_dim        %d\n", head_dim);
  absl::StrAppendFormat(&s, "n_ff            %d\n", n_ff);
  absl::StrAppendFormat(&s, "n_vocab         %d\n", n_vocab);
  absl::StrAppendFormat(&s, "n_ctx_train     %d\n", n_ctx_train);
  absl::StrAppendFormat(&s, "rope_theta      %g\n", rope_theta);
  absl::StrAppendFormat(&s, "rope_layout     %s\n", RopeLayoutName(rope_layout));
  absl::StrAppendFormat(&s, "rope_scaling    %s", RopeScalingName(rope_scaling));
  if (rope_scaling != RopeScaling::kNone) absl::StrAppendFormat(&s, " (factor %g", rope_scaling_factor);
  if (rope_scaling != RopeScaling::kNone && rope_scaling != RopeScaling::kLinear) {
    absl::StrAppendFormat(&s, ", original context %d", rope_original_ctx);
  }
  if (rope_attention_factor != 1.0) absl::StrAppendFormat(&s, ", attention factor %g", rope_attention_factor);
  if (rope_scaling == RopeScaling::kDynamic || rope_scaling == RopeScaling::kLongRope) {
    absl::StrAppendFormat(&s, "; exact up to the original context, where the context is capped");
  }
  if (rope_scaling != RopeScaling::kNone) absl::StrAppendFormat(&s, ")");
  absl::StrAppendFormat(&s, "\nnorm_eps        %g\n", norm_eps);
  absl::StrAppendFormat(&s, "tied_embeddings %s\n", tied_embeddings ? "true" : "false");
  absl::StrAppendFormat(&s, "qkv_bias        %s\n", qkv_bias ? "true" : "false");
  if (qk_norm) absl::StrAppendFormat(&s, "qk_norm         true\n");
  if (n_experts > 0) {
    absl::StrAppendFormat(&s, "experts         %d, top %d, expert FFN %d%s\n", n_experts, n_experts_used, n_ff_expert,
                          norm_topk_prob ? ", top-k renormalised" : "");
    if (n_ff_shared_expert > 0)
      absl::StrAppendFormat(&s, "shared expert   FFN %d (sigmoid gate)\n", n_ff_shared_expert);
    absl::StrAppendFormat(&s, "moe layers      %d of %d\n", n_moe_layers(), n_layers);
  }
  if (sliding_window > 0 && sliding_layers.empty()) {
    absl::StrAppendFormat(&s, "sliding_window  %d (context capped to it: full attention is exact there)\n",
                          sliding_window);
  } else if (sliding_window > 0) {
    const int64_t n = std::count(sliding_layers.begin(), sliding_layers.end(), true);
    absl::StrAppendFormat(&s, "sliding_window  %d in %d of %d layers (masked in attention)\n", sliding_window, n,
                          n_layers);
  }
  if (attn_out_bias || attn_sinks) {
    absl::StrAppendFormat(&s, "attention       %s%s\n", attn_out_bias ? "o_proj bias" : "",
                          attn_sinks ? (attn_out_bias ? ", sinks" : "sinks") : "");
  }
  if (router_bias || expert_bias) {
    absl::StrAppendFormat(&s, "moe biases      %s%s\n", router_bias ? "router" : "",
                          expert_bias ? (router_bias ? ", experts" : "experts") : "");
  }
  if (swiglu_limit > 0) {
    absl::StrAppendFormat(&s, "activation      clamped SwiGLU, alpha %g, limit %g\n", swiglu_alpha, swiglu_limit);
  }
  if (!hf_dtype.empty()) absl::StrAppendFormat(&s, "dtype           %s (config.json)\n", hf_dtype);
  if (defaulted.empty()) {
    absl::StrAppendFormat(&s, "defaulted       none (every key was read from the file)\n");
  } else {
    absl::StrAppendFormat(&s, "defaulted       %d keys the file does not give:\n", defaulted.size());
    for (const DefaultedKey& d : defaulted) absl::StrAppendFormat(&s, "  %s = %s (%s)\n", d.key, d.value, d.rule);
  }
  return s;
}

namespace {

// Files store eps, theta and factors as f32 (GGUF) or decimal text (JSON): compare to f32
// precision.
bool Close(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b)); }

}  // namespace

bool ModelConfig::SameLogicalModel(const ModelConfig& o) const {
  return n_layers == o.n_layers && n_embd == o.n_embd && n_heads == o.n_heads && n_kv_heads == o.n_kv_heads &&
         head_dim == o.head_dim && n_ff == o.n_ff && n_vocab == o.n_vocab && n_ctx_train == o.n_ctx_train &&
         Close(rope_theta, o.rope_theta) && SameRope(o) && Close(norm_eps, o.norm_eps) &&
         tied_embeddings == o.tied_embeddings && qkv_bias == o.qkv_bias && qk_norm == o.qk_norm &&
         sliding_window == o.sliding_window && n_experts == o.n_experts && n_experts_used == o.n_experts_used &&
         n_ff_expert == o.n_ff_expert && n_ff_shared_expert == o.n_ff_shared_expert &&
         norm_topk_prob == o.norm_topk_prob && decoder_sparse_step == o.decoder_sparse_step &&
         mlp_only_layers == o.mlp_only_layers && sliding_layers == o.sliding_layers &&
         attn_out_bias == o.attn_out_bias && attn_sinks == o.attn_sinks && router_bias == o.router_bias &&
         expert_bias == o.expert_bias && Close(swiglu_limit, o.swiglu_limit) &&
         (swiglu_limit == 0 || Close(swiglu_alpha, o.swiglu_alpha));
}

bool ModelConfig::SameRope(const ModelConfig& o) const {
  if (rope_scaling != o.rope_scaling || !Close(rope_scaling_factor, o.rope_scaling_factor)) return false;
  switch (rope_scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kLinear: return true;
    case RopeScaling::kDynamic: return rope_original_ctx == o.rope_original_ctx;
    case RopeScaling::kLlama3:
      return rope_original_ctx == o.rope_original_ctx && Close(rope_low_freq_factor, o.rope_low_freq_factor) &&
             Close(rope_high_freq_factor, o.rope_high_freq_factor);
    case RopeScaling::kYarn:
      return rope_original_ctx == o.rope_original_ctx && Close(rope_attention_factor, o.rope_attention_factor) &&
             Close(rope_beta_fast, o.rope_beta_fast) && Close(rope_beta_slow, o.rope_beta_slow) &&
             rope_yarn_truncate == o.rope_yarn_truncate;
    case RopeScaling::kLongRope:
      return rope_original_ctx == o.rope_original_ctx && Close(rope_attention_factor, o.rope_attention_factor) &&
             std::equal(rope_ext_factors.begin(), rope_ext_factors.end(), o.rope_ext_factors.begin(),
                        o.rope_ext_factors.end(), Close);
  }
  return false;
}

int64_t ModelConfig::WindowOf(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;
  return layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[layer] ? sliding_window
                                                                                                    : 0;
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (n_experts <= 0 || (layer + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

int64_t ModelConfig::n_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += IsMoeLayer(l) ? 1 : 0;
  return n;
}

void CapContextToSlidingWindow(ModelConfig& c) {
  if (c.sliding_window > 0 && c.sliding_layers.empty() && c.sliding_window < c.n_ctx_train) {
    c.n_ctx_train = c.sliding_window;
  }
}

void CapContextToRopeScaling(ModelConfig& c) {
  const bool exact_to_original = c.rope_scaling == RopeScaling::kDynamic || c.rope_scaling == RopeScaling::kLongRope;
  if (exact_to_original && c.rope_original_ctx > 0 && c.rope_original_ctx < c.n_ctx_train) {
    c.n_ctx_train = c.rope_original_ctx;
  }
}

namespace {

// Metadata read as llama.cpp's llama_model::load_hparams reads it (llama-model.cpp): a key it
// requires is required; a key it defaults takes that default, recorded in `defaulted`; a
// key of the wrong type is an error, never a default.
class GgufKeys {
 public:
  GgufKeys(const GgufFile& f, ModelConfig& c) : f_(f), c_(c) {}

  absl::StatusOr<int64_t> Int(const std::string& key) const { return f_.GetInt(key); }
  absl::StatusOr<double> Float(const std::string& key) const { return f_.GetFloat(key); }
  absl::StatusOr<int64_t> Int(const std::string& key, int64_t fallback, std::string_view rule) const {
    if (f_.Find(key) != nullptr) return f_.GetInt(key);
    Record(key, cascade::StrCat(fallback), rule);
    return fallback;
  }
  absl::StatusOr<double> Float(const std::string& key, double fallback, std::string_view rule) const {
    if (f_.Find(key) != nullptr) return f_.GetFloat(key);
    Record(key, absl::StrFormat("%g", fallback), rule);
    return fallback;
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback, std::string_view rule) const {
    if (f_.Find(key) != nullptr) return f_.GetBool(key);
    Record(key, fallback ? "true" : "false", rule);
    return fallback;
  }
  bool Has(const std::string& key) const { return f_.Find(key) != nullptr; }
  void Record(const std::string& key, std::string value, std::string_view rule) const {
    c_.defaulted.push_back({key, std::move(value), std::string(rule)});
  }

 private:
  const GgufFile& f_;
  ModelConfig& c_;
};

constexpr std::string_view kLlamaCppDefault = "llama.cpp's default";

// llama.cpp's MoE keys: `<arch>.expert_count`, `expert_used_count`, and for qwen2moe /
// qwen3moe `expert_feed_forward_length` (Mixtral, arch `llama`, uses feed_forward_length)
// and `expert_shared_feed_forward_length`. Every layer of a GGUF MoE model is MoE
// (llama.cpp has no dense layers in these architectures). The top-k weights are
// renormalised as llama.cpp's graphs do per architecture (Mixtral and Qwen3-MoE yes,
// Qwen2-MoE no), unless the file says `expert_weights_norm`.
absl::Status ReadGgufExperts(const GgufFile& f, const GgufKeys& keys, const std::string& p, ModelConfig& c) {
  const bool moe_arch = c.arch == "qwen2moe" || c.arch == "qwen3moe" || c.arch == "gpt-oss";
  if (!keys.Has(p + "expert_count")) {
    if (moe_arch) return absl::InvalidArgumentError(cascade::StrCat(f.path(), ": ", p, "expert_count is missing"));
    return absl::OkStatus();  // A dense model: llama.cpp's default of 0 experts.
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_experts, keys.Int(p + "expert_count"));
  if (c.n_experts <= 0) {
    if (moe_arch) return absl::InvalidArgumentError(cascade::StrCat(f.path(), ": ", p, "expert_count is 0"));
    c.n_experts = 0;
    return absl::OkStatus();
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_experts_used, keys.Int(p + "expert_used_count"));
  if (moe_arch) {
    CASCADE_ASSIGN_OR_RETURN(c.n_ff_expert, keys.Int(p + "expert_feed_forward_length"));
  } else {
    c.n_ff_expert = c.n_ff;
  }
  if (f.FindTensor("blk.0.ffn_gate_shexp.weight") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(c.n_ff_shared_expert, keys.Int(p + "expert_shared_feed_forward_length", c.n_ff,
                                                            "llama.cpp's rule: feed_forward_length when absent"));
  }
  const bool norm = c.arch != "qwen2moe";
  CASCADE_ASSIGN_OR_RETURN(c.norm_topk_prob,
                           keys.Bool(p + "expert_weights_norm", norm,
                                     norm ? "llama.cpp's graph for this architecture renormalises the top-k weights"
                                          : "llama.cpp's qwen2moe graph does not renormalise the top-k weights"));
  return absl::OkStatus();
}

// gpt-oss as llama.cpp's graph runs it (src/models/openai-moe.cpp): the window on every
// other layer from the first (its swa pattern 2), sinks, O, router and expert biases, and
// the clamped SwiGLU with the constants its graph fixes (LLM_FFN_SWIGLU_OAI_MOE).
void GgufGptOss(const GgufKeys& keys, ModelConfig& c) {
  c.attn_out_bias = c.attn_sinks = c.router_bias = c.expert_bias = true;
  c.sliding_layers.assign(c.n_layers, false);
  for (int64_t l = 0; l < c.n_layers; l += 2) c.sliding_layers[l] = true;
  keys.Record("gpt-oss.attention.sliding_window layers", "even", "llama.cpp's gpt-oss swa pattern 2");
  c.swiglu_limit = 7.0;
  c.swiglu_alpha = 1.702;
  keys.Record("swiglu_limit", "7.0", "llama.cpp's gpt-oss graph (LLM_FFN_SWIGLU_OAI_MOE), alpha 1.702");
}

// RoPE: llama.cpp's defaults are base 10000, scaling type "linear" with factor 1 (none);
// the factor is `rope.scaling.factor`, else the older `rope.scale_linear`; YaRN's original
// context defaults to the trained one, its ramp to beta_fast 32 and beta_slow 1, and its
// attention factor is 1 + 0.1 ln(factor) (ggml's rope_yarn) times `rope.scaling.attn_factor`.
absl::Status ReadGgufRope(const GgufFile& f, const GgufKeys& keys, const std::string& p, ModelConfig& c) {
  CASCADE_ASSIGN_OR_RETURN(c.rope_theta, keys.Float(p + "rope.freq_base", 10000.0, kLlamaCppDefault));
  if (keys.Has(p + "rope.dimension_count")) {
    CASCADE_ASSIGN_OR_RETURN(const int64_t n_rot, keys.Int(p + "rope.dimension_count"));
    if (n_rot != c.head_dim) {
      return absl::UnimplementedError(cascade::StrCat(f.path(), ": ", p, "rope.dimension_count = ", n_rot,
                                                      ": RoPE over part of a head (head_dim ", c.head_dim,
                                                      ") is not supported"));
    }
  }
  std::string type = "linear";
  if (keys.Has(p + "rope.scaling.type")) {
    CASCADE_ASSIGN_OR_RETURN(type, f.GetString(p + "rope.scaling.type"));
  }
  double factor = 0;
  if (keys.Has(p + "rope.scaling.factor")) {
    CASCADE_ASSIGN_OR_RETURN(factor, keys.Float(p + "rope.scaling.factor"));
  } else if (keys.Has(p + "rope.scale_linear")) {
    CASCADE_ASSIGN_OR_RETURN(factor, keys.Float(p + "rope.scale_linear"));
  }
  if (type == "none" || (type == "linear" && (factor == 0 || factor == 1))) return absl::OkStatus();
  if (!keys.Has(p + "rope.scaling.type")) keys.Record(p + "rope.scaling.type", "linear", kLlamaCppDefault);
  if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (type == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
  } else {
    return absl::UnimplementedError(
        cascade::StrCat(f.path(), ": ", p, "rope.scaling.type '", type, "' is not supported (none, linear, yarn)"));
  }
  if (!(factor > 0)) {
    return absl::InvalidArgumentError(cascade::StrCat(f.path(), ": ", p, "rope.scaling.factor must be positive"));
  }
  c.rope_scaling_factor = factor;
  if (c.rope_scaling != RopeScaling::kYarn) return absl::OkStatus();
  CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, keys.Int(p + "rope.scaling.original_context_length", c.n_ctx_train,
                                                         "llama.cpp's rule: the trained context_length"));
  CASCADE_ASSIGN_OR_RETURN(c.rope_beta_fast, keys.Float(p + "rope.scaling.yarn_beta_fast", 32.0, kLlamaCppDefault));
  CASCADE_ASSIGN_OR_RETURN(c.rope_beta_slow, keys.Float(p + "rope.scaling.yarn_beta_slow", 1.0, kLlamaCppDefault));
  CASCADE_ASSIGN_OR_RETURN(const double attn, keys.Float(p + "rope.scaling.attn_factor", 1.0, kLlamaCppDefault));
  // ext_factor -1 means "1 for yarn" to llama.cpp; DeepSeek's log multiplier is another formula.
  CASCADE_ASSIGN_OR_RETURN(const double ext, keys.Float(p + "rope.scaling.yarn_ext_factor", -1.0, kLlamaCppDefault));
  CASCADE_ASSIGN_OR_RETURN(const double log_mul,
                           keys.Float(p + "rope.scaling.yarn_log_multiplier", 0.0, kLlamaCppDefault));
  if ((ext != -1.0 && ext != 1.0) || log_mul != 0.0) {
    return absl::UnimplementedError(cascade::StrCat(f.path(), ": ", p, "rope.scaling.yarn_ext_factor = ", ext,
                                                    " with yarn_log_multiplier = ", log_mul,
                                                    " is not supported (YaRN as llama.cpp's ext_factor 1)"));
  }
  c.rope_attention_factor = attn * (factor > 1 ? 1 + 0.1 * std::log(factor) : 1.0);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& f) {
  ModelConfig c;
  CASCADE_ASSIGN_OR_RETURN(c.arch, f.GetString("general.architecture"));
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "mistral" && c.arch != "qwen2moe" &&
      c.arch != "qwen3moe" && c.arch != "gpt-oss") {
    return absl::UnimplementedError(cascade::StrCat(f.path(), ": architecture '", c.arch,
                                                    "' is not supported (llama, mistral, qwen2, qwen3, qwen2moe, "
                                                    "qwen3moe, gpt-oss are)"));
  }
  if (auto n = f.GetString("general.name"); n.ok()) c.name = *n;
  const std::string p = c.arch + ".";
  const GgufKeys keys(f, c);
  CASCADE_ASSIGN_OR_RETURN(c.n_layers, keys.Int(p + "block_count"));
  CASCADE_ASSIGN_OR_RETURN(c.n_embd, keys.Int(p + "embedding_length"));
  CASCADE_ASSIGN_OR_RETURN(c.n_heads, keys.Int(p + "attention.head_count"));
  CASCADE_ASSIGN_OR_RETURN(c.n_kv_heads,
                           keys.Int(p + "attention.head_count_kv", c.n_heads, "llama.cpp's rule: head_count (no GQA)"));
  CASCADE_ASSIGN_OR_RETURN(c.n_ff, keys.Int(p + "feed_forward_length"));
  CASCADE_RETURN_IF_ERROR(ReadGgufExperts(f, keys, p, c));
  CASCADE_ASSIGN_OR_RETURN(c.n_ctx_train, keys.Int(p + "context_length"));
  CASCADE_ASSIGN_OR_RETURN(c.sliding_window,
                           keys.Int(p + "attention.sliding_window", 0, "llama.cpp's default: full attention"));
  CASCADE_ASSIGN_OR_RETURN(c.norm_eps, keys.Float(p + "attention.layer_norm_rms_epsilon"));
  const int64_t per_head = c.n_heads > 0 ? c.n_embd / c.n_heads : 0;
  CASCADE_ASSIGN_OR_RETURN(
      c.head_dim, keys.Int(p + "attention.key_length", per_head, "llama.cpp's rule: embedding_length / head_count"));
  if (keys.Has(p + "attention.value_length")) {
    CASCADE_ASSIGN_OR_RETURN(const int64_t v, keys.Int(p + "attention.value_length"));
    if (v != c.head_dim) {
      return absl::UnimplementedError(cascade::StrCat(f.path(), ": ", p, "attention.value_length = ", v,
                                                      " differs from the key length ", c.head_dim, ": not supported"));
    }
  }
  CASCADE_RETURN_IF_ERROR(ReadGgufRope(f, keys, p, c));
  // llama.cpp's default is causal attention, the only kind Cascade computes. (Its graphs for
  // these architectures gate experts by softmax and scale attention by 1/sqrt(head_dim)
  // whatever the file says, so their keys are not read here either.)
  if (keys.Has(p + "attention.causal")) {
    CASCADE_ASSIGN_OR_RETURN(const bool causal, f.GetBool(p + "attention.causal"));
    if (!causal) {
      return absl::UnimplementedError(
          cascade::StrCat(f.path(), ": ", p, "attention.causal = false: only causal attention is supported"));
    }
  }
  if (auto v = f.GetInt(p + "vocab_size"); v.ok()) {
    c.n_vocab = *v;
  } else if (const TensorInfo* emb = f.FindTensor("token_embd.weight"); emb != nullptr) {
    c.n_vocab = emb->shape[0];
  } else if (auto toks = f.GetStringArray("tokenizer.ggml.tokens"); toks.ok()) {
    c.n_vocab = static_cast<int64_t>(toks->size());
  }
  // llama.cpp's converter permutes the Q/K rows of `llama` models (Llama, Mistral) so that
  // RoPE rotates adjacent pairs (its LLAMA_ROPE_TYPE_NORM); Qwen2 keeps Hugging Face's rows
  // and rotates the two halves of each head (LLAMA_ROPE_TYPE_NEOX).
  c.rope_layout = c.arch == "llama" || c.arch == "mistral" ? RopeLayout::kAdjacentPairs : RopeLayout::kRotateHalf;
  // Tied when the LM head is absent, or stored as a byte-identical copy of the embedding
  // (llama2.c exports do that). memcmp stops at the first difference, so an untied model
  // costs a few pages.
  const TensorInfo* out = f.FindTensor("output.weight");
  const TensorInfo* emb = f.FindTensor("token_embd.weight");
  c.tied_embeddings = out == nullptr;
  if (out != nullptr && emb != nullptr && out->dtype == emb->dtype && out->shape == emb->shape) {
    auto a = f.Read("output.weight");
    auto b = f.Read("token_embd.weight");
    c.tied_embeddings = a.ok() && b.ok() && std::memcmp(a->data, b->data, out->n_bytes) == 0;
  }
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  if (c.arch == "gpt-oss") GgufGptOss(keys, c);
  CASCADE_RETURN_IF_ERROR(Annotate(c.Validate(), f.path()));
  CapContextToSlidingWindow(c);
  return c;
}

}  // namespace cascade::model
