#include "coordinator/control/control_service.h"

#include <algorithm>

#include "core/logging.h"
#include "core/str_cat.h"
#include "proto/grpc_status.h"
#include "security/grpc_tls.h"

namespace cascade::coordinator {

namespace {

// A node name is printable and short: it goes into a certificate's common name.
bool ValidNodeName(const std::string& node) {
  if (node.empty() || node.size() > 64) return false;
  for (char c : node) {
    if (c <= ' ' || c > '~' || c == '/' || c == ',' || c == '=' || c == '+') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ControlService::CallerNode(const grpc::ServerContext& ctx) const {
  if (trust_.ca == nullptr) return std::string();
  const std::string cn = security::PeerCommonName(ctx);
  if (cn.empty()) {
    return absl::UnauthenticatedError(
        "the control plane wants a cluster certificate: a worker joins with the cluster's token first "
        "(cascade-worker --ca CA.pem --token-file FILE)");
  }
  const std::string_view prefix = security::kWorkerCommonNamePrefix;
  if (cn.compare(0, prefix.size(), prefix) != 0) {
    return absl::PermissionDeniedError(StrCat("certificate '", cn, "' is not a worker's"));
  }
  return cn.substr(prefix.size());
}

grpc::Status ControlService::Join(grpc::ServerContext*, const v1::JoinRequest* req, v1::JoinResponse* resp) {
  if (trust_.ca == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this cluster runs without TLS (security.insecure): start the worker with --insecure");
  }
  if (!security::TokensEqual(req->token(), trust_.join_token)) {
    CASCADE_LOG(Warning) << "refused a Join for node '" << req->node() << "': wrong join token";
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "wrong join token: give the worker the cluster's (security.cluster_dir/join.token)");
  }
  const bool planned =
      std::any_of(replicas_.begin(), replicas_.end(), [&](const StageWorkers* c) { return c->PlansNode(req->node()); });
  if (!ValidNodeName(req->node()) || !planned) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        StrCat("no worker is planned on node '", req->node(), "' (see the config's nodes)"));
  }
  auto cert = trust_.ca->Sign(req->csr_pem(), StrCat(security::kWorkerCommonNamePrefix, req->node()),
                              {std::string(security::kWorkerName)});
  if (!cert.ok()) return ToGrpc(cert.status());
  CASCADE_LOG(Info) << "issued a cluster certificate to a worker of node '" << req->node() << "'";
  resp->set_cert_pem(*cert);
  return grpc::Status::OK;
}

grpc::Status ControlService::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                      v1::RegisterResponse* resp) {
  auto node = CallerNode(*ctx);
  if (!node.ok()) return ToGrpc(node.status());
  if (trust_.ca != nullptr && *node != req->node()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        StrCat("the caller's certificate is for node '", *node, "', not '", req->node(), "'"));
  }
  // The first replica with an open slot takes it; the last refusal says what waits.
  absl::Status refused;
  for (StageWorkers* workers : replicas_) {
    auto r = workers->Register(*req);
    if (r.ok()) {
      *resp = *r;
      return grpc::Status::OK;
    }
    refused = r.status();
  }
  return ToGrpc(refused);
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  if (auto node = CallerNode(*ctx); !node.ok()) return ToGrpc(node.status());
  const int r = req->replica();
  resp->set_shutdown(r < 0 || r >= static_cast<int>(replicas_.size()) ||
                     !replicas_[r]->Heartbeat(req->rank(), req->worker_id()));
  return grpc::Status::OK;
}

grpc::Status ControlService::PutKey(grpc::ServerContext* ctx, const v1::PutKeyRequest* req, v1::PutKeyResponse*) {
  if (auto node = CallerNode(*ctx); !node.ok()) return ToGrpc(node.status());
  store_->Put(req->key(), req->value());
  return grpc::Status::OK;
}

grpc::Status ControlService::WaitKey(grpc::ServerContext* ctx, const v1::WaitKeyRequest* req,
                                     v1::WaitKeyResponse* resp) {
  if (auto node = CallerNode(*ctx); !node.ok()) return ToGrpc(node.status());
  // Bounded by the caller's deadline, and never more than a minute per call.
  auto deadline = std::min(ctx->deadline(), std::chrono::system_clock::now() + std::chrono::minutes(1));
  auto v = store_->Wait(req->key(), deadline);
  if (!v.ok()) return ToGrpc(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

}  // namespace cascade::coordinator
