// `cascade-worker --coordinator HOST:PORT --node NAME --device cpu|cuda:N [--threads N]
// [--listen HOST:PORT] [--draft] (--ca FILE --token-file FILE | --insecure)`: one worker
// per device. It joins the cluster (its join token buys a certificate from the cluster
// CA), serves the Worker RPCs to the coordinator alone, registers (as the drafter with
// --draft), heartbeats, and exits when the coordinator goes away.
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "comm/nccl_communicator.h"
#include "core/args.h"
#include "core/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/server_builder.h"
#include "kernels/cuda_device.h"
#include "security/cluster_ca.h"
#include "security/grpc_tls.h"
#include "worker/worker_service.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "cascade-worker: %s\n", msg.c_str());
  return 2;
}

// Bad arguments: EX_USAGE (sysexits.h), which the coordinator's launcher never restarts.
int UsageError(const std::string& msg) {
  Fail(msg);
  return 64;
}

// Calls `rpc` (Join or Register) until it answers, retrying each second for up to
// `timeout` while the coordinator may still be starting. A refusal is final.
// `plaintext` says how this worker dials, for the hint when nothing ever answers.
absl::Status CallCoordinator(const std::string& what, const std::function<grpc::Status(grpc::ClientContext*)>& rpc,
                             const std::string& coordinator, std::chrono::seconds timeout, bool plaintext) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    const grpc::Status s = rpc(&ctx);
    if (s.ok()) return absl::OkStatus();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::FailedPreconditionError(what + " refused: " + s.error_message());
    }
    if (std::chrono::steady_clock::now() >= deadline || g_stop) {
      // A TLS handshake that fails looks like an unreachable server: say which mismatch
      // it may be.
      return absl::UnavailableError(
          "coordinator " + coordinator + " unreachable (" + what + "): " + s.error_message() +
          (plaintext ? "; if it runs with TLS (the default), this worker needs --ca and a join token, not --insecure"
                     : "; if it runs with security.insecure, start this worker with --insecure; otherwise check "
                       "that --ca is that cluster's ca.pem"));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Joins the cluster: proves the join token and gets a certificate for a key made here.
absl::StatusOr<cascade::security::TlsIdentity> Join(const std::string& coordinator, const std::string& ca_pem,
                                                    const std::string& token, const std::string& node,
                                                    std::chrono::seconds timeout) {
  using namespace cascade;
  auto key = security::MakeKeyAndCsr(std::string(security::kWorkerCommonNamePrefix) + node);
  if (!key.ok()) return key.status();
  auto stub = v1::Coordinator::NewStub(security::ServerAuthChannel(coordinator, ca_pem, security::kCoordinatorName));
  v1::JoinRequest req;
  req.set_token(token);
  req.set_csr_pem(key->csr_pem);
  req.set_node(node);
  v1::JoinResponse resp;
  absl::Status s = CallCoordinator(
      "join", [&](grpc::ClientContext* ctx) { return stub->Join(ctx, req, &resp); }, coordinator, timeout, false);
  if (!s.ok()) return s;
  return security::TlsIdentity{ca_pem, resp.cert_pem(), std::move(key->key_pem)};
}

// Heartbeats until a signal, the coordinator's shutdown, or three missed in a row (the
// coordinator is gone).
void Heartbeat(cascade::v1::Coordinator::Stub& stub, const cascade::v1::RegisterResponse& assigned) {
  const auto interval = std::chrono::milliseconds(std::max<int64_t>(assigned.heartbeat_ms(), 100));
  int missed = 0;
  while (!g_stop) {
    std::this_thread::sleep_for(interval);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + interval * 2);
    cascade::v1::HeartbeatRequest hb;
    hb.set_rank(assigned.rank());
    hb.set_worker_id(assigned.worker_id());
    hb.set_replica(assigned.replica());
    cascade::v1::HeartbeatResponse resp;
    const grpc::Status s = stub.Heartbeat(&ctx, hb, &resp);
    if (s.ok() && resp.shutdown()) return;
    missed = s.ok() ? 0 : missed + 1;
    if (missed >= 3) {
      CASCADE_LOG(Warning) << "coordinator unreachable (" << s.error_message() << "); exiting";
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cascade;
  Args args("cascade-worker", "--coordinator HOST:PORT [options]",
            {{"coordinator", "HOST:PORT", "the coordinator's address to register with (required)"},
             {"node", "NAME", "the node this worker runs on, as named in the cluster config (default n0)"},
             {"device", "cpu|cuda:N", "the device it computes on (default cpu)"},
             {"threads", "N", "CPU threads for compute (default 1)"},
             {"listen", "HOST:PORT", "where to serve the Worker RPCs (default 127.0.0.1:0, any free port)"},
             {"advertise", "HOST", "the host the coordinator and peers reach it at (default: --listen's host)"},
             {"draft", "", "register as the drafter worker (speculative decoding)"},
             {"ca", "FILE", "the cluster's CA bundle (security.cluster_dir/ca.pem), to join with mutual TLS"},
             {"token-file", "FILE",
              "the cluster's join token (security.cluster_dir/join.token; default: $CASCADE_JOIN_TOKEN)"},
             {"insecure", "", "plaintext, no certificates: only for a coordinator with security.insecure"},
             {"join-timeout", "SECONDS", "how long to retry joining and registering (default 60)"},
             {"refuse-token-for-testing", "ID", "refuse every step that carries this token id (tests only)"}});
  if (auto s = args.Parse(argc, argv, 1); !s.ok()) return UsageError(std::string(s.message()));
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto coordinator = args.Require("coordinator");
  if (!coordinator.ok()) return UsageError(std::string(coordinator.status().message()));
  const std::string node = args.GetOr("node", "n0");
  const std::string device = args.GetOr("device", "cpu");
  absl::StatusOr<Device> parsed = ParseDevice(device);
  if (!parsed.ok()) return UsageError("--device: " + std::string(parsed.status().message()));
  if (parsed->kind == DeviceKind::kCuda) {
    // Refuse now, with the runtime's reason, rather than register and fail at load.
    const kernels::CudaAvailability cuda = kernels::QueryCudaDevices();
    if (cuda.device_count <= parsed->index) {
      return UsageError(
          "--device " + device + ": no usable GPU: " +
          (cuda.device_count > 0 ? "only " + std::to_string(cuda.device_count) + " CUDA devices" : cuda.reason));
    }
  }
  auto threads = args.GetInt("threads", 1);
  if (!threads.ok() || *threads < 1) return UsageError("--threads must be a positive integer");
  auto refuse = args.GetInt("refuse-token-for-testing", -1);
  if (!refuse.ok()) return UsageError("--refuse-token-for-testing must be a token id");
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  auto join_timeout = args.GetInt("join-timeout", 60);
  if (!join_timeout.ok() || *join_timeout < 1) return UsageError("--join-timeout must be a positive integer");
  const std::chrono::seconds timeout(*join_timeout);
  // Mutual TLS unless --insecure: join with the token (a certificate for a key made here),
  // then serve and call with that certificate.
  std::shared_ptr<const security::TlsIdentity> tls;
  const bool insecure = args.Has("insecure");
  if (insecure && (args.Has("ca") || args.Has("token-file"))) {
    return UsageError("--insecure with --ca or --token-file: choose plaintext or mutual TLS");
  }
  if (!insecure) {
    const char* env_token = std::getenv("CASCADE_JOIN_TOKEN");
    if (!args.Has("ca") || (!args.Has("token-file") && (env_token == nullptr || *env_token == '\0'))) {
      return UsageError(
          "joining a cluster needs its CA bundle (--ca FILE) and join token (--token-file FILE or "
          "$CASCADE_JOIN_TOKEN), both in the coordinator's security.cluster_dir; or --insecure for a "
          "coordinator with security.insecure: true");
    }
    auto ca = security::ReadSecretFile(args.GetOr("ca", ""));
    if (!ca.ok()) return UsageError("--ca: " + std::string(ca.status().message()));
    absl::StatusOr<std::string> token = env_token != nullptr ? std::string(env_token) : std::string();
    if (args.Has("token-file")) token = security::ReadSecretFile(args.GetOr("token-file", ""));
    if (!token.ok()) return UsageError("--token-file: " + std::string(token.status().message()));
    auto identity = Join(*coordinator, *ca, *token, node, timeout);
    if (!identity.ok()) return Fail(std::string(identity.status().message()));
    tls = std::make_shared<security::TlsIdentity>(*std::move(identity));
  }

  worker::WorkerServiceOptions opts;
  opts.tls = tls;
  opts.n_threads = static_cast<int>(*threads);
  opts.device = *parsed;
  opts.coordinator = *coordinator;
  opts.refuse_token = static_cast<int32_t>(*refuse);
  // UCX's own variable wins over our one-second keepalive (read here, once).
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") != nullptr) opts.ucx_keepalive_interval.clear();
  worker::WorkerService service(opts);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // grpcurl and friends list the services.
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = args.GetOr("listen", "127.0.0.1:0");
  builder.AddListeningPort(listen, security::ClusterServerCredentials(tls.get()), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail("cannot listen on " + listen);
  const std::string host = args.GetOr("advertise", listen.substr(0, listen.rfind(':')));
  const std::string address = host + ":" + std::to_string(port);

  auto stub = v1::Coordinator::NewStub(security::ClusterChannel(*coordinator, tls.get(), security::kCoordinatorName));
  v1::RegisterRequest reg;
  reg.set_address(address);
  reg.set_node(node);
  reg.set_device(device);
  reg.set_pid(getpid());
  reg.set_n_threads(opts.n_threads);
  reg.set_draft(args.Has("draft"));
  reg.set_nccl(comm::NcclCommunicator::Available());
  // What weights and KV can use: host RAM for cpu, the GPU's free memory for cuda:N.
  reg.set_memory_bytes(opts.device.kind == DeviceKind::kCuda
                           ? static_cast<int64_t>(kernels::QueryCudaMemory(opts.device.index).free_bytes)
                           : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
  v1::RegisterResponse assigned;
  if (absl::Status s = CallCoordinator(
          "registration", [&](grpc::ClientContext* ctx) { return stub->Register(ctx, reg, &assigned); }, *coordinator,
          timeout, insecure);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  service.SetPlanned(assigned, reg.draft());
  CASCADE_LOG(Info) << "worker " << address << " registered as rank " << assigned.rank() << " (stage "
                    << assigned.stage() << "/" << assigned.n_stages() << ")"
                    << (insecure ? ", plaintext" : ", mutual TLS");

  Heartbeat(*stub, assigned);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
