// Validation of a public `GenerateRequest` (inference.proto) before it reaches the serving loop:
// the prompt is tokenized (text, ready ids or a chat), every field is checked against its
// range and the model's limits, and the result is the serving loop's `ServingRequest`. Both
// fronts (gRPC and HTTP) reach it through `InferenceService::Prepare`; it is a free
// function, with no serving loop or workers, so that tests and the fuzz target
// (tests/fuzz/generate_request_fuzz.cc) call it directly.
// Thread-safe (free functions over borrowed immutable inputs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/serving/serving_request.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

// The token ids of `prompt`: its text encoded (BOS/EOS as the tokenizer adds them when
// `add_special`), its ids as given, or its chat rendered with the named built-in format or
// else the model's own template (text/chat_format.h) and encoded. InvalidArgument naming
// the field for an id outside [0, n_vocab), an empty chat, an unknown template, a template
// error, or no prompt. `output_format`, when given, gets the format a chat is answered in
// (kText for the other prompts).
absl::StatusOr<std::vector<int32_t>> TokenizePrompt(const v1::Prompt& prompt, const text::Tokenizer& tokenizer,
                                                    int64_t n_vocab, bool add_special,
                                                    text::OutputFormat* output_format = nullptr);

// The grammar of an output constraint (null when none is set): JSON Schema and regular
// expressions go through GBNF (grammar/json_schema.h). InvalidArgument naming the field,
// and what the schema, grammar or pattern uses that is not supported.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(const v1::OutputConstraint& constraint);

// Validates `req` and turns it into the serving loop's request: the prompt tokenized (with
// special tokens), a chat rendered in the harmony format answered in it (reasoning apart
// from the content, text::OutputFormat::kHarmony), unset sampling fields left at `SamplingParams`' defaults, max_tokens
// capped to the room left in a context of `max_context` positions. InvalidArgument naming
// the field for an empty prompt, a prompt that leaves no room for one new token, sampling
// values out of range, max_tokens < 1, or speculative.num_tokens outside [1, 16].
absl::StatusOr<ServingRequest> ValidateGenerateRequest(const v1::GenerateRequest& req, const text::Tokenizer& tokenizer,
                                                       int64_t n_vocab, int64_t max_context);

}  // namespace cascade::coordinator
