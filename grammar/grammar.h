// A context-free grammar over bytes, compiled from GBNF text (llama.cpp's grammar
// notation), for constrained decoding: grammar/matcher.h runs it as a pushdown automaton
// and grammar/token_mask.h turns its states into masks over a vocabulary.
//
// The notation (llama.cpp's grammars/README.md):
//   root ::= "{" ws pair ("," ws pair)* "}"      # a rule per definition; `root` starts
//   pair ::= [a-z]+ ":" ws value                 # literals "…", classes [a-z] [^"\\]
//   ws   ::= [ \t\n]{0,4}                        # groups ( … ), alternatives |,
//                                                # repetition * + ? {m} {m,} {m,n}, `.`
// Escapes in literals and classes: \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH.
// A definition runs until the next `name ::=`, so a rule may span lines. Characters are
// Unicode code points written as UTF-8: a class over non-ASCII code points, `.`, and a
// negated class match whole UTF-8 sequences. Left recursion is refused (the automaton
// expands rules eagerly), as is a reference to an undefined rule.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::grammar {

using ByteSet = std::bitset<256>;

// One step of a rule's alternative: a byte from a set, a reference to a rule, or the end
// of the alternative.
struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = kEnd;
  int32_t arg = 0;  // kBytes: index into Grammar::byte_sets; kRule: rule index.
};

// Compiled rules. Immutable once built; shared between the requests that use it.
struct Grammar {
  std::vector<ByteSet> byte_sets;
  // Every alternative of every rule, one after the other, each ending with a kEnd.
  std::vector<Element> elements;
  // Per rule: the index in `elements` where each of its alternatives starts.
  std::vector<std::vector<int32_t>> alternatives;
  std::vector<std::string> rule_names;  // Synthesized rules are named "<parent>-<n>".
  int32_t root = 0;
  // The GBNF it was compiled from, and its root rule's name: equal sources, equal
  // grammars (what the requests that use one share their masks by).
  std::string source;

  // Diagnostic dump, one line per rule.
  std::string ToString() const;
};

// Compiles GBNF `text`; `root` names the start rule. InvalidArgument naming the line and
// the problem for a syntax error, an undefined rule, left recursion or a missing root.
absl::StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(std::string_view text, std::string_view root = "root");

// Whether `grammar` derives exactly `text` (a whole match). For tests and checks; the
// serving path advances a grammar::Matcher token by token instead.
bool Accepts(const Grammar& grammar, std::string_view text);

// A GBNF literal for `text`: "…" with the characters that need it escaped.
std::string GbnfLiteral(std::string_view text);

// `gbnf` with rule `from` renamed `to`, where it is defined and where it is used (not in
// literals, classes or comments): to embed one grammar's root in another.
std::string RenameGbnfRule(std::string_view gbnf, std::string_view from, std::string_view to);

}  // namespace cascade::grammar
