// Which template renders a chat (ResolveChatFormat) and how (RenderChat): the model's own
// Jinja template by default, a named hard-coded format when asked, the hard-coded format a
// template is recognised as when it does not parse. Expected strings are written from the
// templates themselves (SmolLM2's is quoted below; its Jinja rendering is held to Python's
// jinja2 by jinja_golden_test.cc).
#include "text/chat_format.h"

#include <cstdlib>
#include <fstream>
#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"

#include "nlohmann/json.hpp"
#include "tests/test_support.h"

namespace cascade::text {
namespace {

using ::testing::HasSubstr;

// SmolLM2-Instruct's template: ChatML, with a default system message when the chat has none.
constexpr char kSmolLm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatFormatTest, TheModelsOwnTemplateRendersByDefault) {
  absl::StatusOr<ChatFormat> format = ResolveChatFormat("", kSmolLm2);
  ASSERT_OK(format.status());
  ASSERT_NE(format->jinja, nullptr);
  EXPECT_FALSE(format->harmony);
  EXPECT_EQ(format->Describe(), "model template (jinja)");
  // Without a system message the template's own default appears: the hard-coded ChatML
  // would have left it out.
  absl::StatusOr<std::string> text = RenderChat(*format, {{"user", "Hi"}}, true, {"<s>", "</s>"});
  ASSERT_OK(text.status());
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  text = RenderChat(*format, {{"system", "Be brief."}, {"user", "Hi"}}, false, {"<s>", "</s>"});
  ASSERT_OK(text.status());
  EXPECT_EQ(*text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatFormatTest, ANamedFormatOverridesTheModels) {
  absl::StatusOr<ChatFormat> format = ResolveChatFormat("chatml", kSmolLm2);
  ASSERT_OK(format.status());
  EXPECT_EQ(format->jinja, nullptr);
  EXPECT_EQ(format->Describe(), "chatml (built in)");
  absl::StatusOr<std::string> text = RenderChat(*format, {{"user", "Hi"}}, true, {});
  ASSERT_OK(text.status());
  EXPECT_EQ(*text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_STATUS_CODE(ResolveChatFormat("vicuna", kSmolLm2).status(), kInvalidArgument);
}

TEST(ChatFormatTest, SpecialTokensAndTemplateErrorsReachTheRender) {
  absl::StatusOr<ChatFormat> format = ResolveChatFormat(
      "",
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}"
      "{% endif %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}");
  ASSERT_OK(format.status());
  absl::StatusOr<std::string> text = RenderChat(*format, {{"user", "a"}, {"assistant", "b"}}, false, {"<B>", "<E>"});
  ASSERT_OK(text.status());
  EXPECT_EQ(*text, "<B>[user] a<E>[assistant] b<E>");
  text = RenderChat(*format, {{"tool", "x"}}, false, {"<B>", "<E>"});
  EXPECT_STATUS_CODE(text.status(), kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("no tools here"));
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("chat template"));
}

// chat_template_kwargs: extra variables, set after the others (as transformers does).
TEST(ChatFormatTest, TemplateKwargsAreVariablesOfTheTemplate) {
  absl::StatusOr<ChatFormat> format = ResolveChatFormat(
      "",
      "{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}{{ bos_token }}");
  ASSERT_OK(format.status());
  const std::vector<ChatMessage> chat = {{"user", "q"}};
  EXPECT_EQ(*RenderChat(*format, chat, true, {"<s>", ""}), "q<s>");
  EXPECT_EQ(*RenderChat(*format, chat, true, {"<s>", ""}, R"({"enable_thinking": false, "bos_token": "[B]"})"),
            "q<no-think>[B]");
  EXPECT_EQ(*RenderChat(*format, chat, true, {"<s>", ""}, R"({"enable_thinking": true})"), "q<s>");
  EXPECT_STATUS_CODE(RenderChat(*format, chat, true, {}, "[1, 2]").status(), kInvalidArgument);
  EXPECT_STATUS_CODE(RenderChat(*format, chat, true, {}, "{not json").status(), kInvalidArgument);
  absl::StatusOr<std::string> builtin =
      RenderChat(*ResolveChatFormat("chatml", ""), chat, true, {}, R"({"enable_thinking": false})");
  EXPECT_STATUS_CODE(builtin.status(), kInvalidArgument);
  EXPECT_THAT(std::string(builtin.status().message()), HasSubstr("chat_template_kwargs"));
}

TEST(ChatFormatTest, AnUnparsableTemplateFallsBackToTheFormatItIsRecognisedAs) {
  absl::StatusOr<ChatFormat> format = ResolveChatFormat("", "{% for m in messages %}<|im_start|>{{ m.role ");
  ASSERT_OK(format.status());
  EXPECT_EQ(format->jinja, nullptr);
  EXPECT_EQ(format->builtin, ChatTemplateKind::kChatMl);
  absl::StatusOr<ChatFormat> unknown = ResolveChatFormat("", "{% if %}");
  EXPECT_STATUS_CODE(unknown.status(), kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--chat-template"));
  absl::StatusOr<ChatFormat> none = ResolveChatFormat("", "");
  EXPECT_STATUS_CODE(none.status(), kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no chat template"));
}

TEST(ChatFormatTest, HarmonyTemplatesAnswerInHarmony) {
  absl::StatusOr<ChatFormat> format =
      ResolveChatFormat("",
                        "{{ '<|start|>system<|message|>hi<|end|>' }}{% if add_generation_prompt %}"
                        "{{ '<|start|>assistant' }}{% endif %}{# <|channel|>final #}");
  ASSERT_OK(format.status());
  EXPECT_TRUE(format->harmony);
  ASSERT_NE(format->jinja, nullptr);
  EXPECT_TRUE(ResolveChatFormat("harmony", "")->harmony);
}

// The default model's own template (from its GGUF) through the tokenizer: the special
// tokens of the render encode as single tokens.
TEST(ChatFormatTest, DefaultModelsTemplateEncodes) {
  CASCADE_REQUIRE_FILE(path, ::cascade::testing::DefaultModelPath());
  auto gguf = model::GgufFile::Open(path);
  ASSERT_OK(gguf.status());
  auto tok = model::TokenizerFromGguf(**gguf);
  ASSERT_OK(tok.status());
  absl::StatusOr<ChatFormat> format = ResolveChatFormat("", (*tok)->chat_template());
  ASSERT_OK(format.status());
  ASSERT_NE(format->jinja, nullptr);
  absl::StatusOr<std::string> text = RenderChat(*format, {{"user", "Hi"}}, true, SpecialTokensOf(**tok));
  ASSERT_OK(text.status());
  const std::vector<int32_t> ids = (*tok)->Encode(*text, /*add_special=*/false);
  EXPECT_EQ(ids.front(), 1);                            // <|im_start|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // <|im_end|> after the system and user turns.
  EXPECT_EQ((*tok)->Decode(ids), *text);
}

}  // namespace
}  // namespace cascade::text

namespace cascade::text {
namespace {

// A chat with tools goes to every real template as transformers hands it over: the
// goldens' "parallel_tool_calls" conversation (an assistant message with content None and
// two calls whose arguments are objects, two tool answers, the tools) rendered through
// RenderChat from ChatMessages (arguments as JSON text, as the API carries them) equals
// jinja2's rendering. Templates that print today's date are left out (RenderChat reads
// the clock; the goldens fix it).
TEST(ChatFormatTest, ToolConversationsRenderAsJinja2DoesOnRealTemplates) {
  const char* path = std::getenv("CASCADE_JINJA_GOLDENS");
  if (path == nullptr) GTEST_SKIP() << "CASCADE_JINJA_GOLDENS unset: run through ctest (fixture jinja_goldens)";
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const std::string dir = nlohmann::json::parse(line).at("templates_dir");
  int compared = 0;
  while (std::getline(in, line)) {
    const nlohmann::ordered_json record = nlohmann::ordered_json::parse(line);  // Keys in the golden's order.
    if (record.at("case") != "parallel_tool_calls" || !record.contains("output")) continue;
    std::ifstream f(dir + "/" + record.at("template").get<std::string>());
    const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (source.find("strftime_now") != std::string::npos || source.find("date_string") != std::string::npos) continue;
    absl::StatusOr<ChatFormat> format = ResolveChatFormat("", source);
    if (!format.ok() || format->jinja == nullptr) continue;
    const nlohmann::ordered_json& context = record.at("context");
    std::vector<ChatMessage> messages;
    for (const nlohmann::ordered_json& m : context.at("messages")) {
      ChatMessage msg{m.at("role"), m.at("content").is_null() ? "" : m.at("content").get<std::string>()};
      for (const nlohmann::ordered_json& c : m.value("tool_calls", nlohmann::ordered_json::array())) {
        msg.tool_calls.push_back({c.at("id"), c.at("function").at("name"), c.at("function").at("arguments").dump()});
      }
      msg.tool_call_id = m.value("tool_call_id", "");
      msg.name = m.value("name", "");
      messages.push_back(std::move(msg));
    }
    absl::StatusOr<std::string> text =
        RenderChat(*format, messages, context.at("add_generation_prompt"),
                   {context.at("bos_token"), context.at("eos_token")}, {}, context.at("tools").dump());
    if (!text.ok()) continue;  // The goldens hold jinja2's error too; the golden test compares those.
    EXPECT_EQ(*text, record.at("output").get<std::string>()) << record.at("template");
    ++compared;
  }
  EXPECT_GE(compared, 20) << "too few templates rendered the conversation to be a test";
}

}  // namespace
}  // namespace cascade::text
