// RoPE settings of a config.json in either generation's layout, for ModelConfigFromHfJson;
// not a public door.
//   transformers 4.x: top-level `rope_theta` and `rope_scaling` ({"rope_type" | "type", ...}).
//   transformers 5.x: `rope_parameters` = {"rope_theta", "rope_type", ...}, or one such
//   object per layer type ({"full_attention": {...}, "sliding_attention": {...}}).
// Types: default, linear, dynamic, llama3, yarn, longrope with the fields and defaults of
// transformers' modeling_rope_utils.py; any other type, or RoPE over part of a head, is
// refused naming the key.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/format/hf_keys.h"
#include "model/format/model_config.h"

namespace cascade::model {

// Fills c.rope_* from the top-level object `keys` (whose model type gives rope_theta's
// default). `layer_types` are the attention types the model's layers use, which pick the
// entries of a per-layer-type `rope_parameters` (they must agree). Needs c.head_dim and
// c.n_ctx_train.
absl::Status ParseHfRope(const HfKeys& keys, const std::vector<std::string>& layer_types, const std::string& source,
                         ModelConfig& c);

}  // namespace cascade::model
