// Vocabulary tables shared by every tokenizer kind; see tokenizer_vocab.h.
#include "text/tokenizer_vocab.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <utility>

#include "core/status.h"
#include "core/str_cat.h"
#include "core/utf8.h"

namespace cascade::text {
namespace {

// Texts that end a turn in common chat formats; tokens with these texts (and a
// non-normal type) count as end-of-generation besides EOS (as llama.cpp's vocab loader).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>", "<|endoftext|>", "<|return|>",
    "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<|end_story|>", "<|call|>",
};

// "<0xAB>" -> 0xAB, else -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string DecodeSpmPiece(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out += ' ';
      i += kSpmSpace.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string DecodeByteLevelPiece(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t len = DecodeUtf8(text, i, cp);
    const int b = cp == 0xFFFFFFFF ? -1 : ByteFromUnicode(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(i, len));  // Not of the byte alphabet: keep as is.
    }
    i += len;
  }
  return out;
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> from_unicode;  // Code points < 512 only.
};

const ByteTables& GetByteTables() {
  static const ByteTables* tables = [] {
    auto* t = new ByteTables;
    t->from_unicode.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = direct ? b : 256 + n++;
      AppendUtf8(cp, t->to_unicode[b]);
      t->from_unicode[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

// The bytes token text `t` of type `type` decodes to.
std::string DecodePiece(std::string_view t, int32_t type, bool byte_level) {
  if (type == kTokenTypeNormal) return byte_level ? DecodeByteLevelPiece(t) : DecodeSpmPiece(t);
  if (type == kTokenTypeByte && ParseByteToken(t) >= 0) {
    return std::string(1, static_cast<char>(ParseByteToken(t)));
  }
  return std::string(t);
}

// Bytes of all token texts (the size of Vocab's StringTable of them).
size_t TextBytes(const std::vector<std::string>& tokens) {
  size_t bytes = 0;
  for (const std::string& t : tokens) bytes += t.size();
  return bytes;
}

// Rejects a spec with mismatched table sizes, out-of-range special ids, or byte-level BPE without merges.
absl::Status ValidateSpec(const TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError(cascade::StrCat(src, ": the vocabulary is empty"));
  // StringTable's offsets are 32-bit (with room to spare: a piece is never longer than its text).
  if (n > static_cast<size_t>(INT32_MAX) || TextBytes(spec.tokens) > UINT32_MAX / 4) {
    return absl::InvalidArgumentError(cascade::StrCat(src, ": vocabulary too large"));
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return absl::InvalidArgumentError(cascade::StrCat(src, ": ", spec.scores.size(), " scores for ", n, " tokens"));
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return absl::InvalidArgumentError(
        cascade::StrCat(src, ": ", spec.token_types.size(), " token types for ", n, " tokens"));
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"bos", spec.bos_id}, {"eos", spec.eos_id}, {"unk", spec.unk_id}, {"pad", spec.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(cascade::StrCat(src, ": ", name, " token id ", id, " is outside [0, ", n, ")"));
    }
  }
  if (spec.kind == TokenizerSpec::Kind::kByteLevelBpe && spec.merges.empty() && spec.merge_pairs.empty()) {
    return absl::InvalidArgumentError(cascade::StrCat(src, ": a byte-level BPE vocabulary needs merges"));
  }
  return absl::OkStatus();
}

// Score-ranked SPM: replaces all-equal placeholder scores by score = -id.
void RankPlaceholderScoresById(std::vector<float>& scores) {
  // Converters that only had a merge-ranked vocabulary (llama.cpp's LlamaHfVocab) write
  // the placeholder -1000 for every score; such vocabularies list merge results in merge
  // order, so the id is the rank.
  const size_t n = scores.size();
  bool all_equal = true;
  for (size_t i = 1; i < n && all_equal; ++i) all_equal = scores[i] == scores[0];
  if (all_equal && n > 1) {
    for (size_t i = 0; i < n; ++i) scores[i] = -static_cast<float>(i);
  }
}

}  // namespace

// Decodes one UTF-8 code point at `s[i]`; returns its length (1 for an invalid byte,
// with `cp` = 0xFFFFFFFF).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t& cp) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  const size_t len = Utf8SequenceLength(c);
  if (len == 1 || i + len > s.size()) {
    cp = c < 0x80 ? c : 0xFFFFFFFF;
    return 1;
  }
  cp = c & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) {
    const uint8_t cc = static_cast<uint8_t>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      cp = 0xFFFFFFFF;
      return 1;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  return len;
}

const std::array<std::string, 256>& ByteToUnicode() { return GetByteTables().to_unicode; }

int ByteFromUnicode(uint32_t code_point) { return code_point < 512 ? GetByteTables().from_unicode[code_point] : -1; }

absl::Status Vocab::AddMerge(std::string_view left, std::string_view right, int32_t rank, size_t index) {
  const int32_t l = Find(left), r = Find(right);
  std::string& joined = merge_scratch_;
  joined.assign(left);
  joined.append(right);
  const int32_t result = Find(joined);
  if (l < 0 || r < 0 || result < 0) {
    // Every branch a view of storage that outlives the message (`joined` is a member; a
    // `joined : ""` branch would make a temporary std::string and leave `missing` dangling).
    const std::string_view missing = l < 0 ? left : r < 0 ? right : std::string_view(joined);
    return absl::InvalidArgumentError(cascade::StrCat(spec_.source, ": merges[", index, "] '", left, " ", right,
                                                      "': token '", missing, "' is not in the vocabulary"));
  }
  merges_.insert(PairKey(l, r) << kRankBits | static_cast<uint64_t>(rank));  // The first of a pair stays.
  merge_results_[rank] = result;
  return absl::OkStatus();
}

// Ranks "left right" `merges` first, then `merge_pairs`, in list order.
absl::Status Vocab::AddMerges(const std::vector<std::string>& merges,
                              const std::vector<std::pair<std::string, std::string>>& merge_pairs) {
  const size_t n = merges.size() + merge_pairs.size();
  if (texts_.size() > (size_t{1} << kIdBits) || n > (size_t{1} << kRankBits)) {
    return absl::InvalidArgumentError(cascade::StrCat(spec_.source, ": ", texts_.size(), " tokens and ", n,
                                                      " merges: more than the merge table holds (",
                                                      size_t{1} << kIdBits, " and ", size_t{1} << kRankBits, ")"));
  }
  merges_.reserve(n);
  merge_results_.assign(n, -1);
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i, ++rank) {
    const std::string& m = merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) {
      return absl::InvalidArgumentError(
          cascade::StrCat(spec_.source, ": merges[", i, "] '", m, "' is not of the form 'left right'"));
    }
    CASCADE_RETURN_IF_ERROR(AddMerge(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1), rank, i));
  }
  for (size_t i = 0; i < merge_pairs.size(); ++i, ++rank) {
    CASCADE_RETURN_IF_ERROR(AddMerge(merge_pairs[i].first, merge_pairs[i].second, rank, merges.size() + i));
  }
  return absl::OkStatus();
}

// Decoded pieces and the special, end-of-generation and special-text-splitting sets.
void Vocab::DropHarmonyMessageEnd() {
  int32_t end = -1;
  bool has_return = false, has_call = false;
  for (int32_t id : eog_) {
    has_return |= texts_[id] == "<|return|>";
    has_call |= texts_[id] == "<|call|>";
    if (texts_[id] == "<|end|>") end = id;
  }
  if (has_return && has_call && end >= 0) eog_.erase(end);
}

void Vocab::BuildPieces(bool byte_level) {
  const size_t n = texts_.size();
  pieces_.Reserve(n, n * 8);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view t = texts_[i];
    const int32_t type = types_[i];
    pieces_.Add(DecodePiece(t, type, byte_level));
    if (type == kTokenTypeControl || type == kTokenTypeUnknown || type == kTokenTypeUnused) {
      special_.insert(static_cast<int32_t>(i));
    }
    if ((type == kTokenTypeControl || type == kTokenTypeUserDefined || type == kTokenTypeUnknown) && !t.empty()) {
      split_candidates_[static_cast<uint8_t>(t[0])].push_back(static_cast<int32_t>(i));
    }
    if (type != kTokenTypeNormal && std::find(std::begin(kEogTexts), std::end(kEogTexts), t) != std::end(kEogTexts)) {
      eog_.insert(static_cast<int32_t>(i));
    }
  }
  DropHarmonyMessageEnd();
  if (spec_.eos_id >= 0) eog_.insert(spec_.eos_id);
  for (auto& cands : split_candidates_) {
    std::stable_sort(cands.begin(), cands.end(),
                     [&](int32_t a, int32_t b) { return texts_[a].size() > texts_[b].size(); });
  }
}

// The token of each byte: its GPT-2 code point (byte-level) or "<0xAB>" / the one-byte token (SPM).
void Vocab::BuildByteTokens(bool byte_level) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    int32_t id = -1;
    if (byte_level) {
      id = Find(ByteToUnicode()[b]);
    } else {
      const char buf[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      id = Find(std::string_view(buf, 6));
      if (id < 0) id = Find(std::string(1, static_cast<char>(b)));
    }
    byte_tokens_[b] = id;
  }
}

absl::StatusOr<std::unique_ptr<Vocab>> Vocab::Build(TokenizerSpec spec) {
  std::unique_ptr<Vocab> v(new Vocab);
  CASCADE_RETURN_IF_ERROR(ValidateSpec(spec));
  const size_t n = spec.tokens.size();
  const bool byte_level = spec.kind == TokenizerSpec::Kind::kByteLevelBpe;

  v->texts_.Reserve(n, TextBytes(spec.tokens));
  for (const std::string& t : spec.tokens) v->texts_.Add(t);
  std::vector<std::string>().swap(spec.tokens);  // Its buffer too (clear() would keep 32 bytes a token).
  v->types_ = spec.token_types.empty() ? std::vector<int32_t>(n, kTokenTypeNormal) : std::move(spec.token_types);
  v->scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  std::vector<std::string> merges = std::move(spec.merges);
  std::vector<std::pair<std::string, std::string>> merge_pairs = std::move(spec.merge_pairs);
  v->spec_ = std::move(spec);  // Its tables are moved out (or freed) above.

  // Text -> id. Duplicate texts keep the last id, as llama.cpp's loader does.
  v->token_to_id_ = decltype(v->token_to_id_)(n, TextHash{{&v->texts_}}, TextEq{{&v->texts_}});
  for (size_t i = 0; i < n; ++i) {
    if (v->types_[i] == kTokenTypeUndefined) v->types_[i] = kTokenTypeNormal;
    if (v->texts_[i].empty()) continue;
    if (auto it = v->token_to_id_.find(v->texts_[i]); it != v->token_to_id_.end()) v->token_to_id_.erase(it);
    v->token_to_id_.insert(static_cast<int32_t>(i));
  }

  if (!merges.empty() || !merge_pairs.empty()) {
    CASCADE_RETURN_IF_ERROR(v->AddMerges(merges, merge_pairs));
  } else if (!byte_level) {
    RankPlaceholderScoresById(v->scores_);
  }
  v->BuildPieces(byte_level);
  v->BuildByteTokens(byte_level);
  return v;
}

std::vector<TextFragment> Vocab::SplitSpecial(std::string_view text) const {
  std::vector<TextFragment> out;
  size_t start = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    int32_t found = -1;
    for (int32_t id : split_candidates_[static_cast<uint8_t>(text[i])]) {
      const std::string_view t = texts_[id];
      if (t.size() <= n - i && std::memcmp(text.data() + i, t.data(), t.size()) == 0) {
        found = id;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({-1, text.substr(start, i - start)});
    out.push_back({found, {}});
    i += texts_[found].size();
    start = i;
  }
  if (start < n) out.push_back({-1, text.substr(start)});
  return out;
}

void ApplyRankedMerges(const Vocab& vocab, std::vector<int32_t>& ids) {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, left, left_id, right_id, result;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::vector<Symbol> syms(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later, std::move(heap_storage));
  auto try_add = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0 || syms[left].id < 0 || syms[right].id < 0) return;
    if (const RankedMerge m = vocab.FindMerge(syms[left].id, syms[right].id); m.rank >= 0) {
      queue.push({m.rank, left, syms[left].id, syms[right].id, m.result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    if (l.id != c.left_id || l.next < 0) continue;
    Symbol& r = syms[l.next];
    if (r.id != c.right_id) continue;
    l.id = c.result;
    r.id = -2;
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = c.left;
    try_add(l.prev);
    try_add(c.left);
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = syms[i].next) ids[k++] = syms[i].id;
  ids.resize(k);
}

}  // namespace cascade::text
