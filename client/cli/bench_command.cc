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
#include <thread>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/client.h"
#include "core/args.h"

namespace cascade::cli {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  Args args({"server", "requests", "concurrency", "prompt-tokens", "max-tokens", "json", "label", "chat", "prompt-ids",
             "temperature", "draft-tokens", "ids-out"},
            {"no-speculate"});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("bench", s);
  auto server = args.Require("server");
  if (!server.ok()) return Fail("bench", server.status());
  const int64_t n = args.GetInt("requests", 32).value_or(32);
  const int64_t c = args.GetInt("concurrency", 8).value_or(8);
  const int64_t p = args.GetInt("prompt-tokens", 64).value_or(64);
  const int64_t m = args.GetInt("max-tokens", 64).value_or(64);
  if (n < 1 || c < 1 || p < 1 || m < 1) return Fail("bench", absl::InvalidArgumentError("all counts must be >= 1"));
  const double temperature = args.GetDouble("temperature", 0.0).value_or(0.0);
  const int64_t draft_tokens = args.GetInt("draft-tokens", 0).value_or(0);
  std::vector<int32_t> fixed_ids;
  if (auto ids = args.Get("prompt-ids")) {
    for (size_t at = 0; at < ids->size();) {
      const size_t comma = std::min(ids->find(',', at), ids->size());
      fixed_ids.push_back(std::stoi(ids->substr(at, comma - at)));
      at = comma + 1;
    }
  }
  client::Client cl({*server, std::chrono::seconds(600)});
  std::vector<std::vector<int32_t>> outputs(n);

  std::mutex mu;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t tokens = 0, failures = 0;
  v1::SpeculativeStats spec;  // Summed over requests.
  std::atomic<int64_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < c; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t i = next++; i < n; i = next++) {
        v1::GenerateRequest req;
        if (auto chat = args.Get("chat")) {
          auto* msg = req.mutable_prompt()->mutable_chat()->add_messages();
          msg->set_role("user");
          msg->set_content(*chat);
        } else if (!fixed_ids.empty()) {
          for (int32_t id : fixed_ids) req.mutable_prompt()->mutable_ids()->add_ids(id);
        } else {
          // Distinct prompts (ids 10 + (i + k) % 200) so nothing could be shared.
          for (int64_t k = 0; k < p; ++k) req.mutable_prompt()->mutable_ids()->add_ids(static_cast<int32_t>(10 + (i + k) % 200));
        }
        req.mutable_sampling()->set_temperature(static_cast<float>(temperature));
        req.mutable_sampling()->set_top_k(0);
        req.mutable_sampling()->set_top_p(1);
        req.mutable_sampling()->set_min_p(0);
        req.mutable_sampling()->set_seed(static_cast<uint64_t>(i));
        if (args.Has("no-speculate")) req.mutable_speculative()->set_enabled(false);
        if (draft_tokens > 0) req.mutable_speculative()->set_num_tokens(static_cast<int32_t>(draft_tokens));
        std::vector<int32_t> ids;
        req.set_max_tokens(static_cast<int32_t>(m));
        req.set_ignore_eos(true);
        const auto start = std::chrono::steady_clock::now();
        std::vector<double> arrivals;
        absl::Status s = cl.Generate(req, [&](const v1::GenerateResponse& chunk) {
          const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          for (int k = 0; k < chunk.token_ids_size(); ++k) arrivals.push_back(t);
          ids.insert(ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
          if (chunk.has_usage() && chunk.usage().has_speculative()) {
            const v1::SpeculativeStats& u = chunk.usage().speculative();
            std::lock_guard<std::mutex> lock(mu);
            spec.set_steps(spec.steps() + u.steps());
            spec.set_drafted_tokens(spec.drafted_tokens() + u.drafted_tokens());
            spec.set_accepted_tokens(spec.accepted_tokens() + u.accepted_tokens());
          }
        });
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok() || arrivals.empty()) {
          ++failures;
          continue;
        }
        outputs[i] = std::move(ids);
        ttft.push_back(arrivals.front());
        e2e.push_back(arrivals.back());
        if (arrivals.size() > 1) tpot.push_back((arrivals.back() - arrivals.front()) / (arrivals.size() - 1));
        for (size_t k = 1; k < arrivals.size(); ++k) itl.push_back(arrivals[k] - arrivals[k - 1]);
        tokens += static_cast<int64_t>(arrivals.size());
      }
      (void)w;
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string label = args.GetOr("label", *server);
  std::printf("%-12s %4s %4s %9s %9s %9s %9s %9s %9s %10s %9s\n", "label", "reqs", "conc", "ttft_p50", "ttft_p99",
              "tpot_p50", "tpot_p99", "itl_p50", "itl_p99", "tok/s", "failures");
  std::printf("%-12s %4lld %4lld %8.1fms %8.1fms %8.1fms %8.1fms %8.1fms %8.1fms %10.1f %9lld\n", label.c_str(),
              static_cast<long long>(n), static_cast<long long>(c), 1e3 * Percentile(ttft, 50), 1e3 * Percentile(ttft, 99),
              1e3 * Percentile(tpot, 50), 1e3 * Percentile(tpot, 99), 1e3 * Percentile(itl, 50), 1e3 * Percentile(itl, 99),
              tokens / wall, static_cast<long long>(failures));
  if (auto path = args.Get("json")) {
    nlohmann::json j{{"label", label}, {"requests", n}, {"concurrency", c}, {"prompt_tokens", p}, {"max_tokens", m},
                     {"wall_s", wall}, {"output_tokens", tokens}, {"throughput_tok_s", tokens / wall}, {"failures", failures},
                     {"ttft_ms", {{"p50", 1e3 * Percentile(ttft, 50)}, {"p99", 1e3 * Percentile(ttft, 99)}}},
                     {"tpot_ms", {{"p50", 1e3 * Percentile(tpot, 50)}, {"p99", 1e3 * Percentile(tpot, 99)}}},
                     {"itl_ms", {{"p50", 1e3 * Percentile(itl, 50)}, {"p99", 1e3 * Percentile(itl, 99)}}},
                     {"decode_tok_s_p50", Percentile(tpot, 50) > 0 ? 1.0 / Percentile(tpot, 50) : 0.0},
                     {"speculative",
                      {{"verify_steps", spec.steps()},
                       {"drafted_tokens", spec.drafted_tokens()},
                       {"accepted_tokens", spec.accepted_tokens()},
                       {"acceptance_rate", spec.drafted_tokens() > 0 ? 1.0 * spec.accepted_tokens() / spec.drafted_tokens() : 0.0},
                       {"mean_accepted_length",
                        spec.steps() > 0 ? 1.0 * (spec.accepted_tokens() + spec.steps()) / spec.steps() : 0.0}}}};
    std::ofstream(*path) << j.dump(1) << "\n";
  }
  if (auto path = args.Get("ids-out")) {
    std::ofstream out(*path);
    for (const auto& ids : outputs) out << nlohmann::json(ids).dump() << "\n";
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace cascade::cli
