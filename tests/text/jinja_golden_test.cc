// JinjaTemplate against Python's jinja2 over the real chat templates of llama.cpp's
// collection (models/templates/*.jinja): tests/text/jinja_goldens.py renders each over a
// fixed corpus of conversations (tools, tool calls with dict and string arguments,
// thinking on and off, with and without the generation prompt) in transformers'
// environment, and this test renders the same and compares byte for byte. Where jinja2
// fails (raise_exception, a type error), so must we, with raise_exception's message or the
// same exception class.
// Then the same for random small templates (random/N) drawn from the grammar the
// interpreter supports. The goldens come from the `jinja_goldens` CTest fixture
// ($CASCADE_JINJA_GOLDENS).
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/test_support.h"
#include "text/jinja_template.h"

namespace cascade::text {
namespace {

// Templates that do not render as jinja2 does, each with why. The test fails when one of
// them starts to match (remove it here) or another stops matching.
const std::map<std::string, std::string>& KnownDifferences() {
  static const auto* known = new std::map<std::string, std::string>{};
  return *known;
}

// jinja_goldens.py's FIXED_NOW: 2024-07-26 09:05:07, a Friday.
JinjaRenderOptions FixedNow() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 5;
  tm.tm_sec = 7;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  JinjaRenderOptions options;
  options.now = tm;
  return options;
}

// Where two renders first differ, with some context, for the failure message.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "at byte " + std::to_string(i) + "\n  jinja2: " + nlohmann::json(want.substr(from, 120)).dump() +
         "\n  ours:   " + nlohmann::json(got.substr(from, 120)).dump();
}

TEST(JinjaGoldenTest, RealTemplatesRenderAsJinja2) {
  const char* path = std::getenv("CASCADE_JINJA_GOLDENS");
  if (path == nullptr) GTEST_SKIP() << "CASCADE_JINJA_GOLDENS unset: run through ctest (fixture jinja_goldens)";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const std::string dir = nlohmann::ordered_json::parse(line).at("templates_dir").get<std::string>();

  std::map<std::string, absl::StatusOr<JinjaTemplate>> parsed;
  std::map<std::string, std::string> first_failure;  // Template -> why its first failing case failed.
  std::set<std::string> templates;
  int cases = 0, matched = 0;
  while (std::getline(in, line)) {
    const nlohmann::ordered_json record = nlohmann::ordered_json::parse(line);
    const std::string name = record.at("template").get<std::string>();
    const std::string case_name = record.at("case").get<std::string>();
    templates.insert(name);
    auto it = parsed.find(name);
    if (it == parsed.end()) {
      const std::string source =
          record.contains("source") ? record.at("source").get<std::string>() : testing::ReadFileOrDie(dir + "/" + name);
      it = parsed.emplace(name, JinjaTemplate::Parse(source)).first;
    }
    absl::StatusOr<JinjaValue> context = jinja::ValueFromJson(record.at("context").dump());
    ASSERT_TRUE(context.ok()) << context.status();
    absl::StatusOr<std::string> got =
        it->second.ok() ? it->second->Render(*context, FixedNow()) : absl::StatusOr<std::string>(it->second.status());
    std::string why;
    if (record.contains("output")) {
      const std::string want = record.at("output").get<std::string>();
      if (!got.ok()) {
        why = "jinja2 renders, we fail: " + testing::StatusMessage(got.status());
      } else if (*got != want) {
        why = "output differs " + FirstDifference(want, *got);
      }
    } else {
      const std::string want = record.at("error").get<std::string>();
      const std::string prefix = "TemplateError: ";  // raise_exception: the message must match.
      const std::string ours = got.ok() ? "" : testing::StatusMessage(got.status());
      if (got.ok()) {
        why = "jinja2 fails (" + want + "), we render";
      } else if (want.rfind(prefix, 0) == 0) {
        const std::string message = want.substr(prefix.size());
        if (ours.size() < message.size() || ours.compare(ours.size() - message.size(), message.size(), message) != 0) {
          why = "raise_exception message differs: jinja2 '" + message + "', ours '" + ours + "'";
        }
      } else if (const std::string kind = want.substr(0, want.find(':') + 1); ours.find(kind) == std::string::npos) {
        // Other errors name jinja2's exception class: "TypeError:", "UndefinedError:", ...
        why = "error differs: jinja2 '" + want + "', ours '" + ours + "'";
      }
    }
    ++cases;
    if (why.empty()) {
      ++matched;
    } else if (!first_failure.count(name)) {
      first_failure[name] = case_name + ": " + why;
    }
  }
  int identical = 0, real = 0, random_identical = 0, random = 0;
  for (const std::string& name : templates) {
    const bool known = KnownDifferences().count(name) > 0;
    const bool failed = first_failure.count(name) > 0;
    const bool is_random = name.rfind("random/", 0) == 0;
    (is_random ? random : real) += 1;
    (is_random ? random_identical : identical) += !failed;
    if (failed && !known) ADD_FAILURE() << name << " differs from jinja2 in case " << first_failure[name];
    if (!failed && known) ADD_FAILURE() << name << " now matches jinja2: remove it from KnownDifferences";
  }
  std::printf(
      "[ info ] jinja2 goldens: %d/%d real templates identical over the corpus, %d/%d random templates, "
      "%d/%d renders\n",
      identical, real, random_identical, random, matched, cases);
  EXPECT_GE(real, 60) << "the llama.cpp tree lost its templates?";
}

}  // namespace
}  // namespace cascade::text
