// The operations a Jinja template's values support, as jinja2 in transformers'
// ImmutableSandboxedEnvironment performs them: attribute and item access (a dict's keys
// through `.` too; str, dict and list methods bound), Python's operators, iteration, and
// the builtin filters and tests real chat templates use. Internal to the jinja_*.cc files.
// Errors carry no line: the renderer adds the line of the expression that failed.
// Python's mutating list and dict methods (append, pop, update, ...) are refused as the
// immutable sandbox refuses them ("access to attribute 'append' of 'list' object is
// unsafe."), so templates that rely on them fail here exactly where they fail in
// transformers.
// Errors name Python's exception class as jinja2 would raise it ("TypeError: ...",
// "UndefinedError: ...").
// Thread safety: stateless functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace cascade::text::jinja::internal {

// jinja2's UndefinedError for using `v` (an Undefined) where a value is needed.
absl::Status UndefinedError(const Value& v);

// obj.name: a dict key, a namespace attribute or a bound method; Undefined (with jinja2's
// hint) when there is none. Error only for an Undefined obj.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: an item (negative indexes count from the end), else as GetAttr for a string key.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on a str (by code point), list or tuple; nulls are Undefined.
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's binary operators: + - * / // % ** and `~` (str concatenation).
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
// Python's `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// The items a for loop visits: a list's items, a dict's keys, a string's characters;
// nothing for Undefined; TypeError for the rest.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// len(v), or an error for what has none.
absl::StatusOr<int64_t> Length(const Value& v);

// The string's code points as UTF-8 pieces ("é" is one).
std::vector<std::string_view> Characters(std::string_view s);

// obj.name as a Python method bound to obj (str, dict and list methods), an Undefined
// carrying the SecurityError for a mutating one, or nullopt when there is no such method.
std::optional<Value> BoundMethod(const Value& obj, const std::string& name);
// Python's str.upper/lower/title/capitalize (ASCII letters) and str.strip().
std::string Upper(const std::string& s);
std::string Lower(const std::string& s);
std::string TitleCase(const std::string& s);
std::string Capitalize(const std::string& s);
std::string StripWhitespace(const std::string& s);
// markupsafe.escape: & < > " ' as HTML entities (the `escape` filter, Markup + str).
std::string EscapeHtml(std::string_view s);

// The builtin filters and tests. NotFound for a name with none (jinja2 reports "No filter
// named 'x'." only when it is reached).
absl::StatusOr<Value> CallFilter(std::string_view name, const Value& input, const CallArgs& args);
absl::StatusOr<bool> CallTest(std::string_view name, const Value& v, const CallArgs& args);

// Python's str.format for the template's `'{}'.format(x)`.
absl::StatusOr<Value> FormatString(const std::string& format, const CallArgs& args);

// Argument binding: the argument called `name` (at `position` or by keyword), or
// `fallback` when absent.
const Value* FindArg(const CallArgs& args, size_t position, std::string_view name);
Value ArgOr(const CallArgs& args, size_t position, std::string_view name, Value fallback);

}  // namespace cascade::text::jinja::internal
