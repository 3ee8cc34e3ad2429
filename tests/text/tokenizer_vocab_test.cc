// Tests for the vocabulary tables every tokenizer builds (text/tokenizer_vocab.cc) through
// `Tokenizer::FromSpec`: what a malformed spec is refused with. Regression cases found by
// the fuzz targets (tests/fuzz/) live here, each with its input in the seed corpus.
// To add a case: build a `TokenizerSpec` by hand and assert on `FromSpec`'s status.
#include <string>

#include "tests/test_support.h"
#include "text/tokenizer.h"
#include "text/tokenizer_spec.h"

namespace cascade::text {
namespace {

using ::cascade::testing::StatusIs;

// A merge whose two parts are tokens but whose result is not names the result. The name
// used to be a view of a temporary std::string that was gone by the time the message was
// built (ASan: stack-use-after-scope; found by tokenizer_json_fuzz, seed
// tests/fuzz/corpus/tokenizer_json/crash_merge_result_missing.json).
TEST(TokenizerVocabTest, MergeWithMissingResultNamesIt) {
  TokenizerSpec spec;
  spec.source = "spec.json";
  spec.kind = TokenizerSpec::Kind::kByteLevelBpe;
  spec.tokens = {"a", "b", "c"};
  spec.merges = {"a b"};
  EXPECT_THAT(Tokenizer::FromSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  "spec.json: merges[0] 'a b': token 'ab' is not in the vocabulary"));
  spec.merges.clear();
  spec.merge_pairs = {{"b", "c"}};
  EXPECT_THAT(Tokenizer::FromSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  "spec.json: merges[0] 'b c': token 'bc' is not in the vocabulary"));
}

TEST(TokenizerVocabTest, MergeWithMissingPartNamesIt) {
  TokenizerSpec spec;
  spec.source = "spec.json";
  spec.kind = TokenizerSpec::Kind::kByteLevelBpe;
  spec.tokens = {"a", "b", "ab"};
  spec.merges = {"a x"};
  EXPECT_THAT(Tokenizer::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("token 'x' is not in the vocabulary")));
  spec.merges = {"y b"};
  EXPECT_THAT(Tokenizer::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("token 'y' is not in the vocabulary")));
}

}  // namespace
}  // namespace cascade::text
