// The control-plane RPCs workers call (cluster.proto `Coordinator`), on the coordinator's
// own listener (server.cluster_listen): thin handlers over the Clusters of the replicas
// (registration goes to the first replica with an open slot for the worker's node and
// device; heartbeats to the replica they name) and RendezvousStore (rendezvous, keys
// prefixed by each replica's group), and the gate in front of them.
//
// Who may call what (docs/ARCHITECTURE.md §1, "Trust"): with a cluster CA, Join wants the
// join token and signs the caller's certificate request for the node it names; every
// other call wants a worker's cluster certificate (UNAUTHENTICATED without one,
// PERMISSION_DENIED for a certificate that is not a worker's), and Register only for the
// node its certificate names. Without a CA (security.insecure) anyone may call anything
// but Join. Tokens are compared in constant time and never logged.
// Thread-safe (gRPC calls handlers concurrently; both backends are thread-safe).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "coordinator/control/rendezvous_store.h"
#include "coordinator/control/stage_workers.h"
#include "security/cluster_ca.h"

namespace cascade::coordinator {

// How the control plane trusts its callers.
struct ControlPlaneTrust {
  const security::ClusterCa* ca = nullptr;  // Borrowed; null: insecure.
  std::string join_token;
};

class ControlService final : public v1::Coordinator::Service {
 public:
  // `replicas`: the workers of each data-parallel replica, in replica order.
  ControlService(std::vector<StageWorkers*> replicas, RendezvousStore* store, ControlPlaneTrust trust)
      : replicas_(std::move(replicas)), store_(store), trust_(std::move(trust)) {}
  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse*) override;
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status PutKey(grpc::ServerContext*, const v1::PutKeyRequest*, v1::PutKeyResponse*) override;
  grpc::Status WaitKey(grpc::ServerContext*, const v1::WaitKeyRequest*, v1::WaitKeyResponse*) override;

 private:
  // The node named by the caller's worker certificate ("" for anyone when insecure), or
  // why the caller may not use the control plane.
  absl::StatusOr<std::string> CallerNode(const grpc::ServerContext& ctx) const;

  std::vector<StageWorkers*> replicas_;  // Borrowed.
  RendezvousStore* store_;               // Borrowed.
  const ControlPlaneTrust trust_;
};

}  // namespace cascade::coordinator
