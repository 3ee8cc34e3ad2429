#include "client/cli/prompt.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "text/chat_format.h"

namespace cascade::cli {

absl::StatusOr<std::string> RenderChat(const text::Tokenizer& tokenizer, const std::string& user,
                                       const std::string& system, const std::string& template_name) {
  CASCADE_ASSIGN_OR_RETURN(const text::ChatFormat format,
                           text::ResolveChatFormat(template_name, tokenizer.chat_template()));
  std::vector<text::ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", user});
  return text::RenderChat(format, messages, /*add_generation_prompt=*/true, text::SpecialTokensOf(tokenizer));
}

absl::StatusOr<text::OutputFormat> PromptOutputFormat(const Args& args, const text::Tokenizer& tokenizer) {
  if (!args.Has("chat")) return text::OutputFormat::kText;
  CASCADE_ASSIGN_OR_RETURN(const text::ChatFormat format,
                           text::ResolveChatFormat(args.GetOr("chat-template", ""), tokenizer.chat_template()));
  CASCADE_ASSIGN_OR_RETURN(
      const std::string rendered,
      RenderChat(tokenizer, *args.Get("chat"), args.GetOr("system", ""), args.GetOr("chat-template", "")));
  return text::OutputFormatOf(format, rendered);
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& csv) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(StrCat("--prompt-ids: '", std::string(part), "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids: no ids given");
  return ids;
}

absl::StatusOr<std::vector<int32_t>> PromptIds(const Args& args, const text::Tokenizer& tokenizer,
                                               const std::string& text_flag, bool add_special_text) {
  const int given = args.Has(text_flag) + args.Has("prompt-ids") + args.Has("chat");
  if (given != 1) {
    return absl::InvalidArgumentError(StrCat("give exactly one of --", text_flag, ", --prompt-ids, --chat"));
  }
  if (args.Has("prompt-ids")) {
    CASCADE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(*args.Get("prompt-ids")));
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.n_vocab()) {
        return absl::InvalidArgumentError(
            StrCat("--prompt-ids: id ", id, " is outside the vocabulary [0, ", tokenizer.n_vocab(), ")"));
      }
    }
    return ids;
  }
  if (args.Has("chat")) {
    CASCADE_ASSIGN_OR_RETURN(std::string text, RenderChat(tokenizer, *args.Get("chat"), args.GetOr("system", ""),
                                                          args.GetOr("chat-template", "")));
    // The template already holds any BOS the model wants.
    return tokenizer.Encode(text, /*add_special=*/false);
  }
  return tokenizer.Encode(*args.Get(text_flag), add_special_text);
}

}  // namespace cascade::cli
