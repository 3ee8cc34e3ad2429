#include "worker/grpc_rendezvous.h"

#include <chrono>

#include "proto/grpc_status.h"
#include "security/cluster_ca.h"

namespace cascade::worker {

GrpcRendezvous::GrpcRendezvous(const std::string& address, const security::TlsIdentity* tls)
    : stub_(v1::Coordinator::NewStub(security::ClusterChannel(address, tls, security::kCoordinatorName))) {}

absl::Status GrpcRendezvous::Put(std::string_view key, std::string_view value) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::PutKeyRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  v1::PutKeyResponse resp;
  return FromGrpc(stub_->PutKey(&ctx, req, &resp));
}

absl::StatusOr<std::string> GrpcRendezvous::Wait(std::string_view key, int64_t timeout_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::WaitKeyRequest req;
  req.set_key(std::string(key));
  v1::WaitKeyResponse resp;
  const grpc::Status s = stub_->WaitKey(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s);
  return resp.value();
}

}  // namespace cascade::worker
