#include "client/cli/request_flags.h"

#include <nlohmann/json.hpp>

#include "client/cli/prompt.h"
#include "core/cpu_prefill_activations.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "wire/api_wire.h"

namespace cascade::cli {

std::vector<ArgOption> GenerationOptions() {
  const model::GenerateRequest r;  // The defaults are the request's own.
  const sampling::SamplingParams& d = r.sampling;
  return {
      {"max-tokens", "N", StrCat("tokens to generate at most (default ", r.max_tokens, ")")},
      {"temperature", "T", StrCat("sampling temperature, 0 = greedy (default ", d.temperature, ")")},
      {"top-k", "K", StrCat("keep the K most likely tokens, 0 = off (default ", d.top_k, ")")},
      {"top-p", "P", StrCat("nucleus sampling mass, 1 = off (default ", d.top_p, ")")},
      {"min-p", "P", StrCat("drop tokens below P x the most likely one, 0 = off (default ", d.min_p, ")")},
      {"seed", "S", StrCat("random seed; same seed, same output (default ", d.seed, ")")},
      {"repeat-penalty", "X", StrCat("penalty on tokens already seen, 1 = off (default ", d.repetition_penalty, ")")},
      {"presence-penalty", "X", StrCat("subtracted once from seen tokens (default ", d.presence_penalty, ")")},
      {"frequency-penalty", "X", StrCat("subtracted per occurrence (default ", d.frequency_penalty, ")")},
      {"logprobs", "N", "also report the top-N logprobs of each token (--json)"},
      {"stop", "STR", "stop before this text"},
      {"stop-ids", "IDS", "comma-separated token ids that end generation"},
      {"ignore-eos", "", "keep generating past end-of-generation tokens"},
  };
}

std::vector<ArgOption> KvWindowOptions() {
  return {{"kv-window-tokens", "W",
           "sink + window attention (scheduler.kv_policy: sink_window, lossy): each row sees the last W positions "
           "and the first S (default: exact attention)"},
          {"kv-sink-tokens", "S", "with --kv-window-tokens: the first positions kept (default 4)"}};
}

absl::Status ReadKvWindow(const Args& args, model::LocalEngineOptions* options) {
  CASCADE_ASSIGN_OR_RETURN(const int64_t window, args.GetInt("kv-window-tokens", 0));
  CASCADE_ASSIGN_OR_RETURN(const int64_t sinks, args.GetInt("kv-sink-tokens", window > 0 ? 4 : 0));
  if (window < 0 || sinks < 0 || (window == 0 && args.Has("kv-sink-tokens"))) {
    return absl::InvalidArgumentError("--kv-window-tokens must be >= 1, and --kv-sink-tokens >= 0 goes with it");
  }
  options->kv_window_tokens = window;
  options->kv_sink_tokens = sinks;
  return absl::OkStatus();
}

ArgOption CpuPrefillActivationsOption() {
  return {"cpu-prefill-activations", "TYPE",
          "f32 or bf16 (scheduler.cpu_prefill_activations; bf16 is lossy: FP8 weights' prefills round activations to "
          "bf16 on AVX512_BF16 CPUs) (default f32)"};
}

absl::Status ReadCpuPrefillActivations(const Args& args, model::LocalEngineOptions* options) {
  const std::string name = args.Get("cpu-prefill-activations").value_or("f32");
  const std::optional<bool> bf16 = CpuPrefillActivationsAreBf16(name);
  if (!bf16.has_value()) {
    return absl::InvalidArgumentError(
        StrCat("--cpu-prefill-activations must be ", kCpuPrefillActivationNames, ", got '", name, "'"));
  }
  options->cpu_bf16_prefill = *bf16;
  return absl::OkStatus();
}

ArgOption MaxBatchedTokensOption() {
  return {
      "max-batched-tokens", "N",
      StrCat("prompt tokens per forward pass; a longer prompt is prefilled in pieces (scheduler.max_batched_tokens) "
             "(default ",
             model::LocalEngineOptions{}.max_batched_tokens, ")")};
}

absl::Status ReadMaxBatchedTokens(const Args& args, model::LocalEngineOptions* options) {
  CASCADE_ASSIGN_OR_RETURN(const int64_t n, args.GetInt("max-batched-tokens", options->max_batched_tokens));
  if (n < 1) return absl::InvalidArgumentError("--max-batched-tokens must be >= 1");
  options->max_batched_tokens = n;
  return absl::OkStatus();
}

std::vector<ArgOption> PromptOptions() {
  return {
      {"prompt", "TEXT", "the prompt, as plain text"},
      {"prompt-ids", "IDS", "the prompt, as comma-separated token ids"},
      {"chat", "TEXT", "the prompt, as a user message rendered with the chat template"},
      {"system", "TEXT", "a system message before --chat"},
      {"chat-template", "NAME", "chatml, llama2, llama3 or harmony (default: the model's own)"},
  };
}

absl::StatusOr<model::GenerateRequest> GenerationFromArgs(const Args& args) {
  model::GenerateRequest req;  // Unset flags keep the request's defaults.
  const sampling::SamplingParams& d = req.sampling;
  CASCADE_ASSIGN_OR_RETURN(const int64_t max_tokens, args.GetInt("max-tokens", req.max_tokens));
  CASCADE_ASSIGN_OR_RETURN(const double temperature, args.GetDouble("temperature", d.temperature));
  CASCADE_ASSIGN_OR_RETURN(const int64_t top_k, args.GetInt("top-k", d.top_k));
  CASCADE_ASSIGN_OR_RETURN(const double top_p, args.GetDouble("top-p", d.top_p));
  CASCADE_ASSIGN_OR_RETURN(const double min_p, args.GetDouble("min-p", d.min_p));
  CASCADE_ASSIGN_OR_RETURN(const int64_t seed, args.GetInt("seed", static_cast<int64_t>(d.seed)));
  CASCADE_ASSIGN_OR_RETURN(const double rep, args.GetDouble("repeat-penalty", d.repetition_penalty));
  CASCADE_ASSIGN_OR_RETURN(const double presence, args.GetDouble("presence-penalty", d.presence_penalty));
  CASCADE_ASSIGN_OR_RETURN(const double frequency, args.GetDouble("frequency-penalty", d.frequency_penalty));
  CASCADE_ASSIGN_OR_RETURN(const int64_t logprobs, args.GetInt("logprobs", d.n_logprobs));
  req.max_tokens = static_cast<int32_t>(max_tokens);
  req.sampling.temperature = static_cast<float>(temperature);
  req.sampling.top_k = static_cast<int32_t>(top_k);
  req.sampling.top_p = static_cast<float>(top_p);
  req.sampling.min_p = static_cast<float>(min_p);
  req.sampling.seed = static_cast<uint64_t>(seed);
  req.sampling.repetition_penalty = static_cast<float>(rep);
  req.sampling.presence_penalty = static_cast<float>(presence);
  req.sampling.frequency_penalty = static_cast<float>(frequency);
  req.sampling.n_logprobs = static_cast<int32_t>(logprobs);
  req.stops.ignore_eos = args.Has("ignore-eos");
  if (auto stop = args.Get("stop")) req.stops.stop_strings.push_back(*stop);
  if (auto stop_ids = args.Get("stop-ids")) {
    CASCADE_ASSIGN_OR_RETURN(req.stops.stop_ids, ParseIds(*stop_ids));
  }
  return req;
}

absl::Status FillProtoGeneration(const Args& args, v1::GenerateRequest* req) {
  CASCADE_ASSIGN_OR_RETURN(const model::GenerateRequest g, GenerationFromArgs(args));
  *req->mutable_sampling() = wire::ToApiSampling(g.sampling);
  req->set_max_tokens(g.max_tokens);
  for (const auto& stop : g.stops.stop_strings) req->add_stop(stop);
  for (int32_t id : g.stops.stop_ids) req->add_stop_ids(id);
  req->set_ignore_eos(g.stops.ignore_eos);
  req->set_logprobs(g.sampling.n_logprobs);
  return absl::OkStatus();
}

absl::StatusOr<v1::GenerateRequest> ProtoRequestFromArgs(const Args& args) {
  v1::GenerateRequest req;
  CASCADE_RETURN_IF_ERROR(FillProtoGeneration(args, &req));
  const int given = args.Has("prompt") + args.Has("prompt-ids") + args.Has("chat");
  if (given != 1) return absl::InvalidArgumentError("give exactly one of --prompt, --prompt-ids, --chat");
  if (auto t = args.Get("prompt")) req.mutable_prompt()->set_text(*t);
  if (auto ids = args.Get("prompt-ids")) {
    CASCADE_ASSIGN_OR_RETURN(const std::vector<int32_t> parsed, ParseIds(*ids));
    for (int32_t id : parsed) req.mutable_prompt()->mutable_ids()->add_ids(id);
  }
  if (auto chat = args.Get("chat")) {
    v1::ChatMessages* m = req.mutable_prompt()->mutable_chat();
    if (auto sys = args.Get("system")) {
      auto* s = m->add_messages();
      s->set_role("system");
      s->set_content(*sys);
    }
    auto* u = m->add_messages();
    u->set_role("user");
    u->set_content(*chat);
    m->set_chat_template(args.GetOr("chat-template", ""));
  }
  return req;
}

std::string ResultJson(const std::vector<int32_t>& prompt_ids, const std::vector<int32_t>& token_ids,
                       const std::string& text, const std::string& finish_reason, double load_s, double prefill_tok_s,
                       double decode_tok_s) {
  nlohmann::json j{{"prompt_ids", prompt_ids},
                   {"token_ids", token_ids},
                   {"text", text},
                   {"finish_reason", finish_reason},
                   {"timings", {{"load_s", load_s}, {"prefill_tok_s", prefill_tok_s}, {"decode_tok_s", decode_tok_s}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cascade::cli
