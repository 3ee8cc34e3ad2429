#include "worker/bring_up.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <thread>

#include "comm/nccl_communicator.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cuda_device.h"
#include "security/cluster_ca.h"

namespace cascade::worker {
namespace {

// Calls `rpc` (Join or Register) until it answers, retrying each second for up to
// `timeout` while the coordinator may still be starting. A refusal is final.
// `plaintext` says how this worker dials, for the hint when nothing ever answers.
absl::Status CallCoordinator(const std::string& what, const std::function<grpc::Status(grpc::ClientContext*)>& rpc,
                             const std::string& coordinator, std::chrono::seconds timeout, bool plaintext,
                             const std::atomic<bool>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    const grpc::Status s = rpc(&ctx);
    if (s.ok()) return absl::OkStatus();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::FailedPreconditionError(what + " refused: " + s.error_message());
    }
    if (std::chrono::steady_clock::now() >= deadline || stop) {
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

// A cuda:N this machine cannot use, refused now with the runtime's reason rather than at
// load, after registering.
absl::Status CheckDevice(const WorkerFlags& f) {
  if (f.device.kind != DeviceKind::kCuda) return absl::OkStatus();
  const kernels::CudaAvailability cuda = kernels::QueryCudaDevices();
  if (cuda.device_count > f.device.index) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(
      "--device ", f.device_name,
      ": no usable GPU: ", cuda.device_count > 0 ? StrCat("only ", cuda.device_count, " CUDA devices") : cuda.reason));
}

// A positive integer flag.
absl::StatusOr<int64_t> Positive(const Args& args, const std::string& name, int64_t fallback) {
  absl::StatusOr<int64_t> v = args.GetInt(name, fallback);
  if (!v.ok() || *v < 1) return absl::InvalidArgumentError(StrCat("--", name, " must be a positive integer"));
  return v;
}

}  // namespace

Args WorkerArgs() {
  return Args("cascade-worker", "--coordinator HOST:PORT [options]",
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
}

absl::StatusOr<WorkerFlags> ParseWorkerFlags(const Args& args) {
  WorkerFlags f;
  CASCADE_ASSIGN_OR_RETURN(f.coordinator, args.Require("coordinator"));
  f.node = args.GetOr("node", f.node);
  f.device_name = args.GetOr("device", f.device_name);
  absl::StatusOr<Device> device = ParseDevice(f.device_name);
  if (!device.ok()) return absl::InvalidArgumentError(StrCat("--device: ", device.status().message()));
  f.device = *device;
  CASCADE_RETURN_IF_ERROR(CheckDevice(f));
  CASCADE_ASSIGN_OR_RETURN(const int64_t threads, Positive(args, "threads", 1));
  f.n_threads = static_cast<int>(threads);
  absl::StatusOr<int64_t> refuse = args.GetInt("refuse-token-for-testing", -1);
  if (!refuse.ok()) return absl::InvalidArgumentError("--refuse-token-for-testing must be a token id");
  f.refuse_token = static_cast<int32_t>(*refuse);
  CASCADE_ASSIGN_OR_RETURN(const int64_t join_timeout, Positive(args, "join-timeout", 60));
  f.join_timeout = std::chrono::seconds(join_timeout);
  f.listen = args.GetOr("listen", f.listen);
  f.advertise = args.GetOr("advertise", f.listen.substr(0, f.listen.rfind(':')));
  f.draft = args.Has("draft");
  f.insecure = args.Has("insecure");
  f.ca_path = args.GetOr("ca", "");
  f.token_path = args.GetOr("token-file", "");
  if (f.insecure && (args.Has("ca") || args.Has("token-file"))) {
    return absl::InvalidArgumentError("--insecure with --ca or --token-file: choose plaintext or mutual TLS");
  }
  const char* env_token = std::getenv("CASCADE_JOIN_TOKEN");
  if (!f.insecure && (f.ca_path.empty() || (f.token_path.empty() && (env_token == nullptr || *env_token == '\0')))) {
    return absl::InvalidArgumentError(
        "joining a cluster needs its CA bundle (--ca FILE) and join token (--token-file FILE or "
        "$CASCADE_JOIN_TOKEN), both in the coordinator's security.cluster_dir; or --insecure for a "
        "coordinator with security.insecure: true");
  }
  return f;
}

absl::StatusOr<std::shared_ptr<const security::TlsIdentity>> JoinCluster(const WorkerFlags& f,
                                                                         const std::atomic<bool>& stop) {
  if (f.insecure) return nullptr;
  absl::StatusOr<std::string> ca = security::ReadSecretFile(f.ca_path);
  if (!ca.ok()) return absl::InvalidArgumentError(StrCat("--ca: ", ca.status().message()));
  absl::StatusOr<std::string> token =
      f.token_path.empty() ? std::string(std::getenv("CASCADE_JOIN_TOKEN")) : security::ReadSecretFile(f.token_path);
  if (!token.ok()) return absl::InvalidArgumentError(StrCat("--token-file: ", token.status().message()));
  CASCADE_ASSIGN_OR_RETURN(security::KeyAndCsr key,
                           security::MakeKeyAndCsr(std::string(security::kWorkerCommonNamePrefix) + f.node));
  auto stub = v1::Coordinator::NewStub(security::ServerAuthChannel(f.coordinator, *ca, security::kCoordinatorName));
  v1::JoinRequest req;
  req.set_token(*token);
  req.set_csr_pem(key.csr_pem);
  req.set_node(f.node);
  v1::JoinResponse resp;
  CASCADE_RETURN_IF_ERROR(CallCoordinator(
      "join", [&](grpc::ClientContext* ctx) { return stub->Join(ctx, req, &resp); }, f.coordinator, f.join_timeout,
      false, stop));
  return std::make_shared<const security::TlsIdentity>(
      security::TlsIdentity{*ca, resp.cert_pem(), std::move(key.key_pem)});
}

absl::StatusOr<v1::RegisterResponse> Register(v1::Coordinator::Stub& stub, const WorkerFlags& f,
                                              const std::string& address, const std::atomic<bool>& stop) {
  v1::RegisterRequest reg;
  reg.set_address(address);
  reg.set_node(f.node);
  reg.set_device(f.device_name);
  reg.set_pid(getpid());
  reg.set_n_threads(f.n_threads);
  reg.set_draft(f.draft);
  reg.set_nccl(comm::NcclCommunicator::Available());
  // What weights and KV can use: host RAM for cpu, the GPU's free memory for cuda:N.
  reg.set_memory_bytes(f.device.kind == DeviceKind::kCuda
                           ? static_cast<int64_t>(kernels::QueryCudaMemory(f.device.index).free_bytes)
                           : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
  v1::RegisterResponse assigned;
  CASCADE_RETURN_IF_ERROR(CallCoordinator(
      "registration", [&](grpc::ClientContext* ctx) { return stub.Register(ctx, reg, &assigned); }, f.coordinator,
      f.join_timeout, f.insecure, stop));
  return assigned;
}

void Heartbeat(v1::Coordinator::Stub& stub, const v1::RegisterResponse& assigned, const std::atomic<bool>& stop) {
  const auto interval = std::chrono::milliseconds(std::max<int64_t>(assigned.heartbeat_ms(), 100));
  int missed = 0;
  while (!stop) {
    std::this_thread::sleep_for(interval);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + interval * 2);
    v1::HeartbeatRequest hb;
    hb.set_rank(assigned.rank());
    hb.set_worker_id(assigned.worker_id());
    hb.set_replica(assigned.replica());
    v1::HeartbeatResponse resp;
    const grpc::Status s = stub.Heartbeat(&ctx, hb, &resp);
    if (s.ok() && resp.shutdown()) return;
    missed = s.ok() ? 0 : missed + 1;
    if (missed >= 3) {
      CASCADE_LOG(Warning) << "coordinator unreachable (" << s.error_message() << "); exiting";
      return;
    }
  }
}

}  // namespace cascade::worker
