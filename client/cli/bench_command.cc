// `cascade bench --server ADDR [--requests N] [--concurrency C] [--prompt-tokens P]
// [--max-tokens M] [--json FILE]`: N streaming requests, C at a time, each a fixed
// prompt of P ids and M generated tokens (EOS ignored). Reports time to first token,
// time per output token, inter-token latency (p50/p99) and throughput.
// Also: `--chat TEXT` or `--prompt-ids LIST` (the same prompt for every request instead
// of distinct synthetic ones), `--temperature T` (default 0; request i uses seed i),
// `--no-speculate`, `--draft-tokens K`, and `--ids-out FILE` (one JSON array of generated
// ids per line, in request order: for distribution tests).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/connect.h"
#include "client/client.h"
#include "core/args.h"
#include "core/clock.h"
#include "core/str_cat.h"

namespace cascade::cli {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
  return v[i];
}

// The run's settings, from the command line.
struct BenchOptions {
  int64_t requests = 32;            // --requests: how many requests in all.
  int64_t concurrency = 8;          // --concurrency: requests in flight at once (client threads).
  int64_t prompt_tokens = 64;       // --prompt-tokens: length of each synthetic prompt.
  int64_t max_tokens = 64;          // --max-tokens: tokens generated per request.
  double temperature = 0;           // --temperature: 0 is greedy (outputs comparable across runs).
  int64_t draft_tokens = 0;         // --draft-tokens: drafts per step; 0 keeps the cluster's k.
  bool no_speculate = false;        // --no-speculate: plain decoding for every request.
  std::optional<std::string> chat;  // --chat: the same chat prompt for every request.
  std::vector<int32_t> fixed_ids;   // --prompt-ids: the same id prompt for every request.
};

// What the client threads measured; every field is guarded by `mu` while they run, and
// read without it once they have joined.
struct BenchResults {
  std::mutex mu;
  std::vector<double> ttft, tpot, itl, e2e;  // Seconds, per request (itl: per token).
  int64_t tokens = 0, failures = 0;
  v1::SpeculativeStats spec;                  // Summed over requests.
  std::vector<std::vector<int32_t>> outputs;  // [requests] generated ids, in request order.
};

// Reads the bench options (all but --server, --label, --json and --ids-out) from `args`.
absl::StatusOr<BenchOptions> ParseBenchOptions(const Args& args) {
  BenchOptions opts;
  opts.requests = args.GetInt("requests", opts.requests).value_or(opts.requests);
  opts.concurrency = args.GetInt("concurrency", opts.concurrency).value_or(opts.concurrency);
  opts.prompt_tokens = args.GetInt("prompt-tokens", opts.prompt_tokens).value_or(opts.prompt_tokens);
  opts.max_tokens = args.GetInt("max-tokens", opts.max_tokens).value_or(opts.max_tokens);
  if (opts.requests < 1 || opts.concurrency < 1 || opts.prompt_tokens < 1 || opts.max_tokens < 1) {
    return absl::InvalidArgumentError("all counts must be >= 1");
  }
  opts.temperature = args.GetDouble("temperature", opts.temperature).value_or(opts.temperature);
  opts.draft_tokens = args.GetInt("draft-tokens", opts.draft_tokens).value_or(opts.draft_tokens);
  opts.no_speculate = args.Has("no-speculate");
  opts.chat = args.Get("chat");
  if (auto ids = args.Get("prompt-ids")) {
    for (size_t at = 0; at < ids->size();) {
      const size_t comma = std::min(ids->find(',', at), ids->size());
      opts.fixed_ids.push_back(std::stoi(ids->substr(at, comma - at)));
      at = comma + 1;
    }
  }
  return opts;
}

// The request for request number `i`: its prompt, greedy-or-seeded sampling and speculation settings.
v1::GenerateRequest MakeRequest(const BenchOptions& opts, int64_t i) {
  v1::GenerateRequest req;
  if (opts.chat) {
    auto* msg = req.mutable_prompt()->mutable_chat()->add_messages();
    msg->set_role("user");
    msg->set_content(*opts.chat);
  } else if (!opts.fixed_ids.empty()) {
    for (int32_t id : opts.fixed_ids) req.mutable_prompt()->mutable_ids()->add_ids(id);
  } else {
    // Distinct prompts (ids 10 + (i + k) % 200) so nothing could be shared.
    for (int64_t k = 0; k < opts.prompt_tokens; ++k) {
      req.mutable_prompt()->mutable_ids()->add_ids(static_cast<int32_t>(10 + (i + k) % 200));
    }
  }
  req.mutable_sampling()->set_temperature(static_cast<float>(opts.temperature));
  req.mutable_sampling()->set_top_k(0);
  req.mutable_sampling()->set_top_p(1);
  req.mutable_sampling()->set_min_p(0);
  req.mutable_sampling()->set_seed(static_cast<uint64_t>(i));
  if (opts.no_speculate) req.mutable_speculative()->set_enabled(false);
  if (opts.draft_tokens > 0) req.mutable_speculative()->set_num_tokens(static_cast<int32_t>(opts.draft_tokens));
  req.set_max_tokens(static_cast<int32_t>(opts.max_tokens));
  req.set_ignore_eos(true);
  return req;
}

// Streams request `i` and adds its token arrival times, ids and speculation stats to `results`.
void RunRequest(client::Client& cl, const BenchOptions& opts, int64_t i, BenchResults& results) {
  const v1::GenerateRequest req = MakeRequest(opts, i);
  std::vector<int32_t> ids;
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> arrivals;
  absl::Status s = cl.Generate(req, [&](const v1::GenerateResponse& chunk) {
    const double t = SecondsSince(start);
    for (int k = 0; k < chunk.token_ids_size(); ++k) arrivals.push_back(t);
    ids.insert(ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    if (chunk.has_usage() && chunk.usage().has_speculative()) {
      const v1::SpeculativeStats& u = chunk.usage().speculative();
      std::lock_guard<std::mutex> lock(results.mu);
      v1::SpeculativeStats& spec = results.spec;
      spec.set_steps(spec.steps() + u.steps());
      spec.set_drafted_tokens(spec.drafted_tokens() + u.drafted_tokens());
      spec.set_accepted_tokens(spec.accepted_tokens() + u.accepted_tokens());
    }
  });
  std::lock_guard<std::mutex> lock(results.mu);
  if (!s.ok() || arrivals.empty()) {
    ++results.failures;
    return;
  }
  results.outputs[i] = std::move(ids);
  results.ttft.push_back(arrivals.front());
  results.e2e.push_back(arrivals.back());
  if (arrivals.size() > 1) results.tpot.push_back((arrivals.back() - arrivals.front()) / (arrivals.size() - 1));
  for (size_t k = 1; k < arrivals.size(); ++k) results.itl.push_back(arrivals[k] - arrivals[k - 1]);
  results.tokens += static_cast<int64_t>(arrivals.size());
}

// Prints the one-row latency / throughput table to stdout.
void PrintSummary(const std::string& label, const BenchOptions& opts, const BenchResults& r, double wall) {
  std::printf("%-12s %4s %4s %9s %9s %9s %9s %9s %9s %10s %9s\n", "label", "reqs", "conc", "ttft_p50", "ttft_p99",
              "tpot_p50", "tpot_p99", "itl_p50", "itl_p99", "tok/s", "failures");
  std::printf("%-12s %4lld %4lld %8.1fms %8.1fms %8.1fms %8.1fms %8.1fms %8.1fms %10.1f %9lld\n", label.c_str(),
              static_cast<long long>(opts.requests), static_cast<long long>(opts.concurrency),
              1e3 * Percentile(r.ttft, 50), 1e3 * Percentile(r.ttft, 99), 1e3 * Percentile(r.tpot, 50),
              1e3 * Percentile(r.tpot, 99), 1e3 * Percentile(r.itl, 50), 1e3 * Percentile(r.itl, 99), r.tokens / wall,
              static_cast<long long>(r.failures));
}

// Writes the --json report: settings, latency percentiles, throughput and speculation stats.
void WriteJsonReport(const std::string& path, const std::string& label, const BenchOptions& opts, const BenchResults& r,
                     double wall) {
  const v1::SpeculativeStats& spec = r.spec;
  nlohmann::json j{
      {"label", label},
      {"requests", opts.requests},
      {"concurrency", opts.concurrency},
      {"prompt_tokens", opts.prompt_tokens},
      {"max_tokens", opts.max_tokens},
      {"wall_s", wall},
      {"output_tokens", r.tokens},
      {"throughput_tok_s", r.tokens / wall},
      {"failures", r.failures},
      {"ttft_ms", {{"p50", 1e3 * Percentile(r.ttft, 50)}, {"p99", 1e3 * Percentile(r.ttft, 99)}}},
      {"tpot_ms", {{"p50", 1e3 * Percentile(r.tpot, 50)}, {"p99", 1e3 * Percentile(r.tpot, 99)}}},
      {"itl_ms", {{"p50", 1e3 * Percentile(r.itl, 50)}, {"p99", 1e3 * Percentile(r.itl, 99)}}},
      {"decode_tok_s_p50", Percentile(r.tpot, 50) > 0 ? 1.0 / Percentile(r.tpot, 50) : 0.0},
      {"speculative",
       {{"verify_steps", spec.steps()},
        {"drafted_tokens", spec.drafted_tokens()},
        {"accepted_tokens", spec.accepted_tokens()},
        {"acceptance_rate", spec.drafted_tokens() > 0 ? 1.0 * spec.accepted_tokens() / spec.drafted_tokens() : 0.0},
        {"mean_accepted_length",
         spec.steps() > 0 ? 1.0 * (spec.accepted_tokens() + spec.steps()) / spec.steps() : 0.0}}}};
  std::ofstream(path) << j.dump(1) << "\n";
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  const BenchOptions d;
  Args args("cascade bench", "--server HOST:PORT [options]",
            {{"server", "HOST:PORT", "the coordinator's address (required)"},
             TlsCaOption(),
             {"requests", "N", StrCat("requests in all (default ", d.requests, ")")},
             {"concurrency", "C", StrCat("requests in flight at once (default ", d.concurrency, ")")},
             {"prompt-tokens", "P", StrCat("length of each synthetic prompt (default ", d.prompt_tokens, ")")},
             {"max-tokens", "M", StrCat("tokens generated per request (default ", d.max_tokens, ")")},
             {"temperature", "T", StrCat("sampling temperature, 0 = greedy (default ", d.temperature, ")")},
             {"chat", "TEXT", "the same chat prompt for every request (instead of synthetic ones)"},
             {"prompt-ids", "IDS", "the same comma-separated id prompt for every request"},
             {"no-speculate", "", "plain decoding for every request"},
             {"draft-tokens", "K", "drafts per step (default: the cluster's)"},
             {"label", "NAME", "the row's label (default: the server address)"},
             {"json", "FILE", "also write the report as JSON to FILE"},
             {"ids-out", "FILE", "write each request's generated ids to FILE, one JSON line each"}});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("bench", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto server = args.Require("server");
  if (!server.ok()) return Fail("bench", server.status());
  auto opts = ParseBenchOptions(args);
  if (!opts.ok()) return Fail("bench", opts.status());
  auto connected = ConnectToServer(args, std::chrono::seconds(600));
  if (!connected.ok()) return Fail("bench", connected.status());
  client::Client& cl = *connected;
  BenchResults results;
  results.outputs.resize(opts->requests);

  std::atomic<int64_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < opts->concurrency; ++w) {
    threads.emplace_back([&] {
      for (int64_t i = next++; i < opts->requests; i = next++) RunRequest(cl, *opts, i, results);
    });
  }
  for (auto& t : threads) t.join();
  const double wall = SecondsSince(t0);
  const std::string label = args.GetOr("label", *server);
  PrintSummary(label, *opts, results, wall);
  if (auto path = args.Get("json")) WriteJsonReport(*path, label, *opts, results, wall);
  if (auto path = args.Get("ids-out")) {
    std::ofstream out(*path);
    for (const auto& ids : results.outputs) out << nlohmann::json(ids).dump() << "\n";
  }
  return results.failures == 0 ? 0 : 1;
}

}  // namespace cascade::cli
