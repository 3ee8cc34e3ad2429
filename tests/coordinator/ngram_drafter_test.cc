// Prompt-lookup drafting on hand-made sequences with the expected drafts written out.
#include "coordinator/serving/ngram_drafter.h"

#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(NgramDrafterTest, ProposesWhatFollowedTheLongestRecentMatch) {
  // ... 7 8 9 | 1 2 ... 7 8 9 -> the tokens after the earlier "7 8 9".
  const std::vector<int32_t> h = {5, 7, 8, 9, 1, 2, 3, 4, 6, 7, 8, 9};
  EXPECT_THAT(ProposeNgramDraft(h, {3, 1, 4}), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(ProposeNgramDraft(h, {3, 1, 2}), ElementsAre(1, 2));
}

TEST(NgramDrafterTest, PrefersTheMostRecentOccurrence) {
  const std::vector<int32_t> h = {1, 2, 10, 1, 2, 20, 1, 2};
  EXPECT_THAT(ProposeNgramDraft(h, {2, 1, 3}), ElementsAre(20, 1, 2));
}

TEST(NgramDrafterTest, FallsBackToShorterSuffixes) {
  // "4 5" never occurred before, "5" did.
  const std::vector<int32_t> h = {5, 6, 7, 4, 5};
  EXPECT_THAT(ProposeNgramDraft(h, {3, 1, 2}), ElementsAre(6, 7));
  EXPECT_THAT(ProposeNgramDraft(h, {3, 2, 2}), IsEmpty());  // min_n 2: no match.
}

TEST(NgramDrafterTest, StopsAtTheEndOfHistoryAndHandlesShortInput) {
  const std::vector<int32_t> h = {3, 9, 3};
  EXPECT_THAT(ProposeNgramDraft(h, {3, 1, 4}), ElementsAre(9, 3));
  EXPECT_THAT(ProposeNgramDraft(std::vector<int32_t>{3}, {3, 1, 4}), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(std::vector<int32_t>{}, {3, 1, 4}), IsEmpty());
  EXPECT_THAT(ProposeNgramDraft(std::vector<int32_t>{1, 2, 3}, {3, 1, 4}), IsEmpty());
}

}  // namespace
}  // namespace cascade::coordinator
