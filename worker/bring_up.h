// A worker's way into the cluster, the steps of cascade-worker's main as
// coordinator/bring_up.h holds the coordinator's: its flags, the join (the join token buys
// a certificate for a key made here), the registration that assigns it a stage, and the
// heartbeats that keep it there.
//
// Thread-safety: free functions; `stop` is read concurrently (a signal handler sets it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "core/args.h"
#include "core/tensor.h"
#include "security/grpc_tls.h"

namespace cascade::worker {

struct WorkerFlags {
  std::string coordinator;          // --coordinator HOST:PORT (required).
  std::string node = "n0";          // --node.
  std::string device_name = "cpu";  // --device, as given.
  Device device;                    // --device, parsed.
  int n_threads = 1;                // --threads.
  std::string listen = "127.0.0.1:0";
  std::string advertise;  // --advertise; empty: --listen's host.
  bool draft = false;
  bool insecure = false;
  std::string ca_path, token_path;  // --ca, --token-file (else $CASCADE_JOIN_TOKEN).
  std::chrono::seconds join_timeout{60};
  int32_t refuse_token = -1;  // --refuse-token-for-testing.
};

// cascade-worker's flags and their help.
Args WorkerArgs();
// The flags. InvalidArgument with the message to print for a usage error (the worker then
// exits EX_USAGE, which the coordinator's launcher never restarts), including a cuda:N
// device this machine does not have.
absl::StatusOr<WorkerFlags> ParseWorkerFlags(const Args& args);

// The worker's certificate for mutual TLS, or null with --insecure. InvalidArgument for
// unreadable --ca / --token-file (a usage error); the coordinator's refusal
// (FailedPrecondition) or silence past the join timeout (Unavailable) otherwise.
absl::StatusOr<std::shared_ptr<const security::TlsIdentity>> JoinCluster(const WorkerFlags& flags,
                                                                         const std::atomic<bool>& stop);

// Registers the worker serving at `address` and returns its assignment; retried while the
// coordinator may still be starting.
absl::StatusOr<v1::RegisterResponse> Register(v1::Coordinator::Stub& stub, const WorkerFlags& flags,
                                              const std::string& address, const std::atomic<bool>& stop);

// Heartbeats until `stop`, the coordinator's shutdown, or three missed in a row (the
// coordinator is gone).
void Heartbeat(v1::Coordinator::Stub& stub, const v1::RegisterResponse& assigned, const std::atomic<bool>& stop);

}  // namespace cascade::worker
