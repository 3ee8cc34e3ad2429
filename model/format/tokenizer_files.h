// Reads a model's tokenizer from its files: the `tokenizer.ggml.*` keys of a GGUF file, or
// a Hugging Face `tokenizer.json` (with the `tokenizer_config.json` beside it). The
// readers produce a `text::TokenizerSpec`; `text::Tokenizer::FromSpec` builds the tables.
// This is what the coordinator loads of a model besides its metadata: never weights.
// Thread-safe (free functions over immutable inputs).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/format/model_files.h"
#include "text/tokenizer.h"

namespace cascade::model {

class GgufFile;

// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.*` keys). InvalidArgument
// naming the file and key when a key is missing or malformed, Unimplemented for a
// tokenizer model other than "llama" (SPM) or "gpt2" (byte-level BPE).
absl::StatusOr<text::TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& gguf);
absl::StatusOr<std::unique_ptr<text::Tokenizer>> TokenizerFromGguf(const GgufFile& gguf);

// Builds the tokenizer of a Hugging Face `tokenizer.json` (model type "BPE"), reading the
// `tokenizer_config.json` beside it, when present, for BOS/EOS and the chat template.
// NotFound when the file is missing, InvalidArgument (naming the file and field) for
// malformed JSON or fields, Unimplemented for other model types or pre-tokenizers.
absl::StatusOr<text::TokenizerSpec> TokenizerSpecFromHfJson(const std::string& tokenizer_json_path);
absl::StatusOr<std::unique_ptr<text::Tokenizer>> TokenizerFromHfJson(const std::string& tokenizer_json_path);
// The same from the files' contents, without touching the file system: `tokenizer_json` is
// the text of a tokenizer.json, named `source` in errors; `tokenizer_config_json` is the
// text of its tokenizer_config.json, named `config_source` in errors, or empty when there
// is none. The errors of `TokenizerSpecFromHfJson` except NotFound.
absl::StatusOr<text::TokenizerSpec> TokenizerSpecFromHfJsonText(
    std::string_view tokenizer_json, std::string_view source, std::string_view tokenizer_config_json = {},
    std::string_view config_source = "tokenizer_config.json");

// The tokenizer that belongs to a model: the GGUF's embedded one, or the HF directory's
// tokenizer.json. The readers' errors.
absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizer(const ModelFiles& files);

// The tokenizer at `path` alone, without opening the model: a GGUF file's (any
// architecture, and vocabulary-only files such as llama.cpp's ggml-vocab-*.gguf) or an HF
// directory's tokenizer.json. NotFound when `path` does not exist; the readers' errors.
absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizerAt(const std::string& path);

}  // namespace cascade::model
