// The GBNF compiler: text -> rules of byte sets and rule references (grammar/grammar.h).
// Groups, repetitions and classes over non-ASCII code points become synthesized rules, so
// that every element the matcher meets is one byte set or one reference.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "core/utf8.h"
#include "grammar/grammar.h"

namespace cascade::grammar {
namespace {

using Seq = std::vector<Element>;
using Alts = std::vector<Seq>;
constexpr int64_t kUnbounded = -1;
constexpr int kMaxNesting = 200;  // Groups inside groups.
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Range {
  uint32_t lo, hi;  // Inclusive code points.
};

// The code points [lo, hi] as UTF-8 byte-range sequences: each returned sequence is a
// list of (first, last) byte ranges, one per byte, and a code point's encoding matches
// exactly one sequence. The usual split (as in RE2 and Rust's utf8-ranges): first by
// encoded length, then until every continuation byte ranges over whole 6-bit blocks.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && edge < hi) {
      Utf8Sequences(lo, edge, out);
      Utf8Sequences(edge + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, a);
  AppendUtf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

// Sorted, merged ranges of Unicode scalar values; with `negate`, their complement. A
// range that spans the surrogates (U+D800 to U+DFFF) leaves them out: they are no
// characters, and their UTF-8 spellings are no UTF-8.
std::vector<Range> Normalize(std::vector<Range> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end(), [](Range a, Range b) { return a.lo < b.lo; });
  std::vector<Range> merged;
  for (Range r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  std::vector<Range> out;
  if (negate) {
    uint32_t next = 0;
    for (Range r : merged) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  } else {
    out = std::move(merged);
  }
  std::vector<Range> cut;
  for (Range r : out) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      cut.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) cut.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) cut.push_back({0xE000, r.hi});
  }
  return cut;
}

// A reference at the start of an alternative (after references that may match
// nothing): rule r can begin with rule `to`. It `grows` the matcher's stack when
// something follows `to` in the alternative, which is kept below `to`'s expansion.
struct LeftEdge {
  int32_t to;
  bool grows;
};

// Strongly connected components of the graph `edges` (node -> its edges): a component
// id per node. Tarjan's algorithm with an explicit stack, since the graph is as deep as
// the grammar is large.
std::vector<int32_t> Components(const std::vector<std::vector<LeftEdge>>& edges) {
  const size_t n = edges.size();
  std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1);
  std::vector<int32_t> open;                      // Visited, component not found yet.
  std::vector<std::pair<int32_t, size_t>> calls;  // (node, next edge) of the search.
  int32_t n_visited = 0, n_components = 0;
  auto visit = [&](int32_t v) {
    index[v] = low[v] = n_visited++;
    open.push_back(v);
    calls.push_back({v, 0});
  };
  for (size_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    visit(static_cast<int32_t>(start));
    while (!calls.empty()) {
      const auto [v, next] = calls.back();
      if (next < edges[v].size()) {
        ++calls.back().second;
        const int32_t w = edges[v][next].to;
        if (index[w] < 0) {
          visit(w);
        } else if (component[w] < 0) {  // On the open stack: in v's component.
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[v]);
      if (low[v] != index[v]) continue;
      int32_t w;
      do {
        w = open.back();
        open.pop_back();
        component[w] = n_components;
      } while (w != v);
      ++n_components;
    }
  }
  return component;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> Parse(std::string_view root) {
    SkipSpace();
    if (AtEnd()) return Error("the grammar is empty");
    while (!AtEnd()) CASCADE_RETURN_IF_ERROR(ParseDefinition());
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r]) {
        return absl::InvalidArgumentError(
            StrCat("grammar line ", first_use_line_[r], ": rule '", names_[r], "' is used but never defined"));
      }
    }
    const auto it = ids_.find(std::string(root));
    if (it == ids_.end()) return absl::InvalidArgumentError(StrCat("grammar: no rule named '", root, "'"));
    CASCADE_RETURN_IF_ERROR(CheckLeftRecursion());
    return Flatten(it->second);
  }

 private:
  // --- Lexing -------------------------------------------------------------------------
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  int Line() const { return 1 + static_cast<int>(std::count(text_.begin(), text_.begin() + pos_, '\n')); }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("grammar line ", Line(), ": ", what));
  }
  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string_view Name() {
    const size_t begin = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  // Whether a definition (`name ::=`) starts here; leaves the position unchanged.
  bool AtDefinition() {
    const size_t save = pos_;
    const bool named = !Name().empty();
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t')) ++pos_;
    const bool yes = named && text_.substr(pos_, 3) == "::=";
    pos_ = save;
    return yes;
  }
  // One code point of a literal or class (escapes decoded; raw UTF-8 decoded).
  absl::StatusOr<uint32_t> CodePoint() {
    if (AtEnd()) return Error("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(text_[pos_++]);
    if (c == '\\') return Escape();
    if (c < 0x80) return c;
    uint32_t cp = 0;
    const size_t n = DecodeUtf8At(text_, pos_ - 1, &cp);  // Overlongs, surrogates, past U+10FFFF: no.
    if (n == 0) return Error("invalid UTF-8");
    pos_ += n - 1;
    return cp;
  }
  absl::StatusOr<uint32_t> Escape() {
    if (AtEnd()) return Error("a '\\' ends the grammar");
    const char c = text_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          return Error(StrCat("unknown escape '\\", std::string(1, c), "'"));
        }
        return static_cast<unsigned char>(c);  // \\ \" \] \[ \- and other punctuation.
    }
  }
  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) return Error("bad hexadecimal escape");
      v = v * 16 + d;
      ++pos_;
    }
    if (v > kMaxCodePoint) return Error("escape beyond U+10FFFF");
    if (v >= 0xD800 && v <= 0xDFFF) return Error("escape of a surrogate (U+D800 to U+DFFF), which is no character");
    return v;
  }

  // --- Rules ----------------------------------------------------------------------------
  int32_t RuleId(std::string_view name) {
    auto [it, added] = ids_.try_emplace(std::string(name), static_cast<int32_t>(rules_.size()));
    if (added) AddRule(std::string(name));
    return it->second;
  }
  int32_t AddRule(std::string name) {
    rules_.emplace_back();
    names_.push_back(std::move(name));
    defined_.push_back(false);
    first_use_line_.push_back(Line());
    return static_cast<int32_t>(rules_.size()) - 1;
  }
  int32_t Synthesize(int32_t parent, Alts alts) {
    const int32_t r = AddRule(StrCat(names_[parent], "-", ++synthesized_[parent]));
    rules_[r] = std::move(alts);
    defined_[r] = true;
    return r;
  }
  int32_t ByteSetId(const ByteSet& set) {
    const std::string key = set.to_string();
    auto [it, added] = set_ids_.try_emplace(key, static_cast<int32_t>(byte_sets_.size()));
    if (added) byte_sets_.push_back(set);
    return it->second;
  }
  Element Bytes(const ByteSet& set) { return {Element::kBytes, ByteSetId(set)}; }
  Element Byte(uint8_t b) {
    ByteSet s;
    s.set(b);
    return Bytes(s);
  }

  absl::Status ParseDefinition() {
    const std::string_view name = Name();
    if (name.empty()) return Error(StrCat("expected a rule name, found '", std::string(1, Peek()), "'"));
    SkipSpace();
    if (text_.substr(pos_, 3) != "::=") return Error(StrCat("expected '::=' after '", name, "'"));
    pos_ += 3;
    const int32_t r = RuleId(name);
    if (defined_[r]) return Error(StrCat("rule '", name, "' is defined twice"));
    defined_[r] = true;
    CASCADE_ASSIGN_OR_RETURN(Alts alts, ParseAlternatives(r, /*nested=*/false));
    rules_[r] = std::move(alts);
    return absl::OkStatus();
  }

  absl::StatusOr<Alts> ParseAlternatives(int32_t rule, bool nested) {
    Alts alts;
    while (true) {
      CASCADE_ASSIGN_OR_RETURN(Seq seq, ParseSequence(rule, nested));
      alts.push_back(std::move(seq));
      SkipSpace();
      if (Peek() != '|') break;
      ++pos_;
    }
    return alts;
  }

  absl::StatusOr<Seq> ParseSequence(int32_t rule, bool nested) {
    Seq seq;
    size_t item = 0;  // Where the last item (what a repetition applies to) starts.
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() == '|') break;
      if (Peek() == ')') {
        if (!nested) return Error("unmatched ')'");
        break;
      }
      if (!nested && AtDefinition()) break;
      const char c = Peek();
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (item == seq.size()) return Error(StrCat("'", std::string(1, c), "' repeats nothing"));
        CASCADE_RETURN_IF_ERROR(ParseRepetition(rule, seq, item));
        continue;
      }
      item = seq.size();
      CASCADE_RETURN_IF_ERROR(ParseItem(rule, seq));
    }
    return seq;
  }

  absl::Status ParseItem(int32_t rule, Seq& seq) {
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      while (Peek() != '"') {
        if (AtEnd() || Peek() == '\n') return Error("unterminated literal");
        if (Peek() == '\\') {
          CASCADE_ASSIGN_OR_RETURN(uint32_t cp, CodePoint());
          std::string bytes;
          AppendUtf8(cp, bytes);
          for (char b : bytes) seq.push_back(Byte(static_cast<uint8_t>(b)));
        } else {
          seq.push_back(Byte(static_cast<uint8_t>(text_[pos_++])));  // Raw bytes as written.
        }
      }
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '[') return ParseClass(rule, seq);
    if (c == '.') {
      ++pos_;
      return AppendClass(rule, Normalize({}, /*negate=*/true), seq);
    }
    if (c == '(') {
      ++pos_;
      // The parser recurses per group: a bound keeps a hostile grammar off the stack's end.
      if (++group_depth_ > kMaxNesting) return Error(StrCat("groups nested deeper than ", kMaxNesting));
      CASCADE_ASSIGN_OR_RETURN(Alts alts, ParseAlternatives(rule, /*nested=*/true));
      --group_depth_;
      if (Peek() != ')') return Error("missing ')'");
      ++pos_;
      seq.push_back({Element::kRule, Synthesize(rule, std::move(alts))});
      return absl::OkStatus();
    }
    if (IsNameChar(c)) {
      seq.push_back({Element::kRule, RuleId(Name())});
      return absl::OkStatus();
    }
    return Error(StrCat("unexpected '", std::string(1, c), "'"));
  }

  absl::Status ParseClass(int32_t rule, Seq& seq) {
    ++pos_;  // '['
    const bool negate = Peek() == '^';
    if (negate) ++pos_;
    std::vector<Range> ranges;
    while (Peek() != ']') {
      if (AtEnd()) return Error("unterminated character class");
      CASCADE_ASSIGN_OR_RETURN(uint32_t lo, CodePoint());
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
        ++pos_;
        CASCADE_ASSIGN_OR_RETURN(hi, CodePoint());
        if (hi < lo) return Error("a class range runs backwards");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return AppendClass(rule, Normalize(std::move(ranges), negate), seq);
  }

  // A class as one byte set when it is all ASCII, else a rule of the ASCII byte set and
  // each UTF-8 sequence of the rest.
  absl::Status AppendClass(int32_t rule, const std::vector<Range>& ranges, Seq& seq) {
    ByteSet ascii;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> wide;
    for (Range r : ranges) {
      for (uint32_t cp = r.lo; cp <= std::min<uint32_t>(r.hi, 0x7F); ++cp) ascii.set(cp);
      if (r.hi >= 0x80) Utf8Sequences(std::max<uint32_t>(r.lo, 0x80), r.hi, wide);
    }
    if (wide.empty()) {
      if (ascii.none()) return Error("a character class matches nothing");
      seq.push_back(Bytes(ascii));
      return absl::OkStatus();
    }
    Alts alts;
    if (ascii.any()) alts.push_back({Bytes(ascii)});
    for (const auto& byte_ranges : wide) {
      Seq s;
      for (auto [a, b] : byte_ranges) {
        ByteSet set;
        for (int v = a; v <= b; ++v) set.set(v);
        s.push_back(Bytes(set));
      }
      alts.push_back(std::move(s));
    }
    seq.push_back({Element::kRule, Synthesize(rule, std::move(alts))});
    return absl::OkStatus();
  }

  absl::Status ParseRepetition(int32_t rule, Seq& seq, size_t item) {
    int64_t lo = 0, hi = kUnbounded;
    const char c = text_[pos_++];
    if (c == '*') {
      lo = 0;
    } else if (c == '+') {
      lo = 1;
    } else if (c == '?') {
      hi = 1;
    } else {
      CASCADE_ASSIGN_OR_RETURN(lo, Count());
      hi = lo;
      if (Peek() == ',') {
        ++pos_;
        hi = kUnbounded;
        if (Peek() != '}') {
          CASCADE_ASSIGN_OR_RETURN(hi, Count());
        }
      }
      if (Peek() != '}') return Error("expected '}'");
      ++pos_;
      if (hi != kUnbounded && hi < lo) return Error("a repetition's maximum is below its minimum");
      if (std::max(lo, hi) > 10000) return Error("a repetition count above 10000");
    }
    // The item as one element: a multi-byte literal becomes a rule of its own.
    Element x = seq[item];
    if (seq.size() - item > 1) {
      x = {Element::kRule, Synthesize(rule, {Seq(seq.begin() + item, seq.end())})};
    }
    seq.resize(item);
    for (int64_t i = 0; i < lo; ++i) seq.push_back(x);
    if (hi == kUnbounded) {
      // r ::= x r | "": the reference at the alternative's end keeps the stack flat.
      const int32_t r = Synthesize(rule, {});
      rules_[r] = {{x, {Element::kRule, r}}, {}};
      seq.push_back({Element::kRule, r});
    } else if (hi > lo) {
      // Nested optionals, (x (x (x)?)?)?, so that a count has one derivation.
      int32_t inner = Synthesize(rule, {{x}, {}});
      for (int64_t i = lo + 1; i < hi; ++i) inner = Synthesize(rule, {{x, {Element::kRule, inner}}, {}});
      seq.push_back({Element::kRule, inner});
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Count() {
    SkipSpace();
    int64_t v = 0;
    const size_t begin = pos_;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > 1000000) return Error("a repetition count is too large");
    }
    if (pos_ == begin) return Error("expected a repetition count");
    SkipSpace();
    return v;
  }

  // --- Checks and output ------------------------------------------------------------------
  // The matcher expands references eagerly, so a rule that can reach itself without
  // consuming a byte and with something left to match after it would expand forever,
  // each turn one place deeper: refuse it here, naming the rule. A cycle without such a
  // place comes back to the same stack and the matcher's expansion stops there: `x*` is
  // `r ::= x r | ""`, which is such a cycle when x may match nothing.
  absl::Status CheckLeftRecursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& alt : rules_[r]) {
          const bool all = std::all_of(alt.begin(), alt.end(),
                                       [&](const Element& e) { return e.kind == Element::kRule && nullable[e.arg]; });
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<LeftEdge>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r]) {
        for (size_t i = 0; i < alt.size() && alt[i].kind == Element::kRule; ++i) {
          left[r].push_back({alt[i].arg, i + 1 < alt.size()});
          if (!nullable[alt[i].arg]) break;
        }
      }
    }
    // A cycle through a growing edge: one whose ends are in the same component.
    const std::vector<int32_t> component = Components(left);
    for (size_t r = 0; r < n; ++r) {
      for (const LeftEdge& e : left[r]) {
        if (e.grows && component[e.to] == component[r]) {
          return absl::InvalidArgumentError(StrCat("grammar: rule '", names_[r], "' is left-recursive"));
        }
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Grammar> Flatten(int32_t root) {
    auto g = std::make_shared<Grammar>();
    g->byte_sets = std::move(byte_sets_);
    g->rule_names = std::move(names_);
    g->root = root;
    g->alternatives.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Seq& alt : rules_[r]) {
        g->alternatives[r].push_back(static_cast<int32_t>(g->elements.size()));
        g->elements.insert(g->elements.end(), alt.begin(), alt.end());
        g->elements.push_back({Element::kEnd, 0});
      }
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int group_depth_ = 0;
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<int> first_use_line_;
  std::map<std::string, int32_t> ids_;
  std::map<int32_t, int> synthesized_;
  std::vector<ByteSet> byte_sets_;
  absl::flat_hash_map<std::string, int32_t> set_ids_;
};

std::string DescribeSet(const ByteSet& set) {
  std::string out = "[";
  for (int b = 0; b < 256; ++b) {
    if (!set.test(b)) continue;
    int e = b;
    while (e + 1 < 256 && set.test(e + 1)) ++e;
    auto put = [&](int v) {
      char buf[8];
      if (v >= 0x21 && v < 0x7F && v != '\\' && v != ']' && v != '-') {
        out += static_cast<char>(v);
      } else {
        std::snprintf(buf, sizeof(buf), "\\x%02X", v);
        out += buf;
      }
    };
    put(b);
    if (e > b) {
      out += '-';
      put(e);
    }
    b = e;
  }
  return out + "]";
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(std::string_view text, std::string_view root) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Parser(text).Parse(root);
  if (!g.ok()) return g;
  auto named = std::const_pointer_cast<Grammar>(*std::move(g));
  named->source = StrCat(root, "\n", text);
  return std::shared_ptr<const Grammar>(std::move(named));
}

std::string Grammar::ToString() const {
  std::string out;
  for (size_t r = 0; r < alternatives.size(); ++r) {
    out += rule_names[r] + " ::=";
    for (size_t a = 0; a < alternatives[r].size(); ++a) {
      if (a > 0) out += " |";
      for (int32_t i = alternatives[r][a]; elements[i].kind != Element::kEnd; ++i) {
        const Element& e = elements[i];
        out += " " + (e.kind == Element::kRule ? rule_names[e.arg] : DescribeSet(byte_sets[e.arg]));
      }
    }
    out += "\n";
  }
  return out;
}

std::string RenameGbnfRule(std::string_view gbnf, std::string_view from, std::string_view to) {
  const auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  std::string out;
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {  // A literal or a class, copied with its escapes.
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != close) j += gbnf[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, gbnf.size());
      out.append(gbnf.substr(i, j - i));
      i = j;
    } else if (c == '#') {
      const size_t j = std::min(gbnf.find('\n', i), gbnf.size());
      out.append(gbnf.substr(i, j - i));
      i = j;
    } else if (name_char(c)) {
      size_t j = i;
      while (j < gbnf.size() && name_char(gbnf[j])) ++j;
      const std::string_view name = gbnf.substr(i, j - i);
      out.append(name == from ? to : name);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out += ch;  // UTF-8 bytes as they are: the parser copies a literal's raw bytes.
    }
  }
  return out + "\"";
}

}  // namespace cascade::grammar
