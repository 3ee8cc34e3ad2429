// The cluster commands of `cascade`: generate (streamed or --json), chat (interactive),
// status (waits until the cluster is ready, prints plan, workers and KV usage).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/connect.h"
#include "client/cli/request_flags.h"
#include "client/client.h"
#include "core/args.h"
#include "core/clock.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "proto/grpc_status.h"

namespace cascade::cli {
namespace {

// Server errors keep their gRPC code in the message ("UNAVAILABLE: ..."), so scripts
// can tell a refused request from a dead cluster.
int FailRpc(const char* command, const Args& args, const absl::Status& status) {
  const absl::Status s = WithTlsHint(args, status);
  return Fail(command, absl::Status(s.code(), absl::StatusCodeToString(s.code()) + ": " + std::string(s.message())));
}

// The JSON's finish_reason, from the typed field ("stop", "length"; "" if unset).
std::string FinishReasonText(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    default: return "";
  }
}

// `cascade status` names, from the typed fields.
std::string ClusterStateText(v1::ClusterState state) {
  switch (state) {
    case v1::CLUSTER_STATE_STARTING: return "starting";
    case v1::CLUSTER_STATE_READY: return "ready";
    case v1::CLUSTER_STATE_DEGRADED: return "degraded";
    default: return "unknown";
  }
}
std::string WorkerStateText(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_STATE_WAITING: return "waiting";
    case v1::WORKER_STATE_REGISTERED: return "registered";
    case v1::WORKER_STATE_LOADING: return "loading";
    case v1::WORKER_STATE_READY: return "ready";
    case v1::WORKER_STATE_DEAD: return "dead";
    default: return "unknown";
  }
}

// The options of `cascade generate`.
Args GenerateArgs() {
  std::vector<ArgOption> options = {{"server", "HOST:PORT", "the coordinator's address (required)"}, TlsCaOption()};
  for (ArgOption& o : PromptOptions()) options.push_back(std::move(o));
  for (ArgOption& o : GenerationOptions()) options.push_back(std::move(o));
  options.insert(options.end(),
                 {{"no-speculate", "", "plain decoding for this request, even with a drafter configured"},
                  {"draft-tokens", "K", "most drafted tokens per step, in [1, 16] (default: the cluster's)"},
                  {"json-schema", "FILE", "constrain the answer to JSON valid under this JSON Schema"},
                  {"json-object", "", "constrain the answer to a JSON object"},
                  {"grammar", "FILE", "constrain the answer to this GBNF grammar (rule `root`)"},
                  {"regex", "RE", "constrain the answer to match this regular expression"},
                  {"timeout", "SECONDS", "deadline of the request (default 600)"},
                  {"json", "", "print one JSON object (ids, text, usage) instead of streaming"}});
  return Args("cascade generate", "--server HOST:PORT (--prompt T | --prompt-ids 1,2,3 | --chat T) [options]",
              std::move(options));
}

// The options of `cascade chat`.
Args ChatArgs() {
  std::vector<ArgOption> options = {{"server", "HOST:PORT", "the coordinator's address (required)"},
                                    TlsCaOption(),
                                    {"system", "TEXT", "a system message that opens the conversation"}};
  for (ArgOption& o : GenerationOptions()) {
    if (o.name != "logprobs") options.push_back(std::move(o));  // A chat prints text only.
  }
  options.push_back({"timeout", "SECONDS", "deadline of each answer (default 600)"});
  return Args("cascade chat", "--server HOST:PORT [options]   (interactive: one message a line, answers streamed)",
              std::move(options));
}

absl::StatusOr<client::Client> Connect(const Args& args) {
  auto timeout = args.GetInt("timeout", 600);
  if (!timeout.ok()) return timeout.status();
  return ConnectToServer(args, std::chrono::seconds(*timeout));
}

// --json-schema FILE, --json-object, --grammar FILE or --regex RE: the request's
// constraint (the coordinator compiles it, and refuses it naming what it cannot follow).
absl::Status FillConstraint(const Args& args, v1::GenerateRequest* req) {
  const int given = args.Has("json-schema") + args.Has("json-object") + args.Has("grammar") + args.Has("regex");
  if (given > 1) return absl::InvalidArgumentError("give one of --json-schema, --json-object, --grammar, --regex");
  const auto read = [](const std::string& flag, const std::string& path) -> absl::StatusOr<std::string> {
    std::ifstream in(path);
    if (!in) return absl::InvalidArgumentError(StrCat("--", flag, ": cannot read '", path, "'"));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  v1::OutputConstraint* c = req->mutable_constraint();
  if (auto path = args.Get("json-schema")) {
    CASCADE_ASSIGN_OR_RETURN(*c->mutable_json_schema(), read("json-schema", *path));
  } else if (auto path = args.Get("grammar")) {
    CASCADE_ASSIGN_OR_RETURN(*c->mutable_grammar(), read("grammar", *path));
  } else if (auto re = args.Get("regex")) {
    c->set_regex(*re);
  } else if (args.Has("json-object")) {
    c->set_json_object(true);
  } else {
    req->clear_constraint();
  }
  return absl::OkStatus();
}

// --no-speculate and --draft-tokens N: the request's speculative field.
absl::Status FillSpeculative(const Args& args, v1::GenerateRequest* req) {
  if (args.Has("no-speculate")) req->mutable_speculative()->set_enabled(false);
  if (args.Has("draft-tokens")) {
    auto k = args.GetInt("draft-tokens", 0);
    if (!k.ok()) return k.status();
    req->mutable_speculative()->set_num_tokens(static_cast<int32_t>(*k));
  }
  return absl::OkStatus();
}

nlohmann::json SpeculativeJson(const v1::SpeculativeStats& s) {
  return {{"steps", s.steps()},
          {"drafted_tokens", s.drafted_tokens()},
          {"accepted_tokens", s.accepted_tokens()},
          {"acceptance_rate", s.acceptance_rate()},
          {"mean_accepted_length", s.mean_accepted_length()},
          {"draft_s", s.draft_s()},
          {"verify_s", s.verify_s()}};
}

// MoE models: per layer, the busiest expert's tokens over the mean and every expert's
// tokens since the cluster started.
void PrintExpertLoad(const v1::ClusterStatus& st) {
  for (const v1::ExpertLoad& l : st.expert_load()) {
    const auto busiest = std::max_element(l.tokens().begin(), l.tokens().end());
    std::string tokens;
    for (int64_t t : l.tokens()) tokens += StrCat(tokens.empty() ? "" : " ", t);
    std::printf("moe layer %3lld: max/mean %.2f (busiest expert %lld), tokens per expert: %s\n",
                static_cast<long long>(l.layer()), l.max_mean_ratio(),
                static_cast<long long>(busiest == l.tokens().end() ? -1 : busiest - l.tokens().begin()),
                tokens.c_str());
    if (l.rank_imbalance_before() == 0) continue;  // No redundant experts placed.
    std::string replicas;
    for (int i = 0; i < l.replica_experts_size() && i < l.replica_ranks_size(); ++i) {
      replicas += StrCat(replicas.empty() ? "" : ", ", l.replica_experts(i), "@", l.replica_ranks(i));
    }
    std::printf("moe layer %3lld: redundant experts (expert@rank) %s; busiest rank over the mean %.2f -> %.2f\n",
                static_cast<long long>(l.layer()), replicas.empty() ? "none" : replicas.c_str(),
                l.rank_imbalance_before(), l.rank_imbalance_after());
  }
}

void PrintReplicas(const v1::ClusterStatus& st) {
  std::printf("replicas: %d of %d serving\n", st.replicas_serving(), st.n_replicas());
  for (const v1::ReplicaStatus& r : st.replicas()) {
    const std::string role = r.role().empty() || r.role() == "serve" ? "" : StrCat(" (", r.role(), ")");
    std::printf(
        "replica %d%s: %s; running %lld, waiting %lld; kv blocks %lld free of %lld; steps %lld, finished %lld\n",
        r.replica(), role.c_str(), r.serving() ? "serving" : "down", static_cast<long long>(r.running()),
        static_cast<long long>(r.waiting()), static_cast<long long>(r.kv_blocks_free()),
        static_cast<long long>(r.kv_blocks_total()), static_cast<long long>(r.steps()),
        static_cast<long long>(r.requests_finished()));
  }
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  Args args = GenerateArgs();
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("generate", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto req = ProtoRequestFromArgs(args);
  if (!req.ok()) return Fail("generate", req.status());
  if (absl::Status s = FillSpeculative(args, &*req); !s.ok()) return Fail("generate", s);
  if (absl::Status s = FillConstraint(args, &*req); !s.ok()) return Fail("generate", s);
  auto c = Connect(args);
  if (!c.ok()) return Fail("generate", c.status());
  if (args.Has("json")) {
    auto resp = c->Complete(*req);
    if (!resp.ok()) return FailRpc("generate", args, resp.status());
    const auto& u = resp->usage();
    const double decode_s = u.total_s() - u.ttft_s();
    nlohmann::json j = nlohmann::json::parse(ResultJson(
        {resp->prompt_ids().begin(), resp->prompt_ids().end()}, {resp->token_ids().begin(), resp->token_ids().end()},
        resp->text(), FinishReasonText(resp->finish()), 0.0, u.ttft_s() > 0 ? u.prompt_tokens() / u.ttft_s() : 0,
        decode_s > 0 ? (u.completion_tokens() - 1) / decode_s : 0));
    if (!resp->reasoning().empty()) j["reasoning"] = resp->reasoning();
    if (resp->logprobs_size() > 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& t : resp->logprobs()) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& x : t.top()) top.push_back({{"id", x.id()}, {"logprob", x.logprob()}});
        lp.push_back({{"id", t.id()}, {"logprob", t.logprob()}, {"top", top}});
      }
      j["logprobs"] = lp;
    }
    if (u.has_speculative()) j["speculative"] = SpeculativeJson(u.speculative());
    j["usage"] = {{"ttft_s", u.ttft_s()},
                  {"total_s", u.total_s()},
                  {"prompt_tokens", u.prompt_tokens()},
                  {"completion_tokens", u.completion_tokens()},
                  {"cached_tokens", u.cached_tokens()}};
    if (u.expert_load_max_mean() > 0) j["usage"]["expert_load_max_mean"] = u.expert_load_max_mean();
    if (u.kv_hidden_tokens() > 0) j["usage"]["kv_hidden_tokens"] = u.kv_hidden_tokens();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  // The answer goes to stdout; reasoning (harmony's analysis channel), if any, to stderr.
  absl::Status s = c->Generate(*req, [&](const v1::GenerateResponse& chunk) {
    std::fwrite(chunk.reasoning().data(), 1, chunk.reasoning().size(), stderr);
    std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!s.ok()) return FailRpc("generate", args, s);
  return 0;
}

int ChatCommand(int argc, char** argv) {
  Args args = ChatArgs();
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("chat", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto c = Connect(args);
  if (!c.ok()) return Fail("chat", c.status());
  v1::GenerateRequest base;
  if (auto st = FillProtoGeneration(args, &base); !st.ok()) return Fail("chat", st);
  v1::ChatMessages history;
  if (auto sys = args.Get("system")) {
    auto* m = history.add_messages();
    m->set_role("system");
    m->set_content(*sys);
  }
  std::string line;
  std::fprintf(stderr, "chatting with %s (empty line or Ctrl-D ends)\n", args.GetOr("server", "").c_str());
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    auto* u = history.add_messages();
    u->set_role("user");
    u->set_content(line);
    v1::GenerateRequest req = base;
    *req.mutable_prompt()->mutable_chat() = history;
    std::string answer;
    absl::Status s = c->Generate(req, [&](const v1::GenerateResponse& chunk) {
      answer += chunk.text();
      std::fwrite(chunk.reasoning().data(), 1, chunk.reasoning().size(), stderr);
      std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    if (!s.ok()) return FailRpc("chat", args, s);
    auto* a = history.add_messages();
    a->set_role("assistant");
    a->set_content(answer);
  }
  return 0;
}

int StatusCommand(int argc, char** argv) {
  Args args("cascade status", "--server HOST:PORT [options]   (exit 0 once the cluster is ready)",
            {{"server", "HOST:PORT", "the coordinator's address (required)"},
             TlsCaOption(),
             {"wait", "SECONDS", "wait up to this long for the cluster to be ready (default 60)"},
             {"timeout", "SECONDS", "deadline of each status call (default 600)"}});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("status", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto c = Connect(args);
  if (!c.ok()) return Fail("status", c.status());
  auto wait = args.GetInt("wait", 60);
  if (!wait.ok()) return Fail("status", wait.status());
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<v1::ClusterStatus> st;
  while (true) {
    st = c->GetClusterStatus();
    if (st.ok() && st->ready()) break;
    if (SecondsSince(t0) >= static_cast<double>(*wait)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  if (!st.ok()) return FailRpc("status", args, st.status());
  std::printf("cluster %s%s%s\n", ClusterStateText(st->cluster_state()).c_str(), st->detail().empty() ? "" : ": ",
              st->detail().c_str());
  std::printf("%-6s %-14s %-6s %-8s %-22s %-8s %12s %12s\n", "stage", "layers", "node", "device", "worker", "state",
              "weights", "kv cache");
  const bool replicas = st->n_replicas() > 1;
  for (const auto& s : st->stages()) {
    // With replicas, stage "R.S": stage S of replica R.
    const std::string stage = s.draft()  ? "draft"
                              : replicas ? StrCat(s.replica(), ".", s.stage())
                                         : std::to_string(s.stage());
    std::string experts;
    if (s.expert_end() > 0) {
      experts = StrCat(s.expert_parallel() ? StrCat("  experts [", s.expert_begin(), ", ", s.expert_end(), ")")
                                           : StrCat("  experts [0, ", s.expert_end(), ") sliced"),
                       " ", s.expert_bytes(), " B");
    }
    std::printf("%-6s [%3lld, %3lld)     %-6s %-8s %-22s %-8s %8.1f MiB %8.1f MiB%s\n", stage.c_str(),
                static_cast<long long>(s.first_layer()), static_cast<long long>(s.last_layer()), s.node().c_str(),
                s.device().c_str(), s.worker_address().c_str(), WorkerStateText(s.worker_state()).c_str(),
                s.weight_bytes() / 1048576.0, s.kv_bytes() / 1048576.0, experts.c_str());
  }
  std::printf(
      "kv blocks %lld free of %lld (block size %lld, %s); running %lld, waiting %lld; steps %lld, "
      "largest batch %lld, preemptions %lld, finished %lld\n",
      static_cast<long long>(st->kv_blocks_free()), static_cast<long long>(st->kv_blocks_total()),
      static_cast<long long>(st->kv_block_size()), st->kv_cache_dtype().c_str(), static_cast<long long>(st->running()),
      static_cast<long long>(st->waiting()), static_cast<long long>(st->steps()),
      static_cast<long long>(st->max_batch_seen()), static_cast<long long>(st->preemptions()),
      static_cast<long long>(st->requests_finished()));
  if (replicas) PrintReplicas(*st);
  if (st->prefix_caching()) {
    const int64_t query = st->prefix_query_tokens();
    std::printf("prefix cache: on, hit %lld/%lld tokens (%.1f%%), %lld cached blocks\n",
                static_cast<long long>(st->prefix_hit_tokens()), static_cast<long long>(query),
                query > 0 ? 100.0 * static_cast<double>(st->prefix_hit_tokens()) / static_cast<double>(query) : 0.0,
                static_cast<long long>(st->kv_blocks_cached()));
    if (st->host_kv_blocks_total() > 0) {
      std::printf(
          "host tier: %lld of %lld blocks hold evicted prefixes; %lld blocks copied out, %lld back; "
          "%lld hit tokens from it\n",
          static_cast<long long>(st->host_kv_blocks_cached()), static_cast<long long>(st->host_kv_blocks_total()),
          static_cast<long long>(st->host_kv_offloaded_blocks()), static_cast<long long>(st->host_kv_onloaded_blocks()),
          static_cast<long long>(st->prefix_host_hit_tokens()));
    }
  } else {
    std::printf("prefix cache: off\n");
  }
  if (!st->drafter().empty()) {
    const v1::SpeculativeStats& sp = st->speculative();
    std::printf(
        "speculative (%s drafter): %lld verify steps, acceptance %.1f%%, mean accepted length %.2f, "
        "draft %.2f s, verify %.2f s\n",
        st->drafter().c_str(), static_cast<long long>(sp.steps()), 100 * sp.acceptance_rate(),
        sp.mean_accepted_length(), sp.draft_s(), sp.verify_s());
  }
  PrintExpertLoad(*st);
  return st->ready() ? 0 : 1;
}

}  // namespace cascade::cli
