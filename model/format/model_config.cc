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
    case RopeScaling::kLlama3: return "llama3";
    case RopeScaling::kYarn: return "yarn";
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
  if (rope_scaling != RopeScaling::kNone) absl::StrAppendFormat(&s, " (factor %g)", rope_scaling_factor);
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
  if (sliding_window > 0) {
    absl::StrAppendFormat(&s, "sliding_window  %d (context capped to it: full attention is exact there)\n",
                          sliding_window);
  }
  return s;
}

bool ModelConfig::SameLogicalModel(const ModelConfig& o) const {
  // Files store eps and theta as f32 (GGUF) or decimal text (JSON): compare to f32 precision.
  const auto close = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b)); };
  return n_layers == o.n_layers && n_embd == o.n_embd && n_heads == o.n_heads && n_kv_heads == o.n_kv_heads &&
         head_dim == o.head_dim && n_ff == o.n_ff && n_vocab == o.n_vocab && n_ctx_train == o.n_ctx_train &&
         close(rope_theta, o.rope_theta) && rope_scaling == o.rope_scaling &&
         close(rope_scaling_factor, o.rope_scaling_factor) && close(norm_eps, o.norm_eps) &&
         tied_embeddings == o.tied_embeddings && qkv_bias == o.qkv_bias && qk_norm == o.qk_norm &&
         sliding_window == o.sliding_window && n_experts == o.n_experts && n_experts_used == o.n_experts_used &&
         n_ff_expert == o.n_ff_expert && n_ff_shared_expert == o.n_ff_shared_expert &&
         norm_topk_prob == o.norm_topk_prob && decoder_sparse_step == o.decoder_sparse_step &&
         mlp_only_layers == o.mlp_only_layers;
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
  if (c.sliding_window > 0 && c.sliding_window < c.n_ctx_train) c.n_ctx_train = c.sliding_window;
}

namespace {

// llama.cpp's MoE keys: `<arch>.expert_count`, `expert_used_count`, and for qwen2moe /
// qwen3moe `expert_feed_forward_length` (Mixtral, arch `llama`, uses feed_forward_length)
// and `expert_shared_feed_forward_length`. Every layer of a GGUF MoE model is MoE
// (llama.cpp has no dense layers in these architectures). The top-k weights are
// renormalised as llama.cpp does per architecture (Mixtral and Qwen3-MoE yes, Qwen2-MoE
// no), unless the file says `expert_weights_norm`.
absl::Status ReadGgufExperts(const GgufFile& f, const std::string& p, ModelConfig& c) {
  c.n_experts = f.GetInt(p + "expert_count").value_or(0);
  const bool moe_arch = c.arch == "qwen2moe" || c.arch == "qwen3moe";
  if (c.n_experts <= 0) {
    if (moe_arch) return absl::InvalidArgumentError(cascade::StrCat(f.path(), ": ", p, "expert_count is missing"));
    c.n_experts = 0;
    return absl::OkStatus();
  }
  CASCADE_ASSIGN_OR_RETURN(c.n_experts_used, f.GetInt(p + "expert_used_count"));
  if (moe_arch) {
    CASCADE_ASSIGN_OR_RETURN(c.n_ff_expert, f.GetInt(p + "expert_feed_forward_length"));
  } else {
    c.n_ff_expert = c.n_ff;
  }
  // llama.cpp falls back to feed_forward_length for a shared expert without its own key.
  if (f.FindTensor("blk.0.ffn_gate_shexp.weight") != nullptr) {
    c.n_ff_shared_expert = f.GetInt(p + "expert_shared_feed_forward_length").value_or(c.n_ff);
  }
  c.norm_topk_prob = f.GetBool(p + "expert_weights_norm").value_or(c.arch != "qwen2moe");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& f) {
  ModelConfig c;
  CASCADE_ASSIGN_OR_RETURN(c.arch, f.GetString("general.architecture"));
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "mistral" && c.arch != "qwen2moe" &&
      c.arch != "qwen3moe") {
    return absl::UnimplementedError(cascade::StrCat(f.path(), ": architecture '", c.arch,
                                                    "' is not supported (llama, mistral, qwen2, qwen3, qwen2moe, "
                                                    "qwen3moe are)"));
  }
  if (auto n = f.GetString("general.name"); n.ok()) c.name = *n;
  const std::string p = c.arch + ".";
  CASCADE_ASSIGN_OR_RETURN(c.n_layers, f.GetInt(p + "block_count"));
  CASCADE_ASSIGN_OR_RETURN(c.n_embd, f.GetInt(p + "embedding_length"));
  CASCADE_ASSIGN_OR_RETURN(c.n_heads, f.GetInt(p + "attention.head_count"));
  c.n_kv_heads = f.GetInt(p + "attention.head_count_kv").value_or(c.n_heads);
  CASCADE_ASSIGN_OR_RETURN(c.n_ff, f.GetInt(p + "feed_forward_length"));
  CASCADE_RETURN_IF_ERROR(ReadGgufExperts(f, p, c));
  c.n_ctx_train = f.GetInt(p + "context_length").value_or(2048);
  c.sliding_window = f.GetInt(p + "attention.sliding_window").value_or(0);
  c.rope_theta = f.GetFloat(p + "rope.freq_base").value_or(10000.0);
  CASCADE_ASSIGN_OR_RETURN(c.norm_eps, f.GetFloat(p + "attention.layer_norm_rms_epsilon"));
  c.head_dim = f.GetInt(p + "attention.key_length").value_or(c.n_heads > 0 ? c.n_embd / c.n_heads : 0);
  if (auto v = f.GetInt(p + "vocab_size"); v.ok()) {
    c.n_vocab = *v;
  } else if (const TensorInfo* emb = f.FindTensor("token_embd.weight"); emb != nullptr) {
    c.n_vocab = emb->shape[0];
  } else if (auto toks = f.GetStringArray("tokenizer.ggml.tokens"); toks.ok()) {
    c.n_vocab = static_cast<int64_t>(toks->size());
  }
  if (auto t = f.GetString(p + "rope.scaling.type"); t.ok() && *t != "none") {
    if (*t == "linear")
      c.rope_scaling = RopeScaling::kLinear;
    else if (*t == "yarn")
      c.rope_scaling = RopeScaling::kYarn;
    else
      return absl::UnimplementedError(cascade::StrCat(f.path(), ": rope scaling '", *t, "' is not supported"));
    c.rope_scaling_factor = f.GetFloat(p + "rope.scaling.factor").value_or(1.0);
    c.rope_original_ctx = f.GetInt(p + "rope.scaling.original_context_length").value_or(0);
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
  CASCADE_RETURN_IF_ERROR(Annotate(c.Validate(), f.path()));
  CapContextToSlidingWindow(c);
  return c;
}

}  // namespace cascade::model
