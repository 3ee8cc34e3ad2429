// Chat template detection and rendering; see chat_template.h. The renderings follow
// these reference Jinja templates (as llama.cpp's src/llama-chat.cpp does):
//
// ChatML (e.g. Qwen2/SmolLM2 tokenizer_config.json, minus their default system prompt):
//   {% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' +
//   message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
//   {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
//
// Llama 2 (meta-llama/Llama-2-7b-chat-hf):
//   system folded into the first user turn as '<<SYS>>\n' + system + '\n<</SYS>>\n\n';
//   user:      bos_token + '[INST] ' + content.strip() + ' [/INST]'
//   assistant: ' ' + content.strip() + ' ' + eos_token
//
// Llama 3 (meta-llama/Meta-Llama-3-8B-Instruct):
//   bos_token, then per message '<|start_header_id|>' + role + '<|end_header_id|>\n\n' +
//   content | trim + '<|eot_id|>'; generation prompt
//   '<|start_header_id|>assistant<|end_header_id|>\n\n'.
//
// Harmony (openai/gpt-oss-20b and -120b; llama.cpp's models/templates/openai-gpt-oss-120b.jinja),
// without tools:
//   '<|start|>system<|message|>' + model_identity + '\nKnowledge cutoff: 2024-06\nCurrent date: '
//   + strftime_now('%Y-%m-%d') + '\n\nReasoning: ' + reasoning_effort + '\n\n# Valid channels:
//   analysis, commentary, final. Channel must be included for every message.<|end|>', with
//   the template's defaults "You are ChatGPT, a large language model trained by OpenAI." and
//   "medium"; a first system or developer message as '<|start|>developer<|message|>#
//   Instructions\n\n' + content + '\n\n<|end|>'; user turns '<|start|>user<|message|>' +
//   content + '<|end|>'; earlier assistant turns '<|start|>assistant<|channel|>final<|message|>'
//   + content + '<|end|>' (their reasoning dropped), a last one (no generation prompt) ending
//   '<|return|>'; other roles render nothing; the generation prompt '<|start|>assistant'.
//
// In all of them the very first BOS is left to the tokenizer (see the header).
#include "text/chat_template.h"

#include <ctime>

#include "core/str_cat.h"

namespace cascade::text {
namespace {

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Python's str.strip() / Jinja's trim for ASCII whitespace.
std::string_view Strip(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
}

constexpr std::string_view kNames = "chatml, llama2, llama3, harmony";

std::string RenderChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    cascade::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string RenderLlama2(const std::vector<ChatMessage>& messages) {
  std::string out;
  std::string system;
  size_t begin = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = std::string(Strip(messages[0].content));
    begin = 1;
  }
  bool first = true;
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string_view content = Strip(m.content);
    if (m.role == "assistant") {
      cascade::StrAppend(&out, " ", content, " </s>");
      continue;
    }
    // A user turn (any other role is treated as the user's).
    if (!first) out += "<s>";
    out += "[INST] ";
    if (first && begin == 1) cascade::StrAppend(&out, "<<SYS>>\n", system, "\n<</SYS>>\n\n");
    cascade::StrAppend(&out, content, " [/INST]");
    first = false;
  }
  return out;
}

std::string RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    cascade::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Strip(m.content), "<|eot_id|>");
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Today in UTC as strftime_now("%Y-%m-%d") gives it.
std::string TodayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

std::string RenderHarmony(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = cascade::StrCat(
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
      "2024-06\nCurrent date: ",
      TodayUtc(),
      "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>");
  size_t begin = 0;
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    if (!messages[0].content.empty()) {
      cascade::StrAppend(&out, "<|start|>developer<|message|># Instructions\n\n", messages[0].content, "\n\n<|end|>");
    }
    begin = 1;
  }
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      cascade::StrAppend(&out, "<|start|>user<|message|>", m.content, "<|end|>");
    } else if (m.role == "assistant") {
      const bool last = i + 1 == messages.size() && !add_generation_prompt;
      cascade::StrAppend(&out, "<|start|>assistant<|channel|>final<|message|>", m.content,
                         last ? "<|return|>" : "<|end|>");
    }
  }
  if (add_generation_prompt) out += "<|start|>assistant";
  return out;
}

}  // namespace

absl::StatusOr<ChatTemplateKind> DetectChatTemplate(std::string_view jinja) {
  if (Contains(jinja, "<|channel|>") && Contains(jinja, "<|start|>")) return ChatTemplateKind::kHarmony;
  if (Contains(jinja, "<|im_start|>")) return ChatTemplateKind::kChatMl;
  if (Contains(jinja, "<|start_header_id|>") && Contains(jinja, "<|end_header_id|>")) {
    return ChatTemplateKind::kLlama3;
  }
  if (Contains(jinja, "[INST]") && Contains(jinja, "<<SYS>>")) {
    return ChatTemplateKind::kLlama2;
  }
  if (jinja.empty()) {
    return absl::InvalidArgumentError(
        cascade::StrCat("the model has no chat template; pass --chat-template NAME (one of: ", kNames, ")"));
  }
  return absl::InvalidArgumentError(
      cascade::StrCat("the model's chat template is not one Cascade recognises; pass "
                      "--chat-template NAME (one of: ",
                      kNames, ")"));
}

absl::StatusOr<ChatTemplateKind> ChatTemplateFromName(std::string_view name) {
  if (name == "chatml") return ChatTemplateKind::kChatMl;
  if (name == "llama2") return ChatTemplateKind::kLlama2;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "harmony") return ChatTemplateKind::kHarmony;
  return absl::InvalidArgumentError(cascade::StrCat("unknown chat template '", name, "' (one of: ", kNames, ")"));
}

std::string_view ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatMl: return "chatml";
    case ChatTemplateKind::kLlama2: return "llama2";
    case ChatTemplateKind::kLlama3: return "llama3";
    case ChatTemplateKind::kHarmony: return "harmony";
  }
  return "?";
}

std::string ApplyChatTemplate(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) {
  switch (kind) {
    case ChatTemplateKind::kChatMl: return RenderChatMl(messages, add_generation_prompt);
    case ChatTemplateKind::kLlama2: return RenderLlama2(messages);
    case ChatTemplateKind::kLlama3: return RenderLlama3(messages, add_generation_prompt);
    case ChatTemplateKind::kHarmony: return RenderHarmony(messages, add_generation_prompt);
  }
  return "";
}

}  // namespace cascade::text
