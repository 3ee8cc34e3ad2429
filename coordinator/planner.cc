#include "coordinator/planner.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

// Bytes of stage `s` (of `n_stages`) holding layers [first, last), from prefix sums.
int64_t StageBytes(const PlannerInput& in, const std::vector<int64_t>& prefix, int s, int n_stages, int first,
                   int last) {
  int64_t bytes = prefix[last] - prefix[first];
  if (s == 0) bytes += in.embedding_bytes;
  if (s == n_stages - 1) bytes += in.head_bytes;
  return bytes;
}

// Rejects sizes, stage and TP counts, and device lists that no plan can satisfy.
absl::Status ValidatePlannerInput(const PlannerInput& input) {
  const int n = static_cast<int>(input.layer_bytes.size());
  const int n_stages = input.pipeline_size;
  if (n == 0) return absl::InvalidArgumentError("planner: the model has no layers");
  for (int i = 0; i < n; ++i) {
    if (input.layer_bytes[i] < 0) {
      return absl::InvalidArgumentError(StrCat("planner: layer ", i, " has negative size"));
    }
  }
  if (input.embedding_bytes < 0 || input.head_bytes < 0) {
    return absl::InvalidArgumentError("planner: negative embedding or head size");
  }
  if (n_stages < 1) {
    return absl::InvalidArgumentError(StrCat("parallel.pipeline: must be >= 1, got ", n_stages));
  }
  if (n_stages > n) {
    return absl::InvalidArgumentError(StrCat("parallel.pipeline: ", n_stages, " stages but the model has only ", n,
                                             " layers (every stage needs at least one)"));
  }
  const int t = input.tensor_size;
  if (t < 1) return absl::InvalidArgumentError(StrCat("parallel.tensor: must be >= 1, got ", t));
  if (static_cast<int>(input.devices.size()) < n_stages * t) {
    return absl::InvalidArgumentError(StrCat("parallel.pipeline x parallel.tensor: ", n_stages, " x ", t,
                                             " workers need as many devices, the cluster has ", input.devices.size()));
  }
  for (int s = 0; s < n_stages && !input.groups_span_nodes; ++s) {
    for (int r = 1; r < t; ++r) {
      if (input.devices[s * t + r].node != input.devices[s * t].node) {
        return absl::InvalidArgumentError(
            StrCat("parallel.tensor: stage ", s, "'s TP group of ", t, " would span nodes '", input.devices[s * t].node,
                   "' and '", input.devices[s * t + r].node, "'; each node must hold whole TP groups"));
      }
    }
  }
  return absl::OkStatus();
}

// First programme: the smallest achievable largest stage over all contiguous splits.
int64_t SmallestLargestStage(const PlannerInput& input, const std::vector<int64_t>& prefix) {
  const int n = static_cast<int>(input.layer_bytes.size());
  const int n_stages = input.pipeline_size;
  // best[s][j]: smallest largest stage over splits of layers [0, j) into stages 0..s.
  std::vector<std::vector<int64_t>> best(n_stages, std::vector<int64_t>(n + 1, kInf));
  for (int j = 1; j <= n; ++j) best[0][j] = StageBytes(input, prefix, 0, n_stages, 0, j);
  for (int s = 1; s < n_stages; ++s) {
    for (int j = s + 1; j <= n; ++j) {
      for (int i = s; i < j; ++i) {
        if (best[s - 1][i] == kInf) continue;
        const int64_t v = std::max(best[s - 1][i], StageBytes(input, prefix, s, n_stages, i, j));
        best[s][j] = std::min(best[s][j], v);
      }
    }
  }
  return best[n_stages - 1][n];
}

// Second programme: cut[s][j], the first layer of stage s in the split of layers [0, j) with
// every stage <= `limit` and the smallest sum of squared stage bytes.
std::vector<std::vector<int>> BalancedCuts(const PlannerInput& input, const std::vector<int64_t>& prefix,
                                           int64_t limit) {
  const int n = static_cast<int>(input.layer_bytes.size());
  const int n_stages = input.pipeline_size;
  // squares[s][j]: smallest sum of squared stage bytes with every stage <= limit.
  constexpr long double kInfSq = std::numeric_limits<long double>::infinity();
  std::vector<std::vector<long double>> squares(n_stages, std::vector<long double>(n + 1, kInfSq));
  std::vector<std::vector<int>> cut(n_stages, std::vector<int>(n + 1, -1));
  for (int j = 1; j <= n; ++j) {
    const int64_t b = StageBytes(input, prefix, 0, n_stages, 0, j);
    if (b <= limit) {
      squares[0][j] = static_cast<long double>(b) * b;
      cut[0][j] = 0;
    }
  }
  for (int s = 1; s < n_stages; ++s) {
    for (int j = s + 1; j <= n; ++j) {
      for (int i = s; i < j; ++i) {
        if (squares[s - 1][i] == kInfSq) continue;
        const int64_t b = StageBytes(input, prefix, s, n_stages, i, j);
        if (b > limit) continue;
        const long double v = squares[s - 1][i] + static_cast<long double>(b) * b;
        if (v < squares[s][j]) {
          squares[s][j] = v;
          cut[s][j] = i;
        }
      }
    }
  }
  return cut;
}

// The plan for the split `cut` describes: layer ranges, bytes and devices of every stage.
Plan AssignStages(const PlannerInput& input, const std::vector<int64_t>& prefix,
                  const std::vector<std::vector<int>>& cut) {
  const int n = static_cast<int>(input.layer_bytes.size());
  const int n_stages = input.pipeline_size;
  const int t = input.tensor_size;
  Plan plan;
  plan.n_layers = n;
  plan.stages.resize(n_stages);
  int last = n;
  for (int s = n_stages - 1; s >= 0; --s) {
    const int first = cut[s][last];
    StagePlan& stage = plan.stages[s];
    stage.pp_stage = s;
    stage.rank = s * t;
    stage.first_layer = first;
    stage.last_layer = last;
    stage.weight_bytes = StageBytes(input, prefix, s, n_stages, first, last);
    stage.node = input.devices[s * t].node;
    stage.host = input.devices[s * t].host;
    stage.device = input.devices[s * t].device;
    for (int r = 0; r < t; ++r) {
      const PlannerDevice& d = input.devices[s * t + r];
      stage.tp.push_back({r, s * t + r, d.node, d.host, d.device});
    }
    last = first;
  }
  return plan;
}

}  // namespace

std::vector<PlannerDevice> ClusterDevices(const ClusterConfig& config) {
  std::vector<PlannerDevice> devices;
  for (const NodeSection& node : config.nodes) {
    for (const Device& device : node.devices) devices.push_back({node.name, node.host, device});
  }
  return devices;
}

int64_t Plan::MaxStageBytes() const {
  int64_t max_bytes = 0;
  for (const StagePlan& s : stages) max_bytes = std::max(max_bytes, s.weight_bytes);
  return max_bytes;
}

std::string Plan::ToString() const {
  std::string out = absl::StrFormat("%-5s %-4s %-12s %-16s %-8s %-12s %7s %12s\n", "stage", "rank", "node", "host",
                                    "device", "layers", "n", "weights");
  for (const StagePlan& s : stages) {
    absl::StrAppendFormat(&out, "%-5d %-4d %-12s %-16s %-8s %-12s %7d %8.1f MiB\n", s.pp_stage, s.rank, s.node, s.host,
                          s.device.ToString(), absl::StrFormat("[%d, %d)", s.first_layer, s.last_layer), s.n_layers(),
                          static_cast<double>(s.weight_bytes) / (1 << 20));
  }
  absl::StrAppendFormat(&out, "%d layers over %d stages; largest stage %.1f MiB", n_layers,
                        static_cast<int>(stages.size()), static_cast<double>(MaxStageBytes()) / (1 << 20));
  return out;
}

// Two exact dynamic programmes over contiguous splits (the "linear partition" problem):
// the first finds the smallest achievable largest stage M; the second, among splits whose
// stages all fit in M, picks the one with the smallest sum of squared stage bytes, so
// that the non-bottleneck stages are balanced too and the result is deterministic.
// O(S * n^2) each, trivial for real layer counts.
absl::StatusOr<Plan> PlanStages(const PlannerInput& input) {
  CASCADE_RETURN_IF_ERROR(ValidatePlannerInput(input));
  const int n = static_cast<int>(input.layer_bytes.size());
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + input.layer_bytes[i];
  const int64_t limit = SmallestLargestStage(input, prefix);
  return AssignStages(input, prefix, BalancedCuts(input, prefix, limit));
}

}  // namespace cascade::coordinator
