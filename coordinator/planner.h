// The placement planner: cuts a model's layers into pipeline stages and maps the stages
// onto devices (docs/ARCHITECTURE.md §4). It runs once at coordinator start-up; workers receive
// their `[first_layer, last_layer)` range from the plan and never recompute it.
//
// Stages are contiguous layer ranges balanced by parameter bytes: the plan minimises
// the largest stage's bytes, counting the token embedding on stage 0 and the head (final
// norm + LM head) on the last stage. Stages map to devices in node order; a stage of
// tensor size t takes t devices of one node (its TP group), and data-parallel replicas
// repeat the layout.
//
// Thread safety: stateless functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/config.h"
#include "core/tensor.h"

namespace cascade::coordinator {

// One device of the cluster, in config order.
struct PlannerDevice {
  std::string node;  // The node's name (`nodes[i].name`).
  std::string host;  // The node's host (`nodes[i].host`).
  Device device;     // `cpu` or `cuda:N`.
};

struct PlannerInput {
  // Parameter bytes of each transformer layer, [n_layers]. REQUIRES non-empty, each >= 0.
  std::vector<int64_t> layer_bytes;
  // Bytes of the token embedding, held by stage 0. Default 0.
  int64_t embedding_bytes = 0;
  // Bytes of the final norm and LM head, held by the last stage. With tied embeddings the
  // caller decides whether the last stage's copy counts (it usually reads the embedding
  // again, so pass the embedding bytes). Default 0.
  int64_t head_bytes = 0;
  // Number of pipeline stages. Default 1. REQUIRES 1 <= pipeline_size <= n_layers.
  int pipeline_size = 1;
  // Ranks of each stage's tensor-parallel group; they must sit on one node unless
  // `groups_span_nodes`. Default 1.
  int tensor_size = 1;
  // Expert parallelism (parallel.expert): expert groups may span nodes. All-to-all's carry
  // only the MoE layers' dispatch and combine; the all-reduce form's every collective,
  // which is slower across nodes but what all-to-all is measured against.
  bool groups_span_nodes = false;
  // Devices in node order (the config's `nodes[*].devices` flattened). REQUIRES at least
  // `pipeline_size` entries; the first `pipeline_size` are used.
  std::vector<PlannerDevice> devices;
};

// One worker of a stage's tensor-parallel group.
struct TpMember {
  int tp_rank = 0;  // Rank inside the stage's TP group.
  int rank = 0;     // Global worker rank (node/device order).
  std::string node;
  std::string host;
  Device device;
};

struct StagePlan {
  int pp_stage = 0;          // Index of the stage, 0 .. n_stages - 1.
  int rank = 0;              // Global worker rank (node/device order); equals pp_stage for tp 1.
  int first_layer = 0;       // First layer held (inclusive).
  int last_layer = 0;        // One past the last layer held (exclusive).
  std::string node;          // Node name.
  std::string host;          // Node host.
  Device device;             // The worker's device.
  int64_t weight_bytes = 0;  // Layers' bytes plus embedding (stage 0) / head (last stage).
  std::vector<TpMember> tp;  // [tensor_size] workers of the stage; tp[0] is node/device above.
  // Bytes of one KV block on the stage's busiest TP rank (set once the KV pool is sized).
  int64_t kv_block_bytes = 0;

  int n_layers() const { return last_layer - first_layer; }
};

struct Plan {
  int n_layers = 0;
  std::vector<StagePlan> stages;  // [pipeline_size], in pipeline order.

  // The largest stage's `weight_bytes`.
  int64_t MaxStageBytes() const;
  // A table for the coordinator log: one line per stage with rank, node, host, device,
  // layer range, and weights in MiB.
  std::string ToString() const;
};

// The devices of `config.nodes`, flattened in node order (the order ranks follow).
std::vector<PlannerDevice> ClusterDevices(const ClusterConfig& config);

// Computes the plan.
// Errors: InvalidArgument when `layer_bytes` is empty or has a negative entry, when
// `pipeline_size` < 1 or > n_layers (every stage needs a layer), or when there are
// fewer devices than stages.
absl::StatusOr<Plan> PlanStages(const PlannerInput& input);

}  // namespace cascade::coordinator
