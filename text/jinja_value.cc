#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/str_cat.h"
#include "nlohmann/json.hpp"

namespace cascade::text::jinja {

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::FindString(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value::~Value() {
  if (!list_ && !dict_) return;
  // Children this value alone holds move to a work list before they die, so that each
  // destructor below sees at most one level: the recursion depth stays constant.
  std::vector<Value> pending;
  auto take_children = [&pending](Value& v) {
    auto take = [&pending](Value& c) {
      if ((c.list_ && c.list_.use_count() == 1) || (c.dict_ && c.dict_.use_count() == 1)) {
        pending.push_back(std::move(c));
      }
    };
    if (v.list_ && v.list_.use_count() == 1) {
      for (Value& c : *v.list_) take(c);
    }
    if (v.dict_ && v.dict_.use_count() == 1) {
      for (auto& [k, c] : v.dict_->entries) {
        take(k);
        take(c);
      }
    }
  };
  take_children(*this);
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
    take_children(v);
  }
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.name_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), bool_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), float_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::Markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::Generator(std::vector<Value> items, std::string type_name) {
  Value v = List(std::move(items));
  v.generator_ = true;
  v.name_ = std::move(type_name);
  return v;
}

Value Value::FailingGenerator(absl::Status error) {
  Value v = Generator({});
  v.error_ = std::make_shared<const absl::Status>(std::move(error));
  return v;
}

Value Value::View(std::vector<Value> items, std::string type_name) {
  Value v = List(std::move(items));
  v.view_ = true;
  v.name_ = std::move(type_name);
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.name_ = std::move(name);
  v.function_ = std::make_shared<const NativeFunction>(std::move(fn));
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return bool_;
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !string_->empty();
    case Kind::kList: return generator_ || !list_->empty();
    case Kind::kDict: return is_namespace() || !dict_->entries.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return generator_ || view_ ? std::string_view(name_) : tuple_ ? "tuple" : "list";
    case Kind::kDict: return is_namespace() ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "object";
}

namespace {

bool EqualsAt(const Value& a, const Value& b, int depth) {
  if (depth > 200) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_generator() || b.is_generator()) return &a.list() == &b.list();
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!EqualsAt(a.list()[i], b.list()[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict() == &b.dict();
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !EqualsAt(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction: return a.function_name() == b.function_name();
    default: return false;
  }
}

absl::StatusOr<bool> LessAt(const Value& a, const Value& b, int depth) {
  if (depth > 200) return absl::InvalidArgumentError("RecursionError: maximum recursion depth exceeded in comparison");
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) return absl::InvalidArgumentError(StrCat("UndefinedError: ", v->undefined_hint()));
  }
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order is code point order.
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (EqualsAt(x[i], y[i], depth + 1)) continue;
      return LessAt(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      StrCat("TypeError: '<' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace

bool Equals(const Value& a, const Value& b) { return EqualsAt(a, b, 0); }

absl::StatusOr<bool> Less(const Value& a, const Value& b) { return LessAt(a, b, 0); }

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest round-trip digits, laid out by Python's rule (float_repr_style 'short'):
  // scientific when the decimal exponent is < -4 or >= 16, else positional with ".0".
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  const bool negative = sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  const int decpt = exponent + 1;  // Digits d1 d2 ... are 0.d1d2... * 10^decpt.
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) StrAppend(&out, ".", std::string_view(digits).substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (decpt <= 0) return StrCat(out, "0.", std::string(-decpt, '0'), digits);
  if (static_cast<size_t>(decpt) >= digits.size()) {
    return StrCat(out, digits, std::string(decpt - digits.size(), '0'), ".0");
  }
  return StrCat(out, std::string_view(digits).substr(0, decpt), ".", std::string_view(digits).substr(decpt));
}

namespace {

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string StringRepr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          *out += hex;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 200) return absl::InvalidArgumentError("tojson: nesting too deep");
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int level) {
    if (!o.indent) return;
    *out += '\n';
    for (int i = 0; i < level; ++i) *out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: *out += v.bool_value() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: *out += std::to_string(v.int_value()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.float_value();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : FloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString: JsonString(v.str(), out); return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.is_generator() || v.is_view()) break;
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        if (absl::Status s = AppendJson(v.list()[i], o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return Str(a->first) < Str(b->first); });
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        const Value& key = entries[i]->first;
        if (key.is_string()) {
          JsonString(key.str(), out);
        } else if (key.is_bool() || key.is_none()) {
          *out += key.is_none() ? "\"null\"" : key.bool_value() ? "\"true\"" : "\"false\"";
        } else if (key.is_number()) {
          JsonString(Str(key), out);
        } else {
          return absl::InvalidArgumentError(StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
        }
        *out += key_sep;
        if (absl::Status s = AppendJson(entries[i]->second, o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
    default: break;
  }
  return absl::InvalidArgumentError(StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
}

void AppendRepr(const Value& v, int depth, std::string* out) {
  if (depth > 200) {
    *out += "...";
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kString:
      *out += v.is_markup() ? StrCat("Markup(", StringRepr(v.str()), ")") : StringRepr(v.str());
      return;
    case Value::Kind::kList: {
      if (v.is_generator()) {  // Python prints an address here; no template can rely on it.
        StrAppend(out, "<", v.TypeName(), " object>");
        return;
      }
      if (v.is_view()) StrAppend(out, v.TypeName(), "(");
      *out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += ", ";
        AppendRepr(v.list()[i], depth + 1, out);
      }
      if (v.is_tuple() && v.list().size() == 1) *out += ',';
      *out += v.is_tuple() ? ')' : ']';
      if (v.is_view()) *out += ')';
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) *out += "<Namespace ";
      *out += '{';
      bool first = true;
      for (const auto& [k, val] : v.dict().entries) {
        if (!first) *out += ", ";
        first = false;
        AppendRepr(k, depth + 1, out);
        *out += ": ";
        AppendRepr(val, depth + 1, out);
      }
      *out += '}';
      if (v.is_namespace()) *out += '>';
      return;
    }
    case Value::Kind::kUndefined: *out += "Undefined"; return;
    default: *out += Str(v);
  }
}

constexpr int kMaxJsonDepth = 512;

Value FromJson(const nlohmann::ordered_json& j, int depth, bool* too_deep) {
  if (depth > kMaxJsonDepth) {
    *too_deep = true;
    return Value::None();
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e, depth + 1, too_deep));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(Value(k), FromJson(e, depth + 1, too_deep));
      return Value::MakeDict(std::move(d));
    }
    default: return Value::None();
  }
}

}  // namespace

std::string Str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.int_value());
    case Value::Kind::kFloat: return FloatRepr(v.float_value());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kFunction: return StrCat("<function ", v.function_name(), ">");
    default: {
      std::string out;
      AppendRepr(v, 0, &out);
      return out;
    }
  }
}

std::string Repr(const Value& v) {
  std::string out;
  AppendRepr(v, 0, &out);
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  if (absl::Status s = AppendJson(v, options, 0, &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<Value> ValueFromJson(std::string_view json) {
  // A parse error is reported, never thrown.
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("invalid JSON");
  bool too_deep = false;
  Value v = FromJson(j, 0, &too_deep);
  if (too_deep) return absl::InvalidArgumentError(StrCat("JSON nested deeper than ", kMaxJsonDepth));
  return v;
}

}  // namespace cascade::text::jinja
