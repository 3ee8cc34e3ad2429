// Jinja's lexer, as jinja2 3.1 lexes in the environment Hugging Face transformers renders
// chat templates with: trim_blocks (the newline after a block or comment tag goes),
// lstrip_blocks (the indentation before one goes), `-` and `+` whitespace control on every
// tag, comments dropped, {% raw %} kept verbatim, newlines normalised to \n and one
// trailing newline of the source dropped (keep_trailing_newline=False).
// Thread safety: stateless function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::text::jinja {

struct Token {
  enum class Type {
    kText,        // Template data between tags, whitespace control applied.
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // Identifiers and keywords (if, not, in, true, ...).
    kString,      // A string literal, unescaped (Python's escapes).
    kInt,
    kFloat,
    kOperator,  // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
    kEnd,       // End of the source.
  };
  Type type;
  std::string text;  // Text, name, operator or the string literal's value.
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// The tokens of `source`. InvalidArgument "template line N: ..." for an unterminated tag,
// comment or string, or a character no token starts with.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace cascade::text::jinja
