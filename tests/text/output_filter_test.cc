// OutputFilter: what generation shows and why it ends, over a byte vocabulary (id b is the
// byte b, id 256 is EOS) so every expectation is plain string arithmetic on the fed bytes.
// To add a case: feed bytes through `Generate` and state the text and reason a reader expects.
#include "text/output_filter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/text/byte_tokenizer.h"

namespace cascade::text {
namespace {

using ::cascade::testing::ByteTokenizer;

constexpr int32_t kEos = ::cascade::testing::kByteEos;

struct Outcome {
  std::string shown;  // Everything Push and Flush returned, concatenated.
  FinishReason reason = FinishReason::kNone;
  size_t n_fed = 0;  // Ids fed before the filter said done.
};

// Feeds `ids` until done; the last id is the last the budget allows when `budget_ends`.
Outcome Generate(const Tokenizer& tok, StopConditions stops, const std::vector<int32_t>& ids, bool budget_ends) {
  OutputFilter f(tok, std::move(stops));
  Outcome out;
  for (size_t i = 0; i < ids.size() && !f.done(); ++i) {
    out.shown += f.Push(ids[i], budget_ends && i + 1 == ids.size());
    ++out.n_fed;
  }
  out.shown += f.Flush();
  EXPECT_EQ(out.shown, f.text());
  out.reason = f.reason();
  return out;
}

std::vector<int32_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(OutputFilterTest, EosEndsWithStopAndAddsNoText) {
  auto tok = ByteTokenizer();
  std::vector<int32_t> ids = Bytes("hello");
  ids.push_back(kEos);
  ids.push_back('!');  // Never fed: generation ended at EOS.
  const Outcome o = Generate(*tok, {}, ids, false);
  EXPECT_EQ(o.shown, "hello");
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_EQ(o.n_fed, 6u);
}

TEST(OutputFilterTest, IgnoredEosIsJustASkippedSpecialToken) {
  auto tok = ByteTokenizer();
  const Outcome o = Generate(*tok, {.ignore_eos = true, .stop_strings = {}, .stop_ids = {}}, {'a', kEos, 'b'}, true);
  EXPECT_EQ(o.shown, "ab");
  EXPECT_EQ(o.reason, FinishReason::kLength);
}

TEST(OutputFilterTest, StopStringIsCutAndNeverShown) {
  auto tok = ByteTokenizer();
  const std::string text = "hello world, hello";
  const std::string stop = "lo w";
  const Outcome o = Generate(*tok, {.ignore_eos = false, .stop_strings = {stop}, .stop_ids = {}}, Bytes(text), true);
  EXPECT_EQ(o.shown, text.substr(0, text.find(stop)));
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_EQ(o.n_fed, text.find(stop) + stop.size());
}

TEST(OutputFilterTest, HeldBackPrefixOfAStopStringIsShownAtTheEnd) {
  auto tok = ByteTokenizer();
  // "wor" could begin "world" until the budget ends: then it is shown after all.
  const Outcome o =
      Generate(*tok, {.ignore_eos = false, .stop_strings = {"world"}, .stop_ids = {}}, Bytes("hi wor"), true);
  EXPECT_EQ(o.shown, "hi wor");
  EXPECT_EQ(o.reason, FinishReason::kLength);
}

TEST(OutputFilterTest, StopIdEndsWithStopAndIsNotShown) {
  auto tok = ByteTokenizer();
  const Outcome o = Generate(*tok, {.ignore_eos = false, .stop_strings = {}, .stop_ids = {'x'}}, Bytes("abxcd"), true);
  EXPECT_EQ(o.shown, "ab");
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_EQ(o.n_fed, 3u);
}

TEST(OutputFilterTest, BudgetEndsWithLengthAndFlushesAPartialCharacter) {
  auto tok = ByteTokenizer();
  // "a" then the first byte of "é" (C3 A9): the budget ends mid-character, which shows as
  // U+FFFD (EF BF BD).
  const Outcome o = Generate(*tok, {}, {'a', 0xC3}, true);
  EXPECT_EQ(o.shown, "a\xEF\xBF\xBD");
  EXPECT_EQ(o.reason, FinishReason::kLength);
}

// The harmony markup of gpt-oss's vocabulary, ids 257.. in this order.
const std::vector<std::string> kHarmonyMarkup = {"<|start|>", "<|channel|>", "<|message|>",
                                                 "<|end|>",   "<|return|>",  "<|call|>"};

// `text` as ids: bytes, with each harmony marker as its one special id.
std::vector<int32_t> HarmonyIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    bool marker = false;
    for (size_t m = 0; m < kHarmonyMarkup.size() && !marker; ++m) {
      if (text.compare(i, kHarmonyMarkup[m].size(), kHarmonyMarkup[m]) == 0) {
        ids.push_back(static_cast<int32_t>(257 + m));
        i += kHarmonyMarkup[m].size();
        marker = true;
      }
    }
    if (!marker) ids.push_back(static_cast<uint8_t>(text[i++]));
  }
  return ids;
}

struct HarmonyOutcome {
  std::string content, reasoning;
  FinishReason reason = FinishReason::kNone;
  size_t n_fed = 0;
};

HarmonyOutcome GenerateHarmony(const Tokenizer& tok, StopConditions stops, const std::vector<int32_t>& ids) {
  OutputFilter f(tok, std::move(stops), OutputFormat::kHarmony);
  HarmonyOutcome o;
  for (size_t i = 0; i < ids.size() && !f.done(); ++i) {
    o.content += f.Push(ids[i], i + 1 == ids.size());
    o.reasoning += f.TakeReasoning();
    ++o.n_fed;
  }
  o.content += f.Flush();
  o.reasoning += f.TakeReasoning();
  EXPECT_EQ(o.content, f.text());
  EXPECT_EQ(o.reasoning, f.reasoning());
  o.reason = f.reason();
  return o;
}

// The assistant's turn in gpt-oss's harmony format: the analysis channel is reasoning, the
// final channel content; "<|end|>" ends a message, not the turn, "<|return|>" ends it.
TEST(OutputFilterTest, HarmonySplitsReasoningFromContentAndReturnEnds) {
  auto tok = ByteTokenizer(kHarmonyMarkup);
  ASSERT_FALSE(tok->IsEog(257 + 3));  // <|end|>
  ASSERT_TRUE(tok->IsEog(257 + 4));   // <|return|>
  const std::vector<int32_t> ids = HarmonyIds(
      "<|channel|>analysis<|message|>Two and two.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>xyz");
  const HarmonyOutcome o = GenerateHarmony(*tok, {}, ids);
  EXPECT_EQ(o.reasoning, "Two and two.");
  EXPECT_EQ(o.content, "4");
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_EQ(o.n_fed, ids.size() - 3);  // Nothing after <|return|>.
}

// Stop strings cut the content only: the same words in the reasoning do not stop it.
TEST(OutputFilterTest, HarmonyStopStringsApplyToTheContent) {
  auto tok = ByteTokenizer(kHarmonyMarkup);
  const HarmonyOutcome o = GenerateHarmony(
      *tok, {.ignore_eos = false, .stop_strings = {"STOP"}, .stop_ids = {}},
      HarmonyIds("<|channel|>analysis<|message|>no STOP here<|end|><|start|>assistant<|channel|>final<|message|>"
                 "yes STOP there<|return|>"));
  EXPECT_EQ(o.reasoning, "no STOP here");
  EXPECT_EQ(o.content, "yes ");
  EXPECT_EQ(o.reason, FinishReason::kStop);
}

// A budget that ends inside the analysis message shows its reasoning and no content.
TEST(OutputFilterTest, HarmonyBudgetEndingInTheReasoningKeepsIt) {
  auto tok = ByteTokenizer(kHarmonyMarkup);
  const HarmonyOutcome o = GenerateHarmony(*tok, {}, HarmonyIds("<|channel|>analysis<|message|>thinking <|"));
  EXPECT_EQ(o.reasoning, "thinking <|");
  EXPECT_EQ(o.content, "");
  EXPECT_EQ(o.reason, FinishReason::kLength);
}

// Plain text (the default) skips the markup, as before.
TEST(OutputFilterTest, TextFormatSkipsHarmonyMarkup) {
  auto tok = ByteTokenizer(kHarmonyMarkup);
  const Outcome o = Generate(*tok, {}, HarmonyIds("<|channel|>final<|message|>hi<|return|>"), false);
  EXPECT_EQ(o.shown, "finalhi");
  EXPECT_EQ(o.reason, FinishReason::kStop);
}

TEST(OutputFilterTest, FinishReasonNamesAreOpenAis) {
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "");
}

}  // namespace
}  // namespace cascade::text
