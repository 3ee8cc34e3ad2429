// `cascade-worker --coordinator HOST:PORT --node NAME --device cpu|cuda:N [--threads N]
// [--listen HOST:PORT] [--draft] (--ca FILE --token-file FILE | --insecure)`: one worker
// per device. It joins the cluster (its join token buys a certificate from the cluster
// CA), serves the Worker RPCs to the coordinator alone, registers (as the drafter with
// --draft), heartbeats, and exits when the coordinator goes away (worker/bring_up.h).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/server_builder.h"
#include "security/cluster_ca.h"
#include "worker/bring_up.h"
#include "worker/worker_service.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "cascade-worker: %s\n", msg.c_str());
  return 2;
}

// Bad arguments: EX_USAGE (sysexits.h), which the coordinator's launcher never restarts.
int UsageError(const absl::Status& s) {
  Fail(std::string(s.message()));
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cascade;
  Args args = worker::WorkerArgs();
  if (absl::Status s = args.Parse(argc, argv, 1); !s.ok()) return UsageError(s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  absl::StatusOr<worker::WorkerFlags> flags = worker::ParseWorkerFlags(args);
  if (!flags.ok()) return UsageError(flags.status());
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // Mutual TLS unless --insecure: join with the token, then serve and call with the
  // certificate it bought.
  absl::StatusOr<std::shared_ptr<const security::TlsIdentity>> tls = worker::JoinCluster(*flags, g_stop);
  if (!tls.ok()) {
    return tls.status().code() == absl::StatusCode::kInvalidArgument ? UsageError(tls.status())
                                                                     : Fail(std::string(tls.status().message()));
  }

  worker::WorkerServiceOptions opts;
  opts.tls = *tls;
  opts.n_threads = flags->n_threads;
  opts.device = flags->device;
  opts.coordinator = flags->coordinator;
  opts.refuse_token = flags->refuse_token;
  // Fault injection for the disaggregation kill tests (a local worker takes no test flags,
  // but inherits the coordinator's environment): hold each KV send this long, so that a
  // kill lands while a transfer is under way.
  if (const char* delay = std::getenv("CASCADE_KV_SEND_DELAY_MS_FOR_TESTING"); delay != nullptr) {
    opts.kv_send_delay_ms = std::atoi(delay);
    CASCADE_LOG(Warning) << "tests only: every KV send waits " << opts.kv_send_delay_ms << " ms first";
  }
  // UCX's own variable wins over our one-second keepalive (read here, once).
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") != nullptr) opts.ucx_keepalive_interval.clear();
  worker::WorkerService service(opts);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // grpcurl and friends list the services.
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags->listen, security::ClusterServerCredentials(tls->get()), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail("cannot listen on " + flags->listen);
  const std::string address = flags->advertise + ":" + std::to_string(port);

  auto stub =
      v1::Coordinator::NewStub(security::ClusterChannel(flags->coordinator, tls->get(), security::kCoordinatorName));
  absl::StatusOr<v1::RegisterResponse> assigned = worker::Register(*stub, *flags, address, g_stop);
  if (!assigned.ok()) return Fail(std::string(assigned.status().message()));
  service.SetPlanned(*assigned, flags->draft);
  CASCADE_LOG(Info) << "worker " << address << " registered as rank " << assigned->rank() << " (stage "
                    << assigned->stage() << "/" << assigned->n_stages() << ")"
                    << (flags->insecure ? ", plaintext" : ", mutual TLS");

  worker::Heartbeat(*stub, *assigned, g_stop);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
