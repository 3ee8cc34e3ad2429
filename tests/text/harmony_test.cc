// HarmonyParser (text/harmony.h) on assistant turns written as OpenAI's harmony format
// defines them (the template in llama.cpp's models/templates/openai-gpt-oss-120b.jinja
// renders the same markers): the analysis channel as reasoning, the final channel as
// content, whole and fed one character at a time (every split of every marker), a
// commentary message, text that does not follow the format, and a stream cut mid-marker.
#include "text/harmony.h"

#include <gtest/gtest.h>

#include <string>

namespace cascade::text {
namespace {

struct Split {
  std::string reasoning, content;
};

// Feeds `text` in pieces of `piece` characters (0: whole) and flushes; checks that no
// delta shows a marker. (A marker's own prefix at the very end is text: the detokenizer
// renders each special token whole, so a cut "<|e" was written as plain characters.)
Split Parse(const std::string& text, size_t piece) {
  HarmonyParser p;
  Split s;
  const auto add = [&](const HarmonyParser::Delta& d) {
    for (const std::string* part : {&d.reasoning, &d.content}) {
      for (const char* marker : {"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>"}) {
        EXPECT_EQ(part->find(marker), std::string::npos) << marker << " leaked: " << *part;
      }
    }
    s.reasoning += d.reasoning;
    s.content += d.content;
  };
  if (piece == 0) {
    add(p.Push(text));
  } else {
    for (size_t i = 0; i < text.size(); i += piece) add(p.Push(text.substr(i, piece)));
  }
  add(p.Flush());
  return s;
}

TEST(HarmonyParserTest, SplitsAnalysisFromFinal) {
  const std::string turn =
      "<|channel|>analysis<|message|>The user asks for 2+2. Easy.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";
  for (size_t piece : {0, 1, 2, 3, 5, 7}) {
    SCOPED_TRACE(piece);
    const Split s = Parse(turn, piece);
    EXPECT_EQ(s.reasoning, "The user asks for 2+2. Easy.");
    EXPECT_EQ(s.content, "2 + 2 = 4.");
  }
}

TEST(HarmonyParserTest, FinalOnlyAndCommentary) {
  EXPECT_EQ(Parse("<|channel|>final<|message|>Hi <there>.<|return|>", 1).content, "Hi <there>.");
  const Split s = Parse(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather"
      "<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
      3);
  EXPECT_EQ(s.reasoning, "Need the weather.");
  EXPECT_EQ(s.content, "{\"city\": \"Paris\"}");
}

TEST(HarmonyParserTest, TextOutsideTheFormatIsContent) {
  const Split s = Parse("Just an answer, no channels.", 4);
  EXPECT_EQ(s.content, "Just an answer, no channels.");
  EXPECT_EQ(s.reasoning, "");
}

TEST(HarmonyParserTest, AStreamCutMidMarkerShowsNoMarkup) {
  // max_tokens ended the turn inside the analysis message, then inside a header.
  Split s = Parse("<|channel|>analysis<|message|>Thinking about it<|e", 1);
  EXPECT_EQ(s.reasoning, "Thinking about it<|e");
  s = Parse("<|channel|>analysis<|message|>Done.<|end|><|start|>assist", 2);
  EXPECT_EQ(s.reasoning, "Done.");
  EXPECT_EQ(s.content, "");
}

}  // namespace
}  // namespace cascade::text
