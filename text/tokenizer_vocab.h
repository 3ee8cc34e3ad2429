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

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "text/tokenizer_spec.h"

namespace cascade::text {

// One merge rule: applying it to the pair gives `result`; lower `rank` merges first.
struct RankedMerge {
  int32_t rank = -1;  // -1: no merge.
  int32_t result = -1;
};

// A piece of input text between special tokens: either `token >= 0` (a special token
// found in the text) or `text` (plain text to encode).
struct TextFragment {
  int32_t token = -1;
  std::string_view text;
};

// Strings by index, in one buffer: a vocabulary's 128k-256k token texts as std::strings
// would spend 32 bytes of header each before their text. Offsets are 32-bit (Vocab::Build
// refuses texts over 4 GiB in all).
class StringTable {
 public:
  void Reserve(size_t n, size_t bytes) {
    ends_.reserve(n);
    bytes_.reserve(bytes);
  }
  void Add(std::string_view s) {
    bytes_.append(s);
    ends_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  std::string_view operator[](size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(bytes_).substr(begin, ends_[i] - begin);
  }
  size_t size() const { return ends_.size(); }

 private:
  std::string bytes_;
  std::vector<uint32_t> ends_;
};

class Vocab {
 public:
  Vocab(const Vocab&) = delete;  // token_to_id_'s functors point at texts_.
  Vocab& operator=(const Vocab&) = delete;

  // Validates `spec` (see `Tokenizer::FromSpec`) and builds the tables.
  static absl::StatusOr<std::unique_ptr<Vocab>> Build(TokenizerSpec spec);

  int32_t n_vocab() const { return static_cast<int32_t>(texts_.size()); }
  const TokenizerSpec& spec() const { return spec_; }
  std::string_view text(int32_t id) const { return texts_[id]; }
  std::string_view piece(int32_t id) const { return pieces_[id]; }
  int32_t type(int32_t id) const { return types_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  bool has_merges() const { return !merges_.empty(); }
  bool is_special(int32_t id) const { return special_.contains(id); }
  bool is_eog(int32_t id) const { return eog_.contains(id); }

  // Id of the token with exactly this text, or -1.
  int32_t Find(std::string_view text) const {
    auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? -1 : *it;
  }
  // The merge for the adjacent pair (left, right); rank -1 when there is none.
  RankedMerge FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find(MergePair{PairKey(left, right)});
    if (it == merges_.end()) return {};
    const auto rank = static_cast<int32_t>(*it & ((uint64_t{1} << kRankBits) - 1));
    return {rank, merge_results_[rank]};
  }
  // SPM: the id of byte `b`'s "<0xAB>" token (else the one-byte token), or -1.
  // Byte-level BPE: the id of the token for byte `b`'s GPT-2 code point, or -1.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

  // Splits `text` at every occurrence of a control, user-defined or unknown token's
  // text (longest match first at each position). Fragments view into `text`.
  std::vector<TextFragment> SplitSpecial(std::string_view text) const;

 private:
  Vocab() = default;
  // A merge is one 64-bit entry, the pair's ids (21 bits each) over its rank (22 bits), in a
  // set hashed by the pair: 8 bytes a slot, where a map to a RankedMerge took 16 (a 128k
  // vocabulary has 280k merges). The result is merge_results_[rank].
  static constexpr int kIdBits = 21, kRankBits = 22;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return static_cast<uint64_t>(left) << kIdBits | static_cast<uint64_t>(right);
  }
  struct MergePair {  // A lookup by the pair alone.
    uint64_t key;
  };
  struct MergeHash {
    using is_transparent = void;
    size_t operator()(uint64_t entry) const { return absl::Hash<uint64_t>{}(entry >> kRankBits); }
    size_t operator()(MergePair p) const { return absl::Hash<uint64_t>{}(p.key); }
  };
  struct MergeEq {
    using is_transparent = void;
    bool operator()(uint64_t a, uint64_t b) const { return a >> kRankBits == b >> kRankBits; }
    bool operator()(uint64_t a, MergePair b) const { return a >> kRankBits == b.key; }
    bool operator()(MergePair a, uint64_t b) const { return a.key == b >> kRankBits; }
  };
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

  // Text -> id as a set of ids hashed and compared by their text (4 bytes a slot, where a
  // map from std::string would take 40), looked up by a string_view.
  struct TextOfId {
    using is_transparent = void;
    const StringTable* texts = nullptr;
    std::string_view operator()(int32_t id) const { return (*texts)[id]; }
    std::string_view operator()(std::string_view s) const { return s; }
  };
  struct TextHash : TextOfId {
    template <typename T>
    size_t operator()(const T& key) const {
      return absl::Hash<std::string_view>{}(TextOfId::operator()(key));
    }
  };
  struct TextEq : TextOfId {
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return TextOfId::operator()(a) == TextOfId::operator()(b);
    }
  };

  TokenizerSpec spec_;          // tokens/scores/types/merges moved out.
  StringTable texts_;           // [n_vocab]
  StringTable pieces_;          // [n_vocab] decoded bytes.
  std::vector<float> scores_;   // [n_vocab]
  std::vector<int32_t> types_;  // [n_vocab]
  absl::flat_hash_set<int32_t, TextHash, TextEq> token_to_id_;
  absl::flat_hash_set<uint64_t, MergeHash, MergeEq> merges_;
  std::vector<int32_t> merge_results_;  // By rank.
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
