// RegexToGbnf against Python's re.fullmatch: tests/grammar/json_schema_cases.py matches
// candidate strings against each pattern (the `grammar_cases` CTest fixture writes them to
// $CASCADE_GRAMMAR_CASES), and the grammar must accept exactly the matching ones. Then the
// refusals, and the JSON-string spelling that JSON Schema's `pattern` uses.
//
// To add a case: append it to REGEX_CASES in json_schema_cases.py; a refusal goes in the
// table below.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_support.h"

namespace cascade::grammar {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

std::shared_ptr<const Grammar> CompileRegex(std::string_view pattern) {
  absl::StatusOr<std::string> gbnf = RegexToGbnf(pattern);
  EXPECT_TRUE(gbnf.ok()) << pattern << "\n" << gbnf.status();
  if (!gbnf.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = ParseGbnf(*gbnf);
  EXPECT_TRUE(grammar.ok()) << *gbnf << "\n" << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

TEST(RegexGoldenTest, MatchesWhatPythonFullmatches) {
  const char* path = std::getenv("CASCADE_GRAMMAR_CASES");
  if (path == nullptr) GTEST_SKIP() << "CASCADE_GRAMMAR_CASES unset: run through ctest (fixture grammar_cases)";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  int n_patterns = 0, n_strings = 0, n_failures = 0;
  for (std::string line; std::getline(in, line);) {
    const ordered_json c = ordered_json::parse(line);
    if (c.at("kind") != "regex") continue;
    ++n_patterns;
    const std::string pattern = c.at("pattern").get<std::string>();
    SCOPED_TRACE(c.at("name").get<std::string>() + ": " + pattern);
    const std::shared_ptr<const Grammar> grammar = CompileRegex(pattern);
    if (grammar == nullptr) {
      ++n_failures;
      continue;
    }
    for (const ordered_json& t : c.at("texts")) {
      ++n_strings;
      const std::string text = t.at("text").get<std::string>();
      const bool match = t.at("match").get<bool>();
      if (Accepts(*grammar, text) == match) continue;
      ++n_failures;
      ADD_FAILURE() << (match ? "rejects " : "accepts ") << ordered_json(text).dump() << "\n" << *RegexToGbnf(pattern);
    }
  }
  EXPECT_GE(n_patterns, 20);
  std::cout << n_patterns << " patterns, " << n_strings << " strings, " << n_failures << " failures\n";
}

TEST(RegexGbnfTest, RefusesWhatItCannotExpress) {
  const std::pair<const char*, const char*> refusals[] = {
      {R"((a)\1)", "offset 3: backreferences are not supported"},
      {R"((?P<x>a)(?P=x))", "backreferences are not supported"},
      {"(?=a)b", "lookaround assertions are not supported"},
      {"(?!a)b", "lookaround assertions are not supported"},
      {"(?<=a)b", "lookaround assertions are not supported"},
      {"(?<!a)b", "lookaround assertions are not supported"},
      {"a^b", "offset 1: '^' only anchors the start of the pattern"},
      {"a$b", "offset 1: '$' only anchors the end of the pattern"},
      {"(a$)b", "'$' only anchors the end"},
      {"(^a)*", "'^' only anchors the start"},
      {R"(\bword\b)", "the word-boundary anchor \\b is not supported"},
      {R"(\Aa)", "the anchor \\A is not supported"},
      {"(?i)abc", "inline flags"},
      {"a++", "possessive quantifiers are not supported"},
      {"a**", "multiple repeat"},
      {"*a", "offset 0: nothing to repeat"},
      {"a{3,2}", "maximum is below its minimum"},
      {"a{20000}", "a repetition count above 10000"},
      {"[z-a]", "a class range runs backwards"},
      {R"([\d-z])", "bad character range"},
      {"[abc", "unterminated character class"},
      {"(ab", "missing ')'"},
      {"ab)", "unmatched ')'"},
      {R"(\q)", "unknown escape \\q"},
      {R"(\012)", "octal escapes are not supported"},
      {R"([^\s\S])", "a character class that matches nothing"},
      {"ab\\", "a '\\' ends the pattern"},
      {R"(\uD83D\uDE00)", "offset 0: escape of a surrogate (U+D800 to U+DFFF), which is no character"},
      {R"([\uDC00-\uDFFF])", "escape of a surrogate"},
  };
  for (const auto& [pattern, message] : refusals) {
    SCOPED_TRACE(pattern);
    absl::StatusOr<std::string> gbnf = RegexToGbnf(pattern);
    ASSERT_FALSE(gbnf.ok()) << *gbnf;
    EXPECT_EQ(gbnf.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(testing::StatusMessage(gbnf.status()), HasSubstr(message));
    EXPECT_THAT(testing::StatusMessage(gbnf.status()), HasSubstr(std::string("regex '") + pattern + "'"));
  }
}

// Not UTF-8 (found by tests/fuzz/grammar_fuzz.cc: a 0xFF lead byte decoded as a code point
// past U+10FFFF, spelled back as bytes no JSON string holds). The message does not echo
// the bytes: it travels in JSON.
TEST(RegexGbnfTest, RefusesWhatIsNotUtf8) {
  for (const char* pattern : {"a\xFF\x96\x91\x98", "\xC0\xAF" /* an overlong '/' */, "\xED\xA0\x80" /* a surrogate */,
                              "\xF4\x90\x80\x80" /* past U+10FFFF */}) {
    const absl::StatusOr<std::string> gbnf = RegexToGbnf(pattern);
    EXPECT_EQ(gbnf.status().code(), absl::StatusCode::kInvalidArgument) << pattern;
    EXPECT_EQ(gbnf.status().message(), "regex: invalid UTF-8");
  }
  EXPECT_TRUE(RegexToGbnf("caf\xC3\xA9|\xF0\x9F\x98\x80").ok());
}

// A class range across the surrogates leaves them out (found by tests/fuzz/grammar_fuzz.cc:
// `[\]-\U0001F64F]` let a walk spell U+DDFD, which no JSON parser reads), in the GBNF as
// in its JSON-string spelling.
TEST(RegexGbnfTest, RangesAcrossTheSurrogatesLeaveThemOut) {
  for (bool json_string : {false, true}) {
    absl::StatusOr<std::string> expr = json_string
                                           ? RegexToGbnfExpression(R"([\]-\U0001F64F])", RegexEscape::kJsonString)
                                           : RegexToGbnf(R"([\]-\U0001F64F])");
    ASSERT_TRUE(expr.ok()) << expr.status();
    absl::StatusOr<std::shared_ptr<const Grammar>> grammar = ParseGbnf(json_string ? "root ::= " + *expr : *expr);
    ASSERT_TRUE(grammar.ok()) << grammar.status() << "\n" << *expr;
    for (const char* text : {"a", "\xED\x9F\xBF", "\xEE\x80\x80", "\xF0\x9F\x99\x8F"})
      EXPECT_TRUE(Accepts(**grammar, text)) << text;
    for (const char* text : {"\xED\xA0\x80", "\xED\xB7\xBD", "\xF0\x9F\x99\x90"})
      EXPECT_FALSE(Accepts(**grammar, text)) << text;
  }
}

TEST(RegexGbnfTest, OneRootRuleOverStrings) {
  absl::StatusOr<std::string> gbnf = RegexToGbnf("^[A-Z]{2}-[0-9]{3,5}$");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_EQ(gbnf->rfind("root ::= ", 0), 0u);
  EXPECT_EQ(std::count(gbnf->begin(), gbnf->end(), '\n'), 1) << *gbnf;
}

// Inside a JSON string a matched character is spelled as json.dumps spells it: `"` as
// \", `\` as \\, a control character by its escape; the others as themselves.
TEST(RegexGbnfTest, JsonStringSpellingEscapesWhatJsonNeeds) {
  struct Case {
    const char* pattern;
    std::vector<std::string> accepted, rejected;  // As they appear between the quotes.
  };
  const Case cases[] = {
      {R"(a"b)", {R"(a\"b)"}, {R"(a"b)", R"(a\u0022b)"}},
      {R"(a\\b)", {R"(a\\b)"}, {R"(a\b)"}},
      {R"(x\ny\tz)", {R"(x\ny\tz)"}, {"x\ny\tz"}},
      {R"([\x00-\x1f]+)",
       {R"(\u0000\b\t\n\u000b\f\r\u001f)"},
       {"\x01", R"(\u000A)",
        R"(\u0001)"
        "x"}},
      {R"([^a]+)", {R"(b\"\\\n\u0001é)"}, {"a", "\"", "\\", "\n", R"(\a)"}},
      {".", {"é", R"(\")", R"(\t)"}, {R"(\n)", "\n", "\""}},
      {R"(\s)", {" ", R"(\t)", R"(\n)", R"(\r)", R"(\f)", R"(\u000b)"}, {"\t", R"(\u0020)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    absl::StatusOr<std::string> expr = RegexToGbnfExpression(c.pattern, RegexEscape::kJsonString);
    ASSERT_TRUE(expr.ok()) << expr.status();
    absl::StatusOr<std::shared_ptr<const Grammar>> grammar = ParseGbnf("root ::= " + *expr + "\n");
    ASSERT_TRUE(grammar.ok()) << *expr << "\n" << grammar.status();
    for (const std::string& s : c.accepted) EXPECT_TRUE(Accepts(**grammar, s)) << s << "\n" << *expr;
    for (const std::string& s : c.rejected) EXPECT_FALSE(Accepts(**grammar, s)) << s << "\n" << *expr;
  }
}

}  // namespace
}  // namespace cascade::grammar
