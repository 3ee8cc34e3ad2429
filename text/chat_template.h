// The built-in chat formats: a few well-known formats rendered by hand-written code that
// follows each format's reference template (quoted in chat_template.cc), and the
// recognition of a model's Jinja template as one of them by its distinctive markers. A chat
// normally renders with the model's own Jinja template (chat_format.h); these are what
// `--chat-template NAME` selects, and the fallback for a template that does not parse.
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::text {

enum class ChatTemplateKind {
  kChatMl,  // "chatml": <|im_start|>role\ncontent<|im_end|>\n (Qwen, SmolLM, ...).
  kLlama2,  // "llama2": [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s>
  kLlama3,  // "llama3": <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  // "harmony" (gpt-oss): <|start|>role<|message|>content<|end|>, after a system message
  // naming the date and the channels; the system prompt becomes the developer message.
  kHarmony,
};

// A function call of an assistant message: `arguments` is JSON text.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool".
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // An assistant's calls (Jinja templates only).
  std::string tool_call_id = {};              // A tool message: the call it answers.
  std::string name = {};                      // A tool message: the function's name.
};

// Recognises the format of a model's Jinja template. InvalidArgument for an empty or
// unrecognised template; the message tells the user to pass `--chat-template NAME`.
absl::StatusOr<ChatTemplateKind> DetectChatTemplate(std::string_view jinja);

// The kind for a name ("chatml", "llama2", "llama3"); InvalidArgument listing the names
// otherwise.
absl::StatusOr<ChatTemplateKind> ChatTemplateFromName(std::string_view name);
std::string_view ChatTemplateName(ChatTemplateKind kind);

// Renders `messages` in format `kind`. With `add_generation_prompt` the text ends with
// the opening of an assistant turn (Llama 2 has none: its user turn already ends with
// "[/INST]"). The leading BOS some formats start with is NOT included: encode the result
// with `Tokenizer::Encode(text, /*add_special=*/true)`, which adds it. Later special
// tokens in the text ("<|im_start|>", "<s>", ...) encode as single tokens.
std::string ApplyChatTemplate(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt);

}  // namespace cascade::text
