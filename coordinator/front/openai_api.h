// The OpenAI-compatible API's translation layer, with no I/O: JSON request bodies of
// `/v1/completions` and `/v1/chat/completions` become the `GenerateRequest`s the gRPC API
// serves, and `GenerateResponse`s become OpenAI's JSON, whole or as stream chunks. Field
// names, defaults and shapes follow OpenAI's API reference (as vLLM and llama-server do),
// so the `openai` SDKs and the tools built on them work unchanged. The HTTP side
// (routing, SSE, status codes) is coordinator/front/http_front.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/front/openai_tools.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

namespace cascade::coordinator {

enum class OpenAiEndpoint { kCompletions, kChat };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  v1::GenerateRequest request;  // What the serving loop runs.
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage.
  // Logprobs: completions' `logprobs: n` or chat's `logprobs: true` with `top_logprobs: n`.
  bool logprobs = false;
  int top_logprobs = 0;
  // Choices: `n` sequences from one prompt. Choice i samples with seed + i; the serving
  // side computes the prompt once (choices 1.. start after choice 0's prompt is cached).
  int n = 1;
  // Tool calling: the request's tools and tool_choice, and the syntax the model writes
  // calls in (its template's, text/tool_calls.h), read back into tool_calls.
  OpenAiTools tools;
  text::ToolCallFormat tool_format = text::ToolCallFormat::kNone;
};

// Parses and validates a request body. Errors name the field as OpenAI's `param`
// ("field: why"): InvalidArgument for bad JSON, types, ranges and unsupported options;
// NotFound when `model` is not `model_id` (the one served). `tool_format`: the syntax the
// served model writes function calls in (a required tool_choice forces it).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                                 std::string_view model_id,
                                                 text::ToolCallFormat tool_format = text::ToolCallFormat::kNone);

// OpenAI's error object for a failed status, and the HTTP status that carries it.
struct OpenAiError {
  int http_status = 500;
  nlohmann::json body;  // {"error": {"message", "type", "param", "code"}}
};
OpenAiError ToOpenAiError(const absl::Status& status);

// JSON as the API sends it: compact, invalid UTF-8 (a token's partial character in
// logprobs) replaced rather than thrown on.
std::string DumpJson(const nlohmann::json& j);

// The request of choice `index` of `request`: its seed moved on by the index, so that
// sampled choices differ (greedy ones are equal).
v1::GenerateRequest ChoiceRequest(const OpenAiRequest& request, int index);

// Turns one request's output messages (of each of its `n` choices) into OpenAI's responses.
class OpenAiResponder {
 public:
  OpenAiResponder(const OpenAiRequest& request, const text::Tokenizer& tokenizer, std::string model_id);

  // Streaming: the SSE chunks (each a JSON object) for one output message of choice
  // `index`, in order.
  std::vector<nlohmann::json> Chunks(const v1::GenerateResponse& m, int index = 0);
  // Streaming with include_usage: the last chunk (no choices, the usage). Call after the last message.
  nlohmann::json UsageChunk() const;
  // Whole response: feed every message with Add, then Whole.
  void Add(const v1::GenerateResponse& m, int index = 0);
  nlohmann::json Whole() const;

 private:
  struct Choice {
    bool sent_role = false;   // Chat streams open with the assistant role.
    std::string text;         // Whole: all text so far.
    std::string reasoning;    // Whole: all reasoning so far (harmony's analysis channel).
    nlohmann::json logprobs;  // Whole: merged logprobs.
    int64_t text_offset = 0;  // Completions' logprobs.text_offset.
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    v1::Usage usage;
    std::optional<ToolCallReader> reader;  // With tools: calls read out of the text.
  };
  // The finish_reason of a choice that ended with `finish`: "tool_calls" once it called.
  static std::string FinishOf(const Choice& c, v1::FinishReason finish);
  nlohmann::json Envelope(std::string_view object) const;
  nlohmann::json Logprobs(const v1::GenerateResponse& m, Choice& c);  // Of one message's tokens.
  // The prompt counted once (and its cached tokens, choice 0's), the completions summed.
  nlohmann::json UsageJson() const;
  std::string TokenString(int32_t id) const;

  OpenAiRequest request_;
  const text::Tokenizer& tokenizer_;
  std::string model_id_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
};

}  // namespace cascade::coordinator
