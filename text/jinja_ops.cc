// Attribute and item access, Python's operators and iteration; see jinja_builtins.h.
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/str_cat.h"
#include "text/jinja_builtins.h"

namespace cascade::text::jinja::internal {
namespace {

absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(StrCat("TypeError: ", what)); }

// Python's ints are unbounded; ours are 64-bit and refuse to wrap.
absl::Status Overflow() { return absl::InvalidArgumentError("OverflowError: integer beyond 64 bits"); }

// Bigger strings or lists than this from `*` are refused: a template must not exhaust memory.
constexpr int64_t kMaxRepeatBytes = int64_t{1} << 26;

// jinja2's object_type_repr: "None", "dict object", "list object", ...
std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  return StrCat(v.TypeName(), " object");
}

Value MissingAttribute(const Value& obj, const std::string& name) {
  return Value::Undefined(obj.is_none() ? StrCat("'None' has no attribute '", name, "'")
                                        : StrCat("'", ObjectTypeRepr(obj), "' has no attribute '", name, "'"));
}

// Python's index normalisation for obj[i]: nullopt when out of range.
std::optional<size_t> Index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (static_cast<double>(seq.str().size()) * n > kMaxRepeatBytes)
      return absl::ResourceExhaustedError("string too long");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::Markup(std::move(out)) : Value(std::move(out));
  }
  if (static_cast<double>(seq.list().size()) * n > kMaxRepeatBytes / 16)
    return absl::ResourceExhaustedError("list too long");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

// Python's `%` formatting of a str: %s %r %d %i %f %%; a tuple supplies several values.
absl::StatusOr<Value> PercentFormat(const Value& format, const Value& args) {
  std::vector<Value> values = args.is_tuple() ? args.list() : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  const std::string& f = format.str();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    const char c = f[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) return TypeError("not enough arguments for format string");
    const Value& v = values[next++];
    switch (c) {
      case 's': out += Str(v); break;
      case 'r': out += Repr(v); break;
      case 'd':
      case 'i':
        if (!v.is_number()) return TypeError(StrCat("%d format: a real number is required, not ", v.TypeName()));
        if (v.is_float() && !(std::fabs(v.float_value()) < 9.2e18)) return Overflow();
        out += std::to_string(v.is_float() ? static_cast<int64_t>(v.float_value()) : v.int_value());
        break;
      case 'f': {
        if (!v.is_number()) return TypeError("must be real number");
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%f", v.float_value());
        out += buf;
        break;
      }
      default:
        return absl::InvalidArgumentError(StrCat("ValueError: unsupported format character '", std::string(1, c), "'"));
    }
  }
  // Python's leftover check spares mappings, and lists and Undefined (they have __getitem__).
  if (next < values.size() && !args.is_dict() && !(args.is_list() && !args.is_tuple()) && !args.is_undefined()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return Value(std::move(out));
}

template <typename Op>
absl::StatusOr<Value> IntResult(const Value& a, const Value& b, Op op) {
  int64_t r;
  if (op(a.int_value(), b.int_value(), &r)) return Overflow();
  return Value(r);
}

double FloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

// markupsafe.escape: what Markup + str does to the str.
std::string EscapeHtml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

absl::Status UndefinedError(const Value& v) {
  const std::string& hint = v.undefined_hint();
  if (hint.rfind("SecurityError: ", 0) == 0) return absl::InvalidArgumentError(hint);
  return absl::InvalidArgumentError(StrCat("UndefinedError: ", hint));
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.dict().FindString(name);
    return v != nullptr ? *v : MissingAttribute(obj, name);
  }
  // Python attributes (methods) win over keys for `.`, as jinja2's getattr tries them first.
  if (std::optional<Value> method = BoundMethod(obj, name)) return *std::move(method);
  if (obj.is_dict()) {
    const Value* v = obj.dict().FindString(name);
    if (v != nullptr) return *v;
  }
  return MissingAttribute(obj, name);
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && !obj.is_namespace()) {
    const Value* v = obj.dict().Find(key);
    if (v != nullptr) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_number() && !key.is_float()) {
    if (obj.is_list()) {
      if (std::optional<size_t> i = Index(key.int_value(), obj.list().size())) return obj.list()[*i];
    } else {
      const std::vector<std::string_view> chars = Characters(obj.str());
      if (std::optional<size_t> i = Index(key.int_value(), chars.size())) return Value(chars[*i]);
    }
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(StrCat(ObjectTypeRepr(obj), " has no element ", Repr(key)));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto bound = [](const Value& v) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_number() || v.is_float()) {
      return TypeError("slice indices must be integers or None or have an __index__ method");
    }
    return std::optional<int64_t>(v.int_value());
  };
  absl::StatusOr<std::optional<int64_t>> start = bound(start_v), stop = bound(stop_v), step_o = bound(step_v);
  if (!start.ok()) return start.status();
  if (!stop.ok()) return stop.status();
  if (!step_o.ok()) return step_o.status();
  const int64_t step = step_o->value_or(1);
  if (step == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  std::vector<std::string_view> chars;
  size_t n = 0;
  if (obj.is_string()) {
    chars = Characters(obj.str());
    n = chars.size();
  } else if (obj.is_list()) {
    n = obj.list().size();
  } else {
    return TypeError(StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  // Python's PySlice_AdjustIndices.
  const int64_t len = static_cast<int64_t>(n);
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v;
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  const int64_t lo = adjust(*start, step < 0 ? len - 1 : 0);
  const int64_t hi = adjust(*stop, step < 0 ? -1 : len);
  std::vector<size_t> picked;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) picked.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picked) out += chars[i];
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (size_t i : picked) out.push_back(obj.list()[i]);
  return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(Str(a) + Str(b));
  if (op == "%" && a.is_string()) return PercentFormat(a, b);  // An Undefined argument prints as "".
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers)
      return floats ? Value(a.float_value() + b.float_value())
                    : IntResult(a, b, [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); });
    if (a.is_string() && b.is_string()) {
      // Markup + str escapes the str (markupsafe), a trap jinja2 keeps even without autoescape.
      if (a.is_markup() || b.is_markup()) {
        return Value::Markup((a.is_markup() ? a.str() : EscapeHtml(a.str())) +
                             (b.is_markup() ? b.str() : EscapeHtml(b.str())));
      }
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
    }
    if (a.is_string()) return TypeError(StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    if (a.is_list()) return TypeError(StrCat("can only concatenate list (not \"", b.TypeName(), "\") to list"));
  } else if (op == "-") {
    if (numbers)
      return floats ? Value(a.float_value() - b.float_value())
                    : IntResult(a, b, [](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); });
  } else if (op == "*") {
    if (numbers)
      return floats ? Value(a.float_value() * b.float_value())
                    : IntResult(a, b, [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); });
    if ((a.is_string() || a.is_list()) && b.is_number() && !b.is_float()) return Repeat(a, b.int_value());
    if ((b.is_string() || b.is_list()) && a.is_number() && !a.is_float()) return Repeat(b, a.int_value());
  } else if (op == "/") {
    if (numbers) {
      if (b.float_value() == 0) return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
      return Value(a.float_value() / b.float_value());
    }
  } else if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") return PercentFormat(a, b);
    if (numbers) {
      if (b.float_value() == 0) {
        return absl::InvalidArgumentError(op == "%" ? "ZeroDivisionError: integer modulo by zero"
                                                    : "ZeroDivisionError: integer division or modulo by zero");
      }
      if (floats) {
        const double x = a.float_value(), y = b.float_value();
        return op == "%" ? Value(FloorMod(x, y)) : Value(std::floor(x / y));
      }
      const int64_t x = a.int_value(), y = b.int_value();
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return absl::InvalidArgumentError("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "%" ? Value(r) : Value(q);
    }
  } else if (op == "**") {
    if (numbers) {
      if (!floats && b.int_value() >= 0) {
        int64_t result = 1, base = a.int_value();
        bool overflow = false;
        for (int64_t e = b.int_value(); e > 0; e >>= 1) {
          if (e & 1) overflow |= __builtin_mul_overflow(result, base, &result);
          if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
        }
        if (overflow) return Overflow();
        return Value(result);
      }
      const double x = a.float_value(), y = b.float_value();
      if (x == 0 && y < 0)
        return absl::InvalidArgumentError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      const double r = std::pow(x, y);
      // Python raises where C's pow overflows (finite operands, infinite result).
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
        return absl::InvalidArgumentError("OverflowError: (34, 'Numerical result out of range')");
      }
      return Value(r);
    }
  }
  return TypeError(StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      if (absl::Status deferred = container.generator_error(); !deferred.ok()) return deferred;
      for (const Value& v : container.list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return TypeError(StrCat("unhashable type: '", item.TypeName(), "'"));
      }
      return !container.is_namespace() && container.dict().Find(item) != nullptr;
    default: return TypeError(StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>();
    case Value::Kind::kList:
      if (absl::Status deferred = v.generator_error(); !deferred.ok()) return deferred;
      return v.list();
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      for (const auto& [k, unused] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (std::string_view c : Characters(v.str())) chars.emplace_back(c);
      return chars;
    }
    default: break;
  }
  return TypeError(StrCat("'", v.TypeName(), "' object is not iterable"));
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(Characters(v.str()).size());
    case Value::Kind::kList:
      if (!v.is_generator()) return static_cast<int64_t>(v.list().size());
      break;
    case Value::Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.dict().entries.size());
      break;
    default: break;
  }
  return TypeError(StrCat("object of type '", v.TypeName(), "' has no len()"));
}

std::vector<std::string_view> Characters(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

const Value* FindArg(const CallArgs& args, size_t position, std::string_view name) {
  if (position < args.positional.size()) return &args.positional[position];
  for (const auto& [k, v] : args.keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value ArgOr(const CallArgs& args, size_t position, std::string_view name, Value fallback) {
  const Value* v = FindArg(args, position, name);
  return v != nullptr ? *v : std::move(fallback);
}

}  // namespace cascade::text::jinja::internal
