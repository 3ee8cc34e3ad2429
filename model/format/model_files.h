// Opens a model given by path, whatever its format: a GGUF file, or a Hugging Face
// directory (config.json + safetensors). This is model/'s door for callers that only
// have a path (the CLI, the coordinator, workers).
// Thread-safe after opening (immutable).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/model_config.h"
#include "model/format/weight_source.h"

namespace cascade::model {

class GgufFile;

enum class ModelFormat { kGguf, kHuggingFace };

struct ModelFiles {
  ModelFormat format = ModelFormat::kGguf;
  std::string path;  // As given.
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;  // Owns the mappings.
  // The GGUF file behind `weights` when format == kGguf (borrowed from `weights`).
  const GgufFile* gguf = nullptr;
};

// NotFound when `path` does not exist; the reader's errors otherwise.
absl::StatusOr<ModelFiles> OpenModelFiles(const std::string& path);

// Logs (Info) each key the config did not give, the value taken and its rule: the load log
// of whoever serves the model (a worker once its stage is loaded, the coordinator once its
// plan is made, LocalEngine), so that a wrong default is never silent; after the checks,
// so that a refused configuration still fails in one line.
void LogDefaultedKeys(const ModelFiles& files);

std::string_view ModelFormatName(ModelFormat format);

}  // namespace cascade::model
