// `TokenizerSpec` from the `tokenizer.ggml.*` metadata of a GGUF file (the keys of
// llama.cpp's gguf-py/gguf/constants.py `Keys.Tokenizer`), with llama.cpp's defaults
// where a key is absent (src/llama-vocab.cpp `llama_vocab::impl::load`).
#include <string>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"

namespace cascade::model {
namespace {

using text::Tokenizer;
using text::TokenizerSpec;

// A required key: a missing one is InvalidArgument (the file is not a usable model).
absl::Status Required(absl::Status s) {
  if (s.code() == absl::StatusCode::kNotFound) return absl::InvalidArgumentError(s.message());
  return s;
}

// An optional key: absent -> keep `value`; present -> parsed, or its error.
template <typename T, typename Getter>
absl::Status Optional(const GgufFile& g, std::string_view key, Getter get, T& value) {
  if (g.Find(key) == nullptr) return absl::OkStatus();
  auto v = (g.*get)(key);
  if (!v.ok()) return v.status();
  value = static_cast<T>(*v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  spec.source = gguf.path();
  auto model = gguf.GetString("tokenizer.ggml.model");
  if (!model.ok()) return Required(model.status());
  if (*model == "llama") {
    spec.kind = TokenizerSpec::Kind::kSentencePieceBpe;
  } else if (*model == "gpt2") {
    spec.kind = TokenizerSpec::Kind::kByteLevelBpe;
  } else {
    return absl::UnimplementedError(
        cascade::StrCat(gguf.path(), ": tokenizer.ggml.model '", *model,
                        "' is not supported (supported: 'llama' = SentencePiece BPE, 'gpt2' = byte-level BPE)"));
  }
  const bool spm = spec.kind == TokenizerSpec::Kind::kSentencePieceBpe;

  auto tokens = gguf.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return Required(tokens.status());
  spec.tokens.assign(tokens->begin(), tokens->end());
  const int64_t n_vocab = static_cast<int64_t>(spec.tokens.size());

  if (gguf.Find("tokenizer.ggml.scores") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(spec.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(std::vector<int64_t> types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    spec.token_types.assign(types.begin(), types.end());
  }
  if (gguf.Find("tokenizer.ggml.merges") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(std::vector<std::string_view> merges, gguf.GetStringArray("tokenizer.ggml.merges"));
    spec.merges.assign(merges.begin(), merges.end());
  } else if (!spm) {
    return absl::InvalidArgumentError(cascade::StrCat(gguf.path(),
                                                      ": metadata key 'tokenizer.ggml.merges' is missing "
                                                      "(required for tokenizer.ggml.model 'gpt2')"));
  }
  spec.pre_tokenizer = "default";
  CASCADE_RETURN_IF_ERROR(Optional(gguf, "tokenizer.ggml.pre", &GgufFile::GetString, spec.pre_tokenizer));

  // Special ids. llama.cpp's SPM defaults are <unk>=0, <s>=1, </s>=2.
  if (spm && n_vocab > 2) {
    spec.unk_id = 0;
    spec.bos_id = 1;
    spec.eos_id = 2;
  }
  const std::pair<const char*, int32_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &spec.bos_id},
      {"tokenizer.ggml.eos_token_id", &spec.eos_id},
      {"tokenizer.ggml.unknown_token_id", &spec.unk_id},
      {"tokenizer.ggml.padding_token_id", &spec.pad_id},
  };
  for (const auto& [key, out] : ids) {
    if (gguf.Find(key) == nullptr) continue;
    CASCADE_ASSIGN_OR_RETURN(int64_t id, gguf.GetInt(key));
    if (id < 0 || id >= n_vocab) {
      // 0xFFFFFFFF is how converters write "none"; anything else is ignored with a warning.
      if (id != 0xFFFFFFFFll && id != -1) {
        CASCADE_LOG(Warning) << gguf.path() << ": " << key << " = " << id << " is outside the vocabulary; ignored";
      }
      *out = -1;
    } else {
      *out = static_cast<int32_t>(id);
    }
  }

  spec.add_bos = spm || spec.pre_tokenizer == "llama-bpe";
  spec.add_eos = false;
  spec.add_space_prefix = spm;
  CASCADE_RETURN_IF_ERROR(Optional(gguf, "tokenizer.ggml.add_bos_token", &GgufFile::GetBool, spec.add_bos));
  CASCADE_RETURN_IF_ERROR(Optional(gguf, "tokenizer.ggml.add_eos_token", &GgufFile::GetBool, spec.add_eos));
  CASCADE_RETURN_IF_ERROR(Optional(gguf, "tokenizer.ggml.add_space_prefix", &GgufFile::GetBool, spec.add_space_prefix));
  // llama.cpp sets ignore_merges for Llama 3's pre-tokenizer.
  spec.ignore_merges = spec.pre_tokenizer == "llama-bpe" || spec.pre_tokenizer == "llama3";
  CASCADE_RETURN_IF_ERROR(Optional(gguf, "tokenizer.chat_template", &GgufFile::GetString, spec.chat_template));
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& gguf) {
  CASCADE_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromGguf(gguf));
  return Tokenizer::FromSpec(std::move(spec));
}

}  // namespace cascade::model
