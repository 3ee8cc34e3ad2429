// Private to grammar/: the GBNF of JSON numbers within bounds, for the JSON Schema
// converter (grammar/json_schema.cc): integers in a range, written digit by digit, and
// decimals between integer bounds. Also the few GBNF expression builders that both files
// write their grammars with. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace cascade::grammar {

// --- GBNF expressions ---------------------------------------------------------------------

// A repetition's upper limit that means "no limit".
constexpr int64_t kUnbounded = -1;

// Whether `body` is one symbol that can stand for itself: a rule name, one literal or
// one class.
bool IsSymbol(const std::string& body);

// `expr` as an operand: itself when it is one symbol, else `(expr)`.
std::string Parens(const std::string& expr);

// `expr` repeated lo to hi times (hi kUnbounded: no limit), as a GBNF suffix; "" when hi
// is 0.
std::string Repeat(const std::string& expr, int64_t lo, int64_t hi);

// The non-empty parts joined with spaces: a sequence.
std::string Seq(std::initializer_list<std::string> parts);

// Alternatives, written `a | b | c`; "" for none.
std::string Alt(const std::vector<std::string>& alts);

// --- Numbers ----------------------------------------------------------------------------------

// Numbers have at most 16 integer digits (and 16 fraction, 3 exponent digits), so that a
// model cannot write digits forever; integer ranges are clamped to that.
constexpr int64_t kMaxMagnitude = 9'999'999'999'999'999;

// A GBNF expression for the decimal numerals of the integers in [lo, hi], where
// -kMaxMagnitude <= lo <= hi <= kMaxMagnitude: no leading zeros, no fraction or exponent.
// "-0" is 0 to JSON Schema, so it is in the range when 0 is.
std::string IntegerRange(int64_t lo, int64_t hi);

// A JSON number bound (`minimum` ... `exclusiveMaximum`) as an integer, rounded up or
// down, clamped to ±1e17 (beyond every numeral the grammars write). REQUIRES: `v` is a
// number.
int64_t RoundBound(const nlohmann::ordered_json& v, bool up);

// An integer bound on a number; `exclusive` for exclusiveMinimum and exclusiveMaximum.
struct Bound {
  int64_t value = 0;
  bool exclusive = false;
};

// A GBNF expression for the decimals `-?I(.F)?` (no exponent) between the bounds (either
// may be absent), or "" when no number is within them. Exact under Python's float
// reading for bounds of magnitude at most 2^53: next to a strict bound the fraction keeps
// to 15 significant digits, so that reading it as a double cannot round it onto the bound.
std::string NumberRange(std::optional<Bound> lo, std::optional<Bound> hi);

}  // namespace cascade::grammar
