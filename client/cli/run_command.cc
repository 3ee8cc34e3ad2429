// `cascade run`: single-process generation with the local engine, streamed to stdout, or
// one JSON object with --json.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/prompt.h"
#include "client/cli/request_flags.h"
#include "core/args.h"
#include "core/clock.h"
#include "core/kv_cache_dtype.h"
#include "core/load_balance.h"
#include "core/str_cat.h"
#include "model/kv_cache.h"
#include "model/local_engine.h"
#include "model/transformer.h"

namespace cascade::cli {
namespace {

// MoE models: per MoE layer, the tokens routed to each expert during the run and the
// busiest expert's share over the mean.
nlohmann::json ExpertLoadJson(const model::Transformer& t) {
  const int64_t n_experts = t.config().n_experts;
  nlohmann::json layers = nlohmann::json::array();
  double worst = 0;
  for (size_t i = 0; i < t.moe_layers().size(); ++i) {
    const auto tokens = std::span(t.expert_load()).subspan(i * n_experts, n_experts);
    const double ratio = MaxMeanRatio(tokens);
    worst = std::max(worst, ratio);
    layers.push_back({{"layer", t.moe_layers()[i]},
                      {"tokens", std::vector<int64_t>(tokens.begin(), tokens.end())},
                      {"max_mean_ratio", ratio}});
  }
  return {{"max_mean_ratio", worst}, {"layers", layers}};
}

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
void DrawProgress(double fraction) {
  static int last = -1;
  const int pct = static_cast<int>(fraction * 100);
  if (pct == last) return;
  last = pct;
  const int filled = pct * 30 / 100;
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "##############################", 30 - filled, "", pct);
  if (pct >= 100) std::fprintf(stderr, "\r%60s\r", "");
  std::fflush(stderr);
}

absl::StatusOr<model::GenerateRequest> RequestFromArgs(const Args& args, const text::Tokenizer& tok) {
  auto req = GenerationFromArgs(args);
  if (!req.ok()) return req.status();
  auto ids = PromptIds(args, tok, "prompt", /*add_special_text=*/true);
  if (!ids.ok()) return ids.status();
  req->prompt_ids = *ids;
  auto format = PromptOutputFormat(args, tok);
  if (!format.ok()) return format.status();
  req->output_format = *format;
  return req;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  std::vector<ArgOption> arg_options = {{"model", "PATH", "a GGUF file or Hugging Face directory (required)"}};
  for (ArgOption& o : PromptOptions()) arg_options.push_back(std::move(o));
  for (ArgOption& o : GenerationOptions()) arg_options.push_back(std::move(o));
  arg_options.insert(arg_options.end(),
                     {{"threads", "N", "CPU threads, in [1, 256] (default 1)"},
                      {"ctx", "N", "positions per sequence (default: the model's trained context)"},
                      {"kv-type", "TYPE", "KV cache type: f32, f16, q8_0 or fp8_e4m3 (default f16)"},
                      MaxBatchedTokensOption(),
                      {"json", "", "print one JSON object (ids, text, timings) instead of streaming"}});
  for (ArgOption& o : KvWindowOptions()) arg_options.push_back(std::move(o));
  arg_options.push_back(CpuPrefillActivationsOption());
  Args args("cascade run", "--model PATH (--prompt T | --prompt-ids 1,2,3 | --chat T) [options]",
            std::move(arg_options));
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("run", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto path = args.Require("model");
  if (!path.ok()) return Fail("run", path.status());
  auto threads = args.GetInt("threads", 1);
  if (!threads.ok()) return Fail("run", threads.status());
  if (*threads < 1 || *threads > 256) return Fail("run", absl::InvalidArgumentError("--threads must be in [1, 256]"));
  auto ctx = args.GetInt("ctx", 0);
  if (!ctx.ok()) return Fail("run", ctx.status());

  const auto t0 = std::chrono::steady_clock::now();
  model::LocalEngineOptions options;
  options.n_threads = static_cast<int>(*threads);
  options.max_context = *ctx;
  if (auto kv = args.Get("kv-type")) {
    auto dtype = KvCacheDTypeFromName(*kv);
    if (!dtype.ok()) return Fail("run", absl::InvalidArgumentError(StrCat("--kv-type: ", dtype.status().message())));
    options.kv_dtype = *dtype;
  }
  if (absl::Status st = ReadKvWindow(args, &options); !st.ok()) return Fail("run", st);
  if (absl::Status st = ReadCpuPrefillActivations(args, &options); !st.ok()) return Fail("run", st);
  if (absl::Status st = ReadMaxBatchedTokens(args, &options); !st.ok()) return Fail("run", st);
  if (isatty(STDERR_FILENO)) options.on_load_progress = DrawProgress;
  auto engine = model::LocalEngine::Create(*path, options);
  if (!engine.ok()) return Fail("run", engine.status());
  const double load_s = SecondsSince(t0);

  auto req = RequestFromArgs(args, (*engine)->tokenizer());
  if (!req.ok()) return Fail("run", req.status());
  const bool json = args.Has("json");
  // The answer goes to stdout; reasoning (harmony's analysis channel), if any, to stderr.
  auto res = (*engine)->Generate(
      *req,
      [&](std::string_view text) {
        if (json) return;
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      },
      [&](std::string_view reasoning) {
        if (!json) std::fwrite(reasoning.data(), 1, reasoning.size(), stderr);
      });
  if (!res.ok()) return Fail("run", res.status());
  if (!json) {
    std::printf("\n");
    return 0;
  }
  const double prefill_tok_s = res->prefill_s > 0 ? req->prompt_ids.size() / res->prefill_s : 0;
  const double decode_tok_s = res->decode_s > 0 && res->n_decode_steps > 0 ? res->n_decode_steps / res->decode_s : 0;
  nlohmann::json j = nlohmann::json::parse(ResultJson(req->prompt_ids, res->token_ids, res->text,
                                                      std::string(text::FinishReasonName(res->finish_reason)), load_s,
                                                      prefill_tok_s, decode_tok_s));
  if (!res->reasoning.empty()) j["reasoning"] = res->reasoning;
  if (req->sampling.n_logprobs > 0) {
    nlohmann::json lp = nlohmann::json::array();
    for (const auto& t : res->tokens) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, l] : t.top) top.push_back({{"id", id}, {"logprob", l}});
      lp.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
    }
    j["logprobs"] = lp;
  }
  j["kv_cache"] = {{"dtype", std::string(KvCacheDTypeName(options.kv_dtype))}, {"bytes", (*engine)->kv_bytes()}};
  j["cpu_prefill_activations"] = model::LocalEngine::CpuPrefillActivations(options);
  j["max_batched_tokens"] = options.max_batched_tokens;
  if (const model::Transformer& t = (*engine)->transformer(); !t.moe_layers().empty())
    j["expert_load"] = ExpertLoadJson(t);
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace cascade::cli
