// The generation flags shared by `cascade run` (local engine) and `cascade generate`
// (cluster): sampling, length, stop conditions, logprobs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "core/args.h"
#include "model/local_engine.h"

namespace cascade::cli {

// The generation options (sampling, length, stops, logprobs) with their help lines and
// defaults, to declare in an Args parser.
std::vector<ArgOption> GenerationOptions();

// The prompt options: --prompt, --prompt-ids, --chat, --system, --chat-template.
std::vector<ArgOption> PromptOptions();

// Everything but the prompt, with `cascade run`'s defaults. InvalidArgument naming the flag.
absl::StatusOr<model::GenerateRequest> GenerationFromArgs(const Args& args);

// Fills everything but the prompt of a cluster request from the flags.
absl::Status FillProtoGeneration(const Args& args, v1::GenerateRequest* req);

// The same request for the cluster API, with the prompt taken from --prompt, --prompt-ids
// or --chat (and --system, --chat-template).
absl::StatusOr<v1::GenerateRequest> ProtoRequestFromArgs(const Args& args);

// --kv-window-tokens W and --kv-sink-tokens S: scheduler.kv_policy's sink + window in the
// local engine (`cascade run`, `cascade perplexity`).
std::vector<ArgOption> KvWindowOptions();

// Reads them into `options`: sinks 4 (StreamingLLM's) unless given, and only with a window.
// InvalidArgument naming the flag.
absl::Status ReadKvWindow(const Args& args, model::LocalEngineOptions* options);

// --cpu-prefill-activations f32|bf16: scheduler.cpu_prefill_activations in the local
// engine (`cascade run`, `cascade perplexity`).
ArgOption CpuPrefillActivationsOption();
// --max-batched-tokens N: prompt tokens per forward pass (LocalEngineOptions::max_batched_tokens).
ArgOption MaxBatchedTokensOption();
// Reads it into `options` (its default when absent); InvalidArgument below 1.
absl::Status ReadMaxBatchedTokens(const Args& args, model::LocalEngineOptions* options);

// Reads it into `options` (f32 unless given). InvalidArgument naming the flag.
absl::Status ReadCpuPrefillActivations(const Args& args, model::LocalEngineOptions* options);

// The JSON of `cascade run --json` / `cascade generate --json`.
std::string ResultJson(const std::vector<int32_t>& prompt_ids, const std::vector<int32_t>& token_ids,
                       const std::string& text, const std::string& finish_reason, double load_s, double prefill_tok_s,
                       double decode_tok_s);

}  // namespace cascade::cli
