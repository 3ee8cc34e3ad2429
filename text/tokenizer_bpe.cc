// GPT-2 byte-level BPE (Radford et al. 2019; openai/gpt-2 encoder.py) as Hugging Face
// tokenizers and llama.cpp's `llm_tokenizer_bpe_session` apply it: the text is split by
// the model's pre-tokenizer regexes, each word's bytes are mapped to the printable GPT-2
// alphabet, and ranked merges are applied per word.
//
// The regexes are llama.cpp's (src/llama-vocab.cpp `llm_tokenizer_bpe`) written for RE2.
// `\s` is spelled out as the Unicode White_Space set (RE2's `\s` is ASCII only), and
// since RE2 has no lookahead, `\s+(?!\S)` is matched as a captured `\s+` and trimmed
// afterwards: when such a run of two or more code points is followed by a non-space, its
// last code point is given back, exactly what the lookahead's backtracking does (a
// single one stays, as the `\s+` alternative after it would take it). The run is
// recognised without a capture group (which would cost a second RE2 pass per match): in
// these patterns only that alternative yields an all-whitespace match, except Llama 3's
// `\s*[\r\n]+`, whose matches contain a newline while the `\s+` one then cannot (had
// the run held one, the earlier alternative would have matched). As in llama.cpp,
// several regexes apply in sequence, each splitting the pieces of the previous one, and
// text no regex matches stays a piece of its own.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "core/str_cat.h"
#include "re2/re2.h"
#include "text/tokenizer.h"
#include "text/tokenizer_vocab.h"

namespace cascade::text {
namespace {

// The Unicode White_Space code points (what Python's and Rust's `\s` match).
constexpr std::string_view kWs =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Expands `\s` / `[^\s` / `[\s` in a pattern written with llama.cpp's spelling. `WS`
// marks where the whitespace class goes; `(WS+)` is the captured lookahead run.
std::string Expand(std::string_view pattern) {
  return absl::StrReplaceAll(absl::string_view(pattern.data(), pattern.size()),
                             {{"WS", absl::string_view(kWs.data(), kWs.size())}});
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
constexpr std::string_view kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^WS\\p{L}\\p{N}]+|[WS]+";
// Llama 3 (llama.cpp's case-spelled form of `(?i:'s|...)`); Qwen2 is the same with \p{N}.
constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^WS\\p{L}\\p{N}]+[\\r\\n]*|[WS]*[\\r\\n]+|[WS]+";
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^WS\\p{L}\\p{N}]+[\\r\\n]*|[WS]*[\\r\\n]+|[WS]+";

// o200k (GPT-4o, gpt-oss; llama.cpp's "gpt-4o"): words split at case changes, a
// contraction kept with its word, digits in threes, `/` kept after punctuation.
constexpr std::string_view kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^WS\\p{L}\\p{N}]+[\\r\\n/]*|[WS]*[\\r\\n]+|[WS]+";

// How a pattern's trailing `[WS]+` alternative stands for `\s+(?!\S)|\s+`.
enum class Lookahead {
  kNone,               // The pattern has no such alternative.
  kAnyRun,             // Every all-whitespace match is that alternative's (GPT-2).
  kRunWithoutNewline,  // Only all-whitespace matches without \r / \n are (Llama 3, Qwen2, o200k).
};

struct PrePattern {
  std::string regex;
  Lookahead lookahead = Lookahead::kNone;
};

absl::StatusOr<std::vector<PrePattern>> PreTokenizerPatterns(const std::string& name) {
  const PrePattern gpt2{Expand(kGpt2), Lookahead::kAnyRun};
  if (name == "gpt-2" || name == "gpt2" || name == "mpt" || name == "olmo" || name == "jais") {
    return std::vector<PrePattern>{gpt2};
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "dbrx" || name == "smaug-bpe") {
    return std::vector<PrePattern>{{Expand(kLlama3), Lookahead::kRunWithoutNewline}};
  }
  if (name == "qwen2" || name == "deepseek-r1-qwen") {
    return std::vector<PrePattern>{{Expand(kQwen2), Lookahead::kRunWithoutNewline}};
  }
  if (name == "gpt-4o") return std::vector<PrePattern>{{Expand(kO200k), Lookahead::kRunWithoutNewline}};
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" || name == "codeshell") {
    return std::vector<PrePattern>{{"\\p{N}"}, gpt2};
  }
  if (name == "default" || name.empty()) {
    return std::vector<PrePattern>{{"[\\p{P}\\$\\+<=>\\^~\\|]+"}, gpt2, {"\\p{N}+"}, {"[0-9][0-9][0-9]"}};
  }
  return absl::UnimplementedError(cascade::StrCat("unknown byte-level BPE pre-tokenizer '", name,
                                                  "' (supported: gpt-2, llama-bpe, qwen2, "
                                                  "gpt-4o, smollm, default)"));
}

class BpeTokenizer final : public Tokenizer {
 public:
  struct Regex {
    std::unique_ptr<RE2> re;
    Lookahead lookahead;
  };
  BpeTokenizer(std::unique_ptr<const Vocab> vocab, std::vector<Regex> regexes)
      : Tokenizer(std::move(vocab)), regexes_(std::move(regexes)) {}

 protected:
  void EncodeText(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const override {
    const Vocab& v = vocab();
    const auto& byte_map = ByteToUnicode();
    std::string word;
    std::vector<int32_t> ids;
    for (std::string_view piece : Split(text)) {
      word.clear();
      for (char c : piece) word.append(byte_map[static_cast<uint8_t>(c)]);
      if (v.spec().ignore_merges) {
        if (const int32_t id = v.Find(word); id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      ids.clear();
      for (char c : piece) ids.push_back(v.byte_token(static_cast<uint8_t>(c)));
      ApplyRankedMerges(v, ids);
      for (int32_t id : ids) {
        if (id >= 0) {
          out.push_back(id);
        } else if (v.spec().unk_id >= 0) {
          out.push_back(v.spec().unk_id);  // The vocabulary lacks this byte.
        }
      }
    }
  }

 private:
  // Pre-tokenizes `text` into pieces that view into it.
  std::vector<std::string_view> Split(std::string_view text) const {
    std::vector<std::string_view> pieces{text}, next;
    for (const Regex& re : regexes_) {
      next.clear();
      for (std::string_view p : pieces) SplitOne(*re.re, re.lookahead, p, next);
      pieces.swap(next);
    }
    return pieces;
  }

  // Whether match `m` is the `\s+(?!\S)|\s+` alternative's.
  static bool IsLookaheadRun(Lookahead mode, std::string_view m) {
    if (mode == Lookahead::kNone) return false;
    for (size_t i = 0; i < m.size();) {
      uint32_t cp;
      i += DecodeUtf8(m, i, cp);
      if (!IsWhitespace(cp)) return false;
      if (mode == Lookahead::kRunWithoutNewline && (cp == '\r' || cp == '\n')) return false;
    }
    return true;
  }

  static void SplitOne(const RE2& re, Lookahead mode, std::string_view p, std::vector<std::string_view>& out) {
    re2::StringPiece input(p.data(), p.size());
    re2::StringPiece match[1];
    size_t pos = 0;
    while (pos < p.size()) {
      if (!re.Match(input, pos, p.size(), RE2::UNANCHORED, match, 1)) break;
      const size_t start = match[0].data() - p.data();
      size_t end = start + match[0].size();
      if (start > pos) out.push_back(p.substr(pos, start - pos));
      if (end == start) {  // Defensive: the patterns never match empty.
        uint32_t cp;
        end = start + DecodeUtf8(p, start, cp);
      } else if (end < p.size() && IsLookaheadRun(mode, p.substr(start, end - start))) {
        // `\s+(?!\S)`: give back the last code point when a non-space follows.
        uint32_t next_cp;
        DecodeUtf8(p, end, next_cp);
        if (!IsWhitespace(next_cp)) {
          size_t last = end - 1;
          while (last > start && (static_cast<uint8_t>(p[last]) & 0xC0) == 0x80) --last;
          if (last > start) end = last;
        }
      }
      out.push_back(p.substr(start, end - start));
      pos = end;
    }
    if (pos < p.size()) out.push_back(p.substr(pos));
  }

  std::vector<Regex> regexes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> NewBpeTokenizer(std::unique_ptr<const Vocab> vocab) {
  auto patterns = PreTokenizerPatterns(vocab->spec().pre_tokenizer);
  if (!patterns.ok()) {
    return absl::Status(patterns.status().code(),
                        cascade::StrCat(vocab->spec().source, ": ", ToStd(patterns.status().message())));
  }
  std::vector<BpeTokenizer::Regex> regexes;
  RE2::Options options;
  options.set_log_errors(false);
  for (const PrePattern& pattern : *patterns) {
    auto re = std::make_unique<RE2>(pattern.regex, options);
    if (!re->ok()) {
      return absl::InternalError(
          cascade::StrCat("pre-tokenizer regex '", pattern.regex, "' does not compile: ", re->error()));
    }
    regexes.push_back({std::move(re), pattern.lookahead});
  }
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(vocab), std::move(regexes)));
}

}  // namespace cascade::text
