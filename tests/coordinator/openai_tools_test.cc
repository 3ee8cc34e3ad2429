// tools / tool_choice parsing and the grammar of a forced call: what it accepts is a call
// of a declared function (the named one) with arguments its schema allows, in the
// family's syntax, and nothing else.
#include "coordinator/front/openai_tools.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"

namespace cascade::coordinator {
namespace {

using Ordered = nlohmann::ordered_json;

const Ordered kTools = Ordered::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping"}}])");

OpenAiTools Parse(Ordered body) {
  body["tools"] = kTools;
  absl::StatusOr<OpenAiTools> t = ParseOpenAiTools(body);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : OpenAiTools{};
}

bool Accepts(const std::string& gbnf, std::string_view text) {
  auto g = grammar::ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  return g.ok() && grammar::Accepts(**g, text);
}

TEST(OpenAiToolsTest, RequiredHermesCallsFollowTheSchemas) {
  auto gbnf = ToolCallGbnf(text::ToolCallFormat::kHermes, Parse({{"tool_choice", "required"}}));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, weather));
  EXPECT_TRUE(Accepts(*gbnf, ping + "\n" + weather));  // Parallel calls by default.
  EXPECT_FALSE(Accepts(*gbnf, ""));                    // Required: at least one.
  EXPECT_FALSE(Accepts(*gbnf, "Sure. " + weather));
  EXPECT_FALSE(Accepts(
      *gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Amsterdam\"}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      Accepts(*gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}\n</tool_call>"));

  auto one = ToolCallGbnf(text::ToolCallFormat::kHermes,
                          Parse({{"tool_choice", {{"type", "function"}, {"function", {{"name", "ping"}}}}},
                                 {"parallel_tool_calls", false}}));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(Accepts(*one, ping));
  EXPECT_FALSE(Accepts(*one, weather));
  EXPECT_FALSE(Accepts(*one, ping + "\n" + ping));
}

TEST(OpenAiToolsTest, Llama3CallsAreTheWholeAnswerAndMistralIsRefused) {
  auto gbnf = ToolCallGbnf(text::ToolCallFormat::kLlama3, Parse({{"tool_choice", "required"}}));
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_TRUE(Accepts(*gbnf, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"f\"}}"));
  EXPECT_FALSE(Accepts(*gbnf, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"));
  auto mistral = ToolCallGbnf(text::ToolCallFormat::kMistral, Parse({{"tool_choice", "required"}}));
  EXPECT_EQ(mistral.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenAiToolsTest, BadToolsAndChoicesNameTheField) {
  auto error = [](std::string_view body) {
    auto t = ParseOpenAiTools(Ordered::parse(body));
    EXPECT_FALSE(t.ok()) << body;
    return std::string(t.status().message());
  };
  EXPECT_EQ(error(R"({"tools": {}})"), "tools: expected an array of tools");
  EXPECT_EQ(error(R"({"tools": [{"type": "function", "function": {"name": ""}}]})").rfind("tools[0].function.name", 0),
            0u);
  EXPECT_NE(error(R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function",
            "function": {"name": "a"}}]})")
                .find("declared twice"),
            std::string::npos);
  EXPECT_EQ(error(R"({"tool_choice": "required"})"), "tool_choice: needs tools");
  EXPECT_EQ(error(R"({"tools": [], "tool_choice": "always"})").rfind("tool_choice: expected", 0), 0u);
  EXPECT_NE(error(R"({"tools": [{"type": "function", "function": {"name": "a"}}],
            "tool_choice": {"type": "function", "function": {"name": "b"}}})")
                .find("no tool is named 'b'"),
            std::string::npos);
}

}  // namespace
}  // namespace cascade::coordinator
