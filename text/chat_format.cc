#include "text/chat_format.h"

#include <map>
#include <mutex>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::text {
namespace {

// Parsed templates by their text: a server renders every chat with its model's template,
// which is parsed once. Bounded: a process sees a handful of templates.
absl::StatusOr<std::shared_ptr<const JinjaTemplate>> ParsedTemplate(std::string_view source) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::shared_ptr<const JinjaTemplate>, std::less<>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(source); it != cache->end()) return it->second;
  CASCADE_ASSIGN_OR_RETURN(JinjaTemplate parsed, JinjaTemplate::Parse(source));
  auto shared = std::make_shared<const JinjaTemplate>(std::move(parsed));
  if (cache->size() >= 16) cache->clear();
  cache->emplace(std::string(source), shared);
  return shared;
}

}  // namespace

std::string ChatFormat::Describe() const {
  if (jinja != nullptr) {
    return harmony    ? "model template (jinja, harmony output)"
           : thinking ? "model template (jinja, <think> reasoning)"
                      : "model template (jinja)";
  }
  return StrCat(ChatTemplateName(builtin), " (built in)");
}

absl::StatusOr<ChatFormat> ResolveChatFormat(std::string_view name, std::string_view model_template) {
  ChatFormat format;
  if (!name.empty()) {
    CASCADE_ASSIGN_OR_RETURN(format.builtin, ChatTemplateFromName(name));
    format.harmony = format.builtin == ChatTemplateKind::kHarmony;
    return format;
  }
  absl::StatusOr<ChatTemplateKind> detected = DetectChatTemplate(model_template);
  if (model_template.empty()) return detected.status();  // Says to pass --chat-template.
  format.harmony = detected.ok() && *detected == ChatTemplateKind::kHarmony;
  absl::StatusOr<std::shared_ptr<const JinjaTemplate>> parsed = ParsedTemplate(model_template);
  if (parsed.ok()) {
    format.jinja = *std::move(parsed);
    format.thinking = !format.harmony && model_template.find("</think>") != std::string_view::npos;
    return format;
  }
  if (detected.ok()) {
    format.builtin = *detected;
    return format;
  }
  return absl::InvalidArgumentError(StrCat("the model's chat template does not parse (", parsed.status().message(),
                                           ") and is not one Cascade knows; pass --chat-template NAME (one of: "
                                           "chatml, llama2, llama3, harmony)"));
}

ChatSpecialTokens SpecialTokensOf(const Tokenizer& tokenizer) {
  ChatSpecialTokens tokens;
  if (tokenizer.bos_id() >= 0) tokens.bos = tokenizer.TokenText(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0) tokens.eos = tokenizer.TokenText(tokenizer.eos_id());
  return tokens;
}

namespace {

// A message as transformers hands it to a template: role and content, an assistant's
// tool_calls as {id, type, function: {name, arguments}} with the arguments as an object
// (templates print them with `tojson`; a string that is not JSON stays a string), and a
// tool message's tool_call_id and name. An assistant message that only calls tools has
// content None, as OpenAI clients send it.
JinjaValue MessageValue(const ChatMessage& m) {
  jinja::Dict d;
  d.Set("role", m.role);
  d.Set("content", m.content.empty() && !m.tool_calls.empty() ? JinjaValue::None() : JinjaValue(m.content));
  if (!m.tool_calls.empty()) {
    std::vector<JinjaValue> calls;
    for (const ChatToolCall& c : m.tool_calls) {
      absl::StatusOr<JinjaValue> args = jinja::ValueFromJson(c.arguments);
      jinja::Dict function;
      function.Set("name", c.name);
      function.Set("arguments", args.ok() ? *args : JinjaValue(c.arguments));
      jinja::Dict call;
      call.Set("id", c.id);
      call.Set("type", "function");
      call.Set("function", JinjaValue::MakeDict(std::move(function)));
      calls.push_back(JinjaValue::MakeDict(std::move(call)));
    }
    d.Set("tool_calls", JinjaValue::List(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.Set("tool_call_id", m.tool_call_id);
  if (!m.name.empty()) d.Set("name", m.name);
  return JinjaValue::MakeDict(std::move(d));
}

bool UsesTools(const std::vector<ChatMessage>& messages) {
  return std::any_of(messages.begin(), messages.end(),
                     [](const ChatMessage& m) { return m.role == "tool" || !m.tool_calls.empty(); });
}

}  // namespace

absl::StatusOr<std::string> RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, const ChatSpecialTokens& tokens,
                                       std::string_view template_kwargs_json, std::string_view tools_json) {
  if (format.jinja == nullptr) {
    if (!template_kwargs_json.empty()) {
      return absl::InvalidArgumentError(StrCat("chat_template_kwargs: the ", format.Describe(),
                                               " format takes no template variables (only the model's own template)"));
    }
    if (!tools_json.empty() || UsesTools(messages)) {
      return absl::InvalidArgumentError(StrCat("tools: the ", format.Describe(),
                                               " format has no syntax for tools (only a model's own template does)"));
    }
    return ApplyChatTemplate(format.builtin, messages, add_generation_prompt);
  }
  std::vector<JinjaValue> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) list.push_back(MessageValue(m));
  jinja::Dict context;
  context.Set("messages", JinjaValue::List(std::move(list)));
  if (!tools_json.empty()) {
    absl::StatusOr<JinjaValue> tools = jinja::ValueFromJson(tools_json);
    if (!tools.ok() || !tools->is_list()) return absl::InvalidArgumentError("tools: expected a JSON array");
    context.Set("tools", *tools);
  }
  context.Set("add_generation_prompt", add_generation_prompt);
  context.Set("bos_token", tokens.bos);
  context.Set("eos_token", tokens.eos);
  if (!template_kwargs_json.empty()) {
    absl::StatusOr<JinjaValue> kwargs = jinja::ValueFromJson(template_kwargs_json);
    if (!kwargs.ok() || !kwargs->is_dict()) {
      return absl::InvalidArgumentError(StrCat("chat_template_kwargs: expected a JSON object",
                                               kwargs.ok() ? "" : StrCat(" (", kwargs.status().message(), ")")));
    }
    for (const auto& [key, value] : kwargs->dict().entries) context.Set(key, value);
  }
  absl::StatusOr<std::string> text = format.jinja->Render(JinjaValue::MakeDict(std::move(context)));
  if (!text.ok()) return Annotate(text.status(), "the model's chat template");
  return text;
}

}  // namespace cascade::text
