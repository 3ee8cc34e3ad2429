#include "coordinator/front/request_validation.h"

#include <algorithm>
#include <limits>

#include "core/status.h"
#include "core/str_cat.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "nlohmann/json.hpp"
#include "text/chat_format.h"
#include "text/output_filter.h"
#include "wire/api_wire.h"

namespace cascade::coordinator {

absl::StatusOr<std::vector<int32_t>> TokenizePrompt(const v1::Prompt& prompt, const text::Tokenizer& tokenizer,
                                                    int64_t n_vocab, bool add_special,
                                                    text::OutputFormat* output_format) {
  if (output_format != nullptr) *output_format = text::OutputFormat::kText;
  switch (prompt.kind_case()) {
    case v1::Prompt::kText: return tokenizer.Encode(prompt.text(), add_special);
    case v1::Prompt::kIds: {
      std::vector<int32_t> ids(prompt.ids().ids().begin(), prompt.ids().ids().end());
      for (int32_t id : ids) {
        if (id < 0 || id >= n_vocab) {
          return absl::InvalidArgumentError(
              StrCat("prompt.ids: id ", id, " is outside the vocabulary [0, ", n_vocab, ")"));
        }
      }
      return ids;
    }
    case v1::Prompt::kChat: {
      const v1::ChatMessages& chat = prompt.chat();
      if (chat.messages().empty()) return absl::InvalidArgumentError("prompt.chat: no messages");
      CASCADE_ASSIGN_OR_RETURN(const text::ChatFormat format,
                               text::ResolveChatFormat(chat.chat_template(), tokenizer.chat_template()));
      std::vector<text::ChatMessage> msgs;
      for (const auto& m : chat.messages()) {
        text::ChatMessage msg{m.role(), m.content()};
        for (const v1::ToolCall& c : m.tool_calls()) msg.tool_calls.push_back({c.id(), c.name(), c.arguments()});
        msg.tool_call_id = m.tool_call_id();
        msg.name = m.name();
        msgs.push_back(std::move(msg));
      }
      CASCADE_ASSIGN_OR_RETURN(const std::string rendered,
                               text::RenderChat(format, msgs, true, text::SpecialTokensOf(tokenizer),
                                                chat.template_kwargs_json(), chat.tools_json()));
      // A chat in the harmony format is answered in it, a thinking model's with its
      // <think> block: reasoning apart from the content.
      if (output_format != nullptr) *output_format = text::OutputFormatOf(format, rendered);
      // The template holds any BOS the model wants (transformers encodes it so).
      return tokenizer.Encode(rendered, false);
    }
    case v1::Prompt::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError("prompt: give text, ids or chat");
}

namespace {

// A grammar whose very start keeps too many parses open is refused here, with a 400,
// rather than failing its request at the first step (grammar::Matcher::kMaxStacks).
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> Followable(std::string_view field,
                                                                   std::shared_ptr<const grammar::Grammar> g) {
  if (grammar::Matcher(g).overflowed()) {
    return absl::InvalidArgumentError(StrCat("constraint.", field, ": the grammar keeps more than ",
                                             grammar::Matcher::kMaxStacks,
                                             " parses open at once (nested optional repetitions?)"));
  }
  return g;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(const v1::OutputConstraint& c) {
  const auto named = [](std::string_view field, absl::Status st) {
    return absl::InvalidArgumentError(StrCat("constraint.", field, ": ", st.message()));
  };
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g;
  switch (c.kind_case()) {
    case v1::OutputConstraint::kJsonObject:
      if (!c.json_object())
        return absl::InvalidArgumentError("constraint.json_object: set it to true, or leave it out");
      return grammar::ParseGbnf(grammar::JsonObjectGbnf());
    case v1::OutputConstraint::kJsonSchema: {
      // Ordered: the properties are generated in the order the schema declares them.
      const nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(c.json_schema(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) return absl::InvalidArgumentError("constraint.json_schema: not valid JSON");
      absl::StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(schema);
      if (!gbnf.ok()) return named("json_schema", gbnf.status());
      g = grammar::ParseGbnf(*gbnf);
      if (!g.ok())
        return absl::InternalError(StrCat("the grammar of a JSON schema does not compile: ", g.status().message()));
      return g;
    }
    case v1::OutputConstraint::kGrammar:
      g = grammar::ParseGbnf(c.grammar());
      if (!g.ok()) return named("grammar", g.status());
      return Followable("grammar", *std::move(g));
    case v1::OutputConstraint::kRegex: {
      absl::StatusOr<std::string> gbnf = grammar::RegexToGbnf(c.regex());
      if (!gbnf.ok()) return named("regex", gbnf.status());
      g = grammar::ParseGbnf(*gbnf);
      if (!g.ok()) return named("regex", g.status());
      return Followable("regex", *std::move(g));
    }
    case v1::OutputConstraint::KIND_NOT_SET: break;
  }
  return std::shared_ptr<const grammar::Grammar>();
}

absl::StatusOr<ServingRequest> ValidateGenerateRequest(const v1::GenerateRequest& req, const text::Tokenizer& tokenizer,
                                                       int64_t n_vocab, int64_t max_context) {
  ServingRequest r;
  r.request_id = req.request_id();
  CASCADE_ASSIGN_OR_RETURN(r.prompt,
                           TokenizePrompt(req.prompt(), tokenizer, n_vocab, /*add_special=*/true, &r.output_format));
  if (r.prompt.empty()) return absl::InvalidArgumentError("prompt: empty (no tokens)");
  r.sampling = wire::FromApiSampling(req.sampling(), req.logprobs());
  if (absl::Status st = r.sampling.Validate(); !st.ok()) return Annotate(st, "sampling");
  if (req.has_max_tokens()) r.max_tokens = req.max_tokens();
  if (r.max_tokens < 1) return absl::InvalidArgumentError(StrCat("max_tokens = ", r.max_tokens, ": must be >= 1"));
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n >= max_context) {
    return absl::InvalidArgumentError(
        StrCat("prompt: ", n, " tokens, the context holds ", max_context, " (leave room for at least one new token)"));
  }
  // An explicit length the context cannot hold is refused rather than cut short silently.
  if (req.has_max_tokens() && r.max_tokens != std::numeric_limits<int32_t>::max() && n + r.max_tokens > max_context) {
    return absl::InvalidArgumentError(StrCat(
        "max_tokens: the prompt's ", n, " tokens + max_tokens ", r.max_tokens, " exceed the context of ", max_context,
        " positions (the model's, or what the KV pool holds for one sequence; "
        "scheduler.kv_policy: sink_window serves longer generations in bounded memory)"));
  }
  r.max_tokens = static_cast<int32_t>(std::min<int64_t>(r.max_tokens, max_context - n));
  r.stops.ignore_eos = req.ignore_eos();
  r.stops.stop_strings.assign(req.stop().begin(), req.stop().end());
  r.stops.stop_ids.assign(req.stop_ids().begin(), req.stop_ids().end());
  if (req.has_constraint()) {
    CASCADE_ASSIGN_OR_RETURN(r.grammar, CompileConstraint(req.constraint()));
    if (r.grammar != nullptr && r.output_format == text::OutputFormat::kHarmony) {
      return absl::InvalidArgumentError(
          "constraint: a harmony chat answers in channels, and a constraint on its whole output is not supported");
    }
    if (r.grammar != nullptr && r.output_format == text::OutputFormat::kThinkingOpened) {
      return absl::InvalidArgumentError(
          "constraint: the chat's prompt opens a <think> block, and a constraint on the reasoning is not supported "
          "(a template variable such as enable_thinking may turn thinking off)");
    }
    if (r.grammar != nullptr && r.stops.ignore_eos && r.stops.stop_ids.empty()) {
      return absl::InvalidArgumentError(
          "constraint: with ignore_eos and no stop_ids a finished grammar has no token left");
    }
  }
  if (req.has_speculative()) {
    const v1::SpeculativeParams& sp = req.speculative();
    r.speculate = !sp.has_enabled() || sp.enabled();
    if (sp.has_num_tokens()) {
      if (sp.num_tokens() < 1 || sp.num_tokens() > 16) {
        return absl::InvalidArgumentError(StrCat("speculative.num_tokens = ", sp.num_tokens(), ": must be in [1, 16]"));
      }
      r.num_tokens = sp.num_tokens();
    }
  }
  return r;
}

}  // namespace cascade::coordinator
