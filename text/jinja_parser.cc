#include "text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "core/str_cat.h"
#include "text/jinja_lexer.h"

namespace cascade::text::jinja {
namespace {

constexpr int kMaxDepth = 200;  // Nesting of expressions and statements.

// Recursive descent over the token vector. Functions return null (or false) after
// recording the first error in error_.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end;
    if (!ParseBody({}, &body, &end)) return error_;
    return body;
  }

 private:
  using Type = Token::Type;

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == Type::kOperator && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == Type::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Type::kEnd: return "end of template";
      case Type::kBlockEnd: return "end of statement block";
      case Type::kVarEnd: return "end of print statement";
      case Type::kString: return "string";
      case Type::kInt: return "integer";
      case Type::kFloat: return "float";
      default: return t.text;
    }
  }

  std::nullptr_t Fail(std::string_view what, int line = -1) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(
          StrCat("template line ", line < 0 ? Cur().line : line, ": TemplateSyntaxError: ", what));
    }
    return nullptr;
  }
  bool Expect(Type type, std::string_view what) {
    if (Cur().type == type) {
      Next();
      return true;
    }
    Fail(StrCat("expected ", what, ", got '", Describe(Cur()), "'"));
    return false;
  }
  bool ExpectOp(std::string_view op) {
    if (SkipOp(op)) return true;
    Fail(StrCat("expected '", op, "', got '", Describe(Cur()), "'"));
    return false;
  }
  bool ExpectName(std::string* out) {
    if (Cur().type != Type::kName) {
      Fail(StrCat("expected a name, got '", Describe(Cur()), "'"));
      return false;
    }
    *out = Cur().text;
    Next();
    return true;
  }

  static ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- Statements ----

  // Parses nodes until a block tag named in `ends` (consumed, its name in *end, the
  // parser after the name) or, with no `ends`, the end of the template.
  bool ParseBody(std::initializer_list<std::string_view> ends, Body* body, std::string* end) {
    if (++depth_ > kMaxDepth) return Fail("blocks nested too deeply"), false;
    while (true) {
      const Token& t = Cur();
      if (t.type == Type::kEnd) {
        if (ends.size() == 0) break;
        std::string names;
        for (std::string_view e : ends) StrAppend(&names, names.empty() ? "" : " or ", "'", e, "'");
        return Fail(StrCat("Unexpected end of template. Jinja was looking for the following tags: ", names)), false;
      }
      if (t.type == Type::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = t.text;
        body->push_back(std::move(n));
        Next();
      } else if (t.type == Type::kVarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        Next();
        n->expr = ParseTuple();
        if (!n->expr || !Expect(Type::kVarEnd, "'}}'")) return false;
        body->push_back(std::move(n));
      } else if (t.type == Type::kBlockBegin) {
        Next();
        if (Cur().type == Type::kName &&
            std::find(ends.begin(), ends.end(), std::string_view(Cur().text)) != ends.end()) {
          *end = Cur().text;
          Next();
          break;
        }
        NodePtr n = ParseStatement();
        if (!n) return false;
        body->push_back(std::move(n));
      } else {
        return Fail(StrCat("unexpected '", Describe(t), "'")), false;
      }
    }
    --depth_;
    return true;
  }

  NodePtr NewNode(Node::Kind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  NodePtr ParseStatement() {
    const Token& t = Cur();
    const int line = t.line;
    if (t.type != Type::kName) return Fail("tag name expected");
    const std::string tag = t.text;
    Next();
    NodePtr n;
    std::string end;
    if (tag == "if") {
      n = NewNode(Node::Kind::kIf, line);
      std::string which = "elif";
      while (which == "elif") {
        ExprPtr cond = ParseTuple();
        if (!cond || !Expect(Type::kBlockEnd, "'%}'")) return nullptr;
        Body body;
        if (!ParseBody({"elif", "else", "endif"}, &body, &which)) return nullptr;
        n->branches.emplace_back(std::move(cond), std::move(body));
      }
      if (which == "else") {
        if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endif"}, &n->else_body, &end)) return nullptr;
      }
    } else if (tag == "for") {
      n = NewNode(Node::Kind::kFor, line);
      const int loop_refs = loop_refs_;
      if (!ParseTarget(&n->target, /*allow_attribute=*/false)) return nullptr;
      if (!SkipName("in")) return Fail(StrCat("expected 'in', got '", Describe(Cur()), "'"));
      n->expr = ParseTuple(/*with_condition=*/false);
      if (!n->expr) return nullptr;
      if (SkipName("if")) {
        n->condition = ParseTuple();
        if (!n->condition) return nullptr;
      }
      n->recursive = SkipName("recursive");
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endfor", "else"}, &n->body, &end)) return nullptr;
      n->uses_loop = loop_refs_ != loop_refs;
      if (end == "else" && (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endfor"}, &n->else_body, &end))) {
        return nullptr;
      }
    } else if (tag == "set") {
      Target target;
      if (!ParseTarget(&target, /*allow_attribute=*/true)) return nullptr;
      if (SkipOp("=")) {
        n = NewNode(Node::Kind::kSet, line);
        n->target = std::move(target);
        n->expr = ParseTuple();
        if (!n->expr) return nullptr;
      } else {
        n = NewNode(Node::Kind::kSetBlock, line);
        n->target = std::move(target);
        if (IsOp("|") && !(n->filter = ParseFilters(nullptr))) return nullptr;
        if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endset"}, &n->body, &end)) return nullptr;
      }
    } else if (tag == "macro") {
      n = NewNode(Node::Kind::kMacro, line);
      if (!ExpectName(&n->name) || !ParseParams(n.get())) return nullptr;
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endmacro"}, &n->body, &end)) return nullptr;
      if (Cur().type == Type::kName) Next();  // {% endmacro name %}
    } else if (tag == "call") {
      n = NewNode(Node::Kind::kCallBlock, line);
      if (IsOp("(") && !ParseParams(n.get())) return nullptr;
      n->expr = ParseExpression();
      if (!n->expr) return nullptr;
      if (n->expr->kind != Expr::Kind::kCall) return Fail("expected call", line);
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endcall"}, &n->body, &end)) return nullptr;
    } else if (tag == "filter") {
      n = NewNode(Node::Kind::kFilterBlock, line);
      if (!(n->filter = ParseFilters(nullptr, /*leading_pipe=*/false))) return nullptr;
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endfilter"}, &n->body, &end)) return nullptr;
    } else if (tag == "with") {
      n = NewNode(Node::Kind::kWith, line);
      while (Cur().type != Type::kBlockEnd) {
        if (!n->assignments.empty() && !ExpectOp(",")) return nullptr;
        Target target;
        if (!ParseTarget(&target, false) || !ExpectOp("=")) return nullptr;
        ExprPtr value = ParseExpression();
        if (!value) return nullptr;
        n->assignments.emplace_back(std::move(target), std::move(value));
      }
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endwith"}, &n->body, &end)) return nullptr;
    } else if (tag == "generation") {
      n = NewNode(Node::Kind::kGeneration, line);
      if (!Expect(Type::kBlockEnd, "'%}'") || !ParseBody({"endgeneration"}, &n->body, &end)) return nullptr;
    } else if (tag == "break" || tag == "continue") {
      n = NewNode(tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    } else {
      return Fail(StrCat("Encountered unknown tag '", tag, "'."), line);
    }
    if (!Expect(Type::kBlockEnd, "'%}'")) return nullptr;
    return n;
  }

  // A name, `a, b` (a tuple), `(a, b)`, or with allow_attribute `ns.attr`.
  bool ParseTarget(Target* t, bool allow_attribute) {
    const bool paren = SkipOp("(");
    do {
      std::string name;
      if (!ExpectName(&name)) return false;
      t->names.push_back(std::move(name));
      if (allow_attribute && t->names.size() == 1 && SkipOp(".")) {
        return ExpectName(&t->attribute);
      }
    } while (SkipOp(",") && Cur().type == Type::kName);
    t->tuple = t->names.size() > 1;
    if (paren && !ExpectOp(")")) return false;
    return true;
  }

  // Macro or caller parameters: (a, b=default, ...).
  bool ParseParams(Node* n) {
    if (!ExpectOp("(")) return false;
    while (!IsOp(")")) {
      if (!n->params.empty() && !ExpectOp(",")) return false;
      if (IsOp(")")) break;
      std::string name;
      if (!ExpectName(&name)) return false;
      n->params.push_back(std::move(name));
      ExprPtr def;
      if (SkipOp("=")) {
        def = ParseExpression();
        if (!def) return false;
      }
      n->defaults.push_back(std::move(def));
    }
    Next();
    return true;
  }

  // ---- Expressions ----

  // expression (',' expression)*: a tuple when there is a comma.
  ExprPtr ParseTuple(bool with_condition = true) {
    const int line = Cur().line;
    ExprPtr first = with_condition ? ParseExpression() : ParseOr();
    if (!first || !IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().type == Type::kVarEnd || Cur().type == Type::kBlockEnd || IsOp(")")) break;
      ExprPtr e = with_condition ? ParseExpression() : ParseOr();
      if (!e) return nullptr;
      tuple->children.push_back(std::move(e));
    }
    return tuple;
  }

  ExprPtr ParseExpression() {
    if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
    ExprPtr e = ParseCondition();
    --depth_;
    return e;
  }

  ExprPtr ParseCondition() {
    ExprPtr e = ParseOr();
    while (e && IsName("if")) {
      const int line = Cur().line;
      Next();
      ExprPtr cond = ParseOr();
      if (!cond) return nullptr;
      ExprPtr other;
      if (SkipName("else") && !(other = ParseCondition())) return nullptr;
      ExprPtr c = Make(Expr::Kind::kCondition, line);
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    if (!l || !r) return nullptr;
    ExprPtr b = Make(Expr::Kind::kBinary, line);
    b->name = std::move(op);
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (e && IsName("or")) {
      const int line = Cur().line;
      Next();
      e = Binary("or", std::move(e), ParseAnd(), line);
    }
    return e;
  }

  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (e && IsName("and")) {
      const int line = Cur().line;
      Next();
      e = Binary("and", std::move(e), ParseNot(), line);
    }
    return e;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      const int line = Cur().line;
      Next();
      if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
      ExprPtr inner = ParseNot();
      --depth_;
      if (!inner) return nullptr;
      ExprPtr u = Make(Expr::Kind::kUnary, line);
      u->name = "not";
      u->children.push_back(std::move(inner));
      return u;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Cur().line;
    ExprPtr e = ParseMath1();
    if (!e) return nullptr;
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == Type::kOperator && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                            Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == Type::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      ExprPtr right = ParseMath1();
      if (!right) return nullptr;
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, line);
        cmp->children.push_back(std::move(e));
      }
      cmp->ops.push_back(std::move(op));
      cmp->children.push_back(std::move(right));
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (e && (IsOp("+") || IsOp("-"))) {
      const std::string op = Cur().text;
      const int line = Cur().line;
      Next();
      e = Binary(op, std::move(e), ParseConcat(), line);
    }
    return e;
  }

  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (e && IsOp("~")) {
      const int line = Cur().line;
      Next();
      e = Binary("~", std::move(e), ParseMath2(), line);
    }
    return e;
  }

  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (e && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const std::string op = Cur().text;
      const int line = Cur().line;
      Next();
      e = Binary(op, std::move(e), ParsePow(), line);
    }
    return e;
  }

  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (e && IsOp("**")) {
      const int line = Cur().line;
      Next();
      e = Binary("**", std::move(e), ParseUnary(true), line);
    }
    return e;
  }

  ExprPtr ParseUnary(bool with_filter) {
    if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const int line = Cur().line;
      const std::string op = Cur().text;
      Next();
      ExprPtr inner = ParseUnary(false);
      if (!inner) return nullptr;
      e = Make(Expr::Kind::kUnary, line);
      e->name = op;
      e->children.push_back(std::move(inner));
    } else {
      e = ParsePrimary();
    }
    if (e) e = ParsePostfix(std::move(e));
    if (e && with_filter) e = ParseFilterExpr(std::move(e));
    --depth_;
    return e;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    const int line = t.line;
    ExprPtr e;
    switch (t.type) {
      case Type::kName:
        e = Make(Expr::Kind::kLiteral, line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
          loop_refs_ += t.text == "loop";
        }
        Next();
        return e;
      case Type::kString: {
        std::string s;
        while (Cur().type == Type::kString) {  // Adjacent literals concatenate, as in Python.
          s += Cur().text;
          Next();
        }
        e = Make(Expr::Kind::kLiteral, line);
        e->value = Value(std::move(s));
        return e;
      }
      case Type::kInt:
        e = Make(Expr::Kind::kLiteral, line);
        e->value = Value(t.int_value);
        Next();
        return e;
      case Type::kFloat:
        e = Make(Expr::Kind::kLiteral, line);
        e->value = Value(t.float_value);
        Next();
        return e;
      default: break;
    }
    if (SkipOp("(")) {
      if (SkipOp(")")) return Make(Expr::Kind::kTuple, line);
      ExprPtr first = ParseExpression();
      if (!first) return nullptr;
      if (SkipOp(")")) return first;
      e = Make(Expr::Kind::kTuple, line);
      e->children.push_back(std::move(first));
      while (SkipOp(",")) {
        if (IsOp(")")) break;
        ExprPtr item = ParseExpression();
        if (!item) return nullptr;
        e->children.push_back(std::move(item));
      }
      if (!ExpectOp(")")) return nullptr;
      return e;
    }
    if (SkipOp("[")) {
      e = Make(Expr::Kind::kList, line);
      while (!IsOp("]")) {
        if (!e->children.empty() && !ExpectOp(",")) return nullptr;
        if (IsOp("]")) break;
        ExprPtr item = ParseExpression();
        if (!item) return nullptr;
        e->children.push_back(std::move(item));
      }
      Next();
      return e;
    }
    if (SkipOp("{")) {
      e = Make(Expr::Kind::kDict, line);
      while (!IsOp("}")) {
        if (!e->children.empty() && !ExpectOp(",")) return nullptr;
        if (IsOp("}")) break;
        ExprPtr key = ParseExpression();
        if (!key || !ExpectOp(":")) return nullptr;
        ExprPtr value = ParseExpression();
        if (!value) return nullptr;
        e->children.push_back(std::move(key));
        e->children.push_back(std::move(value));
      }
      Next();
      return e;
    }
    return Fail(StrCat("unexpected '", Describe(t), "'"));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (e) {
      const int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().type == Type::kInt) {
          ExprPtr item = Make(Expr::Kind::kGetItem, line);
          ExprPtr index = Make(Expr::Kind::kLiteral, line);
          index->value = Value(Cur().int_value);
          Next();
          item->children.push_back(std::move(e));
          item->children.push_back(std::move(index));
          e = std::move(item);
          continue;
        }
        ExprPtr attr = Make(Expr::Kind::kGetAttr, line);
        if (!ExpectName(&attr->name)) return nullptr;
        attr->children.push_back(std::move(e));
        e = std::move(attr);
      } else if (SkipOp("[")) {
        e = ParseSubscript(std::move(e), line);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        break;
      }
    }
    return e;
  }

  // After '[': an index, a slice a:b:c, or a tuple of indexes; then ']'.
  ExprPtr ParseSubscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    bool slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!IsOp(":") && !IsOp("]")) {
        parts[i] = ParseTuple();
        if (!parts[i]) return nullptr;
      }
      if (i == 2 || !SkipOp(":")) break;
      slice = true;
    }
    if (!ExpectOp("]")) return nullptr;
    ExprPtr e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
    e->children.push_back(std::move(target));
    if (!slice && !parts[0]) parts[0] = Make(Expr::Kind::kTuple, line);  // x[] indexes by (), as jinja2's.
    e->children.push_back(std::move(parts[0]));
    if (slice) {
      e->children.push_back(std::move(parts[1]));
      e->children.push_back(std::move(parts[2]));
    }
    return e;
  }

  // Arguments "(a, b, key=c)" into e's children and kwarg_names.
  bool ParseArgs(Expr* e) {
    if (!ExpectOp("(")) return false;
    while (!IsOp(")")) {
      if (e->children.size() > 1 || !e->kwarg_names.empty()) {
        if (!ExpectOp(",")) return false;
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Fail("*args and **kwargs are not supported"), false;
      if (Cur().type == Type::kName && Peek().type == Type::kOperator && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        ExprPtr value = ParseExpression();
        if (!value) return false;
        e->kwarg_names.push_back(std::move(key));
        e->children.push_back(std::move(value));
      } else {
        if (!e->kwarg_names.empty()) return Fail("positional argument follows keyword argument"), false;
        ExprPtr value = ParseExpression();
        if (!value) return false;
        e->children.push_back(std::move(value));
      }
    }
    Next();
    return true;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    ExprPtr call = Make(Expr::Kind::kCall, Cur().line);
    call->children.push_back(std::move(callee));
    if (!ParseArgs(call.get())) return nullptr;
    return call;
  }

  // `| name(args) | name ...` applied to `input` (null in filter and set blocks).
  ExprPtr ParseFilters(ExprPtr input, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || SkipOp("|")) {
      first = false;
      ExprPtr f = Make(Expr::Kind::kFilter, Cur().line);
      if (!ExpectName(&f->name)) return nullptr;
      while (SkipOp(".")) {
        std::string more;
        if (!ExpectName(&more)) return nullptr;
        StrAppend(&f->name, ".", more);
      }
      f->children.push_back(std::move(input));
      if (IsOp("(") && !ParseArgs(f.get())) return nullptr;
      input = std::move(f);
    }
    return input;
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (e) {
      if (IsOp("|")) {
        e = ParseFilters(std::move(e));
      } else if (IsName("is")) {
        e = ParseTest(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        break;
      }
    }
    return e;
  }

  ExprPtr ParseTest(ExprPtr e) {
    ExprPtr t = Make(Expr::Kind::kTest, Cur().line);
    Next();  // is
    t->negated = SkipName("not");
    if (!ExpectName(&t->name)) return nullptr;
    t->children.push_back(std::move(e));
    if (IsOp("(")) {
      if (!ParseArgs(t.get())) return nullptr;
    } else if ((Cur().type == Type::kName || Cur().type == Type::kString || Cur().type == Type::kInt ||
                Cur().type == Type::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Fail("You cannot chain multiple tests with is");
      ExprPtr arg = ParsePrimary();
      if (arg) arg = ParsePostfix(std::move(arg));
      if (!arg) return nullptr;
      t->children.push_back(std::move(arg));
    }
    return t;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_refs_ = 0;  // Names `loop` parsed so far: a for loop whose body adds none skips it.
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens)).Run();
}

}  // namespace cascade::text::jinja
