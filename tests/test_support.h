// Helpers shared by the test suites: where the real test models live, temporary files.
// To add a test: put `foo_test.cc` under tests/<module>/; the module's suite globs it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade::testing {

// Directory of the shared real test models and vectors: $CASCADE_TESTDATA, else
// <source>/../shared/testdata. Empty when neither exists.
std::string TestDataDir();
// `TestDataDir()/relative` or empty when the testdata directory is absent.
std::string TestDataPath(const std::string& relative);
// <source>/models/<name> (the default model fetched by scripts/setup.sh), or empty.
std::string DefaultModelPath(const std::string& name = "SmolLM2-135M-Instruct.Q4_1.gguf");
// The repository root.
std::string SourceDir();

// A fresh empty directory removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/name and returns the full path.
  std::string WriteFile(const std::string& name, const std::string& bytes) const;

 private:
  std::string path_;
};

std::string ReadFileOrDie(const std::string& path);

// The value of FP8 E4M3 code q by the OCP definition (sign, 4 exponent bits with bias 7, 3
// mantissa bits; exponent 0 holds the subnormals (m / 8) 2^-6; S.1111.111 is NaN), in
// double: the tests' reference, written apart from core/fp8.h, which they check.
double OcpE4M3(uint8_t q);
// The OCP MX E2M1 value of a 4-bit code (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives),
// from the definition: 1 sign, 2 exponent (bias 1), 1 mantissa bit, no infinities.
double OcpE2M1(uint8_t code);

// The message of `s` as a std::string (absl::string_view is not std::string_view here).
inline std::string StatusMessage(const absl::Status& s) { return std::string(s.message().data(), s.message().size()); }

}  // namespace cascade::testing

// Skips the current test with a printed reason when a shared test file is missing.
#define CASCADE_REQUIRE_FILE(path_var, expr)                                 \
  const std::string path_var = (expr);                                       \
  if (path_var.empty() || !::cascade::testing::internal::Exists(path_var)) { \
    GTEST_SKIP() << "test file not available (" #expr                        \
                    "): set CASCADE_TESTDATA "                               \
                    "or run scripts/setup.sh";                               \
  }

// Asserts an absl::Status (or StatusOr) is OK, printing it otherwise.
#define ASSERT_OK(expr)                                                              \
  do {                                                                               \
    const ::absl::Status cascade_s_ = ::cascade::testing::internal::GetStatus(expr); \
    ASSERT_TRUE(cascade_s_.ok()) << cascade_s_;                                      \
  } while (0)

// Asserts an absl::Status (or StatusOr) has the given code.
#define EXPECT_STATUS_CODE(expr, code_name)                                          \
  do {                                                                               \
    const ::absl::Status cascade_s_ = ::cascade::testing::internal::GetStatus(expr); \
    EXPECT_EQ(cascade_s_.code(), ::absl::StatusCode::code_name) << cascade_s_;       \
  } while (0)

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
namespace cascade::testing::internal {
bool Exists(const std::string& path);
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace cascade::testing::internal

namespace cascade::testing {

// Matches an absl::Status or StatusOr whose code matches `code` (a value or a matcher) and
// whose message matches `message` (any message by default), as Abseil's
// absl/status/status_matchers.h:
//   EXPECT_THAT(OpenModelFiles(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "is not" : "is") + " a status of code " + ::testing::PrintToString(code) +
               " with a matching message") {
  const absl::Status& s = internal::GetStatus(arg);
  *result_listener << "whose status is " << s;
  return ::testing::ExplainMatchResult(code, s.code(), result_listener) &&
         ::testing::ExplainMatchResult(message, std::string(s.message().data(), s.message().size()), result_listener);
}
template <typename Code>
auto StatusIs(Code code) {
  return StatusIs(code, ::testing::A<std::string>());
}

}  // namespace cascade::testing
