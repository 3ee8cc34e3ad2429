// The syntax tree of a parsed Jinja template: expressions (Expr) and statements (Node),
// each carrying its source line for error messages. Built by jinja_parser.h, walked by
// jinja_render.cc; immutable once parsed, so one parsed template renders on many threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace cascade::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // children: the items
    kTuple,     // children: the items
    kDict,      // children: key, value, key, value, ...
    kGetAttr,   // children[0].name
    kGetItem,   // children[0][children[1]]
    kSlice,     // children[0][children[1]:children[2]:children[3]] (null where omitted)
    kCall,      // children[0](children[1..] then kwargs)
    kFilter,    // children[0] | name(children[1..] then kwargs); children[0] null in a filter block
    kTest,      // children[0] is [not] name(children[1..])
    kUnary,     // op children[0]: "not", "-", "+"
    kBinary,    // children[0] op children[1]: + - * / // % ** ~ and or in "not in"
    kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ... (chained)
    kCondition  // children[1] if children[0] else children[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, attribute, filter, test or operator.
  std::vector<ExprPtr> children;
  // kCall, kFilter, kTest: the last kwarg_names.size() children are keyword arguments.
  std::vector<std::string> kwarg_names;
  std::vector<std::string> ops;  // kCompare.
  bool negated = false;          // kTest: "is not".
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// An assignment target: a name, a tuple of names, or an attribute of a namespace.
struct Target {
  std::vector<std::string> names;  // One name, or several for tuple unpacking.
  std::string attribute;           // Non-empty: names[0].attribute (namespace assignment).
  bool tuple = false;
};

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body)..., else_body
    kFor,          // for target in expr [if condition] body [else else_body]
    kSet,          // set target = expr
    kSetBlock,     // set target %} body {% endset, optionally through filter
    kMacro,        // macro name(params) body
    kCallBlock,    // call[(params)] expr %} body: `caller()` renders body
    kFilterBlock,  // filter filter %} body
    kWith,         // with assignments body
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}: renders its body.
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // kFor's inline `if`.
  ExprPtr filter;     // kSetBlock/kFilterBlock: a kFilter chain whose innermost input is null.
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  Target target;
  bool recursive = false;  // kFor.
  bool uses_loop = true;   // kFor: the body names `loop` (else the loop object is not built).
  // kMacro (and kCallBlock's caller parameters): names and defaults (null: required).
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  // kWith: targets and values.
  std::vector<std::pair<Target, ExprPtr>> assignments;
};

}  // namespace cascade::text::jinja
