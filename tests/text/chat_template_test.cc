// Chat templates, table-driven over one shared conversation (as llama.cpp's
// tests/test-chat-template.cpp). Expected strings are written by hand from each format's
// reference Jinja template (quoted in model/chat_template.cc), with the leading BOS left
// to the tokenizer. To add a format: add its kind, a template snippet that identifies
// it, and its expected rendering to `kCases`.
#include "text/chat_template.h"

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>

#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"
#include "tests/test_support.h"
#include "text/tokenizer.h"

namespace cascade::text {
namespace {

using ::testing::HasSubstr;

const std::vector<ChatMessage>& Conversation() {
  static const auto* c = new std::vector<ChatMessage>{
      {"system", "You are a helpful assistant."},
      {"user", "Hello"},
      {"assistant", "Hi there"},
      {"user", "Who are you"},
  };
  return *c;
}

struct Case {
  const char* name;
  ChatTemplateKind kind;
  const char* jinja_snippet;  // Enough of the model's template to recognise it.
  const char* expected;       // With add_generation_prompt.
};

const Case kCases[] = {
    {"chatml", ChatTemplateKind::kChatMl,
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\nHi there<|im_end|>\n"
     "<|im_start|>user\nWho are you<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"llama2", ChatTemplateKind::kLlama2,
     "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' "
     "}}{% endif %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' %}",
     "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello [/INST] Hi there </s>"
     "<s>[INST] Who are you [/INST]"},
    {"llama3", ChatTemplateKind::kLlama3,
     "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
     "message['content'] | trim + '<|eot_id|>' %}",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
};

TEST(ChatTemplateTest, RendersSharedConversation) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto detected = DetectChatTemplate(c.jinja_snippet);
    ASSERT_TRUE(detected.ok()) << detected.status();
    EXPECT_EQ(*detected, c.kind);
    auto named = ChatTemplateFromName(c.name);
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_EQ(*named, c.kind);
    EXPECT_EQ(ChatTemplateName(c.kind), c.name);
    EXPECT_EQ(ApplyChatTemplate(c.kind, Conversation(), /*add_generation_prompt=*/true), c.expected);
  }
}

TEST(ChatTemplateTest, WithoutGenerationPromptOrSystem) {
  const std::vector<ChatMessage> user_only = {{"user", "  Hello  "}};
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatMl, user_only, false), "<|im_start|>user\n  Hello  <|im_end|>\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama2, user_only, false), "[INST] Hello [/INST]");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama3, user_only, false),
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
}

// gpt-oss's harmony format, written by hand from openai-gpt-oss-120b.jinja (quoted in
// text/chat_template.cc) with its defaults: the system block carries today's UTC date
// (the template's strftime_now), the system prompt becomes the developer message, earlier
// assistant turns are final-channel messages; the last assistant turn without a generation
// prompt ends in <|return|>. (Python's jinja2 3.1.6 renders the template itself to exactly
// these strings, strftime_now giving the same date.) The template's own text is recognised.
TEST(ChatTemplateTest, HarmonyAsGptOssRendersIt) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  const std::string system =
      std::string(
          "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
          "Knowledge cutoff: 2024-06\nCurrent date: ") +
      date +
      "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>";
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kHarmony, Conversation(), true),
            system +
                "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant.\n\n<|end|>"
                "<|start|>user<|message|>Hello<|end|><|start|>assistant<|channel|>final<|message|>Hi there<|end|>"
                "<|start|>user<|message|>Who are you<|end|><|start|>assistant");
  const std::vector<ChatMessage> answered = {{"user", "Hi"}, {"assistant", "Hello."}};
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kHarmony, answered, false),
            system + "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|return|>");
  auto detected = DetectChatTemplate(
      "{{- \"<|start|>system<|message|>\" }} ... {{- \"<|start|>assistant<|channel|>final<|message|>\" }}");
  ASSERT_TRUE(detected.ok()) << detected.status();
  EXPECT_EQ(*detected, ChatTemplateKind::kHarmony);
  EXPECT_EQ(ChatTemplateName(ChatTemplateKind::kHarmony), "harmony");
  EXPECT_EQ(*ChatTemplateFromName("harmony"), ChatTemplateKind::kHarmony);
}

TEST(ChatTemplateTest, UnknownTemplatesSayWhatToPass) {
  for (const char* jinja : {"", "{{ messages }}", "[INST] {{ m }} [/INST]"}) {
    auto s = DetectChatTemplate(jinja);
    EXPECT_STATUS_CODE(s, kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("--chat-template NAME"));
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("chatml, llama2, llama3"));
  }
  auto s = ChatTemplateFromName("vicuna");
  EXPECT_STATUS_CODE(s, kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("chatml, llama2, llama3"));
}

TEST(ChatTemplateTest, DetectsDefaultModelsTemplateAndEncodesIt) {
  CASCADE_REQUIRE_FILE(path, ::cascade::testing::DefaultModelPath());
  auto gguf = model::GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = model::TokenizerFromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto kind = DetectChatTemplate((*tok)->chat_template());
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, ChatTemplateKind::kChatMl);
  const std::string prompt = ApplyChatTemplate(*kind, {{"user", "Hi"}}, true);
  const std::vector<int32_t> ids = (*tok)->Encode(prompt, /*add_special=*/true);
  // <|im_start|>=1 and <|im_end|>=2 are single tokens; the prompt decodes back.
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ((*tok)->Decode(ids), prompt);
}

}  // namespace
}  // namespace cascade::text
