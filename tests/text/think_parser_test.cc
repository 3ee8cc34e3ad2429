// A thinking model's answer: the leading <think> block is reasoning, the rest content, in
// every split of the stream; a prompt that opened the block starts the answer inside it;
// an answer without the block is all content.
#include "text/think_parser.h"

#include <gtest/gtest.h>

#include "text/output_filter.h"

namespace cascade::text {
namespace {

ThinkParser::Delta Split(bool opened, std::string_view answer, size_t step) {
  ThinkParser p(opened);
  ThinkParser::Delta all;
  for (size_t i = 0; i < answer.size(); i += step) {
    ThinkParser::Delta d = p.Push(answer.substr(i, step));
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ThinkParser::Delta d = p.Flush();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

void ExpectSplit(bool opened, std::string_view answer, std::string_view reasoning, std::string_view content) {
  for (size_t step : {size_t{1}, size_t{2}, size_t{5}, answer.size() + 1}) {
    const ThinkParser::Delta d = Split(opened, answer, step);
    EXPECT_EQ(d.reasoning, reasoning) << "step " << step << ": " << answer;
    EXPECT_EQ(d.content, content) << "step " << step << ": " << answer;
  }
}

TEST(ThinkParserTest, TheLeadingBlockIsReasoning) {
  ExpectSplit(false, "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", "\nLet me see: 2+2.\n", "\n\nIt is 4.");
  ExpectSplit(false, "\n <think>a</think>b", "a", "b");
  // Only a leading block: a tag later on is content.
  ExpectSplit(false, "It is 4. <think>no</think>", "", "It is 4. <think>no</think>");
  ExpectSplit(false, "<thin", "", "<thin");
  // An unclosed block is reasoning to the end (cut by max_tokens).
  ExpectSplit(false, "<think>still thinking", "still thinking", "");
  // The prompt opened it (DeepSeek-R1's generation prompt ends in "<think>\n").
  ExpectSplit(true, "hmm</think>Answer", "hmm", "Answer");
  ExpectSplit(true, "</thinkless", "</thinkless", "");
}

TEST(ThinkParserTest, PromptsThatOpenTheBlock) {
  EXPECT_TRUE(PromptOpensThinking("<|Assistant|><think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n"));
  ChatFormat thinking;
  thinking.thinking = true;
  EXPECT_EQ(OutputFormatOf(thinking, "x<think>\n"), OutputFormat::kThinkingOpened);
  EXPECT_EQ(OutputFormatOf(thinking, "x"), OutputFormat::kThinking);
  EXPECT_EQ(OutputFormatOf(thinking, "assistant\n<think>\n\n</think>\n\n"), OutputFormat::kText);
  EXPECT_EQ(OutputFormatOf(ChatFormat{}, "x<think>\n"), OutputFormat::kText);
}

}  // namespace
}  // namespace cascade::text
