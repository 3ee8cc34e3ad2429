// Coordinator bring-up: everything decided between reading the config and serving. It
// opens the target (and draft) model's metadata and tokenizer, never their weights;
// plans the stages; checks that TP can split the model and that a draft model shares the
// target's tokenizer; sizes the KV pool; and starts the local workers. `main` parses
// flags, calls these in order, and serves.
// Thread-safety: free functions; the results are plain values owned by the caller.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/config.h"
#include "coordinator/control/stage_workers.h"
#include "coordinator/launcher.h"
#include "coordinator/planner.h"
#include "coordinator/serving/kv_transfer_plan.h"
#include "coordinator/serving/scheduler.h"
#include "coordinator/serving/speculation.h"
#include "model/format/model_files.h"
#include "model/format/model_size.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

// The models as the coordinator knows them: metadata and tokenizers only.
struct ServedModels {
  model::ModelFiles target;
  model::ModelSize target_size;
  std::unique_ptr<text::Tokenizer> tokenizer;
  // The drafter worker's model: the target itself (self-draft) or the draft model.
  std::optional<model::ModelFiles> draft_files;  // Set for draft.model only.
  int64_t draft_layers = 0;                      // 0: no drafter worker.
};

// Opens config.model (and config.draft.model): errors name the config key.
// InvalidArgument when draft.self.layers is not below the model's layers, or when the draft
// model's tokenizer is not the target's (both vocab sizes, or the first id that differs).
absl::StatusOr<ServedModels> OpenServedModels(const ClusterConfig& config);

// What the coordinator runs with: the stage plan, and the options of the cluster, the
// scheduler and the speculative pipeline derived from the config and the models.
struct ServingPlan {
  Plan plan;                   // Replica 0's.
  std::vector<Plan> replicas;  // [replicas]: each replica's stages on its own devices.
  // [replicas]: what each serves (parallel.disaggregation), and its workers' layers and KV
  // heads with their ranks in the KV group (ranks follow the replicas' devices).
  std::vector<ReplicaRole> roles;
  std::vector<std::vector<KvHolder>> kv_holders;
  StageWorkersOptions workers;
  SchedulerOptions scheduler;
  SpeculationOptions speculation;
  int64_t max_context = 0;  // Positions per sequence: the model's context or the KV pool's.
};

// Plans the stages (balanced by the bytes of model::MeasureModel), refuses a TP size the
// heads or FFN cannot split (InvalidArgument under parallel.tensor), and sizes the KV pool
// (InvalidArgument under scheduler.kv_cache_mb when not one block fits).
absl::StatusOr<ServingPlan> PlanServing(const ClusterConfig& config, const ServedModels& models);

// Positions per sequence the cluster serves with `n_blocks` KV blocks of `block_size`: the
// pool's, at most the model's trained context; under scheduler.kv_policy sink_window
// (`sink_window`), the model's context, since a sequence holds only its sinks and window.
int64_t MaxContext(const model::ModelConfig& config, int64_t n_blocks, int64_t block_size, bool sink_window);

// scheduler.kv_policy as served, for the log and ModelInfo: "full", or "sink_window (sinks
// S[, defaulted], window W)".
std::string KvPolicyDescription(const SchedulerSection& sched);

// scheduler.cpu_prefill_activations as served, for the log and ModelInfo: "f32", or "bf16
// (...)" naming what it applies to (each CPU worker's log says what its CPU makes of it).
std::string CpuPrefillActivationsDescription(const SchedulerSection& sched);

// parallel.expert_comm as served, for the log and ModelInfo: "" without expert parallelism
// over more than one rank; else "all_reduce" (", defaulted" when not given) or
// "all_to_all (attention data parallel over the tp ranks)".
std::string ExpertCommDescription(const ParallelSection& parallel);

// For scripts/launch_cluster.sh: first "control ADDR" (the control plane workers dial),
// then "security insecure" or "security tls CLUSTER_DIR" (where ca.pem and join.token
// are), then one line per worker of an external node, "worker STAGE NODE HOST DEVICE"
// (STAGE is "draft" for the drafter).
void PrintExternalWorkers(const ClusterConfig& config, const ServingPlan& plan, std::FILE* out);

// What every launched worker is given besides its place: arguments and "KEY=VALUE"
// environment entries (the cluster's trust, coordinator/control/control_trust.h).
struct WorkerExtras {
  std::vector<std::string> args;
  std::vector<std::string> env;
};

// Starts the workers of `launch: local` nodes, each with `n_threads` CPU threads.
absl::Status LaunchLocalWorkers(const ClusterConfig& config, const ServingPlan& plan, int n_threads,
                                const WorkerExtras& extras, Launcher& launcher);

}  // namespace cascade::coordinator
