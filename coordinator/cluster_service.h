// The control-plane RPCs workers call (cluster.proto `Coordinator`): thin handlers over
// Cluster (registration, heartbeats) and KeyValueStore (rendezvous).
// Thread-safe (gRPC calls handlers concurrently; both backends are thread-safe).
#pragma once

#include "cascade/v1/cluster.grpc.pb.h"
#include "coordinator/cluster.h"
#include "coordinator/key_value_store.h"

namespace cascade::coordinator {

class ClusterService final : public v1::Coordinator::Service {
 public:
  ClusterService(Cluster* cluster, KeyValueStore* store) : cluster_(cluster), store_(store) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status PutKey(grpc::ServerContext*, const v1::PutKeyRequest*, v1::PutKeyResponse*) override;
  grpc::Status WaitKey(grpc::ServerContext*, const v1::WaitKeyRequest*, v1::WaitKeyResponse*) override;

 private:
  Cluster* cluster_;      // Borrowed.
  KeyValueStore* store_;  // Borrowed.
};

}  // namespace cascade::coordinator
