// JSON Schema (and OpenAI's response_format) to GBNF (grammar/grammar.h): the grammar of
// the JSON texts that validate against a schema, for constrained decoding.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cascade::grammar {

// GBNF whose `root` derives the JSON texts valid under `schema`. InvalidArgument naming
// the keyword (and its JSON pointer) for what the converter does not support.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema);

// GBNF whose `root` derives any JSON object (response_format {"type": "json_object"}).
std::string JsonObjectGbnf();

// GBNF whose `root` derives the strings that `pattern` (an ECMA-262 style regular
// expression, the subset JSON Schema's `pattern` uses) matches as a whole.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern);

}  // namespace cascade::grammar
