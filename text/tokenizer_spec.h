// Plain description of a tokenizer's vocabulary and rules, as read from a GGUF file
// (llama.cpp's `tokenizer.ggml.*` keys) or a Hugging Face tokenizer.json. A spec is pure
// data: `Tokenizer::FromSpec` validates it and builds the immutable lookup tables.
// Thread safety: a plain struct (no internal synchronisation; treat as a value).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cascade::text {

// The "▁" (U+2581) SentencePiece uses for a space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Token types as GGUF / llama.cpp store them in `tokenizer.ggml.token_type`.
enum TokenType : int32_t {
  kTokenTypeUndefined = 0,
  kTokenTypeNormal = 1,
  kTokenTypeUnknown = 2,
  kTokenTypeControl = 3,
  kTokenTypeUserDefined = 4,
  kTokenTypeUnused = 5,
  kTokenTypeByte = 6,
};

struct TokenizerSpec {
  enum class Kind {
    // SentencePiece-style BPE: spaces become U+2581 "▁", optional dummy-prefix space,
    // unknown characters fall back to `<0xAB>` byte tokens (llama.cpp `llm_tokenizer_spm`).
    // Merges are ranked by `scores` of the merged token, or by `merges` when non-empty
    // (Hugging Face "BPE" models with a Metaspace-style normalizer).
    kSentencePieceBpe,
    // GPT-2 byte-level BPE: text is pre-split by a regex (`pre_tokenizer`), each byte is
    // mapped to a printable code point, and `merges` are applied by rank.
    kByteLevelBpe,
  };

  Kind kind = Kind::kSentencePieceBpe;
  // Token text by id, [n_vocab]. SPM tokens use "▁" for spaces; byte-level BPE tokens are
  // in the GPT-2 byte-to-unicode alphabet ("Ġ" for a space).
  std::vector<std::string> tokens;
  // Merge priority by id, [n_vocab] or empty (higher merges first; SPM only).
  std::vector<float> scores;
  // `TokenType` values by id, [n_vocab] or empty (all normal).
  std::vector<int32_t> token_types;
  // Ranked merges, highest priority first, each "left right" (one ASCII space between
  // the two token texts). Required for byte-level BPE.
  std::vector<std::string> merges;
  // The same, as explicit pairs (tokenizer.json's newer `[left, right]` form, where a
  // token may itself contain a space). Ranked after `merges`; usually only one is used.
  std::vector<std::pair<std::string, std::string>> merge_pairs;
  // Byte-level BPE pre-tokenizer: "gpt-2", "llama-bpe" (Llama 3), "qwen2", "smollm" or
  // "default" (llama.cpp's names from `tokenizer.ggml.pre`). Ignored for SPM.
  std::string pre_tokenizer = "default";
  // When true and the whole pre-tokenized word is a token, it is emitted without merging
  // (Hugging Face `ignore_merges`; llama.cpp sets it for Llama 3).
  bool ignore_merges = false;
  // Special ids, -1 when absent.
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  // Whether `Encode(text, /*add_special=*/true)` adds BOS / EOS.
  bool add_bos = false;
  bool add_eos = false;
  // SPM only: prefix a "▁" to text at the start and after each special token, and strip
  // that one space again from the first decoded token (llama.cpp `add_space_prefix`).
  bool add_space_prefix = true;
  // SPM only: when a character is not in the vocabulary, use its `<0xAB>` byte tokens
  // (falling back to `unk_id` where one is missing).
  bool byte_fallback = true;
  // The model's Jinja chat template, empty when it has none.
  std::string chat_template;
  // Where the spec came from (a file path), used in error messages.
  std::string source;
};

}  // namespace cascade::text
