// Data parallelism (`parallel.data`): the replicas behind the one coordinator, each a
// whole pipeline on its own devices with its own StageWorkers (workers, step streams) and
// ServingLoop (scheduler, KV pool), and the router in front of them. With one replica it is
// a thin shell over that replica, so every front (gRPC, HTTP, health, metrics) takes one
// path whatever parallel.data says.
//
// Routing: a request goes to the serving replica with the most headroom: its free KV
// fraction less its live requests over scheduler.max_num_seqs (ties to the lower index).
// With parallel.route_by_prefix and prefix caching on, a replica that was sent more of the request's leading prompt
// blocks (coordinator/serving/prefix_affinity.h: a chat's earlier turns) takes it instead while
// it is not much busier: by at most ceil(kAffinitySlack x the share of the prompt's blocks
// it holds beyond the best's x the mean live requests per replica) live requests, and
// with a tenth of its KV pool free. Reuse, as long as the load stays near even.
//
// Disaggregated serving (parallel.disaggregation): replicas have roles. Requests go to the
// prefill replicas (by headroom; to any replica when none serves); after its first token a
// request moves to the decode replica with the most headroom, its KV sent over the
// workers' KV group (coordinator/serving/kv_handoff.cc). A prompt of at most
// local_prefill_tokens goes straight to that decode replica and is prefilled there: a
// short prefill costs a decode step little, and it would otherwise queue behind the long
// ones on the prefill side and move its KV for nothing. With no decode replica serving,
// a prefill replica decodes its requests itself; a dead replica's requests go to any other,
// as with data parallelism. A replica rebuilt after a death is out of the KV group until
// every replica's workers join a new group generation (RejoinKvGroup); meanwhile requests
// reach whichever replica serves, whole.
//
// Thread-safety: Submit, Wake, Stats, FillStatus, Serving are thread-safe (the workers
// and serving loops are). The rest (construction, BringUp, Start, Stop, setters) is the owner's
// thread, before or after serving as each says.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/control/stage_workers.h"
#include "coordinator/planner.h"
#include "coordinator/serving/prefix_affinity.h"
#include "coordinator/serving/scheduler.h"
#include "coordinator/serving/serving_loop.h"
#include "coordinator/serving/speculation.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

// What each replica serves, and its workers as KV holders (ServingPlan). Empty: every
// replica serves whole requests.
struct ReplicaLayout {
  std::vector<ReplicaRole> roles;
  std::vector<std::vector<KvHolder>> kv_holders;
  // parallel.disaggregation.local_prefill_tokens: prompts up to this long skip the prefill side.
  int local_prefill_tokens = 0;
};

class Replicas {
 public:
  // How much busier than the best a replica holding the prompt's prefix may be (see
  // above): a quarter of the mean load, for a prompt it holds whole.
  static constexpr double kAffinitySlack = 0.25;

  // One replica per plan, with `options` (its group suffixed "/rN" when there are several,
  // and its replica index set). Borrows `tokenizer`.
  // `route_by_prefix`: parallel.route_by_prefix (with scheduler.prefix_caching).
  Replicas(const std::vector<Plan>& plans, const StageWorkersOptions& options, const text::Tokenizer* tokenizer,
           const SchedulerOptions& scheduler, const SpeculationOptions& speculation, bool route_by_prefix = false,
           const ReplicaLayout& layout = {});
  ~Replicas();  // Stop().
  Replicas(const Replicas&) = delete;
  Replicas& operator=(const Replicas&) = delete;

  int size() const { return static_cast<int>(replicas_.size()); }
  StageWorkers& workers(int r) { return *replicas_[r].workers; }
  const StageWorkers& workers(int r) const { return *replicas_[r].workers; }
  std::vector<StageWorkers*> all_workers();
  int n_workers() const;

  // Before Start: where latencies go, how long requests wait for a dead worker's return.
  void SetMetrics(ServingMetrics* metrics);
  void SetRecoveryTimeout(std::chrono::seconds timeout);
  // Brings every replica up at once (StageWorkers::BringUp), then sizes each serving loop's KV pool
  // to what its workers hold. The first error, naming its replica when there are several.
  absl::Status BringUp(std::chrono::milliseconds timeout);
  // The fewest KV blocks of any replica (what sets the context length).
  int64_t min_kv_blocks() const;
  void Start();
  void Stop();  // The serving loops, then the workers' step streams (StageWorkers::Close). Idempotent.

  // Routes a request (see above); its output arrives on the returned channel.
  std::shared_ptr<RequestChannel> Submit(ServingRequest request);
  void Wake();
  // The serving loops' stats, summed (largest batch: the largest).
  ServingStats Stats() const;
  // Every replica's workers (StageStatus.replica), the sums of their KV and queues, and
  // the cluster's state: ready when every replica is, degraded (naming the dead workers)
  // when one is down, starting otherwise; n_replicas and replicas_serving.
  void FillStatus(v1::ClusterStatus* status) const;
  // Whether some replica serves (every worker of it ready).
  bool Serving() const;

 private:
  struct Replica {
    std::unique_ptr<StageWorkers> workers;
    std::unique_ptr<ServingLoop> loop;
  };
  // The serving replica with the most headroom other than `except` (-1: any), of a role
  // other than `not_role` (kServe: any role); -1 when none serves.
  int Pick(int except, ReplicaRole not_role = ReplicaRole::kServe) const;
  ReplicaRole role(int r) const { return roles_.empty() ? ReplicaRole::kServe : roles_[r]; }
  // The serving decode replica in the KV group with the most headroom that prefill replica
  // `prefill` may send to (-1: any); -1 when none.
  int PickLinkedDecode(int prefill = -1) const;
  // Whether prefill replica `prefill` sends to decode replica `decode`. A worker takes its
  // transfers one at a time, each sender's in the order it sends them, and a large message
  // waits for its receiver: were one decode replica fed by two prefill replicas that each
  // feed two decode replicas, the orders could cross and wait on each other. So every
  // prefill replica feeds one decode replica (P >= D: prefill p -> decode p mod D), or
  // every decode replica is fed by one (P < D: decode d <- prefill d mod P).
  bool Paired(int prefill, int decode) const;
  // A replica was rebuilt (its workers are outside the KV group): every replica's workers
  // join a new group generation, after which KV moves again. Called on a loop thread.
  void RejoinKvGroup();
  // Free KV fraction less live requests over max_num_seqs.
  double Headroom(int r) const;
  // Pick, or the replica holding the longest prefix of `prompt` (see above); -1 when none
  // serves. Forgets what was sent to replicas that are down (their caches restart empty).
  int Route(std::span<const int32_t> prompt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(route_mu_);

  std::vector<Replica> replicas_;
  std::vector<ReplicaRole> roles_;  // Empty: every replica serves.
  const int local_prefill_tokens_;
  absl::Mutex kv_mu_;  // Serialises RejoinKvGroup.
  int kv_generation_ ABSL_GUARDED_BY(kv_mu_) = 0;
  const int max_num_seqs_;
  absl::Mutex route_mu_;  // Held across a Submit's choice and its hand-over.
  // Null with prefix caching off.
  std::unique_ptr<PrefixAffinity> affinity_ ABSL_GUARDED_BY(route_mu_);
};

}  // namespace cascade::coordinator
