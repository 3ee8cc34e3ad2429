#include "coordinator/cluster_service.h"

#include "proto/grpc_status.h"

namespace cascade::coordinator {

grpc::Status ClusterService::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                      v1::RegisterResponse* resp) {
  auto r = cluster_->Register(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ClusterService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  resp->set_shutdown(!cluster_->Heartbeat(req->rank(), req->worker_id()));
  return grpc::Status::OK;
}

grpc::Status ClusterService::PutKey(grpc::ServerContext*, const v1::PutKeyRequest* req, v1::PutKeyResponse*) {
  store_->Put(req->key(), req->value());
  return grpc::Status::OK;
}

grpc::Status ClusterService::WaitKey(grpc::ServerContext* ctx, const v1::WaitKeyRequest* req,
                                     v1::WaitKeyResponse* resp) {
  // Bounded by the caller's deadline, and never more than a minute per call.
  auto deadline = std::min(ctx->deadline(), std::chrono::system_clock::now() + std::chrono::minutes(1));
  auto v = store_->Wait(req->key(), deadline);
  if (!v.ok()) return ToGrpc(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

}  // namespace cascade::coordinator
