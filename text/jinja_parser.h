// Jinja's parser: tokens (jinja_lexer.h) to the syntax tree (jinja_ast.h), by jinja2 3.1's
// grammar and operator precedence (lowest first: `x if c else y`, or, and, not,
// comparisons and in/not in, + -, ~, * / // %, **, unary - +, then postfix . [] () and
// filters/tests). Statements: if/elif/else, for (tuple targets, inline if, else, recursive),
// set (also as a block), macro, call, filter, with, break/continue (loopcontrols) and
// transformers' generation. Include/import/extends/block have no use in a chat template
// and are refused.
// Thread safety: stateless function.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "text/jinja_ast.h"

namespace cascade::text::jinja {

// The body of the template `source`. InvalidArgument "template line N: ..." for a syntax
// error (as jinja2's TemplateSyntaxError), or nesting deeper than 200.
absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace cascade::text::jinja
