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

TEST(OutputFilterTest, FinishReasonNamesAreOpenAis) {
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "");
}

}  // namespace
}  // namespace cascade::text
