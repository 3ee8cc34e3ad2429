// Tests for the vocabulary tables every tokenizer builds (text/tokenizer_vocab.cc) through
// `Tokenizer::FromSpec`: what a malformed spec is refused with. Regression cases found by
// the fuzz targets (tests/fuzz/) live here, each with its input in the seed corpus.
// To add a case: build a `TokenizerSpec` by hand and assert on `FromSpec`'s status.
#include <string>

#include "tests/test_support.h"
#include "tests/text/byte_tokenizer.h"
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

// "<|end|>" ends a turn in Phi-style formats, but only a message in harmony, whose turn ends
// at "<|return|>" or "<|call|>": with both of those in the vocabulary it is not
// end-of-generation (llama.cpp's rule for o200k_harmony).
TEST(TokenizerVocabTest, HarmonyVocabularyEndsAtReturnAndCallNotEnd) {
  // Ids 257, 258, 259 after the bytes and EOS.
  auto harmony = ::cascade::testing::ByteTokenizer({"<|end|>", "<|return|>", "<|call|>"});
  EXPECT_FALSE(harmony->IsEog(257));
  EXPECT_TRUE(harmony->IsEog(258));
  EXPECT_TRUE(harmony->IsEog(259));
  EXPECT_TRUE(::cascade::testing::ByteTokenizer({"<|end|>"})->IsEog(257));
}

}  // namespace
}  // namespace cascade::text
