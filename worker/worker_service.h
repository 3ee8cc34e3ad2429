// The gRPC face of a worker: `LoadShard` builds the stage (data plane first, then the
// weights and KV cache), `Step` streams steps to the StageExecutor in arrival order.
// One step stream at a time; LoadShard and Step never run concurrently (the coordinator
// loads before it steps), which a mutex enforces.
// Only the coordinator may call (with mutual TLS, its certificate's common name; in an
// insecure cluster, anyone), and LoadShard only for the shard the coordinator planned for
// this worker when it registered (SetPlanned): a model path or layer range it was not
// given is refused with PERMISSION_DENIED.
// Thread-safety: the gRPC handlers may run on any thread; the stage (rendezvous,
// communicators, executor) is guarded by `mu_`, held for the whole of each handler; the
// planned shard by `plan_mu_`. `options_` is set at construction and read-only afterwards.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "comm/communicator.h"
#include "comm/ucx_communicator.h"
#include "security/grpc_tls.h"
#include "worker/stage_executor.h"

namespace cascade::worker {

struct WorkerServiceOptions {
  int n_threads = 1;                          // CPU compute threads for the stage.
  Device device;                              // Where the stage runs: cpu or cuda:N.
  std::string coordinator;                    // host:port, for the rendezvous keys.
  int64_t comm_timeout_ms = 30000;            // Data-plane operations give up after this.
  int64_t tp_spin_us = 50;                    // TP collectives poll this long before sleeping.
  int32_t refuse_token = -1;                  // StageExecutorOptions::refuse_token (tests only).
  int kv_send_delay_ms = 0;                   // StageExecutorOptions::kv_send_delay_ms (tests only).
  std::string ucx_keepalive_interval = "1s";  // comm::UcxOptions::keepalive_interval.
  // This worker's cluster certificate (its calls to the coordinator, and who may call it);
  // null: an insecure cluster.
  std::shared_ptr<const security::TlsIdentity> tls;
};

class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(const WorkerServiceOptions& options);
  ~WorkerService() override;

  grpc::Status LoadShard(grpc::ServerContext* context, const v1::LoadShardRequest* request,
                         grpc::ServerWriter<v1::LoadProgress>* writer) override;
  grpc::Status Step(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::StepResult, v1::StepRequest>* stream) override;

  // The shard the coordinator assigned at registration: the only one LoadShard accepts.
  // `draft`: it registered as the drafter.
  void SetPlanned(const v1::RegisterResponse& assigned, bool draft);

 private:
  // OK for the coordinator; UNAUTHENTICATED / PERMISSION_DENIED for anyone else.
  grpc::Status Authorize(const grpc::ServerContext& context) const;
  // OK when `req` is the planned shard (waiting briefly for Register's answer, which can
  // reach this process after the coordinator's LoadShard); PERMISSION_DENIED otherwise.
  grpc::Status CheckPlanned(const v1::LoadShardRequest& req);
  // A communicator of `size` ranks over `transport` for `group`, met through rendezvous_.
  absl::StatusOr<std::unique_ptr<comm::Communicator>> Connect(const std::string& group, int rank, int size,
                                                              int64_t spin_us, v1::Transport transport)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stage's TP group (tp_comm_) and this rank's pipeline link (comm_), as `req` asks.
  absl::Status ConnectDataPlane(const v1::LoadShardRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The executor's options: the request's shard and this worker's own (the one place
  // LoadShard's fields are read).
  StageExecutorOptions StageOptions(const v1::LoadShardRequest& req) const;
  // The last progress message: done, with what the loaded stage holds.
  v1::LoadProgress Loaded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerServiceOptions options_;
  absl::Mutex mu_;  // Serialises LoadShard and Step.
  std::unique_ptr<comm::Rendezvous> rendezvous_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<comm::Communicator> comm_ ABSL_GUARDED_BY(mu_);     // Pipeline link of this TP rank.
  std::unique_ptr<comm::Communicator> tp_comm_ ABSL_GUARDED_BY(mu_);  // The stage's TP group.
  std::unique_ptr<comm::Communicator> kv_comm_ ABSL_GUARDED_BY(mu_);  // Disaggregation's KV group.
  std::unique_ptr<StageExecutor> executor_ ABSL_GUARDED_BY(mu_);
  absl::Mutex plan_mu_;
  std::optional<v1::RegisterResponse> planned_ ABSL_GUARDED_BY(plan_mu_);
  bool planned_draft_ ABSL_GUARDED_BY(plan_mu_) = false;
};

}  // namespace cascade::worker
