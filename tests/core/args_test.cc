// Tests of cascade::Args: valued and boolean options, `--name=value`, --help / -h and the
// usage text, and the errors (unknown option pointing to --help, missing value, positional
// argument, bad numbers). To add a case, add a TEST below with its own argv.
#include "core/args.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_support.h"

namespace cascade {
namespace {

using ::cascade::testing::StatusIs;
using ::testing::HasSubstr;

Args TestArgs() {
  return Args("prog", "--model PATH [options]",
              {{"model", "PATH", "the model file (required)"},
               {"max-tokens", "N", "tokens at most (default 256)"},
               {"temperature", "T", "0 = greedy"},
               {"json", "", "print JSON"}});
}

// Parses `argv` (after a program name), as a binary's main would.
absl::Status ParseArgv(Args& args, std::vector<std::string> argv) {
  argv.insert(argv.begin(), "prog");
  std::vector<char*> ptrs;
  for (std::string& a : argv) ptrs.push_back(a.data());
  return args.Parse(static_cast<int>(ptrs.size()), ptrs.data(), 1);
}

TEST(ArgsTest, ParsesValuedAndBooleanOptions) {
  Args args = TestArgs();
  ASSERT_TRUE(ParseArgv(args, {"--model", "m.gguf", "--max-tokens=12", "--json"}).ok());
  EXPECT_FALSE(args.help_requested());
  EXPECT_EQ(args.GetOr("model", ""), "m.gguf");
  EXPECT_EQ(*args.GetInt("max-tokens", 0), 12);
  EXPECT_TRUE(args.Has("json"));
  EXPECT_FALSE(args.Has("temperature"));
  EXPECT_EQ(*args.GetDouble("temperature", 0.5), 0.5);
  EXPECT_EQ(*args.Require("model"), "m.gguf");
  EXPECT_THAT(args.Require("temperature"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--temperature")));
}

TEST(ArgsTest, HelpAndShortHelpStopParsing) {
  for (const char* help : {"--help", "-h"}) {
    Args args = TestArgs();
    // Whatever follows --help, even an unknown option, is not parsed.
    ASSERT_TRUE(ParseArgv(args, {"--json", help, "--no-such-option"}).ok()) << help;
    EXPECT_TRUE(args.help_requested()) << help;
  }
}

TEST(ArgsTest, UsageListsEveryOptionOnItsOwnLine) {
  const std::string usage = TestArgs().Usage();
  EXPECT_THAT(usage, HasSubstr("usage: prog --model PATH [options]\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --model PATH     the model file (required)\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --max-tokens N   tokens at most (default 256)\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --temperature T  0 = greedy\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --json           print JSON\n"));
  EXPECT_THAT(usage, HasSubstr("\n  -h, --help       print this help and exit\n"));
}

TEST(ArgsTest, UnknownOptionPointsToHelp) {
  Args args = TestArgs();
  EXPECT_THAT(ParseArgv(args, {"--model", "m", "--modle", "x"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown option '--modle' (see `prog --help`)")));
  EXPECT_FALSE(args.help_requested());
}

TEST(ArgsTest, PositionalArgumentAndMissingValueAreErrors) {
  Args a = TestArgs();
  EXPECT_THAT(ParseArgv(a, {"m.gguf"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument 'm.gguf'")));
  Args b = TestArgs();
  EXPECT_THAT(ParseArgv(b, {"--model"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("option '--model' needs a value")));
}

TEST(ArgsTest, BadNumbersNameTheOption) {
  Args args = TestArgs();
  ASSERT_TRUE(ParseArgv(args, {"--max-tokens", "many", "--temperature", "hot"}).ok());
  EXPECT_THAT(args.GetInt("max-tokens", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--max-tokens 'many' is not an integer")));
  EXPECT_THAT(args.GetDouble("temperature", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--temperature 'hot' is not a number")));
}

}  // namespace
}  // namespace cascade
