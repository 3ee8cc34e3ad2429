// jinja2's builtin filters and tests (filters.py, tests.py) that chat templates use, with
// transformers' `tojson` (json.dumps, ensure_ascii=False); see jinja_builtins.h.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/status.h"
#include "core/str_cat.h"
#include "text/jinja_builtins.h"

namespace cascade::text::jinja::internal {
namespace {

absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(StrCat("TypeError: ", what)); }

// Widths of padding and indentation beyond this are refused (a template must not make
// gigabyte strings out of `|center(10**12)`); indent clamps to it.
constexpr int64_t kMaxPadding = 1 << 16;

// jinja2's make_attrgetter: "a.b.0" looked up part by part as items.
absl::StatusOr<Value> GetPath(const Value& v, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(v, attribute);
  Value cur = v;
  std::string_view path = attribute.str();
  while (true) {
    const size_t dot = path.find('.');
    const std::string part(path.substr(0, dot));
    Value key = !part.empty() && part.size() <= 18 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })
                    ? Value(static_cast<int64_t>(std::stoll(part)))
                    : Value(part);
    absl::StatusOr<Value> next = GetItem(cur, key);
    if (!next.ok()) return next.status();
    cur = *std::move(next);
    if (dot == std::string_view::npos) return cur;
    path.remove_prefix(dot + 1);
  }
}

// The sort key of jinja2's sort/dictsort/unique/min/max: strings lower-cased unless
// case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(Lower(v.str())) : v;
}

absl::StatusOr<std::vector<Value>> SortValues(std::vector<Value> items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    absl::StatusOr<bool> less = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  if (!error.ok()) return error;
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

// Python's int(str) (surrounding whitespace, sign and underscores allowed).
std::optional<int64_t> ParseInt(const std::string& s, int base) {
  const std::string t = StripWhitespace(s);
  if (t.empty()) return std::nullopt;
  std::string digits;
  for (char c : t) {
    if (c != '_') digits += c;
  }
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (end != digits.c_str() + digits.size() || errno != 0) return std::nullopt;
  return v;
}

std::optional<double> ParseFloat(const std::string& s) {
  const std::string t = StripWhitespace(s);
  // Python's float() takes no hex ("0x1p3"), which strtod would.
  if (t.empty() || t.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// json.dumps(ensure_ascii=True): non-ASCII code points as \uXXXX (surrogate pairs above
// the BMP). They occur only inside JSON strings.
std::string EnsureAscii(const std::string& json) {
  std::string out;
  for (std::string_view c : Characters(json)) {
    if (c.size() == 1) {
      out += c;
      continue;
    }
    const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(c[i])); };
    uint32_t cp = c.size() == 2 ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F)
                  : c.size() == 3
                      ? ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F)
                      : ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    out += buf;
  }
  return out;
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& a) {
  JsonOptions o;
  const Value indent = ArgOr(a, 1, "indent", Value::None());
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (indent.is_number()) {
    if (indent.int_value() > kMaxPadding) return absl::ResourceExhaustedError("tojson: indent too large");
    o.indent = std::string(std::max<int64_t>(0, indent.int_value()), ' ');
  }
  const Value seps = ArgOr(a, 2, "separators", Value::None());
  if (seps.is_list() && seps.list().size() == 2 && seps.list()[0].is_string() && seps.list()[1].is_string()) {
    o.separators = std::make_pair(seps.list()[0].str(), seps.list()[1].str());
  }
  o.sort_keys = ArgOr(a, 3, "sort_keys", Value(false)).Truthy();
  absl::StatusOr<std::string> json = ToJson(v, o);
  if (!json.ok()) return TypeError(ToStd(json.status().message()));
  if (ArgOr(a, 0, "ensure_ascii", Value(false)).Truthy()) return Value(EnsureAscii(*json));
  return Value(*std::move(json));
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      lines.push_back(std::move(cur));
      cur.clear();
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::string Indent(const std::string& text, const Value& width, bool first, bool blank) {
  const std::string indention =
      width.is_string() ? width.str() : std::string(std::clamp<int64_t>(width.int_value(), 0, kMaxPadding), ' ');
  std::vector<std::string> lines = SplitLines(text + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  return first ? indention + rv : rv;
}

Value SameString(const Value& input, std::string s) {
  return input.is_markup() ? Value::Markup(std::move(s)) : Value(std::move(s));
}

// jinja2's do_title (not str.title()): each run after whitespace or one of -({[< starts
// upper-cased, the rest of it lower-cased.
std::string TitleFilter(const std::string& s) {
  std::string out;
  bool start = true;
  for (std::string_view c : Characters(s)) {
    const bool separator = c.size() == 1 && (std::isspace(static_cast<unsigned char>(c[0])) || c[0] == '-' ||
                                             c[0] == '(' || c[0] == '{' || c[0] == '[' || c[0] == '<');
    if (separator) {
      out += c;
      start = true;
    } else {
      out += start ? Upper(std::string(c)) : Lower(std::string(c));
      start = false;
    }
  }
  return out;
}

// Python's \w, approximately: ASCII letters, digits and _, and the letters of the
// alphabetic scripts below U+2000 and of CJK and Hangul; not symbols, punctuation or emoji.
bool IsWordCharacter(std::string_view c) {
  if (c.size() == 1) return std::isalnum(static_cast<unsigned char>(c[0])) || c[0] == '_';
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(c[i])); };
  const uint32_t cp = c.size() == 2   ? ((b(0) & 0x1F) << 6) | (b(1) & 0x3F)
                      : c.size() == 3 ? ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F)
                                      : 0x10000;
  if (cp < 0x2000) return cp >= 0xC0 && cp != 0xD7 && cp != 0xF7;
  return (cp >= 0x3040 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF);
}

// select/reject/selectattr/rejectattr: the items whose (attribute's) test is `keep`.
absl::StatusOr<Value> SelectOrReject(const Value& input, const CallArgs& a, bool by_attribute, bool keep) {
  if (!input.Truthy()) return Value::Generator({});  // jinja2 checks `if value:` first.
  absl::StatusOr<std::vector<Value>> items = Iterate(input);
  if (!items.ok()) return items.status();
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (a.positional.empty()) return TypeError("selectattr/rejectattr need an attribute");
    attribute = a.positional[next++];
  }
  std::string test;
  if (next < a.positional.size()) {
    if (!a.positional[next].is_string()) return TypeError("test name must be a string");
    test = a.positional[next++].str();
  }
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + next, a.positional.end());
  test_args.keywords = a.keywords;
  std::vector<Value> out;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attribute) {
      absl::StatusOr<Value> v = GetPath(item, attribute);
      if (!v.ok()) return v.status();
      subject = *std::move(v);
    }
    bool passed = subject.Truthy();
    if (!test.empty()) {
      absl::StatusOr<bool> r = CallTest(test, subject, test_args);
      if (!r.ok()) return r.status();
      passed = *r;
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> Map(const Value& input, const CallArgs& a) {
  if (!input.Truthy()) return Value::Generator({});  // jinja2 checks `if value:` first.
  absl::StatusOr<std::vector<Value>> items = Iterate(input);
  if (!items.ok()) return items.status();
  std::vector<Value> out;
  if (const Value* attribute = FindArg(a, 1000, "attribute")) {
    const Value* fallback = FindArg(a, 1000, "default");
    for (const Value& item : *items) {
      absl::StatusOr<Value> v = GetPath(item, *attribute);
      if (!v.ok()) return v.status();
      out.push_back(v->is_undefined() && fallback != nullptr ? *fallback : *std::move(v));
    }
    return Value::Generator(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) return TypeError("map needs a filter name or attribute=");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keywords = a.keywords;
  for (const Value& item : *items) {
    absl::StatusOr<Value> v = CallFilter(a.positional[0].str(), item, rest);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return Value::Generator(std::move(out));
}

// sort, unique, min, max share the key (attribute, case_sensitive).
absl::StatusOr<std::vector<Value>> Keys(const std::vector<Value>& items, const CallArgs& a, size_t attr_pos,
                                        size_t case_pos) {
  const Value* attribute = FindArg(a, attr_pos, "attribute");
  const bool case_sensitive = ArgOr(a, case_pos, "case_sensitive", Value(false)).Truthy();
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value k = item;
    if (attribute != nullptr && !attribute->is_none()) {
      absl::StatusOr<Value> v = GetPath(item, *attribute);
      if (!v.ok()) return v.status();
      k = *std::move(v);
    }
    keys.push_back(SortKey(k, case_sensitive));
  }
  return keys;
}

absl::StatusOr<Value> CallFilterNow(std::string_view name, const Value& v, const CallArgs& a) {
  if (name == "default" || name == "d") {
    const bool boolean = ArgOr(a, 1, "boolean", Value(false)).Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy())) return ArgOr(a, 0, "default_value", Value(""));
    return v;
  }
  if (name == "safe") return Value::Markup(Str(v));
  if (name == "string") return v.is_string() ? v : Value(Str(v));
  if (name == "escape" || name == "e") return v.is_markup() ? v : Value::Markup(EscapeHtml(Str(v)));
  if (name == "tojson") return ToJsonFilter(v, a);
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = Length(v);
    if (!n.ok()) return n.status();
    return Value(*n);
  }
  if (name == "list") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::List(*std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::Generator({});
    if (!v.is_dict() || v.is_namespace()) return TypeError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict().entries) out.push_back(Value::Tuple({k, val}));
    return Value::Generator(std::move(out));
  }
  if (name == "trim") {
    const Value* chars = FindArg(a, 0, "chars");
    if (chars != nullptr && chars->is_string()) {
      absl::StatusOr<Value> strip = GetAttr(Value(Str(v)), "strip");
      if (!strip.ok()) return strip.status();
      CallArgs args;
      args.positional.push_back(*chars);
      return strip->Call(args);
    }
    return SameString(v, StripWhitespace(Str(v)));
  }
  if (name == "upper") return SameString(v, Upper(Str(v)));
  if (name == "lower") return SameString(v, Lower(Str(v)));
  if (name == "title") return SameString(v, TitleFilter(Str(v)));
  if (name == "capitalize") return SameString(v, Capitalize(Str(v)));
  if (name == "replace") {
    absl::StatusOr<Value> method = GetAttr(Value(Str(v)), "replace");
    if (!method.ok()) return method.status();
    CallArgs args;
    args.positional = {ArgOr(a, 0, "old", Value("")), ArgOr(a, 1, "new", Value(""))};
    const Value count = ArgOr(a, 2, "count", Value::None());
    if (!count.is_none()) args.positional.push_back(count);
    return method->Call(args);
  }
  if (name == "join") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    const std::string sep = Str(ArgOr(a, 0, "d", Value("")));
    const Value* attribute = FindArg(a, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      Value item = (*items)[i];
      if (attribute != nullptr && !attribute->is_none()) {
        absl::StatusOr<Value> x = GetPath(item, *attribute);
        if (!x.ok()) return x.status();
        item = *std::move(x);
      }
      if (i > 0) out += sep;
      out += Str(item);
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {  // An undefined value iterates as empty.
    if (name == "last" && v.is_generator()) return TypeError(StrCat("'", v.TypeName(), "' object is not reversible"));
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items->front() : items->back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string_view> cs = Characters(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return absl::InvalidArgumentError("FilterArgumentError: argument must be iterable");
    std::reverse(items->begin(), items->end());
    if (v.is_list() || v.is_dict() || v.is_undefined()) {  // reversed(): an iterator; others: a list.
      return Value::Generator(*std::move(items), v.is_dict()                        ? "dict_reversekeyiterator"
                                                 : v.is_tuple() || v.is_undefined() ? "reversed"
                                                                                    : "list_reverseiterator");
    }
    return Value::List(*std::move(items));
  }
  if (name == "int") {
    const Value fallback = ArgOr(a, 0, "default", Value(0));
    // Python's int(float): truncation; NaN is a ValueError (the default), beyond 64 bits ours fails.
    auto from_float = [&](double f) -> absl::StatusOr<Value> {
      if (std::isnan(f)) return fallback;
      if (!(std::fabs(f) < 9.2e18)) return absl::InvalidArgumentError("OverflowError: integer beyond 64 bits");
      return Value(static_cast<int64_t>(std::trunc(f)));
    };
    if (v.is_number()) return v.is_float() ? from_float(v.float_value()) : Value(v.int_value());
    if (v.is_string()) {
      if (std::optional<int64_t> i = ParseInt(v.str(), static_cast<int>(ArgOr(a, 1, "base", Value(10)).int_value()))) {
        return Value(*i);
      }
      if (std::optional<double> f = ParseFloat(v.str())) return from_float(*f);
    }
    if (v.is_undefined()) return UndefinedError(v);
    return fallback;
  }
  if (name == "float") {
    const Value fallback = ArgOr(a, 0, "default", Value(0.0));
    if (v.is_number()) return Value(v.float_value());
    if (v.is_string()) {
      if (std::optional<double> f = ParseFloat(v.str())) return Value(*f);
    }
    if (v.is_undefined()) return UndefinedError(v);
    return fallback;
  }
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.float_value()));
    if (v.is_number()) {
      if (v.int_value() == std::numeric_limits<int64_t>::min()) return TypeError("integer beyond 64 bits");
      return Value(std::abs(v.int_value()));
    }
    return TypeError(StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "round") {
    if (!v.is_number()) return TypeError("round needs a number");
    const int64_t precision = ArgOr(a, 0, "precision", Value(0)).int_value();
    const std::string method = Str(ArgOr(a, 1, "method", Value("common")));
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.float_value() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    if (method == "common" && !v.is_float()) return Value(v.int_value());
    return Value(r / scale);
  }
  if (name == "unique") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    absl::StatusOr<std::vector<Value>> keys = Keys(*items, a, 1, 0);
    if (!keys.ok()) return keys.status();
    std::vector<Value> out, seen;
    for (size_t i = 0; i < items->size(); ++i) {
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, (*keys)[i]); })) continue;
      seen.push_back((*keys)[i]);
      out.push_back((*items)[i]);
    }
    return Value::Generator(std::move(out));
  }
  if (name == "sort") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    absl::StatusOr<std::vector<Value>> keys = Keys(*items, a, 2, 1);
    if (!keys.ok()) return keys.status();
    absl::StatusOr<std::vector<Value>> sorted =
        SortValues(*items, *std::move(keys), ArgOr(a, 0, "reverse", Value(false)).Truthy());
    if (!sorted.ok()) return sorted.status();
    return Value::List(*std::move(sorted));
  }
  if (name == "dictsort") {
    if (v.is_undefined()) return UndefinedError(v);  // value.items() on jinja2's Undefined.
    if (!v.is_dict() || v.is_namespace()) {
      return absl::InvalidArgumentError(StrCat("AttributeError: '", v.TypeName(), "' object has no attribute 'items'"));
    }
    const bool case_sensitive = ArgOr(a, 0, "case_sensitive", Value(false)).Truthy();
    const std::string by = Str(ArgOr(a, 1, "by", Value("key")));
    std::vector<Value> items, keys;
    for (const auto& [k, val] : v.dict().entries) {
      items.push_back(Value::Tuple({k, val}));
      keys.push_back(SortKey(by == "value" ? val : k, case_sensitive));
    }
    absl::StatusOr<std::vector<Value>> sorted =
        SortValues(std::move(items), std::move(keys), ArgOr(a, 2, "reverse", Value(false)).Truthy());
    if (!sorted.ok()) return sorted.status();
    return Value::List(*std::move(sorted));
  }
  if (name == "min" || name == "max") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined(StrCat("No aggregated item, sequence was empty."));
    absl::StatusOr<std::vector<Value>> keys = Keys(*items, a, 1, 0);
    if (!keys.ok()) return keys.status();
    size_t best = 0;
    for (size_t i = 1; i < items->size(); ++i) {
      absl::StatusOr<bool> better = name == "min" ? Less((*keys)[i], (*keys)[best]) : Less((*keys)[best], (*keys)[i]);
      if (!better.ok()) return better.status();
      if (*better) best = i;
    }
    return (*items)[best];
  }
  if (name == "sum") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* attribute = FindArg(a, 0, "attribute");
    Value total = ArgOr(a, 1, "start", Value(0));
    for (const Value& item : *items) {
      Value x = item;
      if (attribute != nullptr && !attribute->is_none()) {
        absl::StatusOr<Value> got = GetPath(item, *attribute);
        if (!got.ok()) return got.status();
        x = *std::move(got);
      }
      absl::StatusOr<Value> sum = BinaryOp("+", total, x);
      if (!sum.ok()) return sum.status();
      total = *std::move(sum);
    }
    return total;
  }
  if (name == "indent") {
    if (v.is_undefined()) return UndefinedError(v);
    if (v.is_list() && !v.is_tuple()) {  // jinja2 does `s += "\n"` (a list grows) and then s.splitlines().
      return absl::InvalidArgumentError(
          StrCat("AttributeError: '", v.TypeName(), "' object has no attribute 'splitlines'"));
    }
    if (v.is_tuple()) return TypeError("can only concatenate tuple (not \"str\") to tuple");
    if (!v.is_string()) {
      return TypeError(StrCat("unsupported operand type(s) for +=: '", v.TypeName(), "' and 'str'"));
    }
    return SameString(v, Indent(Str(v), ArgOr(a, 0, "width", Value(4)), ArgOr(a, 1, "first", Value(false)).Truthy(),
                                ArgOr(a, 2, "blank", Value(false)).Truthy()));
  }
  if (name == "center") {
    const std::string s = Str(v);
    const int64_t width = ArgOr(a, 0, "width", Value(80)).int_value();
    if (width > kMaxPadding) return absl::ResourceExhaustedError("center: width too large");
    const int64_t len = static_cast<int64_t>(Characters(s).size());
    if (width <= len) return Value(s);
    const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    return Value(std::string(left, ' ') + s + std::string(pad - left, ' '));
  }
  if (name == "wordcount") {  // len(re.findall(r"\w+", s)).
    int64_t n = 0;
    bool in_word = false;
    const std::string text = Str(v);
    for (std::string_view c : Characters(text)) {
      const bool word = IsWordCharacter(c);
      if (word && !in_word) ++n;
      in_word = word;
    }
    return Value(n);
  }
  if (name == "select" || name == "reject") return SelectOrReject(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return SelectOrReject(v, a, true, name == "selectattr");
  if (name == "map") return Map(v, a);
  if (name == "attr") {
    const Value* attribute = FindArg(a, 0, "name");
    if (attribute == nullptr || !attribute->is_string()) return TypeError("attr needs a name");
    return GetAttr(v, attribute->str());
  }
  if (name == "format") {
    if (!a.keywords.empty()) return absl::UnimplementedError("format with keyword arguments is not supported");
    return BinaryOp("%", Value(Str(v)), Value::Tuple(a.positional));
  }
  if (name == "batch") {
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return items.status();
    const int64_t size = ArgOr(a, 0, "linecount", Value(1)).int_value();
    if (size <= 0) return absl::InvalidArgumentError("ValueError: batch size must be positive");
    const Value* fill = FindArg(a, 1, "fill_with");
    std::vector<Value> out;
    for (size_t i = 0; i < items->size(); i += size) {
      std::vector<Value> row(items->begin() + i, items->begin() + std::min(items->size(), i + size));
      while (fill != nullptr && !fill->is_none() && static_cast<int64_t>(row.size()) < size) row.push_back(*fill);
      out.push_back(Value::List(std::move(row)));
    }
    return Value::Generator(std::move(out));
  }
  return absl::NotFoundError(StrCat("TemplateRuntimeError: No filter named '", name, "' found."));
}

}  // namespace

absl::StatusOr<Value> CallFilter(std::string_view name, const Value& v, const CallArgs& a) {
  absl::StatusOr<Value> result = CallFilterNow(name, v, a);
  // jinja2's generator filters fail only when their result is iterated.
  static constexpr std::string_view kGenerators[] = {"items",      "map",        "select", "reject",
                                                     "selectattr", "rejectattr", "unique", "batch"};
  if (!result.ok() && std::find(std::begin(kGenerators), std::end(kGenerators), name) != std::end(kGenerators)) {
    return Value::FailingGenerator(result.status());
  }
  return result;
}

absl::StatusOr<bool> CallTest(std::string_view name, const Value& v, const CallArgs& a) {
  const Value* arg = FindArg(a, 0, "other");
  auto need_arg = [&]() -> absl::Status {
    return arg == nullptr ? TypeError(StrCat("test '", name, "' needs an argument")) : absl::OkStatus();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") {
    return v.is_undefined() || v.is_string() || v.kind() == Value::Kind::kList || (v.is_dict() && !v.is_namespace());
  }
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_function() || v.is_undefined();  // Undefined defines __call__.
  if (name == "escaped") return v.is_markup();
  if (name == "lower") return Str(v) != Upper(Str(v)) && Str(v) == Lower(Str(v));
  if (name == "upper") return Str(v) != Lower(Str(v)) && Str(v) == Upper(Str(v));
  if (name == "odd" || name == "even" || name == "divisibleby") {  // value % n == 0 or 1, in Python.
    const Value* d = name == "divisibleby" ? FindArg(a, 0, "num") : nullptr;
    if (name == "divisibleby") CASCADE_RETURN_IF_ERROR(need_arg());
    absl::StatusOr<Value> mod = BinaryOp("%", v, d != nullptr ? *d : Value(2));
    if (!mod.ok()) return mod.status();
    if (!mod->is_number()) return false;  // A string's % formatting.
    return Equals(*mod, Value(name == "odd" ? 1 : 0));
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    CASCADE_RETURN_IF_ERROR(need_arg());
    return Equals(v, *arg) == (name != "ne" && name != "!=");
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "gt" || name == "greaterthan" || name == ">") {
    CASCADE_RETURN_IF_ERROR(need_arg());
    const bool lt = name == "lt" || name == "lessthan" || name == "<";
    return lt ? Less(v, *arg) : Less(*arg, v);
  }
  if (name == "le" || name == "<=" || name == "ge" || name == ">=") {
    CASCADE_RETURN_IF_ERROR(need_arg());
    const bool le = name == "le" || name == "<=";
    absl::StatusOr<bool> strict = le ? Less(*arg, v) : Less(v, *arg);
    if (!strict.ok()) return strict.status();
    return !*strict;
  }
  if (name == "in") {
    const Value* seq = FindArg(a, 0, "seq");
    if (seq == nullptr) return TypeError("test 'in' needs an argument");
    return Contains(*seq, v);
  }
  if (name == "sameas") {
    CASCADE_RETURN_IF_ERROR(need_arg());
    if (v.is_list() && arg->is_list()) return &v.list() == &arg->list();
    if (v.is_dict() && arg->is_dict()) return &v.dict() == &arg->dict();
    return v.kind() == arg->kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && Equals(v, *arg)));
  }
  return absl::NotFoundError(StrCat("TemplateRuntimeError: No test named '", name, "' found."));
}

}  // namespace cascade::text::jinja::internal
