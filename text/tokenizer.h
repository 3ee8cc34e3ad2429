// The tokenizer door: text <-> token ids for SentencePiece-style BPE (Llama 2, TinyStories)
// and GPT-2 byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) vocabularies, built from a
// `TokenizerSpec` (model/format/tokenizer_files.h reads one from a GGUF file or a Hugging
// Face tokenizer.json).
//
// Thread safety: a `Tokenizer` is immutable after construction; every method is const and
// keeps its scratch state in locals, so one instance may serve any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer_spec.h"

namespace cascade::text {

class Vocab;  // Private tables (text/tokenizer_vocab.h).

class Tokenizer {
 public:
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Validates `spec` and builds the lookup tables. InvalidArgument (naming `spec.source`)
  // for an empty vocabulary, mismatched array sizes, out-of-range special ids, a merge
  // whose parts or result are not in the vocabulary; Unimplemented for an unknown
  // pre-tokenizer. Duplicate token texts map to the last id (as llama.cpp). When an SPM
  // vocabulary without merges has all scores equal (converters' -1000 placeholder), the
  // id is used as the rank (score = -id), which reproduces merge-ranked BPE.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpec(TokenizerSpec spec);

  // Token ids for `text` (any bytes; invalid UTF-8 is encoded through byte fallback).
  // Control, user-defined and unknown token texts appearing in `text` (e.g.
  // "<|im_start|>") become those single tokens (llama.cpp's parse_special=true).
  // `add_special` adds BOS/EOS as the spec's add_bos/add_eos say.
  std::vector<int32_t> Encode(std::string_view text, bool add_special) const;

  // The text of `ids` concatenated. Control and unknown tokens render as their text
  // unless `skip_special`; ids outside [0, n_vocab) render as nothing. For SPM with
  // add_space_prefix the first rendered token loses one leading space. The result may
  // hold invalid UTF-8 where the ids split a character (see `Detokenizer`).
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes token `id` stands for (byte tokens are one raw byte, "▁" / "Ġ" are
  // spaces); empty for an id out of range. No leading-space stripping.
  std::string_view TokenPiece(int32_t id) const;
  // The token's stored vocabulary text ("▁Hello", "ĠHello", "<0x0A>"); empty if out of range.
  std::string_view TokenText(int32_t id) const;
  // Id of the token whose vocabulary text is exactly `text`, or -1.
  int32_t TokenId(std::string_view text) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the vocabulary has none.
  int32_t eos_id() const;  // -1 when the vocabulary has none.
  bool add_bos() const;
  // True for control and unknown tokens (skipped by `Decode(..., skip_special=true)`).
  bool IsSpecial(int32_t id) const;
  // True for end-of-generation tokens: EOS, and end-of-turn tokens such as "<|im_end|>",
  // "<|eot_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>" present in the vocabulary.
  bool IsEog(int32_t id) const;
  // Whether the first decoded token drops one leading space (SPM dummy prefix).
  bool strips_leading_space() const;
  TokenizerSpec::Kind kind() const;
  // The model's Jinja chat template (empty when none).
  const std::string& chat_template() const;

 protected:
  explicit Tokenizer(std::unique_ptr<const Vocab> vocab);
  // Appends the ids of `text`, which holds no special-token text. `after_special` is true
  // at the start of the input and right after a special token (SPM dummy-prefix rule).
  virtual void EncodeText(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  const Vocab& vocab() const { return *vocab_; }

 private:
  std::unique_ptr<const Vocab> vocab_;
};

}  // namespace cascade::text
