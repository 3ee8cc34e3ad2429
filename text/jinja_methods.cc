// Python's str, dict and list methods as templates call them (`content.strip()`,
// `message.get('x')`, `'{}'.format(x)`), bound to their object; see jinja_builtins.h.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <tuple>

#include "core/str_cat.h"
#include "text/jinja_builtins.h"

namespace cascade::text::jinja::internal {
namespace {

absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(StrCat("TypeError: ", what)); }

// Python's str.isspace() for the ASCII range (str.split() and str.strip() use it).
bool IsPySpace(std::string_view c) {
  return c.size() == 1 && (c[0] == ' ' || (c[0] >= '\t' && c[0] <= '\r') || (c[0] >= '\x1c' && c[0] <= '\x1f'));
}

// Strips characters in `chars` (null: whitespace) from the left and/or right.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string_view> cs = Characters(s);
  std::vector<std::string_view> set;
  const bool whitespace = chars == nullptr || chars->is_none() || !chars->is_string();
  if (!whitespace) set = Characters(chars->str());
  auto strip = [&](std::string_view c) {
    return whitespace ? IsPySpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strip(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cs[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

// str.split / str.rsplit with Python's rules (no sep: runs of whitespace, no empties).
absl::StatusOr<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::string_view> cs = Characters(s);
    if (from_right) std::reverse(cs.begin(), cs.end());
    size_t i = 0;
    int64_t splits = 0;
    while (i < cs.size()) {
      while (i < cs.size() && IsPySpace(cs[i])) ++i;
      if (i == cs.size()) break;
      std::string word;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = cs.size();
        while (e > i && IsPySpace(cs[e - 1])) --e;
        for (size_t k = i; k < e; ++k) word += cs[k];
        i = cs.size();
      } else {
        while (i < cs.size() && !IsPySpace(cs[i])) word += cs[i++];
        ++splits;
      }
      parts.push_back(std::move(word));
    }
    if (from_right) {
      std::reverse(parts.begin(), parts.end());
      for (std::string& p : parts) {
        std::vector<std::string_view> pc = Characters(p);
        std::string r;
        for (auto it = pc.rbegin(); it != pc.rend(); ++it) r += *it;
        p = std::move(r);
      }
    }
  } else {
    if (!sep.is_string()) return TypeError(StrCat("must be str or None, not ", sep.TypeName()));
    const std::string& d = sep.str();
    if (d.empty()) return absl::InvalidArgumentError("ValueError: empty separator");
    if (!from_right) {
      size_t start = 0;
      int64_t splits = 0;
      for (size_t p; (maxsplit < 0 || splits < maxsplit) && (p = s.find(d, start)) != std::string::npos; ++splits) {
        parts.push_back(s.substr(start, p - start));
        start = p + d.size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t splits = 0;
      std::vector<std::string> rev;
      while (maxsplit < 0 || splits < maxsplit) {
        if (end < d.size()) break;
        const size_t p = s.rfind(d, end - d.size());
        if (p == std::string::npos) break;
        rev.push_back(s.substr(p + d.size(), end - p - d.size()));
        end = p;
        ++splits;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  for (std::string& p : parts) out.emplace_back(std::move(p));
  return Value::List(std::move(out));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character.
    int64_t n = 0;
    for (std::string_view c : Characters(s)) {
      if (count < 0 || n++ < count) out += to;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

// Python's case mapping for the scripts a prompt commonly holds: ASCII, Latin-1, Greek and
// Cyrillic (one-to-one maps; others, and 'ß' -> "SS", are left as they are).
uint32_t CaseMap(uint32_t cp, bool upper) {
  auto shift = [&](uint32_t lo_first, uint32_t lo_last, uint32_t up_first) -> std::optional<uint32_t> {
    const uint32_t up_last = up_first + (lo_last - lo_first);
    if (upper && cp >= lo_first && cp <= lo_last) return cp - lo_first + up_first;
    if (!upper && cp >= up_first && cp <= up_last) return cp - up_first + lo_first;
    return std::nullopt;
  };
  if (cp == 0xF7 || cp == 0xD7 || cp == 0x3C2 || cp == 0x3A2) return cp;  // ÷ × ς and the gap.
  for (auto [lo_first, lo_last, up_first] : {std::tuple<uint32_t, uint32_t, uint32_t>{'a', 'z', 'A'},
                                             {0xE0, 0xFE, 0xC0},
                                             {0x3B1, 0x3C9, 0x391},
                                             {0x430, 0x44F, 0x410},
                                             {0x450, 0x45F, 0x400}}) {
    if (std::optional<uint32_t> mapped = shift(lo_first, lo_last, up_first)) return *mapped;
  }
  return cp;
}

bool IsCased(uint32_t cp) { return CaseMap(cp, true) != cp || CaseMap(cp, false) != cp; }

// Applies `upper_at(i, cp, prev_cased)` (true: upper-case, false: lower-case) to each code point.
template <typename F>
std::string MapCase(const std::string& s, F upper_at) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  size_t i = 0;
  for (std::string_view c : Characters(s)) {
    uint32_t cp = static_cast<unsigned char>(c[0]);
    if (c.size() == 2) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(c[1]) & 0x3F);
    if (c.size() > 2 || (c.size() == 1 && cp >= 0x80)) {
      out += c;
      prev_cased = false;
      ++i;
      continue;
    }
    const bool cased = IsCased(cp);
    const uint32_t m = cased ? CaseMap(cp, upper_at(i, prev_cased)) : cp;
    if (m < 0x80) {
      out += static_cast<char>(m);
    } else {
      out += static_cast<char>(0xC0 | (m >> 6));
      out += static_cast<char>(0x80 | (m & 0x3F));
    }
    prev_cased = cased;
    ++i;
  }
  return out;
}

}  // namespace

// Python's str.title(): a cased letter after an uncased character is upper-cased, others
// lower-cased.
std::string TitleCase(const std::string& s) {
  return MapCase(s, [](size_t, bool prev_cased) { return !prev_cased; });
}
std::string Capitalize(const std::string& s) {
  return MapCase(s, [](size_t i, bool) { return i == 0; });
}
std::string Upper(const std::string& s) {
  return MapCase(s, [](size_t, bool) { return true; });
}
std::string Lower(const std::string& s) {
  return MapCase(s, [](size_t, bool) { return false; });
}
std::string StripWhitespace(const std::string& s) { return Strip(s, nullptr, true, true); }

absl::StatusOr<Value> FormatString(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos)
      return absl::InvalidArgumentError("ValueError: Single '{' encountered in format string");
    const std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    // The field's name, then its conversion or spec (looked up first: a missing name is a
    // KeyError whatever follows it).
    const std::string name = field.substr(0, field.find_first_of(":!"));
    const Value* v = nullptr;
    if (name.empty()) {
      v = next < args.positional.size() ? &args.positional[next] : nullptr;
      ++next;
    } else if (std::all_of(name.begin(), name.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = name.size() < 10 ? std::stoul(name) : args.positional.size();
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      for (const auto& [key, value] : args.keywords) {
        if (key == name) v = &value;
      }
      if (v == nullptr) return absl::InvalidArgumentError(StrCat("KeyError: '", name, "'"));
    }
    if (v == nullptr) {
      return absl::InvalidArgumentError("IndexError: Replacement index out of range for positional args tuple");
    }
    if (name.size() != field.size()) return absl::UnimplementedError("format specs in str.format are not supported");
    out += Str(*v);
  }
  return Value(std::move(out));
}

namespace {

absl::StatusOr<Value> StringMethod(const Value& self, const std::string& name, const CallArgs& a) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(Strip(s, FindArg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value maxsplit = ArgOr(a, 1, "maxsplit", Value(-1));
    return Split(s, ArgOr(a, 0, "sep", Value::None()), maxsplit.int_value(), name == "rsplit");
  }
  if (name == "startswith" || name == "endswith") {
    const Value* arg = FindArg(a, 0, "prefix");
    if (arg == nullptr) return TypeError(StrCat(name, "() takes at least 1 argument (0 given)"));
    std::vector<Value> options = arg->is_tuple() ? arg->list() : std::vector<Value>{*arg};
    for (const Value& o : options) {
      if (!o.is_string()) return TypeError(StrCat(name, " first arg must be str or a tuple of str"));
      const std::string& p = o.str();
      if (p.size() <= s.size() &&
          (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0)) {
        return Value(true);
      }
    }
    return Value(false);
  }
  if (name == "replace") {
    const Value* from = FindArg(a, 0, "old");
    const Value* to = FindArg(a, 1, "new");
    if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
      return TypeError("replace() arguments must be str");
    }
    return Value(Replace(s, from->str(), to->str(), ArgOr(a, 2, "count", Value(-1)).int_value()));
  }
  if (name == "upper") return Value(Upper(s));
  if (name == "lower") return Value(Lower(s));
  if (name == "title") return Value(TitleCase(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    const Value* sub = FindArg(a, 0, "sub");
    if (sub == nullptr || !sub->is_string()) return TypeError(StrCat(name, "() argument must be str"));
    if (name == "count") {
      if (sub->str().empty()) return Value(static_cast<int64_t>(Characters(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub->str()); p != std::string::npos; p = s.find(sub->str(), p + sub->str().size())) ++n;
      return Value(n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub->str()) : s.find(sub->str());
    if (p == std::string::npos) {
      if (name == "index") return absl::InvalidArgumentError("ValueError: substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(Characters(std::string_view(s).substr(0, p)).size()));
  }
  if (name == "format") return FormatString(s, a);
  if (name == "join") {
    const Value* items = FindArg(a, 0, "iterable");
    if (items == nullptr) return TypeError("join() takes exactly one argument (0 given)");
    absl::StatusOr<std::vector<Value>> list = Iterate(*items);
    if (!list.ok()) return list.status();
    std::string out;
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) {
        return TypeError(StrCat("sequence item ", i, ": expected str instance, ", (*list)[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += (*list)[i].str();
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return Value::List(std::move(lines));
  }
  auto all = [&](auto pred) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); });
  };
  if (name == "isdigit") return Value(all([](unsigned char c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value(all([](unsigned char c) { return std::isalpha(c) != 0; }));
  if (name == "isalnum") return Value(all([](unsigned char c) { return std::isalnum(c) != 0; }));
  if (name == "isspace")
    return Value(
        all([](unsigned char c) { return IsPySpace(std::string_view(reinterpret_cast<const char*>(&c), 1)); }));
  if (name == "islower") return Value(s != Upper(s) && s == Lower(s));
  if (name == "isupper") return Value(s != Lower(s) && s == Upper(s));
  return absl::InternalError("unreachable");
}

constexpr std::string_view kStringMethods[] = {
    "strip",      "lstrip",  "rstrip",     "split",   "rsplit",  "startswith", "endswith", "replace", "upper",
    "lower",      "title",   "capitalize", "find",    "rfind",   "index",      "count",    "format",  "join",
    "splitlines", "isdigit", "isalpha",    "isalnum", "isspace", "islower",    "isupper"};
// What jinja2's ImmutableSandboxedEnvironment refuses (sandbox.py _mutable_spec).
constexpr std::string_view kUnsafeListMethods[] = {"append", "clear",  "extend",  "insert",
                                                   "pop",    "remove", "reverse", "sort"};
constexpr std::string_view kUnsafeDictMethods[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value Unsafe(const Value& obj, const std::string& name) {
  return Value::Undefined(
      StrCat("SecurityError: access to attribute '", name, "' of '", obj.TypeName(), "' object is unsafe."));
}

}  // namespace

std::optional<Value> BoundMethod(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (!In(kStringMethods, name)) return std::nullopt;
    return Value::Function(name, [obj, name](const CallArgs& a) { return StringMethod(obj, name, a); });
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    if (In(kUnsafeDictMethods, name)) return Unsafe(obj, name);
    if (name == "items" || name == "keys" || name == "values") {
      return Value::Function(name, [obj, name](const CallArgs&) -> absl::StatusOr<Value> {
        std::vector<Value> out;
        for (const auto& [k, v] : obj.dict().entries) {
          out.push_back(name == "items" ? Value::Tuple({k, v}) : name == "keys" ? k : v);
        }
        return Value::View(std::move(out), StrCat("dict_", name));
      });
    }
    if (name == "get") {
      return Value::Function(name, [obj](const CallArgs& a) -> absl::StatusOr<Value> {
        const Value* key = FindArg(a, 0, "key");
        if (key == nullptr) return TypeError("get expected at least 1 argument, got 0");
        const Value* v = obj.dict().Find(*key);
        return v != nullptr ? *v : ArgOr(a, 1, "default", Value::None());
      });
    }
    if (name == "copy") {
      return Value::Function(name,
                             [obj](const CallArgs&) -> absl::StatusOr<Value> { return Value::MakeDict(obj.dict()); });
    }
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (!obj.is_tuple() && In(kUnsafeListMethods, name)) return Unsafe(obj, name);
    if (name == "index" || name == "count") {
      return Value::Function(name, [obj, name](const CallArgs& a) -> absl::StatusOr<Value> {
        const Value x = ArgOr(a, 0, "value", Value());
        int64_t n = 0;
        for (size_t i = 0; i < obj.list().size(); ++i) {
          if (!Equals(obj.list()[i], x)) continue;
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
        if (name == "index") return absl::InvalidArgumentError(StrCat("ValueError: ", Repr(x), " is not in list"));
        return Value(n);
      });
    }
    if (name == "copy" && !obj.is_tuple()) {
      return Value::Function(name, [obj](const CallArgs&) -> absl::StatusOr<Value> { return Value::List(obj.list()); });
    }
  }
  return std::nullopt;
}

}  // namespace cascade::text::jinja::internal
