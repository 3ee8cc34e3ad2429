#include "model/format/tokenizer_files.h"

namespace cascade::model {

absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizer(const ModelFiles& files) {
  if (files.format == ModelFormat::kGguf) return TokenizerFromGguf(*files.gguf);
  return TokenizerFromHfJson(files.path + "/tokenizer.json");
}

}  // namespace cascade::model
