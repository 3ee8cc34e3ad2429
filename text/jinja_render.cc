// The tree-walking renderer of JinjaTemplate (jinja_template.h): statements, expressions,
// scopes and the global functions, by jinja2's rules. Scopes: a for loop's every iteration
// and a macro call get a frame of their own, whose `set`s vanish with it (hence
// namespace()); `if` shares its frame. Macros see their defining frame as it is when called.
#include "text/jinja_template.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"
#include "text/jinja_ast.h"
#include "text/jinja_builtins.h"
#include "text/jinja_parser.h"

namespace cascade::text {

struct JinjaTemplate::Parsed {
  jinja::Body body;
};

namespace jinja {
namespace {

using internal::UndefinedError;

// Bounds that keep a hostile template from hanging or exhausting memory. A real chat
// template renders a few KiB, a long conversation a few MiB.
// Loop iterations are bounded by JinjaRenderOptions::max_steps.
constexpr int64_t kMaxOutputBytes = int64_t{64} << 20;  // Counted over all captures.
constexpr int kMaxCallDepth = 100;                      // Nested macro calls.
constexpr int64_t kMaxRange = 100'000;                  // jinja2's sandbox MAX_RANGE.

struct Frame;
using FramePtr = std::shared_ptr<Frame>;

struct Frame {
  FramePtr parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
      for (const auto& [k, v] : f->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void Set(std::string_view name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }
};

FramePtr Child(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

enum class Flow { kNormal, kBreak, kContinue };

// An error from a builtin gets the line of the expression or statement that raised it.
absl::Status AtLine(int line, const absl::Status& s) {
  if (s.ok() || ToStd(s.message()).rfind("template line ", 0) == 0) return s;
  return absl::Status(s.code(), StrCat("template line ", line, ": ", ToStd(s.message())));
}

class Renderer {
 public:
  Renderer(FramePtr root, int64_t max_steps) : root_(std::move(root)), max_steps_(max_steps) {}

  absl::Status RenderBody(const Body& body, const FramePtr& frame, std::string* out, Flow* flow) {
    for (const NodePtr& node : body) {
      absl::Status s = AtLine(node->line, RenderNode(*node, frame, out, flow));
      if (!s.ok()) return s;
      if (*flow != Flow::kNormal) break;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Eval(const Expr& e, const FramePtr& frame) {
    absl::StatusOr<Value> v = EvalImpl(e, frame);
    if (!v.ok()) return AtLine(e.line, v.status());
    return v;
  }

 private:
  absl::Status Append(std::string* out, std::string_view s) {
    output_bytes_ += static_cast<int64_t>(s.size());
    if (output_bytes_ > kMaxOutputBytes) return absl::ResourceExhaustedError("template output too large");
    out->append(s);
    return absl::OkStatus();
  }

  absl::Status Step() {
    if (++steps_ > max_steps_) return absl::ResourceExhaustedError("template runs too long (loop iterations)");
    return absl::OkStatus();
  }

  absl::Status RenderNode(const Node& n, const FramePtr& frame, std::string* out, Flow* flow) {
    switch (n.kind) {
      case Node::Kind::kText: return Append(out, n.text);
      case Node::Kind::kOutput: {
        CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
        return Append(out, Str(v));
      }
      case Node::Kind::kIf: {
        for (const auto& [cond, body] : n.branches) {
          CASCADE_ASSIGN_OR_RETURN(Value c, Eval(*cond, frame));
          if (c.Truthy()) return RenderBody(body, frame, out, flow);
        }
        return RenderBody(n.else_body, frame, out, flow);
      }
      case Node::Kind::kFor: return RenderFor(n, frame, out);
      case Node::Kind::kSet: {
        CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
        return Assign(n.target, std::move(v), frame);
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        Flow inner = Flow::kNormal;
        CASCADE_RETURN_IF_ERROR(RenderBody(n.body, frame, &captured, &inner));
        Value v(std::move(captured));
        if (n.filter) {
          CASCADE_ASSIGN_OR_RETURN(v, ApplyFilters(*n.filter, std::move(v), frame));
        }
        return Assign(n.target, std::move(v), frame);
      }
      case Node::Kind::kMacro: frame->Set(n.name, MakeMacro(n, frame)); return absl::OkStatus();
      case Node::Kind::kCallBlock: {
        const Expr& call = *n.expr;
        CASCADE_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], frame));
        CASCADE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1, frame));
        args.keywords.emplace_back("caller", MakeMacro(n, frame));
        CASCADE_ASSIGN_OR_RETURN(Value v, CallValue(callee, args));
        return Append(out, Str(v));
      }
      case Node::Kind::kFilterBlock: {
        std::string captured;
        Flow inner = Flow::kNormal;
        CASCADE_RETURN_IF_ERROR(RenderBody(n.body, frame, &captured, &inner));
        CASCADE_ASSIGN_OR_RETURN(Value v, ApplyFilters(*n.filter, Value(std::move(captured)), frame));
        return Append(out, Str(v));
      }
      case Node::Kind::kWith: {
        FramePtr inner = Child(frame);
        for (const auto& [target, expr] : n.assignments) {
          CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*expr, frame));
          CASCADE_RETURN_IF_ERROR(Assign(target, std::move(v), inner));
        }
        return RenderBody(n.body, inner, out, flow);
      }
      case Node::Kind::kGeneration: return RenderBody(n.body, frame, out, flow);
      case Node::Kind::kBreak: *flow = Flow::kBreak; return absl::OkStatus();
      case Node::Kind::kContinue: *flow = Flow::kContinue; return absl::OkStatus();
    }
    return absl::InternalError("unknown node");
  }

  absl::Status Assign(const Target& t, Value v, const FramePtr& frame) {
    if (!t.attribute.empty()) {
      const Value* ns = frame->Find(t.names[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        return absl::InvalidArgumentError("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      }
      ns->dict().Set(Value(t.attribute), std::move(v));
      return absl::OkStatus();
    }
    if (!t.tuple) {
      frame->Set(t.names[0], std::move(v));
      return absl::OkStatus();
    }
    CASCADE_ASSIGN_OR_RETURN(std::vector<Value> items, internal::Iterate(v));
    if (items.size() != t.names.size()) {
      return absl::InvalidArgumentError(
          StrCat("ValueError: ", items.size() < t.names.size() ? "not enough" : "too many",
                 " values to unpack (expected ", t.names.size(), ")"));
    }
    for (size_t i = 0; i < items.size(); ++i) frame->Set(t.names[i], std::move(items[i]));
    return absl::OkStatus();
  }

  absl::Status RenderFor(const Node& n, const FramePtr& frame, std::string* out) {
    CASCADE_ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr, frame));
    CASCADE_ASSIGN_OR_RETURN(std::vector<Value> all, internal::Iterate(iterable));
    std::vector<Value> items;
    if (n.condition) {  // `for x in xs if c`: filtered first, so loop.length counts the kept ones.
      for (Value& item : all) {
        CASCADE_RETURN_IF_ERROR(Step());
        FramePtr probe = Child(frame);
        CASCADE_RETURN_IF_ERROR(Assign(n.target, item, probe));
        CASCADE_ASSIGN_OR_RETURN(Value keep, Eval(*n.condition, probe));
        if (keep.Truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    // The else branch runs unless some iteration reached the end of the body: jinja2 clears
    // its flag there, so a loop whose every iteration hit `continue` (or a first `break`)
    // renders it too.
    bool completed = false;
    for (int64_t i = 0; i < length; ++i) {
      CASCADE_RETURN_IF_ERROR(Step());
      FramePtr inner = Child(frame);
      CASCADE_RETURN_IF_ERROR(Assign(n.target, items[i], inner));
      if (n.uses_loop) inner->Set("loop", LoopObject(items, i));
      Flow flow = Flow::kNormal;
      CASCADE_RETURN_IF_ERROR(RenderBody(n.body, inner, out, &flow));
      if (flow == Flow::kBreak) break;
      completed = completed || flow == Flow::kNormal;
    }
    if (completed) return absl::OkStatus();
    Flow flow = Flow::kNormal;
    return RenderBody(n.else_body, frame, out, &flow);
  }

  // Whether jinja2's compiler folds `e` to a constant: literals and operators over them.
  static bool IsConstant(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return true;
      case Expr::Kind::kUnary:
      case Expr::Kind::kBinary:
      case Expr::Kind::kList:
      case Expr::Kind::kTuple:
        return std::all_of(e.children.begin(), e.children.end(), [](const ExprPtr& c) { return c && IsConstant(*c); });
      default: return false;
    }
  }

  // jinja2's `loop` for iteration i of `items`.
  static Value LoopObject(const std::vector<Value>& items, int64_t i) {
    static const auto* keys = new std::vector<Value>{"index",  "index0", "revindex", "revindex0", "first",    "last",
                                                     "length", "depth",  "depth0",   "previtem",  "nextitem", "cycle"};
    const int64_t length = static_cast<int64_t>(items.size());
    Dict loop;
    loop.entries.reserve(keys->size());
    const Value values[] = {
        Value(i + 1),
        Value(i),
        Value(length - i),
        Value(length - i - 1),
        Value(i == 0),
        Value(i == length - 1),
        Value(length),
        Value(1),
        Value(0),
        i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"),
        i + 1 < length ? items[i + 1] : Value::Undefined("there is no next item"),
        Value::Function("cycle",
                        [i](const CallArgs& a) -> absl::StatusOr<Value> {
                          if (a.positional.empty())
                            return absl::InvalidArgumentError("TypeError: no items for cycling given");
                          return a.positional[static_cast<size_t>(i) % a.positional.size()];
                        }),
    };
    for (size_t k = 0; k < keys->size(); ++k) loop.entries.emplace_back((*keys)[k], values[k]);
    return Value::MakeDict(std::move(loop));
  }

  // A macro (kMacro) or a call block's caller (kCallBlock) as a callable. The defining
  // frame is held weakly: a macro stored in its own frame must not keep it alive forever.
  Value MakeMacro(const Node& n, const FramePtr& frame) {
    std::weak_ptr<Frame> weak = frame;
    const std::string name = n.kind == Node::Kind::kMacro ? n.name : "caller";
    return Value::Function(name, [this, &n, weak](const CallArgs& args) -> absl::StatusOr<Value> {
      FramePtr defining = weak.lock();
      FramePtr f = Child(defining ? defining : root_);
      if (++call_depth_ > kMaxCallDepth) {
        --call_depth_;
        return absl::ResourceExhaustedError(StrCat("macro calls nested deeper than ", kMaxCallDepth));
      }
      absl::StatusOr<Value> result = CallMacro(n, args, f);
      --call_depth_;
      return result;
    });
  }

  absl::StatusOr<Value> CallMacro(const Node& n, const CallArgs& args, const FramePtr& f) {
    CASCADE_RETURN_IF_ERROR(Step());
    std::vector<bool> bound(n.params.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < n.params.size()) {
        f->Set(n.params[i], args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Dict kwargs;
    for (const auto& [key, value] : args.keywords) {
      const auto it = std::find(n.params.begin(), n.params.end(), key);
      if (it != n.params.end()) {
        f->Set(key, value);
        bound[it - n.params.begin()] = true;
      } else if (key == "caller") {
        f->Set("caller", value);
      } else {
        kwargs.Set(Value(key), value);
      }
    }
    for (size_t i = 0; i < n.params.size(); ++i) {
      if (bound[i]) continue;
      if (n.defaults[i]) {
        CASCADE_ASSIGN_OR_RETURN(Value d, Eval(*n.defaults[i], f));
        f->Set(n.params[i], std::move(d));
      } else {
        f->Set(n.params[i], Value::Undefined(StrCat("parameter '", n.params[i], "' was not provided")));
      }
    }
    f->Set("varargs", Value::List(std::move(varargs)));
    f->Set("kwargs", Value::MakeDict(std::move(kwargs)));
    std::string out;
    Flow flow = Flow::kNormal;
    CASCADE_RETURN_IF_ERROR(RenderBody(n.body, f, &out, &flow));
    return Value(std::move(out));
  }

  absl::StatusOr<Value> CallValue(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) return UndefinedError(callee);
    if (!callee.is_function()) {
      return absl::InvalidArgumentError(StrCat("TypeError: '", callee.TypeName(), "' object is not callable"));
    }
    CASCADE_RETURN_IF_ERROR(Step());
    return callee.Call(args);
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const FramePtr& frame) {
    CallArgs args;
    const size_t n_kw = e.kwarg_names.size();
    const size_t n_pos = e.children.size() - n_kw;
    for (size_t i = first; i < e.children.size(); ++i) {
      CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i], frame));
      if (i < n_pos) {
        args.positional.push_back(std::move(v));
      } else {
        args.keywords.emplace_back(e.kwarg_names[i - n_pos], std::move(v));
      }
    }
    return args;
  }

  // A kFilter chain applied to `input` (its innermost input is null: filter/set blocks).
  absl::StatusOr<Value> ApplyFilters(const Expr& f, Value input, const FramePtr& frame) {
    if (f.children[0]) {
      CASCADE_ASSIGN_OR_RETURN(input, ApplyFilters(*f.children[0], std::move(input), frame));
    }
    CASCADE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f, 1, frame));
    absl::StatusOr<Value> result = internal::CallFilter(f.name, input, args);
    if (!result.ok()) return AtLine(f.line, result.status());
    return result;
  }

  absl::StatusOr<bool> Compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return Equals(l, r);
    if (op == "!=") return !Equals(l, r);
    if (op == "in") return internal::Contains(r, l);
    if (op == "not in") {
      CASCADE_ASSIGN_OR_RETURN(bool in, internal::Contains(r, l));
      return !in;
    }
    if (l.is_undefined()) return UndefinedError(l);
    if (r.is_undefined()) return UndefinedError(r);
    absl::StatusOr<bool> less = (op == "<" || op == ">=") ? Less(l, r) : Less(r, l);
    if (!less.ok()) {
      if (ToStd(less.status().message()).rfind("TypeError: ", 0) != 0) return less.status();  // Undefined inside.
      return absl::InvalidArgumentError(StrCat("TypeError: '", op, "' not supported between instances of '",
                                               l.TypeName(), "' and '", r.TypeName(), "'"));
    }
    return (op == "<" || op == ">") ? *less : !*less;
  }

  absl::StatusOr<Value> EvalImpl(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: {
        const Value* v = frame->Find(e.name);
        return v != nullptr ? *v : Value::Undefined(StrCat("'", e.name, "' is undefined"));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& c : e.children) {
          CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*c, frame));
          items.push_back(std::move(v));
        }
        return e.kind == Expr::Kind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          CASCADE_ASSIGN_OR_RETURN(Value k, Eval(*e.children[i], frame));
          CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1], frame));
          d.Set(std::move(k), std::move(v));
        }
        return Value::MakeDict(std::move(d));
      }
      case Expr::Kind::kGetAttr: {
        CASCADE_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        return internal::GetAttr(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        CASCADE_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        CASCADE_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1], frame));
        return internal::GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        CASCADE_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], frame));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[i + 1]) {
            CASCADE_ASSIGN_OR_RETURN(parts[i], Eval(*e.children[i + 1], frame));
          }
        }
        return internal::Slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        CASCADE_ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0], frame));
        CASCADE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        return CallValue(callee, args);
      }
      case Expr::Kind::kFilter: {
        CASCADE_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], frame));
        CASCADE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        return internal::CallFilter(e.name, input, args);
      }
      case Expr::Kind::kTest: {
        CASCADE_ASSIGN_OR_RETURN(Value subject, Eval(*e.children[0], frame));
        CASCADE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, frame));
        CASCADE_ASSIGN_OR_RETURN(bool passed, internal::CallTest(e.name, subject, args));
        return Value(passed != e.negated);
      }
      case Expr::Kind::kUnary: {
        CASCADE_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], frame));
        if (e.name == "not") return Value(!v.Truthy());
        if (v.is_undefined()) return UndefinedError(v);
        if (!v.is_number()) {
          return absl::InvalidArgumentError(
              StrCat("TypeError: bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
        }
        if (e.name == "+") return v.is_bool() ? Value(v.int_value()) : v;
        if (v.is_float()) return Value(-v.float_value());
        if (v.int_value() == std::numeric_limits<int64_t>::min()) {
          return absl::InvalidArgumentError("OverflowError: integer beyond 64 bits");
        }
        return Value(-v.int_value());
      }
      case Expr::Kind::kBinary: {
        CASCADE_ASSIGN_OR_RETURN(Value l, Eval(*e.children[0], frame));
        if (e.name == "and") return l.Truthy() ? Eval(*e.children[1], frame) : l;
        if (e.name == "or") return l.Truthy() ? l : Eval(*e.children[1], frame);
        CASCADE_ASSIGN_OR_RETURN(Value r, Eval(*e.children[1], frame));
        if (e.name == "**" && l.is_number() && l.float_value() < 0 && IsConstant(*e.children[0]) &&
            !IsConstant(*e.children[1])) {
          // jinja2 folds a constant left operand and writes it into Python source as "-2 ** x",
          // which Python reads as -(2 ** x): {{ -2 ** n }} is -(2 ** n) unless n is constant too.
          CASCADE_ASSIGN_OR_RETURN(Value magnitude, internal::BinaryOp("*", l, Value(-1)));
          CASCADE_ASSIGN_OR_RETURN(Value power, internal::BinaryOp("**", magnitude, r));
          return internal::BinaryOp("*", power, Value(-1));
        }
        return internal::BinaryOp(e.name, l, r);
      }
      case Expr::Kind::kCompare: {
        CASCADE_ASSIGN_OR_RETURN(Value l, Eval(*e.children[0], frame));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          CASCADE_ASSIGN_OR_RETURN(Value r, Eval(*e.children[i + 1], frame));
          CASCADE_ASSIGN_OR_RETURN(bool ok, Compare(e.ops[i], l, r));
          if (!ok) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case Expr::Kind::kCondition: {
        CASCADE_ASSIGN_OR_RETURN(Value c, Eval(*e.children[0], frame));
        if (c.Truthy()) return Eval(*e.children[1], frame);
        if (e.children[2]) return Eval(*e.children[2], frame);
        return Value::Undefined(StrCat("the inline if-expression on line ", e.line,
                                       " evaluated to false and no else section was defined."));
      }
    }
    return absl::InternalError("unknown expression");
  }

  FramePtr root_;
  const int64_t max_steps_;
  int64_t output_bytes_ = 0;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

absl::StatusOr<Value> Range(const CallArgs& a) {
  for (const Value& v : a.positional) {
    if (!v.is_number() || v.is_float()) {
      return absl::InvalidArgumentError(
          StrCat("TypeError: '", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].int_value();
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = a.positional[0].int_value();
    stop = a.positional[1].int_value();
    if (a.positional.size() == 3) step = a.positional[2].int_value();
  } else {
    return absl::InvalidArgumentError("TypeError: range expected 1 to 3 arguments");
  }
  if (step == 0) return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
  const double count = step > 0 ? std::max(0.0, std::ceil((double(stop) - start) / step))
                                : std::max(0.0, std::ceil((double(start) - stop) / -double(step)));
  if (count > kMaxRange) {
    return absl::InvalidArgumentError(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value::List(std::move(out));
}

// The globals: jinja2's range/namespace/dict and transformers' raise_exception/strftime_now.
// Every namespace made is added to `namespaces`: the only mutable values, so the only ones
// that can hold themselves ({% set ns.me = ns %}); the render empties them at its end.
FramePtr Globals(const JinjaRenderOptions& options, const std::shared_ptr<std::vector<Value>>& namespaces) {
  auto g = std::make_shared<Frame>();
  g->Set("range", Value::Function("range", Range));
  auto make_dict = [namespaces](bool is_namespace) {
    return [is_namespace, namespaces](const CallArgs& a) -> absl::StatusOr<Value> {
      Dict d;
      d.is_namespace = is_namespace;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) return absl::InvalidArgumentError("TypeError: cannot convert to a dictionary");
        for (const auto& [k, v] : p.dict().entries) d.Set(k, v);
      }
      for (const auto& [k, v] : a.keywords) d.Set(Value(k), v);
      Value made = Value::MakeDict(std::move(d));
      if (is_namespace) namespaces->push_back(made);
      return made;
    };
  };
  g->Set("namespace", Value::Function("namespace", make_dict(true)));
  g->Set("dict", Value::Function("dict", make_dict(false)));
  g->Set("raise_exception", Value::Function("raise_exception", [](const CallArgs& a) -> absl::StatusOr<Value> {
           return absl::InvalidArgumentError(Str(internal::ArgOr(a, 0, "message", Value(""))));
         }));
  std::optional<std::tm> now = options.now;
  g->Set("strftime_now", Value::Function("strftime_now", [now](const CallArgs& a) -> absl::StatusOr<Value> {
           std::tm tm{};
           if (now) {
             tm = *now;
           } else {
             const std::time_t t = std::time(nullptr);
             localtime_r(&t, &tm);
           }
           const std::string format = Str(internal::ArgOr(a, 0, "format", Value("")));
           char buf[512];
           const size_t n = format.empty() ? 0 : std::strftime(buf, sizeof(buf), format.c_str(), &tm);
           return Value(std::string(buf, n));
         }));
  return g;
}

}  // namespace
}  // namespace jinja

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(std::string_view source) {
  absl::StatusOr<jinja::Body> body = jinja::ParseTemplate(source);
  if (!body.ok()) return body.status();
  auto parsed = std::make_shared<Parsed>();
  parsed->body = *std::move(body);
  return JinjaTemplate(std::move(parsed));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const JinjaValue& context, const JinjaRenderOptions& options) const {
  using jinja::Frame;
  if (!context.is_dict()) return absl::InvalidArgumentError("template context must be a dict");
  auto namespaces = std::make_shared<std::vector<JinjaValue>>();
  auto root = std::make_shared<Frame>();
  root->parent = jinja::Globals(options, namespaces);
  for (const auto& [k, v] : context.dict().entries) {
    if (k.is_string()) root->Set(k.str(), v);
  }
  std::string out;
  jinja::Flow flow = jinja::Flow::kNormal;
  const absl::Status status = jinja::Renderer(root, options.max_steps).RenderBody(parsed_->body, root, &out, &flow);
  for (const JinjaValue& ns : *namespaces) ns.dict().entries.clear();  // Breaks reference cycles.
  if (!status.ok()) return status;
  return out;
}

}  // namespace cascade::text
