// How a chat becomes prompt text: the model's own Jinja template (GGUF
// `tokenizer.chat_template`, Hugging Face `chat_template` / `chat_template.jinja`), rendered
// by the Jinja interpreter (jinja_template.h) as transformers renders it, or one of the
// hard-coded formats of chat_template.h when a name is given (`--chat-template NAME`, the
// request's `chat_template`) or the model's template does not parse.
// Thread safety: a ChatFormat is immutable after ResolveChatFormat; RenderChat may run on
// many threads at once. Parsed templates are cached by their text (a few per process).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "text/chat_template.h"
#include "text/jinja_template.h"
#include "text/tokenizer.h"

namespace cascade::text {

struct ChatFormat {
  std::shared_ptr<const JinjaTemplate> jinja;            // The model's template, or
  ChatTemplateKind builtin = ChatTemplateKind::kChatMl;  // the hard-coded format when jinja is null.
  // The model answers in harmony's channels (gpt-oss): its output is split into reasoning
  // and content (output_filter.h).
  bool harmony = false;
  // The model thinks between <think> and </think> before answering (its template shows
  // `</think>`): that text is reasoning, apart from the content (text/think_parser.h).
  bool thinking = false;

  // What the log and `cascade info` show: "model template (jinja)" or "chatml (named)".
  std::string Describe() const;
};

// The format of a chat: the hard-coded one `name` names when given; else the model's own
// template `model_template` as Jinja; else, when it does not parse, the hard-coded format it
// is recognised as (DetectChatTemplate). InvalidArgument naming the choices otherwise.
absl::StatusOr<ChatFormat> ResolveChatFormat(std::string_view name, std::string_view model_template);

// The special tokens' text a template may print (`bos_token`, `eos_token`).
struct ChatSpecialTokens {
  std::string bos;
  std::string eos;
};
// The tokenizer's BOS and EOS text (empty where it has none).
ChatSpecialTokens SpecialTokensOf(const Tokenizer& tokenizer);

// `messages` as prompt text, ending with the opening of an assistant turn when
// `add_generation_prompt`. A Jinja template prints any BOS itself (as transformers
// renders it, encode the text without adding special tokens); errors from the template
// (raise_exception, a type error) come back as InvalidArgument naming its line.
// `template_kwargs_json`: a JSON object of extra variables for a Jinja template
// (`chat_template_kwargs`, e.g. {"enable_thinking": false}), set after the others as
// transformers does; InvalidArgument for anything but an object, or with a built-in format,
// which has no variables.
// `tools_json`: a JSON array of tool definitions, the template's `tools` (only Jinja
// templates take tools, and tool messages or calls).
absl::StatusOr<std::string> RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, const ChatSpecialTokens& tokens,
                                       std::string_view template_kwargs_json = {}, std::string_view tools_json = {});

}  // namespace cascade::text
