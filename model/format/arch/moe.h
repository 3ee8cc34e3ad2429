// Tensor names of the mixture-of-experts FFN (Mixtral, Qwen2-MoE, Qwen3-MoE) in both file
// formats, the one place that knows them:
//  * GGUF (llama.cpp): `blk.L.ffn_gate_inp.weight` (router [n_experts, n_embd]) and the
//    experts merged into 3-D tensors `ffn_{gate,up,down}_exps.weight` [n_experts, rows,
//    cols]; Qwen2-MoE's shared expert `ffn_{gate,up,down}_shexp.weight` and its gate
//    `ffn_gate_inp_shexp.weight` [n_embd].
//  * Hugging Face: one tensor per expert, `model.layers.L.mlp.experts.E.{gate,up,down}_proj`
//    (Qwen), `model.layers.L.block_sparse_moe.experts.E.{w1,w3,w2}` (Mixtral: gate, up,
//    down); routers `mlp.gate` / `block_sparse_moe.gate`; `mlp.shared_expert.*` and
//    `mlp.shared_expert_gate` [1, n_embd].
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>

#include "model/format/model_config.h"
#include "model/format/model_files.h"

namespace cascade::model::arch {

enum class MoeTensor {
  kRouter,        // [n_experts, n_embd]
  kGate,          // Per expert [n_ff_expert, n_embd]
  kUp,            // Per expert [n_ff_expert, n_embd]
  kDown,          // Per expert [n_embd, n_ff_expert]
  kSharedRouter,  // Qwen2-MoE: the shared expert's gate, [n_embd] (GGUF) or [1, n_embd] (HF)
  kSharedGate,    // [n_ff_shared_expert, n_embd]
  kSharedUp,      // [n_ff_shared_expert, n_embd]
  kSharedDown,    // [n_embd, n_ff_shared_expert]
  kRouterBias,    // gpt-oss: [n_experts]
};

// Where one expert's matrix is stored: rows [row_begin, row_begin + rows) of tensor `name`
// read as [Rows(), Cols()] (a GGUF merged tensor holds expert e at rows e * rows).
struct ExpertMatrix {
  std::string name;
  int64_t row_begin = 0;
  int64_t stored_rows = 0;  // Rows() of the stored tensor.
};

// The stored name of a per-layer tensor that is not per expert (router, shared expert).
std::string MoeTensorName(const ModelConfig& config, ModelFormat format, MoeTensor tensor, int64_t layer);

// Expert `expert`'s kGate / kUp / kDown matrix of `layer`.
ExpertMatrix ExpertMatrixOf(const ModelConfig& config, ModelFormat format, MoeTensor tensor, int64_t layer,
                            int64_t expert);

// gpt-oss: the bias of expert `expert`'s kGate / kUp / kDown of `layer`: its elements
// [row_begin, row_begin + rows of the matrix) of tensor `name` read flat, `stored_rows`
// elements in all (GGUF merges the experts' biases into [n_experts, rows]; the Hugging
// Face names are gpt_oss_experts.h's, one per expert).
ExpertMatrix ExpertBiasOf(const ModelConfig& config, ModelFormat format, MoeTensor tensor, int64_t layer,
                          int64_t expert);

}  // namespace cascade::model::arch
