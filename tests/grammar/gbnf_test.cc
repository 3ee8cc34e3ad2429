// The GBNF compiler and the matcher: what a grammar accepts, written out by hand from the
// notation's rules (llama.cpp's grammars/README.md), and the errors it names.
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "gtest/gtest.h"

namespace cascade::grammar {
namespace {

std::shared_ptr<const Grammar> Compile(std::string_view text) {
  auto g = ParseGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

void ExpectAccepts(std::string_view gbnf, std::initializer_list<std::string_view> yes,
                   std::initializer_list<std::string_view> no) {
  const auto g = Compile(gbnf);
  ASSERT_NE(g, nullptr);
  for (std::string_view s : yes) EXPECT_TRUE(Accepts(*g, s)) << gbnf << " should accept '" << s << "'";
  for (std::string_view s : no) EXPECT_FALSE(Accepts(*g, s)) << gbnf << " should refuse '" << s << "'";
}

TEST(GbnfTest, LiteralsAndAlternatives) {
  ExpectAccepts(R"g(root ::= "yes" | "no" | "")g", {"yes", "no", ""}, {"y", "yesno", "No"});
  ExpectAccepts(R"g(root ::= "a\"b\\c\n\x41\u00e9")g", {"a\"b\\c\nA\xC3\xA9"}, {"a\"b\\c\nA"});
}

TEST(GbnfTest, RulesSpanLinesAndComments) {
  ExpectAccepts(R"g(# a comment
root ::= greeting
   " " name   # continues here
greeting ::= "hi" | "hello"
name ::= [a-z]+)g",
                {"hi bob", "hello x"}, {"hi", "hi Bob", "hey bob"});
}

TEST(GbnfTest, ClassesAscii) {
  ExpectAccepts(R"g(root ::= [a-cx] [^a-z0-9] [\]\-])g", {"a!]", "x -", "cA]"}, {"d!]", "aa]", "a!x"});
}

TEST(GbnfTest, ClassesOverUnicodeMatchWholeUtf8Sequences) {
  // é U+00E9, ‐ U+2010, 😀 U+1F600.
  ExpectAccepts(R"g(root ::= [à-ÿ‐😀])g", {"\xC3\xA9", "\xE2\x80\x90", "\xF0\x9F\x98\x80"},
                {"\xC3\x9F", "e", "\xC3", "\xE2\x80\x91"});
  // A negated class takes any character but the listed, of any length, never half of one.
  ExpectAccepts(R"g(root ::= [^"\\]*)g", {"abc", "\xC3\xA9t\xC3\xA9", "\xF0\x9F\x98\x80", ""},
                {"a\"", "\\", "\xC3", "\xED\xA0\x80"});
  ExpectAccepts(R"g(root ::= .)g", {"a", "\n", "\xC3\xA9", "\xF4\x8F\xBF\xBF"}, {"", "ab", "\xF4\x90\x80\x80"});
  // A range across the surrogates leaves them out: U+D800's spelling is no UTF-8.
  ExpectAccepts(R"g(root ::= [\x00-\U0010FFFF])g", {"a", "\xED\x9F\xBF", "\xEE\x80\x80", "\xF4\x8F\xBF\xBF"},
                {"\xED\xA0\x80", "\xED\xBF\xBF"});
}

TEST(GbnfTest, Repetitions) {
  ExpectAccepts(R"g(root ::= "a"{2,3} "b"? "c"* "d"+)g", {"aad", "aaabccdd", "aacd"}, {"ad", "aaaad", "aab", "aabbd"});
  ExpectAccepts(R"g(root ::= ("ab" | "c"){2} "xy"{1,})g", {"abcxy", "ccxyxy", "ababxy"}, {"abxy", "cccxy", "cc"});
  ExpectAccepts(R"g(root ::= [0-9]{0,3} "!")g", {"!", "1!", "123!"}, {"1234!", "12"});
  ExpectAccepts(R"g(root ::= "x"{3,})g", {"xxx", "xxxxxxx"}, {"xx"});
}

TEST(GbnfTest, RepetitionsOfWhatMayMatchNothing) {
  // `x*` is `r ::= x r | ""`: left-recursive when x matches "", but each turn comes back
  // to the same stack, so the matcher's expansion ends (tests/fuzz/grammar_fuzz.cc).
  ExpectAccepts(R"g(root ::= ("a"?)* "b")g", {"b", "ab", "aaab"}, {"", "a", "ba"});
  ExpectAccepts(R"g(root ::= ("ab" | "c"?){2,} "x")g", {"x", "abx", "cabcx"}, {"ax", "xx"});
  ExpectAccepts(R"g(root ::= ("a"* "b"*)+)g", {"", "a", "abba", "bab"}, {"c"});
  ExpectAccepts("root ::= x\nx ::= root | \"y\"", {"y"}, {"", "yy"});  // A cycle of tail references.
}

TEST(GbnfTest, LongChainsOfOptionalsFitTheStack) {
  // The start state passes through 90,000 empty rules without consuming a byte: the
  // matcher's expansion once recursed that deep and overflowed the stack.
  ExpectAccepts("root ::= ((e){300}){300} \"b\"\ne ::= \"\"", {"b"}, {"", "ab"});
}

TEST(GbnfTest, TooManyParsesAtOnceAreGivenUp) {
  // 90,000 optional "a"s: every one may be the next, so a state holds that many parses
  // and each byte would cost as much. The matcher stops at its cap and says so.
  const auto g = Compile(R"g(root ::= (("a"?){300}){300} "b")g");
  ASSERT_NE(g, nullptr);
  Matcher m(g);
  EXPECT_TRUE(m.overflowed());
  EXPECT_EQ(m.Advance(m.start(), 'b'), Matcher::kDead);
  // Well under the cap: still followed.
  ExpectAccepts(R"g(root ::= (("a"?){20}){20} "b")g", {"b", "aab"}, {"", "ba"});
}

TEST(GbnfTest, RecursionNestsBrackets) {
  const auto g = Compile(R"g(root ::= "(" root ")" root | "")g");
  ASSERT_NE(g, nullptr);
  // Balanced strings of a fixed length, checked against a counter.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int j = 0; j < 10; ++j) s += (rng() & 1) ? '(' : ')';
    int depth = 0;
    bool balanced = true;
    for (char c : s) {
      depth += c == '(' ? 1 : -1;
      balanced = balanced && depth >= 0;
    }
    balanced = balanced && depth == 0;
    EXPECT_EQ(Accepts(*g, s), balanced) << s;
  }
}

TEST(GbnfTest, AmbiguityKeepsEveryParse) {
  // "a" can end the first or start the second part: both must stay alive.
  ExpectAccepts(R"g(root ::= "a"* "a" "b" | "a"+ "c")g", {"ab", "aaab", "ac", "aaac"}, {"b", "aa", "abc"});
}

TEST(GbnfTest, MatcherStatesAreReused) {
  const auto g = Compile(R"g(root ::= "\"" [a-z]* "\"")g");
  Matcher m(g);
  const Matcher::State inside = m.Advance(m.start(), "\"ab");
  EXPECT_EQ(m.Advance(inside, 'c'), inside);  // The loop of a string is one state.
  EXPECT_FALSE(m.Accepting(inside));
  const Matcher::State done = m.Advance(inside, '"');
  EXPECT_TRUE(m.Accepting(done));
  EXPECT_FALSE(m.Continues(done));
  EXPECT_EQ(m.Advance(done, 'a'), Matcher::kDead);
  EXPECT_EQ(m.Advance(Matcher::kDead, 'a'), Matcher::kDead);
}

TEST(GbnfTest, ErrorsNameTheProblem) {
  auto error = [](std::string_view text) {
    auto g = ParseGbnf(text);
    EXPECT_FALSE(g.ok()) << text;
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  EXPECT_THAT(error("root ::= item\n"), testing::HasSubstr("'item' is used but never defined"));
  EXPECT_THAT(error("root ::= root \"a\" | \"b\""), testing::HasSubstr("'root' is left-recursive"));
  EXPECT_THAT(error("root ::= x \"a\"\nx ::= \"\" | root"), testing::HasSubstr("left-recursive"));
  EXPECT_THAT(error("root ::= \"a\"\n\nroot ::= \"b\""), testing::HasSubstr("line 3: rule 'root' is defined twice"));
  EXPECT_THAT(error("start ::= \"a\""), testing::HasSubstr("no rule named 'root'"));
  EXPECT_THAT(error("root ::= \"abc"), testing::HasSubstr("unterminated literal"));
  EXPECT_THAT(error("root ::= [a-"), testing::HasSubstr("unterminated"));
  EXPECT_THAT(error("root ::= [z-a]"), testing::HasSubstr("backwards"));
  EXPECT_THAT(error("root ::= (\"a\""), testing::HasSubstr("missing ')'"));
  EXPECT_THAT(error("root ::= \"a\"{3,2}"), testing::HasSubstr("below its minimum"));
  EXPECT_THAT(error("root ::= * \"a\""), testing::HasSubstr("repeats nothing"));
  EXPECT_THAT(error("root ::= \"\\q\""), testing::HasSubstr("unknown escape"));
  EXPECT_THAT(error(""), testing::HasSubstr("empty"));
  EXPECT_THAT(error("root ::= [\xF4\x90\x80\x80]"), testing::HasSubstr("invalid UTF-8"));  // Past U+10FFFF.
  EXPECT_THAT(error("root ::= [\xC0\xAF]"), testing::HasSubstr("invalid UTF-8"));          // Overlong.
  EXPECT_THAT(error(R"(root ::= "\uD83D")"), testing::HasSubstr("escape of a surrogate"));
  EXPECT_THAT(error(R"(root ::= [\uDC00-\uDFFF])"), testing::HasSubstr("escape of a surrogate"));
}

TEST(GbnfTest, RenameTouchesRulesOnly) {
  const std::string gbnf = "root ::= \"root\" [r-t] root-2 # root\nroot-2 ::= \"\\\"root\" | root\n";
  EXPECT_EQ(RenameGbnfRule(gbnf, "root", "call"),
            "call ::= \"root\" [r-t] root-2 # root\nroot-2 ::= \"\\\"root\" | call\n");
}

TEST(GbnfTest, LiteralEscapesRoundTrip) {
  const std::string text = "q\"b\\s\n\t\r\x01\xC3\xA9";
  const auto g = Compile("root ::= " + GbnfLiteral(text));
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, text));
  EXPECT_FALSE(Accepts(*g, text.substr(1)));
}

}  // namespace
}  // namespace cascade::grammar
