// Turns the prompt options shared by `cascade tokenize`, `run` and `generate`
// (--prompt / --text, --prompt-ids, --chat with --system and --chat-template) into ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/args.h"
#include "text/output_filter.h"
#include "text/tokenizer.h"

namespace cascade::cli {

// The chat prompt for a single user message (and optional system message), rendered
// with the model's template or `template_name` when given.
absl::StatusOr<std::string> RenderChat(const text::Tokenizer& tokenizer, const std::string& user,
                                       const std::string& system, const std::string& template_name);

// How the answer to the prompt options is shown: a --chat rendered in the harmony format
// is answered in it (reasoning apart from the content); everything else is plain text.
absl::StatusOr<text::OutputFormat> PromptOutputFormat(const Args& args, const text::Tokenizer& tokenizer);

// Parses "1,2,3" into ids. InvalidArgument for anything else.
absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& csv);

// The prompt ids from exactly one of `text_flag` (e.g. "prompt" or "text"), "prompt-ids",
// "chat". Plain text gets BOS when the model asks for it (`add_special_text`); chat
// templates carry their own special tokens.
absl::StatusOr<std::vector<int32_t>> PromptIds(const Args& args, const text::Tokenizer& tokenizer,
                                               const std::string& text_flag, bool add_special_text);

}  // namespace cascade::cli
