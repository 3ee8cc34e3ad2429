// model/format/hf_defaults.cc against transformers itself: the defaults of each served
// config class as transformers 4.57.6 and 5.25.0 define them, written by
// tests/format/hf_defaults_goldens.py (ctest fixture hf_defaults_goldens) into the file
// $CASCADE_HF_DEFAULTS. Every row of Cascade's table must equal both versions' default, and
// every default those classes have for a key Cascade reads must be in the table.
#include "model/format/hf_defaults.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_support.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

constexpr const char* kModelTypes[] = {"llama", "mistral",   "mixtral",   "qwen2",
                                       "qwen3", "qwen2_moe", "qwen3_moe", "gpt_oss"};

TEST(HfClassDefaultsTest, TableEqualsTransformersOfBothGenerations) {
  const char* path = std::getenv("CASCADE_HF_DEFAULTS");
  if (path == nullptr) GTEST_SKIP() << "CASCADE_HF_DEFAULTS not set (ctest sets it; the fixture needs PyPI once)";
  const Json goldens = Json::parse(testing::ReadFileOrDie(path));
  ASSERT_EQ(goldens.size(), 2u);
  for (const auto& [version, classes] : goldens.items()) {
    for (const char* type : kModelTypes) {
      SCOPED_TRACE(std::string(type) + ", transformers " + version);
      ASSERT_TRUE(classes.contains(type));
      const Json& want = classes[type];
      const auto table = HfClassDefaults(type);
      for (const auto& [key, json] : table) {
        ASSERT_TRUE(want.contains(std::string(key))) << key << ": in the table, not a parameter of the class";
        EXPECT_EQ(Json::parse(json), want[std::string(key)]) << key;
      }
      for (const auto& [key, value] : want.items()) {
        EXPECT_TRUE(HfClassDefault(type, key).has_value()) << key << " = " << value.dump() << " missing from the table";
      }
      std::printf("[ info ] %s, transformers %s: %zu defaults equal\n", type, version.c_str(), table.size());
    }
  }
}

}  // namespace
}  // namespace cascade::model
