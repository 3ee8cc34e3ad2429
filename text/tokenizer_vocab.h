// Private to the tokenizer implementation (behind text/tokenizer.h): the immutable
// vocabulary tables every tokenizer kind shares — token text <-> id, decoded pieces,
// ranked merges, the special-token splitter — and the ranked-merge BPE loop.
// Thread safety: immutable after `Vocab::Build`; all methods are const.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "text/tokenizer_spec.h"

namespace cascade::text {

// One merge rule: applying it to the pair gives `result`; lower `rank` merges first.
struct RankedMerge {
  int32_t rank = 0;
  int32_t result = -1;
};

// A piece of input text between special tokens: either `token >= 0` (a special token
// found in the text) or `text` (plain text to encode).
struct TextFragment {
  int32_t token = -1;
  std::string_view text;
};

class Vocab {
 public:
  // Validates `spec` (see `Tokenizer::FromSpec`) and builds the tables.
  static absl::StatusOr<std::unique_ptr<Vocab>> Build(TokenizerSpec spec);

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const TokenizerSpec& spec() const { return spec_; }
  const std::string& text(int32_t id) const { return tokens_[id]; }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  int32_t type(int32_t id) const { return types_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  bool has_merges() const { return !merges_.empty(); }
  bool is_special(int32_t id) const { return special_.contains(id); }
  bool is_eog(int32_t id) const { return eog_.contains(id); }

  // Id of the token with exactly this text, or -1.
  int32_t Find(std::string_view text) const {
    auto it = token_to_id_.find(absl::string_view(text.data(), text.size()));
    return it == token_to_id_.end() ? -1 : it->second;
  }
  // The merge for the adjacent pair (left, right), or nullptr.
  const RankedMerge* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  // SPM: the id of byte `b`'s "<0xAB>" token (else the one-byte token), or -1.
  // Byte-level BPE: the id of the token for byte `b`'s GPT-2 code point, or -1.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

  // Splits `text` at every occurrence of a control, user-defined or unknown token's
  // text (longest match first at each position). Fragments view into `text`.
  std::vector<TextFragment> SplitSpecial(std::string_view text) const;

 private:
  Vocab() = default;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  absl::Status AddMerge(std::string_view left, std::string_view right, int32_t rank, size_t index);
  // `Build` step: ranks "left right" `merges`, then `merge_pairs`, in list order.
  absl::Status AddMerges(const std::vector<std::string>& merges,
                         const std::vector<std::pair<std::string, std::string>>& merge_pairs);
  // `Build` step: decoded pieces and the special, end-of-generation and splitting sets.
  void BuildPieces(bool byte_level);
  // In the harmony format (o200k_harmony) "<|end|>" ends one message of a turn, not the
  // turn: "<|return|>" and "<|call|>" do. With both in the vocabulary, "<|end|>" is not
  // end-of-generation (llama.cpp's rule for the same vocabulary).
  void DropHarmonyMessageEnd();
  // `Build` step: `byte_tokens_` from the token table.
  void BuildByteTokens(bool byte_level);

  TokenizerSpec spec_;               // tokens/scores/types/merges moved out.
  std::vector<std::string> tokens_;  // [n_vocab]
  std::vector<std::string> pieces_;  // [n_vocab] decoded bytes.
  std::vector<float> scores_;        // [n_vocab]
  std::vector<int32_t> types_;       // [n_vocab]
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  absl::flat_hash_map<uint64_t, RankedMerge> merges_;
  std::array<int32_t, 256> byte_tokens_{};
  absl::flat_hash_set<int32_t> special_;  // Control, unknown, unused.
  absl::flat_hash_set<int32_t> eog_;
  // Special-text splitting: candidate ids by first byte, longest text first.
  std::array<std::vector<int32_t>, 256> split_candidates_;
  std::string merge_scratch_;  // Used by `AddMerge` during `Build` only.
};

// Applies `vocab`'s ranked merges to a word given as one token id per initial symbol
// (-1 for a symbol not in the vocabulary, which never merges), in place, leftmost pair
// first among equal ranks (Sennrich et al. BPE as Hugging Face tokenizers / llama.cpp
// `llm_tokenizer_bpe_session` apply it).
void ApplyRankedMerges(const Vocab& vocab, std::vector<int32_t>& ids);

// GPT-2's reversible byte -> printable code point map (openai/gpt-2 encoder.py
// `bytes_to_unicode`), as UTF-8 strings.
const std::array<std::string, 256>& ByteToUnicode();
// The inverse: byte for a code point of that alphabet, or -1.
int ByteFromUnicode(uint32_t code_point);

// Length in bytes of the UTF-8 sequence starting with lead byte `c` (1 for a stray
// continuation byte), as llama.cpp's `unicode_len_utf8`.
inline size_t Utf8SequenceLength(uint8_t c) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[c >> 4];
}

// Decodes one UTF-8 code point at `s[i]`; returns its length (1 for an invalid byte,
// with `cp` = 0xFFFFFFFF).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t& cp);

// Factories of the two kinds (tokenizer_spm.cc, tokenizer_bpe.cc).
class Tokenizer;
absl::StatusOr<std::unique_ptr<Tokenizer>> NewSpmTokenizer(std::unique_ptr<const Vocab> vocab);
absl::StatusOr<std::unique_ptr<Tokenizer>> NewBpeTokenizer(std::unique_ptr<const Vocab> vocab);

}  // namespace cascade::text
