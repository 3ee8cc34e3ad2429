// `cascade run`: single-process generation with the local engine, streamed to stdout, or
// one JSON object with --json.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/prompt.h"
#include "model/local_engine.h"

namespace cascade::cli {
namespace {

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

absl::StatusOr<model::GenerateRequest> RequestFromArgs(const Args& args, const model::Tokenizer& tok) {
  model::GenerateRequest req;
  auto ids = PromptIds(args, tok, "prompt", /*add_special_text=*/true);
  if (!ids.ok()) return ids.status();
  req.prompt_ids = *ids;
  auto max_tokens = args.GetInt("max-tokens", 256);
  auto temperature = args.GetDouble("temperature", 0.8);
  auto top_k = args.GetInt("top-k", 40);
  auto top_p = args.GetDouble("top-p", 0.95);
  auto min_p = args.GetDouble("min-p", 0.05);
  auto seed = args.GetInt("seed", 0);
  auto rep = args.GetDouble("repeat-penalty", 1.0);
  auto presence = args.GetDouble("presence-penalty", 0.0);
  auto frequency = args.GetDouble("frequency-penalty", 0.0);
  auto logprobs = args.GetInt("logprobs", 0);
  for (const absl::Status& s : {max_tokens.status(), temperature.status(), top_k.status(), top_p.status(),
                                min_p.status(), seed.status(), rep.status(), presence.status(),
                                frequency.status(), logprobs.status()}) {
    if (!s.ok()) return s;
  }
  req.max_tokens = static_cast<int32_t>(*max_tokens);
  req.sampling.temperature = static_cast<float>(*temperature);
  req.sampling.top_k = static_cast<int32_t>(*top_k);
  req.sampling.top_p = static_cast<float>(*top_p);
  req.sampling.min_p = static_cast<float>(*min_p);
  req.sampling.seed = static_cast<uint64_t>(*seed);
  req.sampling.repetition_penalty = static_cast<float>(*rep);
  req.sampling.presence_penalty = static_cast<float>(*presence);
  req.sampling.frequency_penalty = static_cast<float>(*frequency);
  req.sampling.n_logprobs = static_cast<int32_t>(*logprobs);
  req.ignore_eos = args.Has("ignore-eos");
  if (auto stop = args.Get("stop")) req.stop_strings.push_back(*stop);
  if (auto stop_ids = args.Get("stop-ids")) {
    auto parsed = ParseIds(*stop_ids);
    if (!parsed.ok()) return parsed.status();
    req.stop_ids = *parsed;
  }
  return req;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  Args args({"model", "prompt", "prompt-ids", "chat", "system", "chat-template", "max-tokens",
             "temperature", "top-k", "top-p", "min-p", "seed", "threads", "repeat-penalty",
             "presence-penalty", "frequency-penalty", "logprobs", "stop", "stop-ids", "ctx"},
            {"json", "ignore-eos"});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("run", s);
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
  if (isatty(STDERR_FILENO)) options.on_load_progress = DrawProgress;
  auto engine = model::LocalEngine::Create(*path, options);
  if (!engine.ok()) return Fail("run", engine.status());
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto req = RequestFromArgs(args, (*engine)->tokenizer());
  if (!req.ok()) return Fail("run", req.status());
  const bool json = args.Has("json");
  auto res = (*engine)->Generate(*req, [&](std::string_view text) {
    if (json) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!res.ok()) return Fail("run", res.status());
  if (!json) {
    std::printf("\n");
    return 0;
  }
  const double prefill_tok_s = res->prefill_s > 0 ? req->prompt_ids.size() / res->prefill_s : 0;
  const double decode_tok_s = res->decode_s > 0 && res->n_decode_steps > 0 ? res->n_decode_steps / res->decode_s : 0;
  nlohmann::json j{{"prompt_ids", req->prompt_ids},
                   {"token_ids", res->token_ids},
                   {"text", res->text},
                   {"finish_reason", res->finish_reason},
                   {"timings", {{"load_s", load_s}, {"prefill_tok_s", prefill_tok_s}, {"decode_tok_s", decode_tok_s}}}};
  if (req->sampling.n_logprobs > 0) {
    nlohmann::json lp = nlohmann::json::array();
    for (const auto& t : res->tokens) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, l] : t.top) top.push_back({{"id", id}, {"logprob", l}});
      lp.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
    }
    j["logprobs"] = lp;
  }
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace cascade::cli
