// Tests for ApiKeys (coordinator/front/api_keys.h): keys load from a file with comments and
// blank lines, bad files are refused naming the key, only "Bearer <a configured key>" is
// allowed, and no message repeats what the caller sent.
#include "coordinator/front/api_keys.h"

#include <fstream>

#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::TempDir;
using ::testing::HasSubstr;

std::string Write(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/keys";
  std::ofstream(path) << text;
  return path;
}

TEST(ApiKeysTest, LoadsKeysSkippingCommentsAndBlanks) {
  TempDir d;
  auto keys = ApiKeys::Load(Write(d.path(), "# keys\n\n  0123456789abcdef  \nfedcba9876543210 # ops\n"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Allows("Bearer 0123456789abcdef"));
  EXPECT_TRUE(keys->Allows("Bearer fedcba9876543210"));
  EXPECT_FALSE(keys->Allows("Bearer 0123456789abcdeF"));
  EXPECT_FALSE(keys->Allows("Bearer 0123456789abcde"));  // A prefix.
  EXPECT_FALSE(keys->Allows("0123456789abcdef"));        // No scheme.
  EXPECT_FALSE(keys->Allows("Basic 0123456789abcdef"));  // Another scheme.
  EXPECT_FALSE(keys->Allows(""));
}

TEST(ApiKeysTest, RefusesBadFilesNamingTheKey) {
  TempDir d;
  EXPECT_THAT(std::string(ApiKeys::Load(d.path() + "/missing").status().message()),
              HasSubstr("security.api_keys_file: cannot read"));
  EXPECT_THAT(std::string(ApiKeys::Load(Write(d.path(), "# none\n\n")).status().message()), HasSubstr("holds no key"));
  EXPECT_THAT(std::string(ApiKeys::Load(Write(d.path(), "0123456789abcdef\nshort\n")).status().message()),
              HasSubstr("line 2: a key of 5 characters is too easy to guess"));
}

TEST(ApiKeysTest, NoKeysMeansOpenAndMessagesNeverEchoTheOffer) {
  EXPECT_TRUE(ApiKeys().Allows(""));
  EXPECT_FALSE(ApiKeys().enabled());
  const ApiKeys keys = ApiKeys::FromKeys({"0123456789abcdef"});
  EXPECT_EQ(keys.Check("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(keys.Check("").message()), HasSubstr("authorization: Bearer KEY"));
  const absl::Status wrong = keys.Check("Bearer secret-guess-123456");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(std::string(wrong.message()).find("secret-guess"), std::string::npos);
  EXPECT_TRUE(keys.Check("Bearer 0123456789abcdef").ok());
}

}  // namespace
}  // namespace cascade::coordinator
