// `cascade-coordinator --config FILE [--worker-threads N]`: loads the config and the
// model's metadata and tokenizer (never its weights), plans the stages, serves the
// public API (server.listen) and the control plane (server.cluster_listen, mutual TLS
// with the cluster's CA), launches the local workers, waits for every stage, and logs one
// line with `ready` and the public address. Config errors exit 2 naming the key.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "coordinator/bring_up.h"
#include "coordinator/config.h"
#include "coordinator/control/control_service.h"
#include "coordinator/control/control_trust.h"
#include "coordinator/control/rendezvous_store.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/control/stage_workers.h"
#include "coordinator/front/api_keys.h"
#include "coordinator/front/health_watch.h"
#include "coordinator/front/http_front.h"
#include "coordinator/front/inference_service.h"
#include "coordinator/front/public_tls.h"
#include "coordinator/launcher.h"
#include "coordinator/planner.h"
#include "coordinator/serving/replicas.h"
#include "core/args.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "security/grpc_tls.h"
#include "text/tool_calls.h"

namespace {

std::atomic<int> g_signals{0};  // SIGINT/SIGTERM received: 1 drains, 2 stops waiting.
void OnSignal(int) { ++g_signals; }

int Fail(const absl::Status& s) {
  std::string msg(s.message());
  for (char& c : msg)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "cascade-coordinator: %s\n", msg.c_str());
  return 2;
}

// Flags after --config.
struct Flags {
  int n_threads = 1;        // --worker-threads: CPU threads of each local worker.
  int64_t startup_s = 120;  // --startup-timeout: seconds to wait for every worker.
  bool list_workers = false;
};

// Graceful shutdown (SIGTERM or SIGINT): new requests are refused (UNAVAILABLE, health
// NOT_SERVING), the ones begun run to their end for up to `timeout_s` (a second signal
// stops waiting), then the serving loops stop and end any left with UNAVAILABLE.
void Drain(cascade::coordinator::InferenceService& inference, cascade::coordinator::Replicas& replicas,
           cascade::coordinator::HealthWatch& health, int timeout_s) {
  inference.Drain();
  health.Set(false, "draining");
  CASCADE_LOG(Info) << "draining: " << inference.live_calls() << " request(s) in flight, taking no new ones (up to "
                    << timeout_s << " s; signal again to stop now)";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (inference.live_calls() > 0 && g_signals < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (const int left = inference.live_calls(); left > 0) {
    CASCADE_LOG(Warning) << "drain ended with " << left << " request(s) unfinished: they end with UNAVAILABLE";
  }
  replicas.Stop();
}

// A started gRPC server with one service on `listen` (the port it got in *port), or null.
std::unique_ptr<grpc::Server> StartServer(const std::string& listen, std::shared_ptr<grpc::ServerCredentials> creds,
                                          grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, std::move(creds), port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  return server != nullptr && *port != 0 ? std::move(server) : nullptr;
}

// The API keys of security.api_keys_file, when given (empty: no key needed).
absl::StatusOr<cascade::coordinator::ApiKeys> LoadApiKeys(const cascade::coordinator::ClusterConfig& config) {
  if (config.security.api_keys_file.empty()) return cascade::coordinator::ApiKeys();
  CASCADE_ASSIGN_OR_RETURN(cascade::coordinator::ApiKeys keys,
                           cascade::coordinator::ApiKeys::Load(config.security.api_keys_file));
  CASCADE_LOG(Info) << "API keys: " << keys.size() << " loaded; the public API wants one";  // Never the keys.
  return keys;
}

// The two gRPC servers and where they are reached.
struct Servers {
  std::unique_ptr<grpc::Server> api, control;
  std::string address;          // The public API's HOST:PORT.
  std::string control_address;  // What the workers dial.
};

// The public API and the control plane listen apart: clients never reach Register,
// rendezvous keys or Join, and the control plane can stay on the cluster's network. The
// public API serves TLS with server.tls_cert_file (the certificate and key are checked
// here, before anything listens).
absl::StatusOr<Servers> StartServers(const cascade::coordinator::ClusterConfig& config,
                                     cascade::coordinator::InferenceService& inference,
                                     cascade::coordinator::ControlService& control_service,
                                     const cascade::coordinator::ControlTrust& trust) {
  using namespace cascade;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // grpcurl and friends list the services.
  CASCADE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> public_credentials,
                           coordinator::PublicServerCredentials(config.server));
  Servers s;
  int port = 0, control_port = 0;
  s.api = StartServer(config.server.listen, public_credentials, &inference, &port);
  if (s.api == nullptr) return absl::UnavailableError(StrCat("server.listen: cannot listen on ", config.server.listen));
  s.control = StartServer(config.server.cluster_listen, security::ClusterServerCredentials(trust.identity().get()),
                          &control_service, &control_port);
  if (s.control == nullptr) {
    return absl::UnavailableError(StrCat("server.cluster_listen: cannot listen on ", config.server.cluster_listen));
  }
  s.address = coordinator::HostPort(config.server.listen_host, port);
  if (!config.server.tls_cert_file.empty()) CASCADE_LOG(Info) << "public API over TLS on " << s.address;
  // A wildcard listener is reached through loopback here.
  const std::string& ch = config.server.cluster_host;
  s.control_address = coordinator::HostPort(ch == "0.0.0.0" ? "127.0.0.1" : ch == "::" ? "::1" : ch, control_port);
  return s;
}

// The OpenAI-style HTTP front on server.http_listen, or null when it is not configured.
absl::StatusOr<std::unique_ptr<cascade::coordinator::HttpFront>> StartHttp(
    const cascade::coordinator::ClusterConfig& config, cascade::coordinator::InferenceService& inference,
    cascade::coordinator::Replicas& replicas, const cascade::text::Tokenizer* tokenizer,
    cascade::coordinator::ServingMetrics& metrics, const cascade::coordinator::ApiKeys& keys) {
  using namespace cascade::coordinator;
  if (config.server.http_listen.empty()) return nullptr;
  // server.tool_call_format: the template's own syntax unless the config names one.
  cascade::text::ToolCallFormat tool_format = cascade::text::DetectToolCallFormat(tokenizer->chat_template());
  const bool from_template = config.server.tool_call_format == "auto";
  if (!from_template) (void)cascade::text::ParseToolCallFormat(config.server.tool_call_format, &tool_format);
  CASCADE_LOG(Info) << "tool calls: " << cascade::text::ToolCallFormatName(tool_format)
                    << (from_template ? " (from the chat template)" : " (server.tool_call_format)");
  auto http = std::make_unique<HttpFront>(&inference, &replicas, tokenizer, &metrics,
                                          HttpFrontOptions{.host = config.server.http_host,
                                                           .port = config.server.http_port,
                                                           .threads = config.server.http_threads,
                                                           .model_id = config.server.model_name,
                                                           .keys = &keys,
                                                           .health_needs_key = config.security.health_needs_key,
                                                           .metrics_needs_key = config.security.metrics_needs_key,
                                                           .tls_cert_file = config.server.tls_cert_file,
                                                           .tls_key_file = config.server.tls_key_file,
                                                           .tool_format = tool_format});
  CASCADE_RETURN_IF_ERROR(http->Start());
  CASCADE_LOG(Info) << (config.server.tls_cert_file.empty() ? "http" : "https") << " front on "
                    << config.server.http_host << ":" << http->port() << " (model '" << config.server.model_name
                    << "')";
  return http;
}

// Launches the local workers and waits until every replica is up. A worker that refuses
// its device (no usable GPU for cuda:N) will never register: the wait stops and says why.
absl::Status LaunchAndBringUp(const cascade::coordinator::ClusterConfig& config,
                              const cascade::coordinator::ServingPlan& serving, const Flags& flags,
                              const cascade::coordinator::ControlTrust& trust, const std::string& control_address,
                              cascade::coordinator::Replicas& replicas, cascade::coordinator::Launcher& launcher) {
  using namespace cascade;
  using namespace cascade::coordinator;
  launcher.OnExit([&replicas](int stage, const std::string& why, bool final) {
    if (!final) return;
    for (StageWorkers* workers : replicas.all_workers()) {
      workers->AbortStartup(stage < 0 ? StrCat("the drafter's worker ", why)
                                      : StrCat("the worker for stage ", stage, " ", why));
    }
  });
  CASCADE_RETURN_IF_ERROR(
      LaunchLocalWorkers(config, serving, flags.n_threads, {trust.worker_args(), trust.worker_env()}, launcher));
  CASCADE_LOG(Info) << "waiting for " << replicas.n_workers() << " worker(s) on " << control_address
                    << (trust.insecure() ? " (plaintext)" : " (mutual TLS)");
  absl::Status st = replicas.BringUp(std::chrono::seconds(flags.startup_s));
  if (!st.ok()) CASCADE_LOG(Error) << st.ToString();
  return st;
}

// The one line that says the cluster serves: where, its layout, its KV pool and context, and
// a MoE model's expert form (ExpertCommDescription; empty when none).
void LogReady(const cascade::coordinator::ClusterConfig& config, const cascade::coordinator::Replicas& replicas,
              const std::string& address, int64_t n_blocks, int64_t max_context, const std::string& expert_comm) {
  using namespace cascade;
  using namespace cascade::coordinator;
  const StageWorkers& first = replicas.workers(0);
  const DraftSection& draft = config.draft;
  const ParallelSection& p = config.parallel;
  const std::string layout =
      p.disaggregated
          ? StrCat(
                "prefill ", p.prefill_replicas, " x ", p.prefill.pipeline, " stage(s) x tp ", p.prefill.tensor,
                ", decode ", p.decode_replicas, " x ", p.decode.pipeline, " stage(s) x tp ", p.decode.tensor,
                p.local_prefill_tokens > 0
                    ? StrCat(", prompts of <= ", p.local_prefill_tokens, " tokens prefilled on the decode side")
                    : ", every prompt prefilled on the prefill side (parallel.disaggregation.local_prefill_tokens 0)")
          : StrCat(replicas.size() > 1 ? StrCat(replicas.size(), " replicas x ") : std::string(), first.n_stages(),
                   " stage(s) x tp ", first.tp_size());
  CASCADE_LOG(Info)
      << "ready on " << address << " (" << layout
      << (first.tp_size() > 1 && first.n_stages() > 1
              ? StrCat(", ", PpHandoffName(config.transport.pp_handoff), " hand-off")
              : std::string())
      << ", " << n_blocks << " KV blocks of " << config.scheduler.kv_block_size
      << (first.options().host_kv_blocks > 0 ? StrCat(" + ", first.options().host_kv_blocks, " in the host tier")
                                             : std::string())
      << ", context " << max_context << ", KV policy " << KvPolicyDescription(config.scheduler)
      << (config.scheduler.cpu_bf16_prefill
              ? StrCat(", prefill activations ", CpuPrefillActivationsDescription(config.scheduler))
              : std::string())
      << (p.redundant_experts > 0
              ? StrCat(", ", p.redundant_experts, " redundant expert(s) per rank, placed every ", p.eplb_interval_steps,
                       " steps", p.eplb_interval_given ? "" : " (defaulted: parallel.eplb_interval_steps)")
              : std::string())
      << (expert_comm.empty() ? "" : StrCat(", experts ", expert_comm))
      << (draft.kind == DraftKind::kNone ? std::string() : StrCat(", drafter ", DraftKindName(draft.kind))) << ")";
}

// Serves the planned cluster until SIGINT/SIGTERM: the gRPC services, the local workers,
// bring-up (with the KV pool lowered to what the GPUs hold), then the replicas' serving loops.
// The exit code.
int Serve(const cascade::coordinator::ClusterConfig& config, const cascade::coordinator::ServedModels& models,
          const cascade::coordinator::ServingPlan& serving, const Flags& flags) {
  using namespace cascade;
  using namespace cascade::coordinator;
  const model::ModelConfig& mc = models.target.config;
  auto trust = ControlTrust::Create(config);
  if (!trust.ok()) return Fail(trust.status());
  StageWorkersOptions worker_options = serving.workers;
  worker_options.tls = (*trust)->identity();
  Replicas replicas(serving.replicas, worker_options, models.tokenizer.get(), serving.scheduler, serving.speculation,
                    config.parallel.route_by_prefix,
                    config.parallel.disaggregated
                        ? ReplicaLayout{serving.roles, serving.kv_holders, config.parallel.local_prefill_tokens}
                        : ReplicaLayout{});
  RendezvousStore store;
  ControlService control_service(replicas.all_workers(), &store, {(*trust)->ca(), (*trust)->join_token()});
  const std::string expert_comm = mc.n_experts > 0 ? ExpertCommDescription(config.parallel) : "";
  InferenceService inference(
      &replicas, models.tokenizer.get(), mc,
      {config.model.path, serving.max_context, std::string(DraftKindName(config.draft.kind)),
       KvPolicyDescription(config.scheduler), expert_comm, CpuPrefillActivationsDescription(config.scheduler)});
  ServingMetrics metrics;
  absl::StatusOr<ApiKeys> keys = LoadApiKeys(config);
  if (!keys.ok()) return Fail(keys.status());
  inference.SetApiKeys(&*keys);
  replicas.SetMetrics(&metrics);
  replicas.SetRecoveryTimeout(std::chrono::seconds(config.server.recovery_timeout_s));
  inference.SetMetrics(&metrics);

  absl::StatusOr<Servers> servers = StartServers(config, inference, control_service, **trust);
  if (!servers.ok()) return Fail(servers.status());
  HealthWatch health(servers->api->GetHealthCheckService());  // NOT_SERVING until the cluster is ready.
  absl::StatusOr<std::unique_ptr<HttpFront>> http =
      StartHttp(config, inference, replicas, models.tokenizer.get(), metrics, *keys);
  if (!http.ok()) return Fail(http.status());
  // A client that closes its HTTP connection must fail a write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  Launcher launcher(DefaultWorkerBinary(), servers->control_address);
  if (absl::Status st = LaunchAndBringUp(config, serving, flags, **trust, servers->control_address, replicas, launcher);
      !st.ok()) {
    return Fail(st);
  }
  const int64_t n_blocks = replicas.min_kv_blocks();
  const int64_t max_context = MaxContext(mc, n_blocks, config.scheduler.kv_block_size, config.scheduler.kv_sink_window);
  if (n_blocks != serving.workers.kv_blocks) inference.SetMaxContext(max_context);  // GPUs hold fewer.
  replicas.Start();
  health.Update(replicas);
  LogReady(config, replicas, servers->address, n_blocks, max_context, expert_comm);
  while (g_signals == 0) {
    health.Update(replicas);  // NOT_SERVING while no replica has every worker, until one rebuilds.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Drain(inference, replicas, health, config.server.drain_timeout_s);
  CASCADE_LOG(Info) << "shutting down";
  if (*http != nullptr) (*http)->Stop();
  servers->api->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  launcher.StopAll();
  servers->control->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cascade;
  using namespace cascade::coordinator;
  Args args("cascade-coordinator", "--config FILE [options]",
            {{"config", "FILE", "the cluster's YAML config (required; keys in configs/README.md)"},
             {"worker-threads", "N", "CPU threads of each local worker (default 1)"},
             {"startup-timeout", "SECONDS", "how long to wait for every worker to register and load (default 120)"},
             {"list-workers", "", "print the command line of each external worker and exit"}});
  if (auto s = args.Parse(argc, argv, 1); !s.ok()) return Fail(s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto path = args.Require("config");
  if (!path.ok()) return Fail(path.status());
  auto config = LoadClusterConfig(*path);
  if (!config.ok()) return Fail(config.status());
  auto threads = args.GetInt("worker-threads", 1);
  auto startup = args.GetInt("startup-timeout", 120);
  if (!threads.ok()) return Fail(threads.status());
  if (!startup.ok()) return Fail(startup.status());
  const Flags flags{static_cast<int>(*threads), *startup, args.Has("list-workers")};

  // The models' metadata and tokenizers only; then the plan, the KV pool, the options.
  auto models = OpenServedModels(*config);
  if (!models.ok()) return Fail(models.status());
  auto serving = PlanServing(*config, *models);
  if (!serving.ok()) return Fail(serving.status());
  model::LogDefaultedKeys(models->target);
  if (flags.list_workers) {
    PrintExternalWorkers(*config, *serving, stdout);
    return 0;
  }
  for (size_t r = 0; r < serving->replicas.size(); ++r) {
    if (serving->replicas.size() > 1) std::fprintf(stderr, "replica %zu:\n", r);
    std::fprintf(stderr, "%s\n", serving->replicas[r].ToString().c_str());
  }
  return Serve(*config, *models, *serving, flags);
}
