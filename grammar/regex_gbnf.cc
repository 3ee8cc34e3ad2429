// Regular expressions to GBNF (grammar/json_schema.h): a pattern is parsed into a small
// tree of character sets, sequences, alternatives and repetitions, and the tree is written
// back as one GBNF expression, which needs no rules of its own because GBNF's groups,
// classes and repetitions are those of regular expressions.
//
// The dialect is the subset of ECMA-262 that JSON Schema's `pattern` uses, with Python's
// `re` semantics where the two differ (Python's `jsonschema` is our reference): `.` is any
// character but "\n", and `\d \w \s` are ASCII ([0-9], [A-Za-z0-9_], [ \t\n\r\f\v]), as in
// ECMA-262 and Python's re.ASCII. The match is whole (re.fullmatch), so `^` and `$` may
// only stand where nothing can precede (follow) them, and are dropped there.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"
#include "core/utf8.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace cascade::grammar {
namespace {

constexpr int kMaxGroupNesting = 200;  // Groups inside groups.

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kUnbounded = -1;
// GBNF's own limit on a repetition count (grammar/gbnf.cc).
constexpr int kMaxRepeat = 10000;

// A set of code points: sorted, disjoint, non-adjacent closed intervals.
class CharSet {
 public:
  using Range = std::pair<uint32_t, uint32_t>;

  static CharSet Of(uint32_t lo, uint32_t hi) {
    CharSet s;
    s.Add(lo, hi);
    return s;
  }
  void Add(uint32_t lo, uint32_t hi) {
    ranges_.emplace_back(lo, hi);
    Normalize();
  }
  void Add(const CharSet& other) {
    ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
    Normalize();
  }
  // Every Unicode scalar value not in the set.
  CharSet Complement() const {
    CharSet out;
    uint32_t next = 0;
    for (auto [lo, hi] : ranges_) {
      if (lo > next) out.ranges_.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
    out.Normalize();
    return out;
  }
  CharSet Minus(uint32_t lo, uint32_t hi) const {
    CharSet out;
    for (auto [a, b] : ranges_) {
      if (b < lo || a > hi) {
        out.ranges_.emplace_back(a, b);
        continue;
      }
      if (a < lo) out.ranges_.emplace_back(a, lo - 1);
      if (b > hi) out.ranges_.emplace_back(hi + 1, b);
    }
    return out;
  }
  bool Contains(uint32_t c) const {
    return std::any_of(ranges_.begin(), ranges_.end(), [c](const Range& r) { return r.first <= c && c <= r.second; });
  }
  bool empty() const { return ranges_.empty(); }
  bool single() const { return ranges_.size() == 1 && ranges_[0].first == ranges_[0].second; }
  const std::vector<Range>& ranges() const { return ranges_; }

 private:
  // Sorted and merged, the surrogates (U+D800 to U+DFFF) cut out: they are no characters,
  // and a range such as [\]-\U0001F64F] spans them.
  void Normalize() {
    std::sort(ranges_.begin(), ranges_.end());
    std::vector<Range> merged;
    for (Range r : ranges_) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    ranges_ = std::move(merged);
    *this = Minus(0xD800, 0xDFFF);
  }

  std::vector<Range> ranges_;
};

CharSet Digits() { return CharSet::Of('0', '9'); }
CharSet WordChars() {
  CharSet s = CharSet::Of('a', 'z');
  s.Add('A', 'Z');
  s.Add('0', '9');
  s.Add('_', '_');
  return s;
}
CharSet Spaces() {
  CharSet s = CharSet::Of('\t', '\r');  // \t \n \v \f \r
  s.Add(' ', ' ');
  return s;
}

// The parsed pattern. Anchors are nodes until the check that drops them.
struct Node {
  enum Kind { kChars, kSeq, kAlt, kRepeat, kStart, kEnd };
  Kind kind = kSeq;
  CharSet chars;               // kChars.
  std::vector<Node> children;  // kSeq, kAlt; kRepeat: one.
  int min = 0, max = 0;        // kRepeat; max kUnbounded for no limit.
  size_t offset = 0;           // Where in the pattern (code points), for errors.

  static Node Make(Kind kind, size_t offset, CharSet chars = {}) {
    Node n;
    n.kind = kind;
    n.offset = offset;
    n.chars = std::move(chars);
    return n;
  }
};

absl::StatusOr<std::vector<uint32_t>> DecodeUtf8(std::string_view text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8At(text, i, &cp);  // Overlongs, surrogates, past U+10FFFF: no.
    if (n == 0) return absl::InvalidArgumentError("regex: invalid UTF-8");
    out.push_back(cp);
    i += n;
  }
  return out;
}

// A recursive-descent parser over code points. Single use.
class RegexParser {
 public:
  RegexParser(std::string_view pattern, std::vector<uint32_t> cps) : pattern_(pattern), cps_(std::move(cps)) {}

  absl::StatusOr<Node> Parse() {
    CASCADE_ASSIGN_OR_RETURN(Node root, ParseAlternation());
    if (!AtEnd()) return Error("unmatched ')'");
    return root;
  }

 private:
  bool AtEnd() const { return pos_ >= cps_.size(); }
  uint32_t Peek(size_t ahead = 0) const { return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0; }
  bool Next(uint32_t c) {
    if (AtEnd() || cps_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Error(std::string_view what) const { return ErrorAt(pos_, what); }
  absl::Status ErrorAt(size_t offset, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("regex '", pattern_, "' at offset ", offset, ": ", what));
  }

  absl::StatusOr<Node> ParseAlternation() {
    Node alt = Node::Make(Node::kAlt, pos_);
    while (true) {
      CASCADE_ASSIGN_OR_RETURN(Node seq, ParseSequence());
      alt.children.push_back(std::move(seq));
      if (!Next('|')) break;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  absl::StatusOr<Node> ParseSequence() {
    Node seq = Node::Make(Node::kSeq, pos_);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const size_t start = pos_;
      CASCADE_ASSIGN_OR_RETURN(Node atom, ParseAtom());
      CASCADE_ASSIGN_OR_RETURN(std::optional<Node> repeated, ParseQuantifier(atom));
      if (repeated.has_value()) {
        repeated->offset = start;
        seq.children.push_back(std::move(*repeated));
      } else {
        seq.children.push_back(std::move(atom));
      }
    }
    return seq;
  }

  // The quantifier after `atom`, if one follows: the repetition node, or nullopt.
  absl::StatusOr<std::optional<Node>> ParseQuantifier(Node& atom) {
    const size_t at = pos_;
    int min = 0, max = kUnbounded;
    const uint32_t c = Peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c != '{' || !ParseCounts(&min, &max)) {
      return std::optional<Node>();  // Python reads a `{` that opens no count as itself.
    }
    if (atom.kind == Node::kStart || atom.kind == Node::kEnd) return ErrorAt(at, "an anchor cannot be repeated");
    if (max != kUnbounded && max < min) return ErrorAt(at, "a repetition's maximum is below its minimum");
    if (std::max(min, max) > kMaxRepeat) return ErrorAt(at, StrCat("a repetition count above ", kMaxRepeat));
    Next('?');  // Lazy: the same strings match.
    if (Peek() == '+') return Error("possessive quantifiers are not supported");
    if (Peek() == '*' || Peek() == '?' || (Peek() == '{' && LooksLikeCounts())) return Error("multiple repeat");
    Node rep = Node::Make(Node::kRepeat, atom.offset);
    rep.min = min;
    rep.max = max;
    rep.children.push_back(std::move(atom));
    return std::optional<Node>(std::move(rep));
  }

  bool LooksLikeCounts() {
    const size_t save = pos_;
    int a, b;
    const bool yes = ParseCounts(&a, &b);
    pos_ = save;
    return yes;
  }

  // `{m}`, `{m,}`, `{,n}`, `{m,n}` at the position; leaves it unchanged when it is not one.
  bool ParseCounts(int* min, int* max) {
    const size_t save = pos_;
    ++pos_;  // '{'
    const std::optional<int> lo = Number();
    std::optional<int> hi = lo;
    const bool comma = Next(',');
    if (comma) hi = Number();
    if (!Next('}') || (!lo.has_value() && !comma)) {
      pos_ = save;
      return false;
    }
    *min = lo.value_or(0);
    *max = comma && !hi.has_value() ? kUnbounded : *hi;
    return true;
  }

  std::optional<int> Number() {
    std::optional<int> v;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<int64_t>(int64_t{v.value_or(0)} * 10 + (Peek() - '0'), kMaxRepeat + 1);
      ++pos_;
    }
    return v;
  }

  absl::StatusOr<Node> ParseAtom() {
    const size_t at = pos_;
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': return ParseGroup();
      case '[': return Chars(ParseClass(), at);
      case '.': return Chars(CharSet::Of('\n', '\n').Complement(), at);
      case '^': return Node::Make(Node::kStart, at);
      case '$': return Node::Make(Node::kEnd, at);
      case '\\': return Chars(ParseEscape(/*in_class=*/false), at);
      case '*':
      case '+':
      case '?': --pos_; return Error("nothing to repeat");
      default: return Node::Make(Node::kChars, at, CharSet::Of(c, c));
    }
  }

  absl::StatusOr<Node> Chars(absl::StatusOr<CharSet> set, size_t at) const {
    if (!set.ok()) return set.status();
    if (set->empty()) return ErrorAt(at, "a character class that matches nothing");
    return Node::Make(Node::kChars, at, *std::move(set));
  }

  absl::StatusOr<Node> ParseGroup() {
    const size_t at = pos_ - 1;  // The '('.
    if (Next('?')) {
      if (Next(':')) {
        // A non-capturing group: as any group here.
      } else if (Peek() == 'P' && Peek(1) == '<') {
        pos_ += 2;
        CASCADE_RETURN_IF_ERROR(SkipGroupName());
      } else if (Peek() == '<' && Peek(1) != '=' && Peek(1) != '!') {
        ++pos_;
        CASCADE_RETURN_IF_ERROR(SkipGroupName());
      } else if (Peek() == '=' || Peek() == '!' || Peek() == '<') {
        return ErrorAt(at, "lookaround assertions are not supported");
      } else if (Peek() == 'P' && Peek(1) == '=') {
        return ErrorAt(at, "backreferences are not supported");
      } else {
        return ErrorAt(at, "inline flags and other (?...) constructs are not supported");
      }
    }
    // The parser recurses per group: a bound keeps a hostile pattern off the stack's end.
    if (++group_depth_ > kMaxGroupNesting) return ErrorAt(at, "groups nested deeper than 200");
    CASCADE_ASSIGN_OR_RETURN(Node inner, ParseAlternation());
    --group_depth_;
    if (!Next(')')) return ErrorAt(at, "missing ')'");
    return inner;
  }

  absl::Status SkipGroupName() {
    while (!AtEnd() && Peek() != '>') ++pos_;
    if (!Next('>')) return Error("unterminated group name");
    return absl::OkStatus();
  }

  // A class after its '['. Python's rules: a ']' first is itself, a '-' first or last is
  // itself.
  absl::StatusOr<CharSet> ParseClass() {
    const bool negate = Next('^');
    CharSet set;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']' && !first) break;
      first = false;
      CASCADE_ASSIGN_OR_RETURN(CharSet lo, ClassItem());
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < cps_.size()) {
        ++pos_;
        CASCADE_ASSIGN_OR_RETURN(CharSet hi, ClassItem());
        if (!lo.single() || !hi.single()) return Error("bad character range");
        const uint32_t a = lo.ranges()[0].first, b = hi.ranges()[0].first;
        if (b < a) return Error("a class range runs backwards");
        set.Add(a, b);
      } else {
        set.Add(lo);
      }
    }
    ++pos_;  // ']'
    return negate ? set.Complement() : set;
  }

  absl::StatusOr<CharSet> ClassItem() {
    const uint32_t c = cps_[pos_++];
    if (c == '\\') return ParseEscape(/*in_class=*/true);
    return CharSet::Of(c, c);
  }

  // An escape after its '\'.
  absl::StatusOr<CharSet> ParseEscape(bool in_class) {
    const size_t at = pos_ - 1;  // The backslash.
    if (AtEnd()) return ErrorAt(at, "a '\\' ends the pattern");
    const uint32_t c = cps_[pos_++];
    auto one = [](uint32_t v) { return CharSet::Of(v, v); };
    switch (c) {
      case 'd': return Digits();
      case 'D': return Digits().Complement();
      case 'w': return WordChars();
      case 'W': return WordChars().Complement();
      case 's': return Spaces();
      case 'S': return Spaces().Complement();
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case 'a': return one('\a');
      case 'x': return HexEscape(2, at);
      case 'u': return HexEscape(4, at);
      case 'U': return HexEscape(8, at);
      case 'b':
        if (in_class) return one('\b');
        return ErrorAt(at, "the word-boundary anchor \\b is not supported");
      case 'B':
      case 'A':
      case 'Z':
      case 'z':
      case 'G': return ErrorAt(at, StrCat("the anchor \\", std::string(1, static_cast<char>(c)), " is not supported"));
      case '0':
        if (Peek() >= '0' && Peek() <= '7') return ErrorAt(at, "octal escapes are not supported");
        return one(0);
      default: break;
    }
    if (c >= '1' && c <= '9') return ErrorAt(at, "backreferences are not supported");
    if (c < 0x80 && std::isalnum(static_cast<int>(c))) {
      return ErrorAt(at, StrCat("unknown escape \\", std::string(1, static_cast<char>(c))));
    }
    return one(c);  // An escaped metacharacter (or any other punctuation) is itself.
  }

  absl::StatusOr<CharSet> HexEscape(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const uint32_t c = Peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return ErrorAt(at, "bad hexadecimal escape");
      v = v * 16 + d;
      ++pos_;
    }
    if (v > kMaxCodePoint) return ErrorAt(at, "escape beyond U+10FFFF");
    if (v >= 0xD800 && v <= 0xDFFF)
      return ErrorAt(at, "escape of a surrogate (U+D800 to U+DFFF), which is no character");
    return CharSet::Of(v, v);
  }

  std::string_view pattern_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  int group_depth_ = 0;
};

// Drops the anchors where they are no-ops for a whole match (`^` with nothing before it,
// `$` with nothing after it) and refuses the others, which would need lookaround.
absl::Status DropAnchors(std::string_view pattern, Node& node, bool at_start, bool at_end) {
  auto refuse = [&](std::string_view what) {
    return absl::InvalidArgumentError(StrCat("regex '", pattern, "' at offset ", node.offset, ": ", what));
  };
  switch (node.kind) {
    case Node::kStart:
      if (!at_start) return refuse("'^' only anchors the start of the pattern");
      node = Node::Make(Node::kSeq, node.offset);
      return absl::OkStatus();
    case Node::kEnd:
      if (!at_end) return refuse("'$' only anchors the end of the pattern");
      node = Node::Make(Node::kSeq, node.offset);
      return absl::OkStatus();
    case Node::kChars: return absl::OkStatus();
    case Node::kAlt:
      for (Node& child : node.children) CASCADE_RETURN_IF_ERROR(DropAnchors(pattern, child, at_start, at_end));
      return absl::OkStatus();
    case Node::kRepeat: return DropAnchors(pattern, node.children[0], false, false);
    case Node::kSeq: {
      // Anchors next to anchors still stand at the edge: `^^a`, `a$$`.
      auto anchor = [](const Node& n) { return n.kind == Node::kStart || n.kind == Node::kEnd; };
      std::vector<Node>& c = node.children;
      for (size_t i = 0; i < c.size(); ++i) {
        const bool start = at_start && std::all_of(c.begin(), c.begin() + i, anchor);
        const bool end = at_end && std::all_of(c.begin() + i + 1, c.end(), anchor);
        CASCADE_RETURN_IF_ERROR(DropAnchors(pattern, c[i], start, end));
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// --- Writing GBNF -------------------------------------------------------------------------

// A GBNF expression and how it may be combined: kAtom takes a quantifier as it is, kSeq
// sits in a sequence as it is, kAlt needs parentheses in both.
struct Expr {
  enum Shape { kEmpty, kAtom, kSeq, kAlt };
  std::string text;
  Shape shape = kEmpty;
};

std::string Hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*X", digits, v);
  return buf;
}

// One code point inside a GBNF class: escaped where GBNF would read it otherwise, and
// non-ASCII as \u / \U so that the grammar text stays ASCII.
std::string ClassChar(uint32_t c) {
  if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '"')
    return StrCat("\\", std::string(1, static_cast<char>(c)));
  if (c == '^' || c < 0x20 || c == 0x7F) return "\\x" + Hex(c, 2);
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  return c < 0x10000 ? "\\u" + Hex(c, 4) : "\\U" + Hex(c, 8);
}

std::string ClassRanges(const CharSet& set) {
  std::string out;
  for (auto [lo, hi] : set.ranges()) {
    out += ClassChar(lo);
    if (hi > lo) out += (hi > lo + 1 ? "-" : "") + ClassChar(hi);
  }
  return out;
}

// A GBNF class for a non-empty set, negated when that is shorter (`.` is `[^\n]`).
std::string GbnfClass(const CharSet& set) {
  const CharSet complement = set.Complement();
  if (!complement.empty() && complement.ranges().size() < set.ranges().size()) {
    return "[^" + ClassRanges(complement) + "]";
  }
  return "[" + ClassRanges(set) + "]";
}

// How a character is written inside a JSON string: as itself, or escaped as Python's
// json.dumps(ensure_ascii=False) writes it (the one spelling we generate of each).
std::string JsonChar(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (c < 0x20) {
    std::string hex = Hex(c, 4);
    std::transform(hex.begin(), hex.end(), hex.begin(), [](char h) { return std::tolower(h); });
    return "\\u" + hex;
  }
  return Utf8Of(c);
}

// Two or more alternatives, atoms or sequences.
Expr Alternatives(const std::vector<Expr>& alts) {
  std::string text;
  for (const Expr& a : alts) text += (text.empty() ? "" : " | ") + a.text;
  return {text, Expr::kAlt};
}

class Writer {
 public:
  explicit Writer(RegexEscape escape) : escape_(escape) {}

  Expr Write(const Node& node) const {
    switch (node.kind) {
      case Node::kChars: return Chars(node.chars);
      case Node::kSeq: return Sequence(node.children);
      case Node::kAlt: return Alternation(node.children);
      case Node::kRepeat: return Repeat(node);
      case Node::kStart:
      case Node::kEnd: break;  // Dropped before writing.
    }
    return {};
  }

 private:
  bool json() const { return escape_ == RegexEscape::kJsonString; }

  // The text of a one-character set (as it appears in the output), for merging literals.
  std::string Spelling(uint32_t c) const { return json() ? JsonChar(c) : Utf8Of(c); }

  Expr Chars(const CharSet& set) const {
    if (set.single()) {
      return Literal(Spelling(set.ranges()[0].first));
    }
    if (!json()) return {GbnfClass(set), Expr::kAtom};
    // Inside a JSON string: the characters that stand as themselves in one class, and
    // the escaped ones (quote, backslash, controls) each by its escape.
    std::vector<Expr> alts;
    const CharSet plain = set.Minus(0, 0x1F).Minus('"', '"').Minus('\\', '\\');
    if (!plain.empty()) {
      alts.push_back(plain.single() ? Literal(Spelling(plain.ranges()[0].first)) : Expr{GbnfClass(plain), Expr::kAtom});
    }
    std::string short_escapes;
    std::string unicode_escapes[2];  // \u000X and \u001X: the last hex digit.
    for (uint32_t c : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (set.Contains(c)) short_escapes += ClassChar(c);
    }
    for (uint32_t c = 0; c < 0x20; ++c) {
      if (!set.Contains(c)) continue;
      const std::string spelled = JsonChar(c);
      if (spelled.size() == 2) {
        short_escapes += spelled[1];
      } else {
        unicode_escapes[c >> 4] += spelled.back();
      }
    }
    if (!short_escapes.empty()) alts.push_back({"\"\\\\\" [" + short_escapes + "]", Expr::kSeq});
    for (int high = 0; high < 2; ++high) {
      if (!unicode_escapes[high].empty()) {
        alts.push_back({StrCat("\"\\\\u00", high, "\" [", unicode_escapes[high], "]"), Expr::kSeq});
      }
    }
    return alts.size() == 1 ? alts[0] : Alternatives(alts);
  }

  Expr Sequence(const std::vector<Node>& children) const {
    std::vector<Expr> items;
    std::string literal;  // Consecutive single characters, written as one literal.
    auto flush = [&] {
      if (!literal.empty()) items.push_back(Literal(literal));
      literal.clear();
    };
    for (const Node& child : children) {
      if (child.kind == Node::kChars && child.chars.single()) {
        literal += Spelling(child.chars.ranges()[0].first);
        continue;
      }
      flush();
      Expr e = Write(child);
      if (e.shape != Expr::kEmpty) items.push_back(std::move(e));
    }
    flush();
    if (items.empty()) return {};
    if (items.size() == 1) return items[0];
    std::string text;
    for (const Expr& item : items) {
      text += (text.empty() ? "" : " ") + (item.shape == Expr::kAlt ? "(" + item.text + ")" : item.text);
    }
    return {text, Expr::kSeq};
  }

  // A literal of the characters spelled `text`: an atom only when it is one character,
  // since a quantifier must repeat the whole of it.
  static Expr Literal(const std::string& text) {
    const auto cps = DecodeUtf8(text);
    return {GbnfLiteral(text), cps.ok() && cps->size() == 1 ? Expr::kAtom : Expr::kSeq};
  }

  Expr Alternation(const std::vector<Node>& children) const {
    std::vector<Expr> alts;
    bool empty = false;
    for (const Node& child : children) {
      Expr e = Write(child);
      if (e.shape == Expr::kEmpty) {
        empty = true;
      } else if (std::none_of(alts.begin(), alts.end(), [&](const Expr& a) { return a.text == e.text; })) {
        alts.push_back(std::move(e));
      }
    }
    if (alts.empty()) return {};
    const Expr e = alts.size() == 1 ? alts[0] : Alternatives(alts);
    if (!empty) return e;
    return {(e.shape == Expr::kAtom ? e.text : "(" + e.text + ")") + "?", Expr::kAtom};
  }

  Expr Repeat(const Node& node) const {
    Expr inner = Write(node.children[0]);
    if (inner.shape == Expr::kEmpty || node.max == 0) return {};
    const std::string base = inner.shape == Expr::kAtom ? inner.text : "(" + inner.text + ")";
    const int lo = node.min, hi = node.max;
    std::string q;
    if (lo == 0 && hi == kUnbounded) {
      q = "*";
    } else if (lo == 1 && hi == kUnbounded) {
      q = "+";
    } else if (lo == 0 && hi == 1) {
      q = "?";
    } else if (lo == hi) {
      if (lo == 1) return inner;
      q = StrCat("{", lo, "}");
    } else {
      q = hi == kUnbounded ? StrCat("{", lo, ",}") : StrCat("{", lo, ",", hi, "}");
    }
    return {base + q, Expr::kAtom};
  }

  RegexEscape escape_;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnfExpression(std::string_view pattern, RegexEscape escape) {
  CASCADE_ASSIGN_OR_RETURN(std::vector<uint32_t> cps, DecodeUtf8(pattern));
  RegexParser parser(pattern, std::move(cps));
  CASCADE_ASSIGN_OR_RETURN(Node root, parser.Parse());
  CASCADE_RETURN_IF_ERROR(DropAnchors(pattern, root, /*at_start=*/true, /*at_end=*/true));
  const Expr e = Writer(escape).Write(root);
  return e.shape == Expr::kEmpty ? std::string("\"\"") : e.text;
}

absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern) {
  CASCADE_ASSIGN_OR_RETURN(std::string expr, RegexToGbnfExpression(pattern, RegexEscape::kRaw));
  return StrCat("root ::= ", expr, "\n");
}

}  // namespace cascade::grammar
