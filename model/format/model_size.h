// Parameter bytes of a model by part, from its tensor table alone (no weight is read):
// what the coordinator's planner balances pipeline stages by. Tensor names come from the
// architecture tables (model/format/arch/), the one place that knows them.
// Thread-safe (a pure function of immutable files).
#pragma once

#include <cstdint>
#include <vector>

#include "model/format/model_files.h"

namespace cascade::model {

struct ModelSize {
  std::vector<int64_t> layer_bytes;  // [n_layers]: every per-layer tensor of the layer.
  int64_t embedding_bytes = 0;       // The token embedding (stage 0).
  // The final norm and LM head (last stage); with tied embeddings the embedding again,
  // since the last stage reads it as its head.
  int64_t head_bytes = 0;
  // Of layer_bytes, the routed experts' matrices (arch/moe.h's names; not a shared expert):
  // a token reads n_experts_used / n_experts of them.
  int64_t routed_expert_bytes = 0;

  // Bytes of layers [0, n_layers) plus the embedding and the head: a drafter's weights.
  int64_t PrefixBytes(int64_t n_layers) const;
  // The weight bytes one decode token reads (batch 1): every layer's, the routed experts'
  // in the share `config` routes a token to, and the head; the embedding only as the head.
  int64_t DecodeStepBytes(const ModelConfig& config) const;
};

ModelSize MeasureModel(const ModelFiles& files);

}  // namespace cascade::model
