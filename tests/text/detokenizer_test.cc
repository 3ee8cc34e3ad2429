// Incremental detokenizer: complete UTF-8 only, held-back partial characters, U+FFFD for
// bytes that can never complete, equality with one-shot Decode.
// To add a case: extend the table in `TakeCompleteUtf8Cases` or feed ids of a real vocab.
#include "text/detokenizer.h"

#include <string>
#include <vector>

#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"
#include "tests/test_support.h"
#include "tests/text/byte_tokenizer.h"
#include "text/tokenizer.h"

namespace cascade::text {
namespace {

using ::cascade::testing::ByteTokenizer;

using ::cascade::testing::TestDataPath;

// A vocabulary of byte tokens only (SPM style), so any byte sequence can be fed.

TEST(DetokenizerTest, HoldsBackPartialCharacters) {
  auto tok = ByteTokenizer();
  Detokenizer d(*tok);
  // "é" = C3 A9, "😀" = F0 9F 98 80.
  EXPECT_EQ(d.Feed('a'), "a");
  EXPECT_EQ(d.Feed(0xC3), "");
  EXPECT_EQ(d.n_pending_bytes(), 1u);
  EXPECT_EQ(d.Feed(0xA9), "\xC3\xA9");
  EXPECT_EQ(d.Feed(0xF0), "");
  EXPECT_EQ(d.Feed(0x9F), "");
  EXPECT_EQ(d.Feed(0x98), "");
  EXPECT_EQ(d.Feed(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.n_pending_bytes(), 0u);
  EXPECT_EQ(d.Flush(), "");
}

TEST(DetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  auto tok = ByteTokenizer();
  Detokenizer d(*tok);
  EXPECT_EQ(d.Feed(0xFF), "\xEF\xBF\xBD");  // Never valid.
  EXPECT_EQ(d.Feed(0xE2), "");              // Start of a 3-byte character...
  EXPECT_EQ(d.Feed('x'), "\xEF\xBF\xBDx");  // ...interrupted.
  EXPECT_EQ(d.Feed(0xF0), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // Unfinished at the end.
}

TEST(DetokenizerTest, SkipsSpecialTokensByDefault) {
  auto tok = ByteTokenizer();
  Detokenizer skip(*tok);
  EXPECT_EQ(skip.Feed(256), "");
  Detokenizer keep(*tok, DetokenizerOptions{.skip_special = false});
  EXPECT_EQ(keep.Feed(256), "</s>");
  EXPECT_EQ(keep.Feed(-3), "");  // Out of range: nothing.
  EXPECT_EQ(keep.Feed(9999), "");
}

TEST(DetokenizerTest, TakeCompleteUtf8Cases) {
  struct Case {
    std::string in;
    bool final;
    std::string out;
    std::string left;
  };
  const std::vector<Case> cases = {
      {"abc", false, "abc", ""},
      {"a\xE6\x97", false, "a", "\xE6\x97"},  // Partial 日.
      {"a\xE6\x97", true, "a\xEF\xBF\xBD", ""},
      {"\xC0\xAF", false, "\xEF\xBF\xBD\xEF\xBF\xBD", ""},                  // Overlong: both invalid.
      {"\xED\xA0\x80", false, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", ""},  // Surrogate.
      {"\x80", false, "\xEF\xBF\xBD", ""},                                  // Stray continuation.
  };
  for (const Case& c : cases) {
    std::string bytes = c.in;
    EXPECT_EQ(TakeCompleteUtf8(&bytes, c.final), c.out);
    EXPECT_EQ(bytes, c.left);
  }
}

TEST(DetokenizerTest, StreamEqualsDecodeOnRealVocab) {
  CASCADE_REQUIRE_FILE(path, TestDataPath("models/stories260K.gguf"));
  auto gguf = model::GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = model::TokenizerFromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = " Once upon a time 😀 日本語 ½ months";  // Many byte tokens.
  const std::vector<int32_t> ids = (*tok)->Encode(text, /*add_special=*/true);
  Detokenizer d(**tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string part = d.Feed(id);
    std::string copy = part;  // Every part is complete UTF-8 on its own.
    EXPECT_EQ(TakeCompleteUtf8(&copy, /*final=*/true), part);
    streamed += part;
  }
  streamed += d.Flush();
  EXPECT_EQ(streamed, (*tok)->Decode(ids, /*skip_special=*/true));
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace cascade::text
