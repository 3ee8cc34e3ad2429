// Token masks against the brute force: each token's bytes run through a fresh matcher from
// the same text, one token at a time, without the trie or the cache.
#include "grammar/token_mask.h"

#include <random>
#include <string>

#include "grammar/grammar.h"
#include "gtest/gtest.h"

namespace cascade::grammar {
namespace {

// A vocabulary of every 1- and 2-byte string over a small alphabet, some longer pieces,
// an empty piece and a control token.
std::vector<std::string> Vocabulary() {
  const std::string alphabet = "{}\":, abtrue0129-.\\";
  std::vector<std::string> v = {"", "<eos>", "<ctl>"};
  for (char a : alphabet) {
    v.push_back(std::string(1, a));
    for (char b : alphabet) v.push_back(std::string{a, b});
  }
  for (const char* s : {"true", "\"a\"", "{\"", "\":", "\", \"", "tr", "ue}", "\xC3\xA9", "\xC3", "\xA9"})
    v.push_back(s);
  return v;
}

constexpr int32_t kEos = 1, kControl = 2;

TEST(TokenMaskTest, MasksMatchTheBruteForceAlongRandomWalks) {
  const auto g = ParseGbnf(R"g(root ::= "{" ws (pair ("," ws pair)*)? ws "}"
pair ::= string ws ":" ws value
value ::= string | "true" | number | root
number ::= "-"? [0-9]{1,3}
string ::= "\"" ([^"\\] | "\\" ["\\])* "\""
ws ::= " "?)g");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<std::string> vocab = Vocabulary();
  std::vector<bool> excluded(vocab.size());
  excluded[kEos] = excluded[kControl] = true;
  auto trie = std::make_shared<TokenTrie>(vocab, excluded);
  std::mt19937 rng(11);
  for (int walk = 0; walk < 40; ++walk) {
    TokenConstraint c(*g, trie, {kEos});
    std::string text;
    for (int step = 0; step < 30; ++step) {
      const TokenMask& mask = c.Mask(c.state());
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < static_cast<int32_t>(vocab.size()); ++t) {
        Matcher fresh(*g);
        const bool fits = t == kEos ? fresh.Accepting(fresh.Advance(fresh.start(), text))
                                    : t != kControl && !vocab[t].empty() &&
                                          fresh.Advance(fresh.start(), text + vocab[t]) != Matcher::kDead;
        ASSERT_EQ(MaskAllows(mask, t), fits) << "after '" << text << "' token '" << vocab[t] << "'";
        if (fits) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(c.Accept(pick).ok());
      if (pick == kEos) break;
      text += vocab[pick];
    }
  }
}

TEST(TokenMaskTest, EndTokensOnlyWhereTheGrammarEnds) {
  const auto g = ParseGbnf(R"g(root ::= "ab" "c"?)g");
  ASSERT_TRUE(g.ok());
  const std::vector<std::string> vocab = {"a", "b", "c", "<eos>", "ab", "abc", "bc"};
  auto trie = std::make_shared<TokenTrie>(vocab, std::vector<bool>{false, false, false, true, false, false, false});
  TokenConstraint c(*g, trie, {3});
  auto allowed = [&] {
    std::string out;
    for (int32_t t = 0; t < 7; ++t) out += c.Allows(c.state(), t) ? '1' : '0';
    return out;
  };
  EXPECT_EQ(allowed(), "1000110");
  EXPECT_FALSE(c.Accept(3).ok());  // EOS before the grammar ends is refused.
  ASSERT_TRUE(c.Accept(0).ok());
  EXPECT_EQ(allowed(), "0100001");
  ASSERT_TRUE(c.Accept(1).ok());
  EXPECT_EQ(allowed(), "0011000");  // "c" or the end.
  ASSERT_TRUE(c.Accept(2).ok());
  EXPECT_EQ(allowed(), "0001000");  // Only the end.
  EXPECT_FALSE(c.Accept(2).ok());
  EXPECT_EQ(c.Next(c.state(), 3), c.state());
}

TEST(TokenMaskTest, RepeatedStatesAreCached) {
  const auto g = ParseGbnf(R"g(root ::= "\"" [a-z]* "\"")g");
  ASSERT_TRUE(g.ok());
  std::vector<std::string> vocab = {"\"", "<eos>"};
  for (char a = 'a'; a <= 'z'; ++a) vocab.push_back(std::string(1, a));
  std::vector<bool> excluded(vocab.size());
  excluded[1] = true;
  TokenConstraint c(*g, std::make_shared<TokenTrie>(vocab, excluded), {1});
  ASSERT_TRUE(c.Accept(0).ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.Allows(c.state(), 2 + i % 26));
    ASSERT_TRUE(c.Accept(2 + i % 26).ok());
  }
  EXPECT_EQ(c.masks_computed(), 1);  // Every letter leads back to the same state.
}

}  // namespace
}  // namespace cascade::grammar

namespace cascade::grammar {
namespace {

TEST(TokenMaskTest, RequestsShareMasksButNotEndTokens) {
  const auto g = ParseGbnf(R"g(root ::= "a" "b"?)g");
  ASSERT_TRUE(g.ok());
  const std::vector<std::string> vocab = {"a", "b", "<eos>", "<end>"};
  auto masks = std::make_shared<GrammarMasks>(
      *g, std::make_shared<TokenTrie>(vocab, std::vector<bool>{false, false, true, true}));
  TokenConstraint first(masks, {2}), second(masks, {3});
  ASSERT_TRUE(first.Accept(0).ok());
  EXPECT_TRUE(first.Allows(first.state(), 2));
  EXPECT_FALSE(first.Allows(first.state(), 3));
  const int64_t computed = masks->masks_computed();
  ASSERT_TRUE(second.Accept(0).ok());
  EXPECT_FALSE(second.Allows(second.state(), 2));  // Each request its own end tokens.
  EXPECT_TRUE(second.Allows(second.state(), 3));
  EXPECT_TRUE(second.Allows(second.state(), 1));
  EXPECT_EQ(masks->masks_computed(), computed);  // The same states: no mask walked again.
  EXPECT_FALSE(second.Accept(2).ok());
  EXPECT_TRUE(second.Accept(3).ok());
}

}  // namespace
}  // namespace cascade::grammar
