#include "worker/worker_service.h"

#include <algorithm>
#include <chrono>

#include "comm/nccl_communicator.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "proto/grpc_status.h"
#include "security/cluster_ca.h"
#include "wire/step_wire.h"
#include "worker/grpc_rendezvous.h"

namespace cascade::worker {

WorkerService::WorkerService(const WorkerServiceOptions& options) : options_(options) {}
WorkerService::~WorkerService() = default;

void WorkerService::SetPlanned(const v1::RegisterResponse& assigned, bool draft) {
  absl::MutexLock lock(&plan_mu_);
  planned_ = assigned;
  planned_draft_ = draft;
}

grpc::Status WorkerService::Authorize(const grpc::ServerContext& context) const {
  if (options_.tls == nullptr) return grpc::Status::OK;
  const std::string cn = security::PeerCommonName(context);
  if (cn.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "a worker takes calls only from its coordinator (with the cluster's certificate)");
  }
  if (cn != security::kCoordinatorCommonName) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, StrCat("'", cn, "' is not the coordinator"));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::CheckPlanned(const v1::LoadShardRequest& req) {
  absl::MutexLock lock(&plan_mu_);
  const auto known = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_) { return planned_.has_value(); };
  if (!plan_mu_.AwaitWithTimeout(absl::Condition(&known), absl::Seconds(10))) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "LoadShard before this worker registered");
  }
  const v1::RegisterResponse& p = *planned_;
  const int tp_size = std::max(1, req.tp_size());
  // The drafter's stage and TP fields are its own (one stage, no TP), not the target's.
  const bool place =
      req.draft() || (req.stage() == p.stage() && req.tp_rank() == p.tp_rank() && tp_size == std::max(1, p.tp_size()));
  if (req.model_path() == p.model_path() && req.first_layer() == p.first_layer() &&
      req.last_layer() == p.last_layer() && req.draft() == planned_draft_ && place) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      StrCat("LoadShard of ", req.model_path(), " layers [", req.first_layer(), ", ", req.last_layer(),
                             ") stage ", req.stage(), " tp ", req.tp_rank(), "/", tp_size,
                             " is not this worker's planned shard (", p.model_path(), " layers [", p.first_layer(),
                             ", ", p.last_layer(), ") stage ", p.stage(), " tp ", p.tp_rank(), "/", p.tp_size(), ")"));
}

absl::StatusOr<std::unique_ptr<comm::Communicator>> WorkerService::Connect(const std::string& group, int rank, int size,
                                                                           int64_t spin_us, v1::Transport transport) {
  comm::GroupOptions g;
  g.group = group;
  g.rank = rank;
  g.size = size;
  g.timeout_ms = options_.comm_timeout_ms;
  if (transport == v1::TRANSPORT_NCCL) {
    if (options_.device.kind != DeviceKind::kCuda) {
      return absl::InvalidArgumentError("transport nccl needs a cuda device; this worker runs on cpu");
    }
    return comm::NcclCommunicator::Create(g, rendezvous_.get(), options_.device.index);
  }
  if (transport != v1::TRANSPORT_UCX) {
    return absl::InvalidArgumentError(StrCat("unknown transport ", static_cast<int>(transport), " (ucx or nccl)"));
  }
  comm::UcxOptions ucx;
  ucx.spin_us = spin_us;
  ucx.keepalive_interval = options_.ucx_keepalive_interval;
  return comm::UcxCommunicator::Create(g, rendezvous_.get(), ucx);
}

absl::Status WorkerService::ConnectDataPlane(const v1::LoadShardRequest& req) {
  rendezvous_ = std::make_unique<GrpcRendezvous>(options_.coordinator, options_.tls.get());
  if (req.tp_size() > 1) {
    // TP peers meet twice per layer: spin briefly instead of sleeping on the event fd.
    absl::StatusOr<std::unique_ptr<comm::Communicator>> c = Connect(
        StrCat(req.group(), "/tp", req.stage()), req.tp_rank(), req.tp_size(), options_.tp_spin_us, req.tp_transport());
    if (!c.ok()) return Annotate(c.status(), "connecting the tensor-parallel group");
    tp_comm_ = *std::move(c);
  }
  if (req.n_stages() > 1) {
    absl::StatusOr<std::unique_ptr<comm::Communicator>> c =
        Connect(StrCat(req.group(), "/pp", req.tp_rank()), req.stage(), req.n_stages(), 0, req.pp_transport());
    if (!c.ok()) return Annotate(c.status(), "connecting the pipeline stages");
    comm_ = *std::move(c);
  }
  if (req.kv_group_size() > 1) {
    // Host memory between replicas: their devices need not share a fabric.
    absl::StatusOr<std::unique_ptr<comm::Communicator>> c =
        Connect(req.kv_group(), req.kv_rank(), req.kv_group_size(), 0, v1::TRANSPORT_UCX);
    if (!c.ok()) return Annotate(c.status(), "connecting the KV transfer group");
    kv_comm_ = *std::move(c);
  }
  return absl::OkStatus();
}

StageExecutorOptions WorkerService::StageOptions(const v1::LoadShardRequest& req) const {
  StageExecutorOptions o;
  o.model_path = req.model_path();
  o.first_layer = req.first_layer();
  o.last_layer = req.last_layer();
  o.stage = req.stage();
  o.n_stages = req.n_stages();
  o.kv_blocks = req.kv_blocks();
  o.host_kv_blocks = req.host_kv_blocks();
  o.kv_rank = req.kv_rank();
  o.kv_block_size = req.kv_block_size();
  o.kv_dtype = wire::FromKvCacheDType(req.kv_cache_dtype());
  o.n_threads = options_.n_threads;
  o.device = options_.device;
  o.tp_rank = req.tp_rank();
  o.tp_size = std::max(1, req.tp_size());
  o.expert_parallel = req.expert_parallel();
  o.expert_all_to_all = req.expert_all_to_all();
  o.kv_window_tokens = req.kv_window_tokens();
  o.kv_sink_tokens = req.kv_sink_tokens();
  o.full_handoff = req.pp_handoff() == v1::PP_HANDOFF_FULL;
  o.device_sampling = !req.host_sampling();
  o.cuda_graphs = req.cuda_graphs();
  o.cpu_bf16_prefill = req.cpu_bf16_prefill();
  o.draft = req.draft();
  o.refuse_token = options_.refuse_token;
  o.kv_send_delay_ms = options_.kv_send_delay_ms;
  return o;
}

v1::LoadProgress WorkerService::Loaded() const {
  v1::LoadProgress done;
  done.set_fraction(1.0);
  done.set_done(true);
  done.set_weight_bytes(executor_->weight_bytes());
  done.set_kv_bytes(executor_->kv_bytes());
  done.set_expert_begin(executor_->shard().expert_begin);
  done.set_expert_end(executor_->shard().expert_end);
  done.set_expert_bytes(executor_->expert_bytes());
  return done;
}

grpc::Status WorkerService::LoadShard(grpc::ServerContext* context, const v1::LoadShardRequest* req,
                                      grpc::ServerWriter<v1::LoadProgress>* writer) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  if (grpc::Status s = CheckPlanned(*req); !s.ok()) {
    CASCADE_LOG(Error) << "refused LoadShard: " << s.error_message();
    return s;
  }
  absl::MutexLock lock(&mu_);
  executor_.reset();
  comm_.reset();
  tp_comm_.reset();
  kv_comm_.reset();
  CASCADE_LOG(Info) << "loading stage " << req->stage() << "/" << req->n_stages() << " tp " << req->tp_rank() << "/"
                    << std::max(1, req->tp_size()) << ": layers [" << req->first_layer() << ", " << req->last_layer()
                    << ") of " << req->model_path()
                    << (req->tp_size() > 1 && req->n_stages() > 1
                            ? (req->pp_handoff() == v1::PP_HANDOFF_FULL ? ", full hand-off" : ", split hand-off")
                            : "");
  // The data plane first, through the rendezvous: the TP group of this stage, then the
  // pipeline link of this TP rank (TP rank r of every stage).
  if (absl::Status s = ConnectDataPlane(*req); !s.ok()) return ToGrpc(s);
  const StageExecutorOptions o = StageOptions(*req);
  double last_sent = -1;
  auto e = StageExecutor::Create(o, comm_.get(), tp_comm_.get(), [&](double f) {
    if (f - last_sent < 0.05 && f < 1.0) return;
    last_sent = f;
    v1::LoadProgress p;
    p.set_fraction(f);
    writer->Write(p);
  });
  if (!e.ok()) return ToGrpc(e.status());
  executor_ = std::move(*e);
  executor_->set_kv_comm(kv_comm_.get());
  // A later StepRequest.kv_join meets its group here; it runs inside Step, which holds mu_.
  executor_->set_kv_connect([this](const std::string& group, int rank, int size) {
    mu_.AssertHeld();
    return Connect(group, rank, size, 0, v1::TRANSPORT_UCX);
  });
  writer->Write(Loaded());
  CASCADE_LOG(Info) << "stage " << req->stage() << " ready: " << executor_->weight_bytes() / 1048576.0
                    << " MiB weights, " << executor_->kv_bytes() / 1048576.0 << " MiB KV";
  return grpc::Status::OK;
}

grpc::Status WorkerService::Step(grpc::ServerContext* context,
                                 grpc::ServerReaderWriter<v1::StepResult, v1::StepRequest>* stream) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (executor_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "Step before LoadShard");
  }
  v1::StepRequest req;
  while (stream->Read(&req)) {
    auto result = executor_->Execute(req);
    if (!result.ok()) {
      // A malformed step is refused before any compute or data-plane traffic, by every
      // stage alike: answer it and keep serving. Anything else ends the stream.
      const bool refused = result.status().code() == absl::StatusCode::kInvalidArgument;
      CASCADE_LOG(Error) << "step " << req.step_id() << (refused ? " refused: " : " failed: ")
                         << result.status().ToString();
      v1::StepResult err;
      err.set_step_id(req.step_id());
      err.set_code(static_cast<int32_t>(result.status().code()));
      err.set_error(std::string(result.status().message()));
      if (refused) {
        if (!stream->Write(err)) break;
        continue;
      }
      stream->Write(err);
      return ToGrpc(result.status());
    }
    if (!stream->Write(*result)) break;
  }
  return grpc::Status::OK;
}

}  // namespace cascade::worker
