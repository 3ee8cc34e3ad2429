// JSON Schema (and OpenAI's response_format) to GBNF (grammar/grammar.h): the grammar of
// the JSON texts that validate against a schema, for constrained decoding; and regular
// expressions to GBNF, alone or as a JSON string's `pattern`. Thread-safe (pure functions).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cascade::grammar {

// GBNF whose `root` derives the JSON texts valid under `schema`. InvalidArgument naming
// the keyword (and its JSON pointer) for what the converter does not support, e.g.
// "/properties/age/multipleOf: not supported"; never a validation keyword ignored.
//
// The texts are compact JSON: at most one space between two tokens (`ws ::= " "?`), none
// around the whole; object members in the schema's order, the declared `properties`
// first; numbers of at most 16 digits, 16 fraction digits and 3 exponent digits. Within
// that, the grammar derives what Python's `jsonschema` accepts (Draft 2020-12, format
// checking off), but for deliberate narrowings, each of which only leaves valid texts out:
//   * `additionalProperties` absent next to `properties` allows no other member;
//   * `pattern` matches the whole string (JSON Schema searches), with ECMA-262's ASCII
//     \d \w \s; `format` date, time, date-time and uuid are enforced (others ignored);
//   * a pattern's, enum's or extra key's characters are spelled one way (as Python's
//     json.dumps spells them), and `enum`/`const` values as their compact serialization;
//   * `integer` has no fraction or exponent (jsonschema takes 1.0); a schema without
//     `type` has the types its keywords imply (`properties`: an object);
//   * a `number` with bounds (integers up to 2^53 only) has no exponent, and next to a
//     strict bound its fraction keeps to 15 significant digits, so that Python's float
//     reading cannot round it onto the bound.
// One widening: `oneOf` is read as `anyOf` (a text matching two branches is accepted).
// nlohmann::json holds an object's keys sorted; pass nlohmann::ordered_json to keep the
// declared order of `properties` (a model fills them in that order).
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema);
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);

// GBNF whose `root` derives any JSON object (response_format {"type": "json_object"}).
std::string JsonObjectGbnf();

// GBNF whose `root` derives the strings that `pattern` (an ECMA-262 style regular
// expression, the subset JSON Schema's `pattern` uses) matches as a whole.
// Python's `re` semantics where ECMA-262 differs (`.` is any character but "\n"), with
// ECMA-262's ASCII \d \w \s. InvalidArgument naming the construct and its offset for
// what it cannot express: backreferences, lookaround, `^` or `$` where something could
// come before (after) them, \b and the other anchors, inline flags, possessive quantifiers.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern);

// How RegexToGbnfExpression writes a matched character.
enum class RegexEscape {
  kRaw,         // As itself: the text is the matched string.
  kJsonString,  // As inside a JSON string literal (Python's json.dumps(ensure_ascii=False)).
};

// RegexToGbnf's right-hand side alone: one GBNF expression that needs no other rule.
absl::StatusOr<std::string> RegexToGbnfExpression(std::string_view pattern, RegexEscape escape);

}  // namespace cascade::grammar
