#include "model/format/tokenizer_files.h"

#include <filesystem>

#include "core/status.h"
#include "model/format/gguf.h"

namespace cascade::model {

absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizer(const ModelFiles& files) {
  if (files.format == ModelFormat::kGguf) {
    absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer = TokenizerFromGguf(*files.gguf);
    files.gguf->ReleaseHeaderPages();  // The tokenizer holds its own copy of the vocabulary.
    return tokenizer;
  }
  return TokenizerFromHfJson(files.path + "/tokenizer.json");
}

absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizerAt(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return TokenizerFromHfJson(path + "/tokenizer.json");
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(path + ": no such file or directory");
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
  return TokenizerFromGguf(*gguf);
}

}  // namespace cascade::model
