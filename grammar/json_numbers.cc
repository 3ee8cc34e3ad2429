// The GBNF of JSON numbers within bounds (grammar/json_numbers.h), for the JSON Schema
// converter, and the GBNF expression builders it writes with.
//
// The digit-by-digit integer ranges are learned from llama.cpp's
// common/json-schema-to-grammar.cpp (`_build_min_max_int`), written anew.
#include "grammar/json_numbers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/str_cat.h"
#include "grammar/grammar.h"

namespace cascade::grammar {

// --- GBNF expressions -------------------------------------------------------------------------

// Whether `body` is one symbol that can stand for itself: a rule name, one literal or
// one class.
bool IsSymbol(const std::string& body) {
  if (body.empty()) return false;
  if (body[0] == '"' || body[0] == '[') {
    const char close = body[0] == '"' ? '"' : ']';
    size_t i = 1;
    while (i < body.size() && body[i] != close) i += body[i] == '\\' ? 2 : 1;
    return i == body.size() - 1;
  }
  return std::all_of(body.begin(), body.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  });
}

std::string Parens(const std::string& expr) { return IsSymbol(expr) ? expr : "(" + expr + ")"; }

// `expr` repeated lo to hi times (hi kUnbounded: no limit), as a GBNF suffix.
std::string Repeat(const std::string& expr, int64_t lo, int64_t hi) {
  if (hi == 0) return "";
  const std::string x = Parens(expr);
  if (lo == 0 && hi == kUnbounded) return x + "*";
  if (lo == 1 && hi == kUnbounded) return x + "+";
  if (lo == 0 && hi == 1) return x + "?";
  if (lo == 1 && hi == 1) return expr;
  if (lo == hi) return StrCat(x, "{", lo, "}");
  if (hi == kUnbounded) return StrCat(x, "{", lo, ",}");
  return StrCat(x, "{", lo, ",", hi, "}");
}

// Joins the non-empty parts with spaces: a sequence.
std::string Seq(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!p.empty()) out += (out.empty() ? "" : " ") + p;
  }
  return out;
}

// Alternatives, written `a | b | c`.
std::string Alt(const std::vector<std::string>& alts) {
  std::string out;
  for (const std::string& alt : alts) out += (out.empty() ? "" : " | ") + alt;
  return out;
}

// --- Integer ranges -------------------------------------------------------------------------

namespace {

// Decimal strings of equal length from `a` to `b` (a <= b, leading zeros allowed): digit
// by digit, the shared prefix, then the lower end's tail, the whole middle digits, the
// upper end's tail.
std::string SameLengthRange(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  const std::string prefix = a.substr(0, i);
  if (i == a.size()) return GbnfLiteral(prefix);
  const size_t k = a.size() - i - 1;  // Digits after the first differing one.
  auto digits = [](char lo, char hi) {
    return lo == hi ? GbnfLiteral(std::string(1, lo)) : StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
  };
  const std::string lit = prefix.empty() ? "" : GbnfLiteral(prefix);
  if (k == 0) return Seq({lit, digits(a[i], b[i])});
  const std::string a_tail = a.substr(i + 1), b_tail = b.substr(i + 1);
  const std::string zeros(k, '0'), nines(k, '9');
  std::vector<std::string> alts;
  char lo = a[i], hi = b[i];
  if (a_tail != zeros) {
    alts.push_back(Seq({GbnfLiteral(prefix + a[i]), Parens(SameLengthRange(a_tail, nines))}));
    ++lo;
  }
  std::string upper;
  if (b_tail != nines) {
    upper = Seq({GbnfLiteral(prefix + b[i]), Parens(SameLengthRange(zeros, b_tail))});
    --hi;
  }
  if (lo <= hi) alts.push_back(Seq({lit, digits(lo, hi), Repeat("[0-9]", k, k)}));
  if (!upper.empty()) alts.push_back(upper);
  return Alt(alts);
}

// The decimal numerals (no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi.
std::string UnsignedRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo == 0) {
    alts.push_back("\"0\"");
    lo = 1;
  }
  if (lo <= hi) {
    // Lengths whose every numeral is in range make one `[1-9] [0-9]{m,n}`; only the
    // shortest and the longest length can be partial.
    const int lo_digits = static_cast<int>(std::to_string(lo).size());
    const int hi_digits = static_cast<int>(std::to_string(hi).size());
    int full_min = 0, full_max = -1;
    for (int len = lo_digits; len <= hi_digits; ++len) {
      const int64_t first = static_cast<int64_t>(std::pow(10.0, len - 1));
      const int64_t last = first * 10 - 1;
      const int64_t a = std::max(lo, first), b = std::min(hi, last);
      if (a == first && b == last) {
        if (full_max < 0) full_min = len;
        full_max = len;
      } else {
        alts.push_back(SameLengthRange(std::to_string(a), std::to_string(b)));
      }
    }
    if (full_max >= 0) alts.push_back(Seq({"[1-9]", Repeat("[0-9]", full_min - 1, full_max - 1)}));
  }
  return Alt(alts);
}

}  // namespace

// The integers in [lo, hi] (within ±kMaxMagnitude). "-0" is 0 to JSON Schema, so it is
// in the range when 0 is.
std::string IntegerRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (hi >= 0) alts.push_back(UnsignedRange(std::max<int64_t>(lo, 0), hi));
  if (lo <= 0) {
    // Magnitudes m with lo <= -m <= hi; m = 0 when 0 is in range.
    alts.push_back(Seq({"\"-\"", Parens(UnsignedRange(std::max<int64_t>(-hi, 0), -lo))}));
  }
  return Alt(alts);
}

// A bound as an integer, rounded up or down, clamped to ±1e17 (beyond every numeral).
int64_t RoundBound(const nlohmann::ordered_json& v, bool up) {
  constexpr int64_t kFar = 100'000'000'000'000'000;
  if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kFar));
  if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kFar, kFar);
  const double d = std::clamp(v.get<double>(), -1e17, 1e17);
  return static_cast<int64_t>(up ? std::ceil(d) : std::floor(d));
}

// --- Number ranges ---------------------------------------------------------------------------
// Decimals `I(.F)?` (no exponent) against integer bounds, exact under Python's float
// reading: a bound b with |b| <= 2^53 is a double, and rounding is monotonic, so D >= b
// gives float(D) >= b. A strict bound needs float(D) != b as well, which holds when D
// and b are decimals of at most 15 significant digits (distinct ones read as distinct
// doubles): next to a strict bound the fraction is cut to fit.

namespace {

// The fractions an integer part may take: none at all (kAny with 0 digits included),
// up to `digits` digits, only zeros, or with a non-zero digit among up to `digits`.
struct Fraction {
  enum Kind { kNothing, kZero, kNonZero, kAny };
  Kind kind = kAny;
  int digits = 16;
};

Fraction Intersect(Fraction a, Fraction b) {
  if (a.kind == Fraction::kNothing || b.kind == Fraction::kNothing) return {Fraction::kNothing, 0};
  const bool zero = a.kind == Fraction::kZero || b.kind == Fraction::kZero;
  const bool non_zero = a.kind == Fraction::kNonZero || b.kind == Fraction::kNonZero;
  if (zero) return {non_zero ? Fraction::kNothing : Fraction::kZero, 16};
  const int digits = std::min(a.digits, b.digits);
  if (non_zero && digits <= 0) return {Fraction::kNothing, 0};
  return {non_zero ? Fraction::kNonZero : Fraction::kAny, std::max(digits, 0)};
}

// Digit strings of 1 to n digits with a non-zero one.
std::string NonZeroDigits(int n) {
  if (n == 1) return "[1-9]";
  return StrCat("[1-9] [0-9]{0,", n - 1, "} | \"0\" (", NonZeroDigits(n - 1), ")");
}

std::string FractionGbnf(const Fraction& f) {
  switch (f.kind) {
    case Fraction::kNothing: break;
    case Fraction::kZero: return "(\".\" \"0\"{1,16})?";
    case Fraction::kNonZero: return StrCat("\".\" (", NonZeroDigits(f.digits), ")");
    case Fraction::kAny: return f.digits == 0 ? "" : Repeat(Seq({"\".\"", Repeat("[0-9]", 1, f.digits)}), 0, 1);
  }
  return "";
}

// The fraction digits that keep `i`.F apart from the integers i and i + 1 once read as a
// double: 15 significant digits in all, or all 16 when i is 0 (0.F is far from both).
int SafeFractionDigits(int64_t i) { return i == 0 ? 16 : 15 - static_cast<int>(std::to_string(i).size()); }

// The decimals of magnitude m >= 0 within the bounds (either may be absent), as
// alternatives: integer parts in runs with any fraction, and the parts next to a bound,
// each with the fraction it allows.
std::vector<std::string> MagnitudeRange(std::optional<Bound> lo, std::optional<Bound> hi) {
  if (lo.has_value() && lo->value < 0) lo.reset();  // Every magnitude is above it.
  if (hi.has_value() && hi->value < 0) return {};
  auto fraction_at = [&](int64_t i) {
    Fraction f;
    if (lo.has_value() && i == lo->value && lo->exclusive)
      f = Intersect(f, {Fraction::kNonZero, SafeFractionDigits(i)});
    if (hi.has_value() && i == hi->value) f = Intersect(f, {hi->exclusive ? Fraction::kNothing : Fraction::kZero, 16});
    if (hi.has_value() && i == hi->value - 1 && hi->exclusive)
      f = Intersect(f, {Fraction::kAny, SafeFractionDigits(i)});
    return f;
  };
  const int64_t first = lo.has_value() ? lo->value : 0, last = hi.has_value() ? hi->value : kMaxMagnitude;
  std::set<int64_t> special;  // Integer parts next to a bound.
  for (int64_t i : {first, last - 1, last}) {
    if (first <= i && i <= last) special.insert(i);
  }
  std::vector<std::string> alts;
  int64_t next = first;  // The first integer part not yet covered.
  for (int64_t i : special) {
    if (next < i) alts.push_back(Seq({Parens(UnsignedRange(next, i - 1)), FractionGbnf(Fraction())}));
    const Fraction f = fraction_at(i);
    if (f.kind != Fraction::kNothing) alts.push_back(Seq({GbnfLiteral(std::to_string(i)), FractionGbnf(f)}));
    next = i + 1;
  }
  if (next <= last) alts.push_back(Seq({Parens(UnsignedRange(next, last)), FractionGbnf(Fraction())}));
  return alts;
}

}  // namespace

// Numbers between the bounds: the non-negative ones, then "-" and the magnitudes of the
// negative ones (x >= lo is m <= -lo); "-0.0" is 0 and comes with it.
std::string NumberRange(std::optional<Bound> lo, std::optional<Bound> hi) {
  auto mirror = [](const std::optional<Bound>& b) {
    return b.has_value() ? std::optional<Bound>(Bound{-b->value, b->exclusive}) : std::nullopt;
  };
  std::vector<std::string> alts = MagnitudeRange(lo, hi);
  const std::vector<std::string> negative = MagnitudeRange(mirror(hi), mirror(lo));
  if (!negative.empty()) {
    alts.push_back(Seq({"\"-\"", Parens(Alt(negative))}));
  }
  return Alt(alts);
}

}  // namespace cascade::grammar
