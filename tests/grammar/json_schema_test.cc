// JsonSchemaToGbnf against Python's jsonschema: tests/grammar/json_schema_cases.py judges
// candidate texts for each schema (the `grammar_cases` CTest fixture writes them to
// $CASCADE_GRAMMAR_CASES), and the generated grammar must accept exactly the texts the
// reference expects (the valid ones, but for the deliberate narrowings the script names).
// Then the refusals, each naming its keyword by JSON pointer, and the grammar's shape.
//
// To add a case: append it to SCHEMA_CASES in json_schema_cases.py; a refusal goes in
// the Refuses table below.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
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
using ::testing::Not;

// The fixture's records of `kind` ("schema" or "regex"); skips when run outside ctest.
std::vector<ordered_json> ReadCases(const std::string& kind) {
  std::vector<ordered_json> out;
  const char* path = std::getenv("CASCADE_GRAMMAR_CASES");
  if (path == nullptr) return out;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::string line;
  while (std::getline(in, line)) {
    ordered_json record = ordered_json::parse(line);
    if (record.at("kind") == kind) out.push_back(std::move(record));
  }
  return out;
}

std::shared_ptr<const Grammar> Compile(const ordered_json& schema) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << schema.dump() << "\n" << gbnf.status();
  if (!gbnf.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = ParseGbnf(*gbnf);
  EXPECT_TRUE(grammar.ok()) << *gbnf << "\n" << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

std::shared_ptr<const Grammar> Compile(const char* schema) { return Compile(ordered_json::parse(schema)); }

TEST(JsonSchemaGoldenTest, AcceptsWhatJsonschemaValidates) {
  if (std::getenv("CASCADE_GRAMMAR_CASES") == nullptr) {
    GTEST_SKIP() << "CASCADE_GRAMMAR_CASES unset: run through ctest (fixture grammar_cases)";
  }
  const std::vector<ordered_json> cases = ReadCases("schema");
  int n_texts = 0, n_failures = 0;
  for (const ordered_json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::shared_ptr<const Grammar> grammar = Compile(c.at("schema"));
    if (grammar == nullptr) {
      ++n_failures;
      continue;
    }
    for (const ordered_json& t : c.at("texts")) {
      ++n_texts;
      const std::string text = t.at("text").get<std::string>();
      const bool expect = t.at("expect").get<bool>();
      if (Accepts(*grammar, text) == expect) continue;
      ++n_failures;
      ADD_FAILURE() << (expect ? "rejects " : "accepts ") << text
                    << " (jsonschema: " << (t.at("valid").get<bool>() ? "valid" : "invalid") << ")\n"
                    << *JsonSchemaToGbnf(c.at("schema"));
    }
  }
  EXPECT_GE(cases.size(), 70u);
  std::cout << cases.size() << " schemas, " << n_texts << " texts, " << n_failures << " failures\n";
}

// What the converter refuses, and where it says the keyword is.
struct Refusal {
  const char* schema;
  const char* message;  // A substring of the status message.
};

TEST(JsonSchemaTest, RefusesWhatItCannotExpressNamingTheKeyword) {
  const Refusal refusals[] = {
      {R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":5}}})",
       "/properties/age/multipleOf: not supported"},
      {R"({"properties":{"a/b~":{"multipleOf":2}}})", "/properties/a~1b~0/multipleOf: not supported"},
      {R"({"type":"number","minimum":0.5})", "/minimum: on a number, only integer bounds up to 2^53 are supported"},
      {R"({"type":"number","exclusiveMaximum":1e300})", "/exclusiveMaximum: on a number, only integer bounds"},
      {R"({"type":"number","minimum":1,"maximum":0})", "no number is within the bounds: nothing validates"},
      {R"({"not":{"type":"string"}})", "/not: not supported"},
      {R"({"type":"array","uniqueItems":true})", "/uniqueItems: not supported"},
      {R"({"type":"array","contains":{}})", "/contains: not supported"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "/patternProperties: not supported"},
      {R"({"type":"object","minProperties":1})", "/minProperties: not supported"},
      {R"({"if":{},"then":{}})", "/if: not supported"},
      {R"({"nullable":true,"type":"string"})", "/nullable: not supported"},
      {R"({"$ref":"https://example.com/s.json"})", "/$ref: 'https://example.com/s.json': only references into"},
      {R"({"$ref":"#anchor"})", "anchors ($anchor) are not supported"},
      {R"({"$ref":"#/$defs/Missing"})", "/$ref: '#/$defs/Missing' does not resolve"},
      {R"({"$defs":{"A":{"anyOf":[{"$ref":"#/$defs/A"},{"type":"null"}]}},"$ref":"#/$defs/A"})",
       "/$defs/A/anyOf/0/$ref: '#/$defs/A' refers back to itself before any input"},
      {R"({"$ref":"#/$defs/A","maxLength":3,"$defs":{"A":{}}})", "/maxLength: next to $ref is not supported"},
      {"false", "(root): the schema false: nothing validates"},
      {R"({"type":"object","properties":{"x":false},"required":["x"]})", "/properties/x: required but"},
      {R"({"required":["a"],"additionalProperties":false})", "'a' is not allowed by additionalProperties"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "/allOf/0/type: allOf merges object schemas only"},
      {R"({"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]})",
       "/allOf/1/properties/a: declared differently"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "/type: next to anyOf is not supported"},
      {R"({"enum":[1,2],"maxLength":1})", "/maxLength: next to enum or const is not supported"},
      {R"({"enum":[]})", "/enum: no value is of the schema's type: nothing validates"},
      {R"({"type":"string","enum":[1,2]})", "nothing validates"},
      {R"({"type":"frob"})", "/type: unknown type \"frob\""},
      {R"({"type":[]})", "/type: an empty list"},
      {R"({"type":"string","pattern":"(a)\\1"})", "/pattern: regex '(a)\\1' at offset 3: backreferences"},
      {R"({"type":"string","pattern":"a","minLength":1})", "/minLength: next to pattern is not supported"},
      {R"({"type":"string","maxLength":20000})", "/maxLength: above 10000 is not supported"},
      {R"({"type":"string","minLength":-1})", "/minLength: must be a non-negative integer"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "/maxLength: below minLength"},
      {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "no array length fits"},
      {R"({"type":"integer","minimum":10,"maximum":5})", "no integer of at most 16 digits"},
      {R"({"type":"integer","minimum":1e20})", "no integer of at most 16 digits"},
      {R"({"properties":{"x":{"$id":"x.json","type":"string"}}})", "/properties/x/$id: a nested $id"},
      {R"({"properties":[]})", "/properties: must be an object"},
      {R"({"required":"a"})", "/required: must be an array of strings"},
      {R"([1])", "(root): a schema must be an object or a boolean"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.schema);
    absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(ordered_json::parse(r.schema));
    ASSERT_FALSE(gbnf.ok()) << *gbnf;
    EXPECT_EQ(gbnf.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(testing::StatusMessage(gbnf.status()), HasSubstr(r.message));
  }
}

TEST(JsonSchemaTest, AnnotationsAreIgnored) {
  const auto grammar = Compile(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
      "title":"T","description":"d","$comment":"c","examples":[1],"default":1,"deprecated":false,
      "readOnly":true,"writeOnly":false,"strict":true,"type":"integer"})");
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(Accepts(*grammar, "12"));
  EXPECT_FALSE(Accepts(*grammar, "\"12\""));
}

TEST(JsonSchemaTest, RuleNamesAreReadableAndValid) {
  const char* schema = R"({"$defs":{"Street Address":{"type":"object","properties":{"line":{"type":"string"}}}},
      "type":"object","properties":{"first_name":{"type":"string","maxLength":20},
      "home":{"$ref":"#/$defs/Street Address"}},"required":["first_name"]})";
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(ordered_json::parse(schema));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_THAT(*gbnf, HasSubstr("\nroot-first-name ::= "));
  EXPECT_THAT(*gbnf, HasSubstr("\ndef-Street-Address ::= "));
  const std::regex rule_line("[a-zA-Z0-9-]+ ::= .+");
  std::istringstream lines(*gbnf);
  for (std::string line; std::getline(lines, line);) EXPECT_TRUE(std::regex_match(line, rule_line)) << line;
  EXPECT_TRUE(gbnf->rfind("root ::= ", 0) == 0) << *gbnf;
}

TEST(JsonSchemaTest, RefRuleNamesSurviveTheRulesAddedInTheirBody) {
  // A `$ref` target's body adds rules named after it; its name was once read through a
  // reference into the growing rule list, freed by then (tests/fuzz/grammar_fuzz.cc).
  const char* schema = R"({"$defs":{"node":{"type":"object","properties":{"a":{"type":"string","maxLength":1},
      "b":{"type":"string","maxLength":2},"c":{"type":"string","maxLength":3},"d":{"type":"string","maxLength":4},
      "e":{"type":"string","maxLength":5}}}},"type":"object","properties":{"x":{"$ref":"#/$defs/node"}}})";
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(ordered_json::parse(schema));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  for (const char* rule : {"def-node", "def-node-a", "def-node-b", "def-node-e", "def-node-after-b"}) {
    EXPECT_THAT(*gbnf, HasSubstr(std::string("\n") + rule + " ::= ")) << *gbnf;
  }
}

TEST(JsonSchemaTest, IdenticalSubschemasShareOneRule) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(ordered_json::parse(R"({"type":"object","properties":{
      "a":{"type":"string","maxLength":5},"b":{"type":"string","maxLength":5},"c":{"type":"string","maxLength":6}}})"));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_THAT(*gbnf, HasSubstr("\nroot-a ::= "));
  EXPECT_THAT(*gbnf, Not(HasSubstr("\nroot-b ::= ")));
  EXPECT_THAT(*gbnf, HasSubstr("\nroot-c ::= "));
}

TEST(JsonSchemaTest, OrderedJsonKeepsTheDeclaredOrderAndJsonSortsIt) {
  const char* schema = R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},
      "required":["z","a"]})";
  const auto ordered = Compile(schema);
  ASSERT_NE(ordered, nullptr);
  EXPECT_TRUE(Accepts(*ordered, R"({"z":1,"a":2})"));
  EXPECT_FALSE(Accepts(*ordered, R"({"a":2,"z":1})"));
  absl::StatusOr<std::string> sorted = JsonSchemaToGbnf(nlohmann::json::parse(schema));
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  auto grammar = ParseGbnf(*sorted);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(Accepts(**grammar, R"({"a":2,"z":1})"));
  EXPECT_FALSE(Accepts(**grammar, R"({"z":1,"a":2})"));
}

TEST(JsonSchemaTest, JsonObjectGbnfIsAnyObject) {
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = ParseGbnf(JsonObjectGbnf());
  ASSERT_TRUE(grammar.ok()) << grammar.status() << "\n" << JsonObjectGbnf();
  for (const char* yes : {"{}", "{ }", R"({"a": [1, {"b": null}], "c": "\u00e9\n"})", R"({"x":-1.5e-3,"y":true})",
                          R"({"a":{"b":{"c":[[],[{}]]}}})"}) {
    EXPECT_TRUE(Accepts(**grammar, yes)) << yes;
  }
  for (const char* no :
       {"[]", "\"x\"", "1", "null", " {}", "{} ", "{\"a\" 1}", "{\"a\":01}", "{'a':1}", "{\"a\":1,}"}) {
    EXPECT_FALSE(Accepts(**grammar, no)) << no;
  }
}

TEST(JsonSchemaTest, IntegerRangesAreExactAcrossDigitCounts) {
  // Every bound pair from a spread of values, checked on every integer near them.
  const int64_t bounds[] = {-1001, -1000, -999, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1009};
  for (int64_t lo : bounds) {
    for (int64_t hi : bounds) {
      if (hi < lo) continue;
      ordered_json schema = {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}};
      const auto grammar = Compile(schema);
      ASSERT_NE(grammar, nullptr);
      for (int64_t v = -1100; v <= 1100; ++v) {
        EXPECT_EQ(Accepts(*grammar, std::to_string(v)), lo <= v && v <= hi) << schema.dump() << " on " << v;
      }
    }
  }
}

}  // namespace
}  // namespace cascade::grammar
