// Door for Hugging Face model directories: `config.json` plus safetensors weights
// (`model.safetensors`, or shards listed by `model.safetensors.index.json`).
// The coordinator uses only ModelConfigFromHfDir (config, never weights); workers open
// the weights. Thread-safe (stateless functions; the returned source is immutable).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/model_config.h"
#include "model/format/weight_source.h"

namespace cascade::model {

// Reads `dir`/config.json with ModelConfigFromHfJson; `name` is the directory's base
// name. NotFound when config.json is missing; otherwise as ModelConfigFromHfJson.
absl::StatusOr<ModelConfig> ModelConfigFromHfDir(const std::string& dir);

// Opens the safetensors weights of `path`: a model directory (see
// SafetensorsSource::OpenDirectory) or a single `.safetensors` file. Tensor names are
// the checkpoint's own (`model.layers.0.self_attn.q_proj.weight`); nothing is renamed
// or aliased, so a tied checkpoint may store only one of `model.embed_tokens.weight` /
// `lm_head.weight`.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenHfWeights(const std::string& path);

}  // namespace cascade::model
