// comm::Rendezvous over the coordinator's PutKey/WaitKey RPCs, so workers bootstrap the
// data plane (UCX worker addresses, later NCCL ids) with no extra service.
// Thread-safe (gRPC stubs are).
#pragma once

#include <memory>
#include <string>

#include "cascade/v1/cluster.grpc.pb.h"
#include "comm/communicator.h"
#include "security/grpc_tls.h"

namespace cascade::worker {

class GrpcRendezvous final : public comm::Rendezvous {
 public:
  // `tls`: the worker's cluster certificate (null: an insecure cluster).
  GrpcRendezvous(const std::string& coordinator_address, const security::TlsIdentity* tls);
  absl::Status Put(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> Wait(std::string_view key, int64_t timeout_ms) override;

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace cascade::worker
