#include "model/format/arch/moe.h"

#include "core/str_cat.h"

namespace cascade::model::arch {
namespace {

bool Mixtral(const ModelConfig& c) { return c.arch == "mixtral" || c.arch == "llama" || c.arch == "mistral"; }

std::string HfPrefix(const ModelConfig& c, int64_t layer) {
  return StrCat("model.layers.", layer, Mixtral(c) ? ".block_sparse_moe." : ".mlp.");
}

// The expert matrices' stem in each format (GGUF merged tensor, HF per-expert name).
const char* GgufExperts(MoeTensor t) {
  switch (t) {
    case MoeTensor::kGate: return "ffn_gate_exps.weight";
    case MoeTensor::kUp: return "ffn_up_exps.weight";
    default: return "ffn_down_exps.weight";
  }
}

const char* HfExpert(const ModelConfig& c, MoeTensor t) {
  switch (t) {
    case MoeTensor::kGate: return Mixtral(c) ? "w1.weight" : "gate_proj.weight";
    case MoeTensor::kUp: return Mixtral(c) ? "w3.weight" : "up_proj.weight";
    default: return Mixtral(c) ? "w2.weight" : "down_proj.weight";
  }
}

}  // namespace

std::string MoeTensorName(const ModelConfig& c, ModelFormat format, MoeTensor t, int64_t layer) {
  if (format == ModelFormat::kGguf) {
    const char* stem = "";
    switch (t) {
      case MoeTensor::kRouter: stem = "ffn_gate_inp.weight"; break;
      case MoeTensor::kRouterBias: stem = "ffn_gate_inp.bias"; break;
      case MoeTensor::kSharedRouter: stem = "ffn_gate_inp_shexp.weight"; break;
      case MoeTensor::kSharedGate: stem = "ffn_gate_shexp.weight"; break;
      case MoeTensor::kSharedUp: stem = "ffn_up_shexp.weight"; break;
      case MoeTensor::kSharedDown: stem = "ffn_down_shexp.weight"; break;
      default: stem = GgufExperts(t); break;
    }
    return StrCat("blk.", layer, ".", stem);
  }
  const std::string p = HfPrefix(c, layer);
  switch (t) {
    case MoeTensor::kRouter: return p + (c.arch == "gpt_oss" ? "router.weight" : "gate.weight");
    case MoeTensor::kRouterBias: return p + "router.bias";
    case MoeTensor::kSharedRouter: return p + "shared_expert_gate.weight";
    case MoeTensor::kSharedGate: return p + "shared_expert.gate_proj.weight";
    case MoeTensor::kSharedUp: return p + "shared_expert.up_proj.weight";
    case MoeTensor::kSharedDown: return p + "shared_expert.down_proj.weight";
    default: return StrCat(p, "experts.*.", HfExpert(c, t));
  }
}

ExpertMatrix ExpertMatrixOf(const ModelConfig& c, ModelFormat format, MoeTensor t, int64_t layer, int64_t expert) {
  const int64_t rows = t == MoeTensor::kDown ? c.n_embd : c.n_ff_expert;
  if (format == ModelFormat::kGguf) {
    return {StrCat("blk.", layer, ".", GgufExperts(t)), expert * rows, c.n_experts * rows};
  }
  return {StrCat(HfPrefix(c, layer), "experts.", expert, ".", HfExpert(c, t)), 0, rows};
}

ExpertMatrix ExpertBiasOf(const ModelConfig& c, ModelFormat format, MoeTensor t, int64_t layer, int64_t expert) {
  ExpertMatrix m = ExpertMatrixOf(c, format, t, layer, expert);
  m.name.replace(m.name.size() - 6, 6, "bias");  // "P.weight" -> "P.bias".
  if (format != ModelFormat::kGguf) m.stored_rows = t == MoeTensor::kDown ? c.n_embd : c.n_ff_expert;
  return m;
}

}  // namespace cascade::model::arch
