#include "model/format/model_files.h"

#include <filesystem>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/gguf.h"
#include "model/format/hf_model.h"

namespace cascade::model {

std::string_view ModelFormatName(ModelFormat format) { return format == ModelFormat::kGguf ? "gguf" : "huggingface"; }

void LogDefaultedKeys(const ModelFiles& m) {
  for (const DefaultedKey& d : m.config.defaulted) {
    CASCADE_LOG(Info) << m.path << ": " << d.key << " = " << d.value << " (not in the file: " << d.rule << ")";
  }
}

absl::StatusOr<ModelFiles> OpenModelFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(cascade::StrCat(path, ": no such file or directory"));
  }
  ModelFiles m;
  m.path = path;
  if (fs::is_directory(path, ec)) {
    m.format = ModelFormat::kHuggingFace;
    CASCADE_ASSIGN_OR_RETURN(m.config, ModelConfigFromHfDir(path));
    CASCADE_ASSIGN_OR_RETURN(m.weights, OpenHfWeights(path));
    return m;
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
  CASCADE_ASSIGN_OR_RETURN(m.config, ModelConfigFromGguf(*gguf));
  m.gguf = gguf.get();
  m.weights = std::move(gguf);
  return m;
}

}  // namespace cascade::model
