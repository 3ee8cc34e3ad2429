#include "model/format/arch/llama.h"

#include "core/str_cat.h"

namespace cascade::model::arch {
namespace {

struct Names {
  const char* gguf;
  const char* hf;
  bool per_layer;
};

Names NamesOf(LlamaTensor t) {
  switch (t) {
    case LlamaTensor::kTokenEmbd: return {"token_embd.weight", "model.embed_tokens.weight", false};
    case LlamaTensor::kOutputNorm: return {"output_norm.weight", "model.norm.weight", false};
    case LlamaTensor::kOutput: return {"output.weight", "lm_head.weight", false};
    case LlamaTensor::kAttnNorm: return {"attn_norm.weight", "input_layernorm.weight", true};
    case LlamaTensor::kAttnQ: return {"attn_q.weight", "self_attn.q_proj.weight", true};
    case LlamaTensor::kAttnK: return {"attn_k.weight", "self_attn.k_proj.weight", true};
    case LlamaTensor::kAttnV: return {"attn_v.weight", "self_attn.v_proj.weight", true};
    case LlamaTensor::kAttnOutput: return {"attn_output.weight", "self_attn.o_proj.weight", true};
    case LlamaTensor::kAttnQBias: return {"attn_q.bias", "self_attn.q_proj.bias", true};
    case LlamaTensor::kAttnKBias: return {"attn_k.bias", "self_attn.k_proj.bias", true};
    case LlamaTensor::kAttnVBias: return {"attn_v.bias", "self_attn.v_proj.bias", true};
    case LlamaTensor::kFfnNorm: return {"ffn_norm.weight", "post_attention_layernorm.weight", true};
    case LlamaTensor::kFfnGate: return {"ffn_gate.weight", "mlp.gate_proj.weight", true};
    case LlamaTensor::kFfnUp: return {"ffn_up.weight", "mlp.up_proj.weight", true};
    case LlamaTensor::kFfnDown: return {"ffn_down.weight", "mlp.down_proj.weight", true};
    case LlamaTensor::kAttnQNorm: return {"attn_q_norm.weight", "self_attn.q_norm.weight", true};
    case LlamaTensor::kAttnKNorm: return {"attn_k_norm.weight", "self_attn.k_norm.weight", true};
    case LlamaTensor::kRopeFreqs: return {"rope_freqs.weight", "", false};
    case LlamaTensor::kAttnKScale: return {"", "self_attn.k_scale", true};
    case LlamaTensor::kAttnVScale: return {"", "self_attn.v_scale", true};
    case LlamaTensor::kAttnOutputBias: return {"attn_output.bias", "self_attn.o_proj.bias", true};
    case LlamaTensor::kAttnSinks: return {"attn_sinks.weight", "self_attn.sinks", true};
    case LlamaTensor::kPostAttentionNorm:
      return {"post_attention_norm.weight", "post_attention_layernorm.weight", true};
  }
  return {"", "", false};
}

}  // namespace

std::string LlamaTensorName(ModelFormat format, LlamaTensor tensor, int64_t layer) {
  const Names n = NamesOf(tensor);
  const std::string stored = format == ModelFormat::kGguf ? n.gguf : n.hf;
  if (!n.per_layer || stored.empty()) return stored;
  return format == ModelFormat::kGguf ? StrCat("blk.", layer, ".", stored)
                                      : StrCat("model.layers.", layer, ".", stored);
}

}  // namespace cascade::model::arch
