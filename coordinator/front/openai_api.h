// The OpenAI-compatible API's translation layer, with no I/O: JSON request bodies of
// `/v1/completions` and `/v1/chat/completions` become the `GenerateRequest`s the gRPC API
// serves, and `GenerateResponse`s become OpenAI's JSON, whole or as stream chunks. Field
// names, defaults and shapes follow OpenAI's API reference (as vLLM and llama-server do),
// so the `openai` SDKs and the tools built on them work unchanged. The HTTP side
// (routing, SSE, status codes) is coordinator/front/http_front.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
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
};

// Parses and validates a request body. Errors name the field as OpenAI's `param`
// ("field: why"): InvalidArgument for bad JSON, types, ranges and unsupported options;
// NotFound when `model` is not `model_id` (the one served).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                                 std::string_view model_id);

// OpenAI's error object for a failed status, and the HTTP status that carries it.
struct OpenAiError {
  int http_status = 500;
  nlohmann::json body;  // {"error": {"message", "type", "param", "code"}}
};
OpenAiError ToOpenAiError(const absl::Status& status);

// JSON as the API sends it: compact, invalid UTF-8 (a token's partial character in
// logprobs) replaced rather than thrown on.
std::string DumpJson(const nlohmann::json& j);

// Turns one request's output messages into OpenAI's responses.
class OpenAiResponder {
 public:
  OpenAiResponder(const OpenAiRequest& request, const text::Tokenizer& tokenizer, std::string model_id);

  // Streaming: the SSE chunks (each a JSON object) for one output message, in order.
  std::vector<nlohmann::json> Chunks(const v1::GenerateResponse& m);
  // Streaming with include_usage: the last chunk (no choices, the usage). Call after the last message.
  nlohmann::json UsageChunk() const;
  // Whole response: feed every message with Add, then Whole.
  void Add(const v1::GenerateResponse& m);
  nlohmann::json Whole() const;

 private:
  nlohmann::json Envelope(std::string_view object) const;
  nlohmann::json Logprobs(const v1::GenerateResponse& m);  // Of one message's tokens.
  nlohmann::json UsageJson() const;
  std::string TokenString(int32_t id) const;

  OpenAiRequest request_;
  const text::Tokenizer& tokenizer_;
  std::string model_id_;
  std::string id_;
  int64_t created_;
  bool sent_role_ = false;   // Chat streams open with the assistant role.
  std::string text_;         // Whole: all text so far.
  std::string reasoning_;    // Whole: all reasoning so far (harmony's analysis channel).
  nlohmann::json logprobs_;  // Whole: merged logprobs.
  int64_t text_offset_ = 0;  // Completions' logprobs.text_offset.
  std::string finish_reason_;
  v1::Usage usage_;
  bool has_usage_ = false;
};

}  // namespace cascade::coordinator
