// Reading calls back out of an answer: whole and in every split of the stream, calls that
// do not parse kept as content, and each family's syntax detected from real templates
// (llama.cpp's models/templates, through the jinja_goldens fixture's first line).
#include "text/tool_calls.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "nlohmann/json.hpp"

namespace cascade::text {
namespace {

struct Read {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// The answer fed in pieces of `step` bytes.
Read ReadAll(ToolCallFormat format, std::string_view answer, size_t step) {
  ToolCallParser p(format);
  Read r;
  for (size_t i = 0; i < answer.size(); i += step) r.content += p.Push(answer.substr(i, step), r.calls);
  r.content += p.Flush(r.calls);
  return r;
}

void ExpectRead(ToolCallFormat format, std::string_view answer, std::string_view content,
                const std::vector<std::pair<std::string, std::string>>& calls) {
  for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, answer.size() + 1}) {
    const Read r = ReadAll(format, answer, step);
    EXPECT_EQ(r.content, content) << "step " << step << ": " << answer;
    ASSERT_EQ(r.calls.size(), calls.size()) << "step " << step << ": " << answer;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, calls[i].first);
      EXPECT_EQ(r.calls[i].arguments, calls[i].second);
    }
  }
}

TEST(ToolCallsTest, HermesBlocksAnywhereInTheAnswer) {
  ExpectRead(ToolCallFormat::kHermes,
             "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}\n"
             "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>",
             "Let me check.\n\n", {{"get_weather", R"({"city":"Paris","n":2})"}, {"search", "{}"}});
  // Arguments given as a JSON string, and a partial tag that turns out to be text.
  ExpectRead(ToolCallFormat::kHermes,
             "a <tool <tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call> b", "a <tool  b",
             {{"f", R"({"x":1})"}});
  // What does not parse stays content, as does an unterminated call.
  ExpectRead(ToolCallFormat::kHermes, "<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", {});
  ExpectRead(ToolCallFormat::kHermes, "x<tool_call>{\"name\": \"f\"", "x<tool_call>{\"name\": \"f\"", {});
  ExpectRead(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>",
             "<tool_call>{\"name\": \"f\"}</tool_call>", {});
}

TEST(ToolCallsTest, Llama3AndMistralAnswersThatAreCalls) {
  ExpectRead(ToolCallFormat::kLlama3, " {\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}", "",
             {{"f", R"({"a":[1,2]})"}});
  ExpectRead(ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", {{"f", "{}"}});
  ExpectRead(ToolCallFormat::kLlama3, "Paris is sunny.", "Paris is sunny.", {});
  ExpectRead(ToolCallFormat::kLlama3, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {});
  ExpectRead(ToolCallFormat::kMistral,
             "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}, {\"name\": \"g\", \"arguments\": {}}]", "",
             {{"f", R"({"q":"x"})"}, {"g", "{}"}});
  ExpectRead(ToolCallFormat::kMistral, "[TOOL", "[TOOL", {});
  ExpectRead(ToolCallFormat::kMistral, "Sure: [1, 2]", "Sure: [1, 2]", {});
}

TEST(ToolCallsTest, DeepSeekBlocksOfEitherGeneration) {
  // V3 / R1: "function", the name, the arguments in a json fence (as the template writes
  // them, `tojson` of the OpenAI string: a JSON string holding the object).
  ExpectRead(
      ToolCallFormat::kDeepSeek,
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n"
      "\"{\\\"q\\\": 1}\"\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"search", R"({"q":1})"}});
  // V3.1: the name, then the arguments; a block the model left open still gives its calls.
  ExpectRead(ToolCallFormat::kDeepSeek,
             "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": [1]}<｜tool▁call▁end｜>", "",
             {{"f", R"({"a":[1]})"}});
  ExpectRead(ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜>",
             "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜>", {});
}

TEST(ToolCallsTest, FormatsAreDetectedFromRealTemplates) {
  const char* goldens = std::getenv("CASCADE_JINJA_GOLDENS");
  if (goldens == nullptr) GTEST_SKIP() << "CASCADE_JINJA_GOLDENS unset: run through ctest (fixture jinja_goldens)";
  std::ifstream in(goldens);
  std::string first;
  std::getline(in, first);
  const std::string dir = nlohmann::json::parse(first).at("templates_dir");
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kDeepSeek},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolCallFormat::kDeepSeek},
  };
  for (const auto& [name, want] : cases) {
    std::ifstream f(dir + "/" + name);
    ASSERT_TRUE(f.good()) << dir << "/" << name;
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(ToolCallFormatName(DetectToolCallFormat(text)), ToolCallFormatName(want)) << name;
  }
  EXPECT_EQ(DetectToolCallFormat("{% for m in messages %}{{ m.content }}{% endfor %}"), ToolCallFormat::kNone);
  ToolCallFormat f = ToolCallFormat::kNone;
  EXPECT_TRUE(ParseToolCallFormat("llama3", &f));
  EXPECT_EQ(f, ToolCallFormat::kLlama3);
  EXPECT_FALSE(ParseToolCallFormat("harmony", &f));
}

}  // namespace
}  // namespace cascade::text
