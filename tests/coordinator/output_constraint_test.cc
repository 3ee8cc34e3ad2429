// ConstrainStep: drafts cut at the first the grammar refuses, one mask per sampled row
// (the state before each kept draft, then after them all), bits as the wire says.
#include "coordinator/serving/output_constraint.h"

#include <gtest/gtest.h>

namespace cascade::coordinator {
namespace {

bool Bit(const std::string& masks, size_t row_bytes, int row, int token) {
  return (static_cast<uint8_t>(masks[row * row_bytes + token / 8]) >> (token % 8)) & 1;
}

TEST(OutputConstraintTest, DraftsAreCutAtTheFirstRefusedAndEachRowGetsItsMask) {
  auto g = grammar::ParseGbnf(R"g(root ::= "ab" [0-9]+ "!")g");
  ASSERT_TRUE(g.ok()) << g.status();
  // 0 "a", 1 "b", 2 "ab", 3 "1", 4 "2", 5 "!", 6 "<eos>", then nine filler tokens.
  std::vector<std::string> vocab = {"a", "b", "ab", "1", "2", "!", "<eos>"};
  for (int i = 0; i < 9; ++i) vocab.push_back("x" + std::to_string(i));
  std::vector<bool> excluded(vocab.size());
  excluded[6] = true;
  grammar::TokenConstraint c(*g, std::make_shared<grammar::TokenTrie>(vocab, excluded), {6});
  ASSERT_TRUE(c.Accept(0).ok());  // "a"

  v1::StepSequence s;
  for (int t : {0, 1, 3, 0, 4}) s.add_tokens(t);  // Fed "a", drafts "b" "1" "a" "2": "a" is refused.
  s.set_n_draft(4);
  s.set_sample(true);
  ASSERT_TRUE(ConstrainStep(c, s).ok());
  EXPECT_EQ(s.n_draft(), 2);
  ASSERT_EQ(s.tokens_size(), 3);
  const size_t row_bytes = (vocab.size() + 7) / 8;
  ASSERT_EQ(s.allowed_tokens().size(), 3 * row_bytes);
  // Row 0: after "a", only "b". Row 1: after "ab", digits. Row 2: after "ab1", digits or "!".
  for (int t = 0; t < static_cast<int>(vocab.size()); ++t) {
    EXPECT_EQ(Bit(s.allowed_tokens(), row_bytes, 0, t), t == 1) << t;
    EXPECT_EQ(Bit(s.allowed_tokens(), row_bytes, 1, t), t == 3 || t == 4) << t;
    EXPECT_EQ(Bit(s.allowed_tokens(), row_bytes, 2, t), t == 3 || t == 4 || t == 5) << t;
  }
  // The request's own state is not moved by drafts: only accepted tokens move it.
  EXPECT_TRUE(c.Allows(c.state(), 1));
  EXPECT_FALSE(c.Allows(c.state(), 3));
}

TEST(OutputConstraintTest, EndTokensAreNeverKeptAsDrafts) {
  auto g = grammar::ParseGbnf(R"g(root ::= "a")g");
  ASSERT_TRUE(g.ok());
  grammar::TokenConstraint c(
      *g, std::make_shared<grammar::TokenTrie>(std::vector<std::string>{"a", "<eos>"}, std::vector<bool>{false, true}),
      {1});
  ASSERT_TRUE(c.Accept(0).ok());
  v1::StepSequence s;
  for (int t : {0, 1}) s.add_tokens(t);
  s.set_n_draft(1);
  s.set_sample(true);
  ASSERT_TRUE(ConstrainStep(c, s).ok());
  EXPECT_EQ(s.n_draft(), 0);  // The end ends the sequence: it is sampled, never verified.
  EXPECT_EQ(s.allowed_tokens(), std::string(1, '\x02'));
}

}  // namespace
}  // namespace cascade::coordinator

namespace cascade::coordinator {
namespace {

TEST(OutputConstraintTest, AGrammarTooAmbiguousToFollowFailsItsRequest) {
  // After "x", 90,000 optional "a"s may each come next (grammar::Matcher::kMaxStacks).
  auto g = grammar::ParseGbnf(R"g(root ::= "x" (("a"?){300}){300} "b")g");
  ASSERT_TRUE(g.ok()) << g.status();
  grammar::TokenConstraint c(*g,
                             std::make_shared<grammar::TokenTrie>(std::vector<std::string>{"x", "a", "b", "<eos>"},
                                                                  std::vector<bool>{false, false, false, true}),
                             {3});
  v1::StepSequence s;
  for (int t : {2, 0}) s.add_tokens(t);  // A draft "x" leads into the ambiguous part.
  s.set_n_draft(1);
  s.set_sample(true);
  const absl::Status st = ConstrainStep(c, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("parses open at once"), std::string_view::npos) << st;
}

}  // namespace
}  // namespace cascade::coordinator
