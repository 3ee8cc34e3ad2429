// The values a Jinja template computes with: Python's (None, bool, int, float, str, list,
// tuple, dict) as jinja2 sees them, plus jinja2's Undefined, its Markup strings (`|safe`),
// namespace() objects and callables (macros, globals, bound methods). Lists and dicts are
// shared by reference, as in Python, so that `ns.items` seen through two names is one list.
// Printing follows Python's str()/repr() byte for byte (`[1, 'a']`, `True`, `None`, `1.0`),
// JSON follows json.dumps (transformers' `tojson`), because real chat templates print both.
// Thread safety: a Value is not synchronised; values built for one render stay in it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::text::jinja {

class Value;

// Positional and keyword arguments of a call, in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// A callable: a macro, a global function or a bound method. Its errors get the calling
// expression's line from the renderer.
using NativeFunction = std::function<absl::StatusOr<Value>(const CallArgs& args)>;

// An insertion-ordered mapping (Python 3.7+ dicts), with linear lookup: chat messages hold
// a handful of keys. Also namespace() objects (is_namespace), which print differently.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* Find(const Value& key) const;
  const Value* FindString(std::string_view key) const;
  void Set(Value key, Value value);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  // Undefined; `hint` is jinja2's message for using it ("'x' is undefined").
  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) = default;
  // Frees nested lists and dicts iteratively: a template can build a list nested a million
  // deep ({% set ns.x = [ns.x] %} in a loop), which a recursive destructor would overflow
  // the stack on.
  ~Value();
  static Value Undefined(std::string hint);
  static Value None();
  Value(bool b);                                        // NOLINT: implicit, as Python literals.
  Value(int i) : Value(static_cast<int64_t>(i)) {}      // NOLINT
  Value(int64_t i);                                     // NOLINT
  Value(double d);                                      // NOLINT
  Value(std::string s);                                 // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT
  static Value Markup(std::string s);                   // A string jinja2 will not escape again (`|safe`).
  static Value List(std::vector<Value> items = {});
  static Value Tuple(std::vector<Value> items);
  // What jinja2's map/select/selectattr/unique/items/batch filters return (and reverse,
  // a "list_reverseiterator"): iterable once, but truthy even when empty, with no len(),
  // no items by index, and not JSON.
  static Value Generator(std::vector<Value> items, std::string type_name = "generator");
  // A generator whose iteration fails with `error`: jinja2's generator filters raise only
  // when consumed, so `{% if x|items %}` on a string is true rather than an error.
  static Value FailingGenerator(absl::Status error);
  // dict.keys()/values()/items(): iterable again and again, with len(), printed as
  // "dict_keys([...])", but no items by index and not JSON.
  static Value View(std::vector<Value> items, std::string type_name);
  static Value MakeDict(Dict dict = {});
  static Value Function(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int.
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList && !generator_ && !view_; }  // Or a tuple.
  bool is_generator() const { return kind_ == Kind::kList && generator_; }
  bool is_view() const { return kind_ == Kind::kList && view_; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return is_dict() && dict_->is_namespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_markup() const { return is_string() && markup_; }

  bool bool_value() const { return bool_; }
  int64_t int_value() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }
  double float_value() const { return is_float() ? float_ : static_cast<double>(int_value()); }
  const std::string& str() const { return *string_; }  // Only for strings.
  std::vector<Value>& list() const { return *list_; }  // Lists, tuples, generators, views.
  Dict& dict() const { return *dict_; }                // Only for dicts and namespaces.
  const std::string& undefined_hint() const { return name_; }
  // A generator's deferred error (OK for others).
  absl::Status generator_error() const { return error_ ? *error_ : absl::OkStatus(); }
  const std::string& function_name() const { return name_; }
  absl::StatusOr<Value> Call(const CallArgs& args) const { return (*function_)(args); }

  // Python's truth value (jinja2's Undefined is false).
  bool Truthy() const;
  // Python's type name, for error messages ("str", "int", "dict", "NoneType", ...).
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool tuple_ = false;
  bool generator_ = false;
  bool view_ = false;
  bool markup_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const NativeFunction> function_;
  std::shared_ptr<const absl::Status> error_;
  std::string name_;  // Undefined's hint, a function's name or a generator's type.
};

// Python's `a == b` (1 == 1.0 == True; dicts compare as mappings; Undefined equals only
// Undefined, as jinja2's). Structures nested deeper than 200 compare unequal (Python
// raises RecursionError near there).
bool Equals(const Value& a, const Value& b);
// Python's `a < b` for numbers, strings and lists; InvalidArgument (Python's TypeError)
// for other pairs.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// Python's str(v) (what `{{ v }}` prints) and repr(v).
std::string Str(const Value& v);
std::string Repr(const Value& v);
// Python's repr of a float ("1.0", "1e+16", "0.0001", "inf").
std::string FloatRepr(double d);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...): indent
// nullopt is one line; the separators default to (", ", ": ") without indent and (",", ": ")
// with it. InvalidArgument for what JSON cannot hold (Undefined, functions).
struct JsonOptions {
  std::optional<std::string> indent;  // Python's int indent is that many spaces.
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options = {});

// A value from JSON text (objects keep their key order; integers stay ints): how messages
// and tools arrive from the OpenAI API. InvalidArgument for malformed JSON or nesting
// deeper than 512.
absl::StatusOr<Value> ValueFromJson(std::string_view json);

}  // namespace cascade::text::jinja
