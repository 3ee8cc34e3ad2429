#include "coordinator/bring_up.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "coordinator/control/kv_budget.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/tokenizer_files.h"
#include "model/format/tp_shard.h"

namespace cascade::coordinator {
namespace {

// OK when both tokenizers map every id to the same text; otherwise the sizes and the first
// id that differs, so a mismatched draft model is refused at start.
absl::Status SameVocabulary(const text::Tokenizer& target, const text::Tokenizer& draft) {
  if (target.n_vocab() != draft.n_vocab()) {
    return absl::InvalidArgumentError(StrCat("the draft model's tokenizer is not the target's: target vocab ",
                                             target.n_vocab(), " tokens, draft vocab ", draft.n_vocab()));
  }
  for (int32_t id = 0; id < target.n_vocab(); ++id) {
    if (target.TokenText(id) != draft.TokenText(id)) {
      return absl::InvalidArgumentError(StrCat("the draft model's tokenizer is not the target's (both have ",
                                               target.n_vocab(), " tokens, id ", id, " is '", target.TokenText(id),
                                               "' in the target, '", draft.TokenText(id), "' in the draft)"));
    }
  }
  return absl::OkStatus();
}

// The drafter of config.draft: its layer count, and its files for a draft model.
absl::Status OpenDrafter(const DraftSection& draft, ServedModels& models) {
  if (draft.kind == DraftKind::kSelf) {
    if (draft.self_layers >= models.target.config.n_layers) {
      return absl::InvalidArgumentError(StrCat("draft.self.layers: ", draft.self_layers, " must be below the model's ",
                                               models.target.config.n_layers, " layers"));
    }
    models.draft_layers = draft.self_layers;
  } else if (draft.kind == DraftKind::kModel) {
    auto files = model::OpenModelFiles(draft.model_path);
    if (!files.ok()) return Annotate(files.status(), "draft.model");
    auto tokenizer = model::LoadTokenizer(*files);
    if (!tokenizer.ok()) return Annotate(tokenizer.status(), "draft.model");
    CASCADE_RETURN_IF_ERROR(Annotate(SameVocabulary(*models.tokenizer, **tokenizer), "draft.model"));
    models.draft_layers = files->config.n_layers;
    models.draft_files = *std::move(files);
  }
  return absl::OkStatus();
}

bool OnGpu(const Device& d) { return d.kind == DeviceKind::kCuda; }

bool StageOnGpu(const StagePlan& s) {
  bool gpu = s.tp.empty() && OnGpu(s.device);
  for (const TpMember& m : s.tp) gpu = gpu || OnGpu(m.device);
  return gpu;
}

// Each stage's TP shards as KV holders, rank `base` onwards (InvalidArgument under
// parallel.tensor when the model cannot split).
absl::StatusOr<std::vector<KvHolder>> ReplicaKvHolders(const ClusterConfig& config, const model::ModelFiles& files,
                                                       const Plan& plan, int base) {
  std::vector<KvHolder> out;
  for (const StagePlan& s : plan.stages) {
    const int tp = static_cast<int>(s.tp.size());
    for (int r = 0; r < tp; ++r) {
      auto shard = config.parallel.expert_all_to_all
                       ? model::TpShard::ForExpertGroup(files.config, r, tp)
                       : model::TpShard::ForFiles(files, s.first_layer, s.last_layer, r, tp, config.parallel.expert);
      if (!shard.ok()) {
        return Annotate(shard.status(), config.parallel.expert_all_to_all ? "parallel.expert_comm" : "parallel.tensor");
      }
      out.push_back(
          {base + s.pp_stage * tp + r, s.first_layer, s.last_layer, shard->kv_head_begin, shard->kv_head_end});
    }
  }
  return out;
}

// The host tier of the prefix cache: scheduler.host_kv_cache_mb on every target worker,
// in blocks of the largest stage's size (the drafter recomputes its own KV).
absl::StatusOr<int64_t> HostKvBlocks(const SchedulerSection& sched, int64_t block_bytes) {
  if (sched.host_kv_cache_mb == 0) return 0;
  if (!sched.prefix_caching) {
    return absl::InvalidArgumentError(
        "scheduler.host_kv_cache_mb: the host tier holds cached prefixes, and "
        "scheduler.prefix_caching is false");
  }
  const int64_t n = std::min<int64_t>(sched.host_kv_cache_mb * 1048576 / block_bytes, INT32_MAX);
  if (n < 1) {
    return absl::InvalidArgumentError(
        StrCat("scheduler.host_kv_cache_mb: too small for one KV block of ", block_bytes, " bytes"));
  }
  return n;
}

// The KV pool: the same block count on every stage, as many as the tightest worker holds:
// scheduler.kv_cache_mb on CPU workers (and GPU workers when given); a GPU worker's free
// memory after its weights, once it registers (StageWorkers::BringUp, coordinator/control/kv_budget.h).
absl::Status SizeKvPool(const ClusterConfig& config, const ServedModels& models, ServingPlan& out) {
  const model::ModelConfig& mc = models.target.config;
  const SchedulerSection& sched = config.scheduler;
  const int64_t bs = sched.kv_block_size, budget = sched.kv_cache_mb * 1048576;
  StageWorkersOptions& co = out.workers;
  int64_t n_blocks = INT64_MAX, largest_block = 0;
  bool any_gpu = models.draft_layers > 0 && OnGpu(config.draft.devices[0]);
  for (size_t r = 0; r < out.replicas.size(); ++r) {
    for (StagePlan& stage : out.replicas[r].stages) {
      int64_t heads = 0;  // The busiest TP rank's.
      for (const KvHolder& h : out.kv_holders[r]) {
        if (h.first_layer == stage.first_layer) heads = std::max(heads, h.head_end - h.head_begin);
      }
      stage.kv_block_bytes = KvBlockBytes(stage.n_layers(), bs, heads, mc.head_dim, sched.kv_cache_dtype);
      largest_block = std::max(largest_block, stage.kv_block_bytes);
      const bool gpu = StageOnGpu(stage);
      any_gpu = any_gpu || gpu;
      if (!gpu || sched.kv_cache_mb_given) n_blocks = std::min(n_blocks, budget / stage.kv_block_bytes);
    }
  }
  out.plan = out.replicas[0];
  if (models.draft_layers > 0) {
    // The drafter holds the same block ids, over its own layers and heads.
    const model::ModelFiles& df = models.draft_files ? *models.draft_files : models.target;
    co.draft_block_bytes =
        KvBlockBytes(models.draft_layers, bs, df.config.n_kv_heads, df.config.head_dim, sched.kv_cache_dtype);
    if (!OnGpu(config.draft.devices[0]) || sched.kv_cache_mb_given) {
      // Under all-to-all the drafter holds every lane's pool.
      n_blocks = std::min(n_blocks, budget / (co.draft_block_bytes * config.parallel.lanes()));
    }
    const model::ModelSize draft_size = models.draft_files ? model::MeasureModel(df) : models.target_size;
    co.draft_weight_bytes = draft_size.PrefixBytes(models.draft_layers);
  }
  if (n_blocks < 1) return absl::InvalidArgumentError("scheduler.kv_cache_mb: too small for one KV block");
  // Only GPU workers and no kv_cache_mb: the registered GPUs decide; the context can be no
  // longer than the model's anyway.
  if (n_blocks == INT64_MAX) n_blocks = (mc.n_ctx_train + bs - 1) / bs * std::max(1, sched.max_num_seqs);
  co.kv_blocks = n_blocks;
  co.size_kv_from_gpus = any_gpu;
  CASCADE_ASSIGN_OR_RETURN(co.host_kv_blocks, HostKvBlocks(sched, largest_block));
  out.max_context = MaxContext(mc, n_blocks, bs, sched.kv_sink_window);
  return absl::OkStatus();
}

// The workers', scheduler and speculation options the config asks for (the KV pool apart);
// InvalidArgument when the pool cannot hold one sequence's sink + window.
absl::Status CopyOptions(const ClusterConfig& config, const ServedModels& models, ServingPlan& out) {
  const DraftSection& draft = config.draft;
  StageWorkersOptions& co = out.workers;
  co.model_path = config.model.path;
  co.group = StrCat("cascade-", getpid());
  co.kv_block_size = config.scheduler.kv_block_size;
  co.kv_cache_dtype = config.scheduler.kv_cache_dtype;
  co.gpu_memory_fraction = config.scheduler.gpu_memory_fraction;
  co.max_batched_tokens = config.scheduler.max_batched_tokens;
  co.pp_nccl = config.transport.activations == ActivationTransport::kNccl;
  co.pp_handoff = config.transport.pp_handoff == PpHandoff::kFull ? v1::PP_HANDOFF_FULL : v1::PP_HANDOFF_SPLIT;
  co.expert_parallel = config.parallel.expert;
  co.expert_all_to_all = config.parallel.expert_all_to_all;
  co.redundant_experts = config.parallel.redundant_experts;
  co.eplb_interval_steps = config.parallel.eplb_interval_steps;
  co.device_sampling = config.scheduler.device_sampling;
  co.cuda_graphs = config.scheduler.cuda_graphs;
  co.cpu_bf16_prefill = config.scheduler.cpu_bf16_prefill;
  if (config.scheduler.kv_sink_window) {
    co.kv_window_tokens = config.scheduler.kv_window_tokens;
    co.kv_sink_tokens = config.scheduler.kv_sink_tokens;
  }
  if (models.draft_layers > 0) {
    co.draft = true;
    co.draft_model_path = draft.kind == DraftKind::kModel ? draft.model_path : config.model.path;
    co.draft_layers = models.draft_layers;
    co.draft_node = draft.node;
    co.draft_device = draft.devices[0];
  }
  SchedulerOptions& so = out.scheduler;
  so.max_num_seqs = config.scheduler.max_num_seqs;
  so.max_batched_tokens = config.scheduler.max_batched_tokens;
  so.kv_block_size = static_cast<int32_t>(config.scheduler.kv_block_size);
  so.prefix_caching = config.scheduler.prefix_caching;
  so.max_queued = config.scheduler.max_queued;
  so.n_kv_blocks = static_cast<int32_t>(std::min<int64_t>(co.kv_blocks, INT32_MAX));
  so.n_host_kv_blocks = static_cast<int32_t>(co.host_kv_blocks);
  so.kv_window_tokens = co.kv_window_tokens;
  so.n_lanes = config.parallel.lanes();
  so.kv_sink_tokens = co.kv_sink_tokens;
  if (const int64_t peak = Scheduler::WindowPeakBlocks(so); peak > so.n_kv_blocks) {
    return absl::InvalidArgumentError(StrCat(
        "scheduler.kv_window_tokens: a sequence's sinks (", so.kv_sink_tokens, "), window (", so.kv_window_tokens,
        ") and prefill chunk (scheduler.max_batched_tokens ", so.max_batched_tokens, ") need up to ", peak,
        " KV blocks at once, the pool holds ", so.n_kv_blocks, " (raise scheduler.kv_cache_mb)"));
  }
  // One more batch with a drafter worker: it drafts one while the stages verify others.
  so.max_in_flight_batches = static_cast<int>(out.plan.stages.size()) + (models.draft_layers > 0 ? 1 : 0);
  out.speculation = {draft.kind, draft.ngram_n, draft.num_tokens, draft.adaptive, draft.max_batch};
  return absl::OkStatus();
}

// Debian's UCX disables error handling on its shared-memory transports unless told
// otherwise: without these, peer-failure detection forces TCP on one host.
WorkerLaunch LocalWorker(int stage, bool draft, const std::string& node, const Device& device, int n_threads,
                         const WorkerExtras& extras) {
  WorkerLaunch l{stage,
                 draft,
                 node,
                 device.ToString(),
                 n_threads,
                 extras.args,
                 {"UCX_POSIX_ERROR_HANDLING=y", "UCX_SYSV_ERROR_HANDLING=y"}};
  l.extra_env.insert(l.extra_env.end(), extras.env.begin(), extras.env.end());
  return l;
}

}  // namespace

int64_t MaxContext(const model::ModelConfig& config, int64_t n_blocks, int64_t block_size, bool sink_window) {
  return sink_window ? config.n_ctx_train : std::min<int64_t>(config.n_ctx_train, n_blocks * block_size);
}

std::string KvPolicyDescription(const SchedulerSection& sched) {
  if (!sched.kv_sink_window) return "full";
  return StrCat("sink_window (sinks ", sched.kv_sink_tokens,
                sched.kv_sink_tokens_given ? "" : " defaulted: StreamingLLM's four attention sinks", ", window ",
                sched.kv_window_tokens, ")");
}

std::string CpuPrefillActivationsDescription(const SchedulerSection& sched) {
  return sched.cpu_bf16_prefill ? "bf16 (FP8 weights' prefills on CPU workers with AVX512_BF16)" : "f32";
}

std::string ExpertCommDescription(const ParallelSection& p) {
  if (!p.expert || p.tensor < 2) return "";
  if (p.expert_all_to_all) return "all_to_all (attention data parallel over the tp ranks)";
  return p.expert_comm_given ? "all_reduce" : "all_reduce (defaulted: parallel.expert_comm)";
}

absl::StatusOr<ServedModels> OpenServedModels(const ClusterConfig& config) {
  ServedModels models;
  auto files = model::OpenModelFiles(config.model.path);
  if (!files.ok()) return Annotate(files.status(), "model.path");
  models.target = *std::move(files);
  auto tokenizer = model::LoadTokenizer(models.target);
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), "model.path");
  models.tokenizer = *std::move(tokenizer);
  models.target_size = model::MeasureModel(models.target);
  CASCADE_RETURN_IF_ERROR(OpenDrafter(config.draft, models));
  return models;
}

absl::StatusOr<ServingPlan> PlanServing(const ClusterConfig& config, const ServedModels& models) {
  PlannerInput in;
  in.layer_bytes = models.target_size.layer_bytes;
  in.embedding_bytes = models.target_size.embedding_bytes;
  in.head_bytes = models.target_size.head_bytes;
  const std::vector<PlannerDevice> devices = ClusterDevices(config);
  ServingPlan out;
  // Replica r plans on the next run of its pipeline × tensor devices; the layer cut depends
  // on the model and the pipeline size alone, so replicas of one shape hold the same layers.
  size_t next_device = 0;
  int next_rank = 0;  // In the KV group.
  for (const ReplicaShape& shape : config.parallel.Replicas()) {
    const int r = static_cast<int>(out.replicas.size());
    in.pipeline_size = shape.pipeline;
    in.tensor_size = shape.tensor;
    in.groups_span_nodes = config.parallel.expert;  // Expert groups may span nodes (either form).
    const size_t n = static_cast<size_t>(shape.pipeline) * shape.tensor;
    in.devices.assign(devices.begin() + next_device, devices.begin() + next_device + n);
    next_device += n;
    auto plan = PlanStages(in);
    if (!plan.ok()) return Annotate(plan.status(), StrCat("replica ", r));
    CASCADE_ASSIGN_OR_RETURN(std::vector<KvHolder> holders, ReplicaKvHolders(config, models.target, *plan, next_rank));
    next_rank += static_cast<int>(n);
    out.replicas.push_back(*std::move(plan));
    out.kv_holders.push_back(std::move(holders));
    out.roles.push_back(shape.role);
  }
  CASCADE_RETURN_IF_ERROR(SizeKvPool(config, models, out));
  CASCADE_RETURN_IF_ERROR(CopyOptions(config, models, out));
  return out;
}

void PrintExternalWorkers(const ClusterConfig& config, const ServingPlan& plan, std::FILE* out) {
  std::fprintf(out, "control %s\n", config.server.cluster_listen.c_str());
  if (config.security.insecure) {
    std::fprintf(out, "security insecure\n");
  } else {
    std::fprintf(out, "security tls %s\n", config.security.cluster_dir.c_str());
  }
  for (const Plan& replica : plan.replicas) {
    for (const StagePlan& s : replica.stages) {
      for (const TpMember& m : s.tp) {
        for (const NodeSection& node : config.nodes) {
          if (node.name == m.node && node.launch == LaunchMode::kExternal) {
            std::fprintf(out, "worker %d %s %s %s\n", s.pp_stage, node.name.c_str(), node.host.c_str(),
                         m.device.ToString().c_str());
          }
        }
      }
    }
  }
  for (const NodeSection& node : config.nodes) {
    if (plan.workers.draft && node.name == plan.workers.draft_node && node.launch == LaunchMode::kExternal) {
      std::fprintf(out, "worker draft %s %s %s\n", node.name.c_str(), node.host.c_str(),
                   plan.workers.draft_device.ToString().c_str());
    }
  }
}

absl::Status LaunchLocalWorkers(const ClusterConfig& config, const ServingPlan& plan, int n_threads,
                                const WorkerExtras& extras, Launcher& launcher) {
  for (const NodeSection& node : config.nodes) {
    if (node.launch != LaunchMode::kLocal) continue;
    for (const Plan& replica : plan.replicas) {
      for (const StagePlan& s : replica.stages) {
        for (const TpMember& m : s.tp) {
          if (m.node == node.name) {
            CASCADE_RETURN_IF_ERROR(
                launcher.Launch(LocalWorker(s.pp_stage, false, node.name, m.device, n_threads, extras)));
          }
        }
      }
    }
    if (plan.workers.draft && node.name == plan.workers.draft_node) {
      CASCADE_RETURN_IF_ERROR(
          launcher.Launch(LocalWorker(-1, true, node.name, plan.workers.draft_device, n_threads, extras)));
    }
  }
  return absl::OkStatus();
}

}  // namespace cascade::coordinator
