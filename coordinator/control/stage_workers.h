// The coordinator's view of its workers: which worker holds which stage of the plan,
// their health, and the step streams that drive them. Bring-up waits for every stage's
// worker to register, loads all shards in parallel (their data plane connects through
// the rendezvous while they load), then opens one Step stream per worker. Steps go to
// every stage in the same order; the last stage's results come back in that order.
//
// Thread-safety: Register/Heartbeat/Status are called from gRPC threads; SendStep and
// NextResult from the one serving-loop thread. The slots, results, stream state, startup
// error and KV size are guarded by `mu_` (ABSL_GUARDED_BY, checked by clang's
// -Wthread-safety); `plan_` and `options_` are const; `generation_` is touched only by
// BringUp (before the serving loop starts) and Recover (on the serving-loop thread). Helpers
// marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) run under it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/planner.h"
#include "security/grpc_tls.h"

namespace cascade::coordinator {

struct StageWorkersOptions {
  std::string model_path;         // As the workers should open it.
  std::string group = "cascade";  // Rendezvous key prefix of this run (and replica).
  int replica = 0;                // Its data-parallel replica (parallel.data).
  int64_t kv_blocks = 0;  // KV blocks per worker (per lane under all-to-all; an upper bound with size_kv_from_gpus).
  int64_t host_kv_blocks = 0;  // Host tier of the prefix cache, per target worker (0: none).
  // Disaggregated serving: the KV group joining every target worker of every replica
  // (LoadShard's kv_group), its size, and the rank of this replica's first worker; worker
  // (stage s, TP rank r) has rank kv_rank_base + s * tensor + r. Size 0: no group.
  std::string kv_group;
  int kv_group_size = 0;
  int kv_rank_base = 0;  // At bring-up, lower kv_blocks to what every registered cuda:N worker holds after its
  // weights (coordinator/control/kv_budget.h): gpu_memory_fraction of the free memory it reported,
  // KV blocks of its StagePlan's kv_block_bytes (draft_block_bytes for the drafter) bytes.
  bool size_kv_from_gpus = false;
  double gpu_memory_fraction = 0.9;
  int64_t draft_block_bytes = 0;
  int64_t draft_weight_bytes = 0;  // The drafter's weights (its layers, embedding and head).
  int64_t kv_block_size = 16;
  DType kv_cache_dtype = DType::kF16;  // scheduler.kv_cache_dtype
  int64_t max_batched_tokens = 2048;
  // Stage hand-off over NCCL (transport.activations: nccl; all devices cuda) rather than UCX.
  bool pp_nccl = false;
  v1::PpHandoff pp_handoff = v1::PP_HANDOFF_SPLIT;  // transport.pp_handoff.
  bool expert_parallel = false;                     // parallel.expert (MoE layers).
  // parallel.expert_comm: all_to_all: every rank of the last stage answers for its lane's
  // sequences, so every step gathers every worker's answer (their tokens merged).
  bool expert_all_to_all = false;
  int redundant_experts = 0;     // parallel.redundant_experts: replica slots per rank and MoE layer.
  int eplb_interval_steps = 0;   // parallel.eplb_interval_steps.
  int64_t kv_window_tokens = 0;  // scheduler.kv_policy sink_window (0: full).
  int64_t kv_sink_tokens = 0;
  bool device_sampling = true;    // scheduler.device_sampling.
  bool cuda_graphs = false;       // scheduler.cuda_graphs.
  bool cpu_bf16_prefill = false;  // scheduler.cpu_prefill_activations: bf16.

  // The coordinator's cluster certificate for its calls to workers (mutual TLS); null:
  // plaintext (security.insecure).
  std::shared_ptr<const security::TlsIdentity> tls;

  int64_t heartbeat_ms = 500;    // Interval workers are told to use.
  int64_t dead_after_ms = 3000;  // No heartbeat for this long = dead.
  // The drafter worker (speculative decoding with a self or model drafter), when set: one
  // more worker, registered with `draft`, that loads layers [0, draft_layers) of
  // draft_model_path plus its head into its own KV cache of kv_blocks blocks.
  bool draft = false;
  std::string draft_model_path;
  int64_t draft_layers = 0;
  std::string draft_node;
  Device draft_device;
};

enum class WorkerState { kWaiting, kRegistered, kLoading, kReady, kDead };
std::string_view WorkerStateName(WorkerState s);
v1::WorkerState WorkerStateProto(WorkerState s);

class StageWorkers {
 public:
  StageWorkers(Plan plan, StageWorkersOptions options);
  ~StageWorkers();  // Close().
  // A shutdown: ends the step streams (cancelled, their readers joined) before the workers
  // are stopped, so that workers going away from now on are expected, not reported dead.
  // Idempotent.
  void Close();
  StageWorkers(const StageWorkers&) = delete;
  StageWorkers& operator=(const StageWorkers&) = delete;

  // A worker registers: it gets the first waiting stage on its node and device.
  // FailedPrecondition when no such stage is waiting (the message says which exist).
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request);
  // False when the rank is unknown or dead, or now held by another registration than
  // `worker_id` (the worker was declared dead and replaced): the worker should exit.
  bool Heartbeat(int rank, int64_t worker_id);

  // Waits up to `timeout` for every stage to register, then loads them and opens the
  // step streams. Unavailable / DeadlineExceeded naming the stage that failed.
  absl::Status BringUp(std::chrono::milliseconds timeout);
  // KV blocks per stage: options.kv_blocks, or after BringUp what the GPUs hold.
  int64_t kv_blocks() const;
  // Disaggregation: whether the workers are in the KV group, so that KV can move to or from
  // this replica. A replica rebuilt after a death is not, until a KV group join.
  bool kv_linked() const { return kv_linked_; }
  void set_kv_linked(bool linked) { kv_linked_ = linked; }  // After a KV group (re)join.
  // Ends a BringUp in progress (or the next one) with FailedPrecondition(`why`): a worker
  // that can never register (it refused its device or arguments).
  void AbortStartup(const std::string& why);

  // True when a stage died and every stage now has a live, registered worker again (a
  // restarted worker registered): `Recover` can rebuild the pipeline.
  bool CanRecover() const;
  // Closes the old step streams, reloads every stage into a fresh data-plane group and
  // reopens the streams. ServingLoop-loop thread only, with no step in flight.
  absl::Status Recover();

  // Sends a step to every stage. Unavailable when a stage is dead.
  absl::Status SendStep(const v1::StepRequest& step);
  // Sends a step to the drafter worker only. REQUIRES options().draft.
  absl::Status SendDraft(const v1::StepRequest& step);
  // The next result of the last stage or of the drafter (`draft` set), waiting up to
  // `timeout` (DeadlineExceeded); Unavailable naming the worker when one died or failed.
  absl::StatusOr<v1::StepResult> NextResult(std::chrono::milliseconds timeout);

  // Every stage ready and alive.
  bool Healthy() const;
  // MoE: the worst layer's busiest-expert tokens over its mean, over every token routed so
  // far (0 for a dense model or before any step).
  double ExpertLoadMaxMean() const;
  // MoE: tokens routed to each expert of every MoE layer so far (layer -> per expert).
  std::map<int64_t, std::vector<int64_t>> ExpertTokens() const;
  // parallel.redundant_experts: the placement just sent (layer, expert, rank) and each
  // layer's rank imbalance before and after it, for the status.
  struct ReplicaPlacement {
    std::vector<std::array<int64_t, 3>> replicas;
    std::map<int64_t, std::pair<double, double>> imbalance;
  };
  void SetReplicaPlacement(ReplicaPlacement placement);
  // Marks dead the workers whose heartbeats stopped; returns a description of the dead
  // ones (empty when none).
  std::string CheckHeartbeats();
  void FillStatus(v1::ClusterStatus* status) const;
  int n_stages() const { return static_cast<int>(plan_.stages.size()); }
  int tp_size() const { return plan_.stages.empty() ? 1 : static_cast<int>(plan_.stages[0].tp.size()); }
  // Target workers (the drafter, when there is one, comes after them).
  int n_workers() const { return n_stages() * tp_size(); }
  // Whether any worker (or the drafter) is planned on `node`.
  bool PlansNode(std::string_view node) const;
  const Plan& plan() const { return plan_; }
  const StageWorkersOptions& options() const { return options_; }
  // Where each worker's step time is observed. REQUIRES: before BringUp.
  void SetMetrics(ServingMetrics* metrics) { metrics_ = metrics; }

 private:
  struct Slot {
    StagePlan stage;
    int tp_rank = 0;        // This worker's rank in the stage's TP group.
    bool draft = false;     // The drafter worker (last slot).
    int rank = 0;           // Global worker rank.
    int64_t worker_id = 0;  // Its current registration (RegisterResponse.worker_id).
    std::string node;
    Device device;
    bool nccl = false;                         // The registered worker's binary has NCCL.
    int64_t memory_bytes = 0;                  // What it reported it can use (a GPU's free memory).
    int64_t kv_bytes = 0;                      // KV cache it allocated (reported when loaded).
    int64_t expert_begin = 0, expert_end = 0;  // MoE experts it holds (reported when loaded).
    int64_t expert_bytes = 0;
    WorkerState state = WorkerState::kWaiting;
    std::string address;
    int pid = 0;
    std::string death;  // Why it is dead.
    std::chrono::steady_clock::time_point last_seen;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Worker::Stub> stub;
    std::unique_ptr<grpc::ClientContext> step_ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResult>> stream;
    std::thread reader;
  };
  absl::Status LoadOne(int stage, const std::string& group, bool join_kv);
  // "nccl" when every worker of the stage's TP group runs on cuda and has NCCL, else "ucx"
  // (GPU workers then copy through host buffers).
  v1::Transport TpTransport(int pp_stage) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadAllAndOpenStreams();
  // Lowers kv_blocks_ to what the registered GPU workers hold (size_kv_from_gpus).
  absl::Status SizeKvFromGpus() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadResults(int stage);
  void MarkDead(int stage, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DeadDescription() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Plan plan_;
  const StageWorkersOptions options_;
  mutable absl::Mutex mu_;
  // The vector's length is fixed by the constructor (one slot per worker); the slots'
  // contents change under mu_.
  ServingMetrics* metrics_ = nullptr;  // Thread-safe itself; set before the streams open.
  std::vector<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  int64_t last_worker_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::StepResult> results_ ABSL_GUARDED_BY(mu_);
  // Steps with KV transfers (every step under all-to-all), by id: answers still awaited,
  // the last stage's result (its tokens, from each of its ranks), and what every worker
  // said of the transfers.
  struct Gathered {
    int remaining = 0;
    v1::StepResult result;
    std::vector<uint64_t> failed;
    std::string error, step_error, join_error;
    int64_t bytes = 0;
    int32_t code = 0;
  };
  absl::flat_hash_map<int64_t, Gathered> gathering_ ABSL_GUARDED_BY(mu_);
  // When SendStep sent each of the last steps, at step_id % size (the round-trip metric).
  std::array<std::pair<int64_t, std::chrono::steady_clock::time_point>, 64> sent_ ABSL_GUARDED_BY(mu_);
  // Tokens routed to each expert of each MoE layer since start, by global layer (from the
  // step results of every stage's TP rank 0).
  std::map<int64_t, std::vector<int64_t>> expert_tokens_ ABSL_GUARDED_BY(mu_);
  ReplicaPlacement replica_placement_ ABSL_GUARDED_BY(mu_);
  bool streams_open_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;       // Close() was called.
  std::string startup_error_ ABSL_GUARDED_BY(mu_);  // AbortStartup's reason.
  int64_t kv_blocks_ ABSL_GUARDED_BY(mu_) = 0;      // options_.kv_blocks, lowered at bring-up.
  // Data-plane group generation; bumped by Recover. Not guarded: only BringUp and Recover
  // touch it (through LoadAllAndOpenStreams), and they never run concurrently.
  int generation_ = 0;
  std::atomic<bool> kv_linked_{false};  // Its workers are in the KV group (kv_linked()).
};

}  // namespace cascade::coordinator
