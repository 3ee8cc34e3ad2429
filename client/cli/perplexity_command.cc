// `cascade perplexity --model PATH --file TEXT [--ctx N] [--threads N] [--kv-window-tokens W
// [--kv-sink-tokens S]] [--json]`: the perplexity of the first N tokens of a text, teacher
// forced in one forward pass of the local engine, so that exact attention and the sink +
// window policy (scheduler.kv_policy) can be compared on the same text. With a window it
// also reports the positions the policy changed (those past S + W), apart.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <span>
#include <sstream>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/request_flags.h"
#include "core/args.h"
#include "core/str_cat.h"
#include "model/local_engine.h"

namespace cascade::cli {
namespace {

// The negative log-likelihood, in nats, of `next` under one row of logits.
double RowNll(const float* row, int64_t n_vocab, int32_t next) {
  double mx = row[0];
  for (int64_t v = 1; v < n_vocab; ++v) mx = std::max<double>(mx, row[v]);
  double z = 0;
  for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(row[v] - mx);
  return mx + std::log(z) - row[next];
}

// exp(mean NLL) over rows [begin, end); 0 when empty.
double Perplexity(const std::vector<double>& nll, size_t begin, size_t end) {
  if (begin >= end) return 0;
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += nll[i];
  return std::exp(sum / static_cast<double>(end - begin));
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("--file: cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int PerplexityCommand(int argc, char** argv) {
  std::vector<ArgOption> arg_options = {
      {"model", "PATH", "a GGUF file or Hugging Face directory (required)"},
      {"file", "PATH", "the text to score (required)"},
      {"ctx", "N", "score its first N tokens, the BOS included (default 1024)"},
      {"threads", "N", "CPU threads, in [1, 256] (default 1)"},
      MaxBatchedTokensOption(),
      {"json", "", "print one JSON object (with each row's negative log-likelihood, `nll`)"}};
  for (ArgOption& o : KvWindowOptions()) arg_options.push_back(std::move(o));
  arg_options.push_back(CpuPrefillActivationsOption());
  Args args("cascade perplexity", "--model PATH --file TEXT [options]", std::move(arg_options));
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("perplexity", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto path = args.Require("model");
  if (!path.ok()) return Fail("perplexity", path.status());
  auto file = args.Require("file");
  if (!file.ok()) return Fail("perplexity", file.status());
  auto text = ReadText(*file);
  if (!text.ok()) return Fail("perplexity", text.status());
  auto ctx = args.GetInt("ctx", 1024);
  if (!ctx.ok()) return Fail("perplexity", ctx.status());
  auto threads = args.GetInt("threads", 1);
  if (!threads.ok()) return Fail("perplexity", threads.status());
  if (*ctx < 2 || *threads < 1 || *threads > 256) {
    return Fail("perplexity", absl::InvalidArgumentError("--ctx must be >= 2 and --threads in [1, 256]"));
  }
  model::LocalEngineOptions options;
  options.n_threads = static_cast<int>(*threads);
  options.max_context = *ctx;
  if (absl::Status st = ReadKvWindow(args, &options); !st.ok()) return Fail("perplexity", st);
  if (absl::Status st = ReadCpuPrefillActivations(args, &options); !st.ok()) return Fail("perplexity", st);
  if (absl::Status st = ReadMaxBatchedTokens(args, &options); !st.ok()) return Fail("perplexity", st);
  auto engine = model::LocalEngine::Create(*path, options);
  if (!engine.ok()) return Fail("perplexity", engine.status());

  std::vector<int32_t> ids = (*engine)->tokenizer().Encode(*text, /*add_special=*/true);
  if (static_cast<int64_t>(ids.size()) < *ctx) {
    return Fail("perplexity",
                absl::InvalidArgumentError(StrCat("--file: ", ids.size(), " tokens, fewer than --ctx ", *ctx)));
  }
  ids.resize(*ctx);
  const auto t0 = std::chrono::steady_clock::now();
  // ids[r + 1] under row r, for every row but the last; a piece of rows at a time, so that
  // the logits of a long window are never held at once.
  const int64_t n_vocab = (*engine)->config().n_vocab;
  std::vector<double> nll;
  double scoring_s = 0;  // Not the forward's: the NLLs between its pieces.
  absl::Status scored = (*engine)->ForEachPromptLogits(ids, 0, [&](int64_t row, std::span<const float> logits) {
    const auto s0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; (i + 1) * n_vocab <= static_cast<int64_t>(logits.size()); ++i) {
      if (row + i + 1 < static_cast<int64_t>(ids.size())) {
        nll.push_back(RowNll(logits.data() + i * n_vocab, n_vocab, ids[row + i + 1]));
      }
    }
    scoring_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    return absl::OkStatus();
  });
  if (!scored.ok()) return Fail("perplexity", scored);
  const double forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - scoring_s;
  // Rows at positions >= S + W are the ones whose attention the policy narrowed.
  const size_t narrowed_from = options.kv_window_tokens > 0
                                   ? static_cast<size_t>(options.kv_window_tokens + options.kv_sink_tokens)
                                   : nll.size();
  const double ppl = Perplexity(nll, 0, nll.size());
  const double ppl_narrowed = Perplexity(nll, narrowed_from, nll.size());
  if (args.Has("json")) {
    nlohmann::json j = {{"tokens_scored", nll.size()},
                        {"perplexity", ppl},
                        {"kv_window_tokens", options.kv_window_tokens},
                        {"kv_sink_tokens", options.kv_sink_tokens},
                        {"narrowed_rows", nll.size() - std::min(narrowed_from, nll.size())},
                        {"perplexity_narrowed_rows", ppl_narrowed},
                        {"forward_s", forward_s},
                        {"cpu_prefill_activations", model::LocalEngine::CpuPrefillActivations(options)},
                        {"nll", nll}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("tokens scored   %zu\n", nll.size());
  std::printf("perplexity      %.4f\n", ppl);
  if (options.kv_window_tokens > 0) {
    std::printf("sink + window   sinks %lld, window %lld: rows from %zu narrowed, their perplexity %.4f\n",
                static_cast<long long>(options.kv_sink_tokens), static_cast<long long>(options.kv_window_tokens),
                narrowed_from, ppl_narrowed);
  }
  std::printf("forward         %.2f s (prefill activations %s)\n", forward_s,
              model::LocalEngine::CpuPrefillActivations(options).c_str());
  return 0;
}

}  // namespace cascade::cli
