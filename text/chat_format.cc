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
  if (jinja != nullptr) return harmony ? "model template (jinja, harmony output)" : "model template (jinja)";
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

absl::StatusOr<std::string> RenderChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, const ChatSpecialTokens& tokens,
                                       std::string_view template_kwargs_json) {
  if (format.jinja == nullptr) {
    if (!template_kwargs_json.empty()) {
      return absl::InvalidArgumentError(StrCat("chat_template_kwargs: the ", format.Describe(),
                                               " format takes no template variables (only the model's own template)"));
    }
    return ApplyChatTemplate(format.builtin, messages, add_generation_prompt);
  }
  std::vector<JinjaValue> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.Set("role", m.role);
    d.Set("content", m.content);
    list.push_back(JinjaValue::MakeDict(std::move(d)));
  }
  jinja::Dict context;
  context.Set("messages", JinjaValue::List(std::move(list)));
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
