// `cascade-coordinator --config FILE [--worker-threads N]`: loads the config and the
// model's metadata and tokenizer (never its weights), plans the stages, serves the
// public API and the control plane, launches the local workers, waits for every stage,
// and logs one line with `ready` and the address. Config errors exit 2 naming the key.
#include <csignal>
#include <optional>
#include <cstdio>
#include <regex>
#include <thread>

#include "coordinator/cluster.h"
#include "coordinator/kv_budget.h"
#include "coordinator/cluster_service.h"
#include "coordinator/config.h"
#include "coordinator/engine.h"
#include "coordinator/inference_service.h"
#include "coordinator/key_value_store.h"
#include "coordinator/launcher.h"
#include "coordinator/planner.h"
#include "core/args.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "model/local_engine.h"
#include "model/model_files.h"
#include "model/tp_shard.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const absl::Status& s) {
  std::string msg(s.message());
  for (char& c : msg) if (c == '\n') c = ' ';
  std::fprintf(stderr, "cascade-coordinator: %s\n", msg.c_str());
  return 2;
}

// Parameter bytes per layer, of the embedding, and of the head, from the tensor table.
cascade::coordinator::PlannerInput SizeModel(const cascade::model::ModelFiles& files) {
  cascade::coordinator::PlannerInput in;
  in.layer_bytes.assign(files.config.n_layers, 0);
  static const std::regex layer_re(R"((?:blk|model\.layers)\.(\d+)\.)");
  for (const auto& t : files.weights->tensors()) {
    std::smatch m;
    if (std::regex_search(t.name, m, layer_re)) {
      const int64_t l = std::stoll(m[1]);
      if (l >= 0 && l < files.config.n_layers) in.layer_bytes[l] += static_cast<int64_t>(t.n_bytes);
    } else if (t.name.find("embd") != std::string::npos || t.name.find("embed_tokens") != std::string::npos) {
      in.embedding_bytes += static_cast<int64_t>(t.n_bytes);
    } else {
      in.head_bytes += static_cast<int64_t>(t.n_bytes);
    }
  }
  // A tied head reads the embedding again on the last stage.
  if (files.config.tied_embeddings) in.head_bytes += in.embedding_bytes;
  return in;
}

// OK when both tokenizers map every id to the same text; otherwise the sizes and the first
// id that differs, so a mismatched draft model is refused at start.
absl::Status SameVocabulary(const cascade::model::Tokenizer& target, const cascade::model::Tokenizer& draft) {
  if (target.n_vocab() != draft.n_vocab()) {
    return absl::InvalidArgumentError(cascade::StrCat("the draft model's tokenizer is not the target's: target vocab ",
                                                      target.n_vocab(), " tokens, draft vocab ", draft.n_vocab()));
  }
  for (int32_t id = 0; id < target.n_vocab(); ++id) {
    if (target.TokenText(id) != draft.TokenText(id)) {
      return absl::InvalidArgumentError(cascade::StrCat(
          "the draft model's tokenizer is not the target's (both have ", target.n_vocab(), " tokens, id ", id,
          " is '", target.TokenText(id), "' in the target, '", draft.TokenText(id), "' in the draft)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cascade;
  using namespace cascade::coordinator;
  Args args({"config", "worker-threads", "startup-timeout"}, {"list-workers"});
  if (auto s = args.Parse(argc, argv, 1); !s.ok()) return Fail(s);
  auto path = args.Require("config");
  if (!path.ok()) return Fail(path.status());
  auto config = LoadClusterConfig(*path);
  if (!config.ok()) return Fail(config.status());
  auto threads = args.GetInt("worker-threads", 1);
  auto startup = args.GetInt("startup-timeout", 120);
  if (!threads.ok()) return Fail(threads.status());
  if (!startup.ok()) return Fail(startup.status());

  // The model's metadata and tokenizer only.
  auto files = model::OpenModelFiles(config->model.path);
  if (!files.ok()) return Fail(Annotate(files.status(), "model.path"));
  auto tokenizer = model::LoadTokenizer(*files);
  if (!tokenizer.ok()) return Fail(Annotate(tokenizer.status(), "model.path"));
  PlannerInput in = SizeModel(*files);
  in.pipeline_size = config->parallel.pipeline;
  in.tensor_size = config->parallel.tensor;
  in.devices = ClusterDevices(*config);
  auto plan = PlanStages(in);
  if (!plan.ok()) return Fail(plan.status());
  // Refuse, at start and with the reason, a TP size the model's heads or FFN cannot split.
  if (config->parallel.tensor > 1) {
    for (const StagePlan& s : plan->stages) {
      for (int r = 0; r < config->parallel.tensor; ++r) {
        auto shard = model::TpShard::ForFiles(*files, s.first_layer, s.last_layer, r, config->parallel.tensor);
        if (!shard.ok()) return Fail(Annotate(shard.status(), "parallel.tensor"));
      }
    }
  }
  // The drafter: n-gram in the coordinator, or a drafter worker running the target's first
  // layers (self) or a draft model whose tokenizer must be the target's.
  const DraftSection& draft = config->draft;
  int64_t draft_layers = 0;
  std::optional<model::ModelFiles> draft_files;
  if (draft.kind == DraftKind::kSelf) {
    if (draft.self_layers >= files->config.n_layers) {
      return Fail(absl::InvalidArgumentError(StrCat("draft.self.layers: ", draft.self_layers, " must be below the model's ",
                                                    files->config.n_layers, " layers")));
    }
    draft_layers = draft.self_layers;
  } else if (draft.kind == DraftKind::kModel) {
    auto df = model::OpenModelFiles(draft.model_path);
    if (!df.ok()) return Fail(Annotate(df.status(), "draft.model"));
    auto dt = model::LoadTokenizer(*df);
    if (!dt.ok()) return Fail(Annotate(dt.status(), "draft.model"));
    if (absl::Status same = SameVocabulary(**tokenizer, **dt); !same.ok()) return Fail(Annotate(same, "draft.model"));
    draft_layers = df->config.n_layers;
    draft_files = std::move(*df);
  }
  if (args.Has("list-workers")) {
    // For scripts/launch_cluster.sh: one line per worker to start elsewhere.
    for (const StagePlan& s : plan->stages) {
      for (const TpMember& m : s.tp) {
        for (const NodeSection& node : config->nodes) {
          if (node.name == m.node && node.launch == LaunchMode::kExternal) {
            std::printf("%d %s %s %s\n", s.pp_stage, node.name.c_str(), node.host.c_str(), m.device.ToString().c_str());
          }
        }
      }
    }
    for (const NodeSection& node : config->nodes) {
      if (draft_layers > 0 && node.name == draft.node && node.launch == LaunchMode::kExternal) {
        std::printf("draft %s %s %s\n", node.name.c_str(), node.host.c_str(), draft.devices[0].ToString().c_str());
      }
    }
    return 0;
  }
  std::fprintf(stderr, "%s\n", plan->ToString().c_str());

  // KV pool: the same block count on every stage, as many as the tightest worker holds:
  // scheduler.kv_cache_mb on CPU workers (and GPU workers when given); a GPU worker's free
  // memory after its weights, once it registers (Cluster::BringUp, coordinator/kv_budget.h).
  const model::ModelConfig& mc = files->config;
  const int64_t bs = config->scheduler.kv_block_size;
  const int64_t budget = config->scheduler.kv_cache_mb * 1048576;
  const auto on_gpu = [](const Device& d) { return d.kind == DeviceKind::kCuda; };
  bool any_gpu = draft_layers > 0 && on_gpu(draft.devices[0]);
  int64_t n_blocks = INT64_MAX;
  // With TP a worker holds ceil(n_kv_heads / tp) KV heads (at least one).
  const int64_t tp = config->parallel.tensor;
  const int64_t local_kv_heads = std::max<int64_t>(1, (mc.n_kv_heads + tp - 1) / tp);
  std::vector<int64_t> stage_block_bytes;
  for (const StagePlan& s : plan->stages) {
    const int64_t block_bytes = KvBlockBytes(s.n_layers(), bs, local_kv_heads, mc.head_dim);
    stage_block_bytes.push_back(block_bytes);
    bool gpu = s.tp.empty() ? on_gpu(s.device) : false;
    for (const TpMember& m : s.tp) gpu = gpu || on_gpu(m.device);
    any_gpu = any_gpu || gpu;
    if (!gpu || config->scheduler.kv_cache_mb_given) n_blocks = std::min(n_blocks, budget / block_bytes);
  }
  int64_t draft_block_bytes = 0, draft_weight_bytes = 0;
  if (draft_layers > 0) {
    // The drafter holds the same block ids, over its own layers and heads.
    const model::ModelFiles& df = draft_files ? *draft_files : *files;
    draft_block_bytes = KvBlockBytes(draft_layers, bs, df.config.n_kv_heads, df.config.head_dim);
    if (!on_gpu(draft.devices[0]) || config->scheduler.kv_cache_mb_given) {
      n_blocks = std::min(n_blocks, budget / draft_block_bytes);
    }
    const PlannerInput dsz = SizeModel(df);
    draft_weight_bytes = dsz.embedding_bytes + dsz.head_bytes;
    for (int64_t l = 0; l < draft_layers && l < static_cast<int64_t>(dsz.layer_bytes.size()); ++l) {
      draft_weight_bytes += dsz.layer_bytes[l];
    }
  }
  if (n_blocks < 1) return Fail(absl::InvalidArgumentError("scheduler.kv_cache_mb: too small for one KV block"));
  // Only GPU workers and no kv_cache_mb: the registered GPUs decide; the context can be no
  // longer than the model's anyway.
  if (n_blocks == INT64_MAX) n_blocks = (mc.n_ctx_train + bs - 1) / bs * std::max(1, config->scheduler.max_num_seqs);
  int64_t max_context = std::min<int64_t>(mc.n_ctx_train, n_blocks * bs);

  ClusterOptions co;
  co.model_path = config->model.path;
  co.group = StrCat("cascade-", getpid());
  co.kv_blocks = n_blocks;
  co.kv_block_size = bs;
  co.size_kv_from_gpus = any_gpu;
  co.gpu_memory_fraction = config->scheduler.gpu_memory_fraction;
  co.stage_block_bytes = stage_block_bytes;
  co.draft_block_bytes = draft_block_bytes;
  co.draft_weight_bytes = draft_weight_bytes;
  co.max_batched_tokens = config->scheduler.max_batched_tokens;
  co.pp_nccl = config->transport.activations == ActivationTransport::kNccl;
  if (draft_layers > 0) {
    co.draft = true;
    co.draft_model_path = draft.kind == DraftKind::kModel ? draft.model_path : config->model.path;
    co.draft_layers = draft_layers;
    co.draft_node = draft.node;
    co.draft_device = draft.devices[0];
  }
  Cluster cluster(*plan, co);
  KeyValueStore store;
  SchedulerOptions so;
  so.max_num_seqs = config->scheduler.max_num_seqs;
  so.max_batched_tokens = config->scheduler.max_batched_tokens;
  so.kv_block_size = static_cast<int32_t>(bs);
  so.n_kv_blocks = static_cast<int32_t>(std::min<int64_t>(n_blocks, INT32_MAX));
  // One more batch with a drafter worker: it drafts one while the stages verify others.
  so.max_in_flight_batches = cluster.n_stages() + (draft_layers > 0 ? 1 : 0);
  SpeculationOptions spec;
  spec.kind = draft.kind;
  spec.ngram_n = draft.ngram_n;
  spec.num_tokens = draft.num_tokens;
  spec.adaptive = draft.adaptive;
  spec.max_batch = draft.max_batch;
  Engine engine(&cluster, tokenizer->get(), so, spec);
  ClusterService cluster_service(&cluster, &store);
  InferenceService inference(&engine, &cluster, tokenizer->get(), mc,
                             {config->model.path, max_context, std::string(DraftKindName(draft.kind))});

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->server.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&cluster_service);
  builder.RegisterService(&inference);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(absl::UnavailableError(StrCat("server.listen: cannot listen on ", config->server.listen)));
  }
  const std::string address = StrCat(config->server.listen_host, ":", port);
  server->GetHealthCheckService()->SetServingStatus(false);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  Launcher launcher(DefaultWorkerBinary(), address);
  // A worker that refuses its device (no usable GPU for cuda:N) will never register: stop
  // waiting for it and say why.
  launcher.OnExit([&cluster](int stage, const std::string& why, bool final) {
    if (final) {
      cluster.AbortStartup(stage < 0 ? StrCat("the drafter's worker ", why) : StrCat("the worker for stage ", stage, " ", why));
    }
  });
  for (size_t i = 0; i < config->nodes.size(); ++i) {
    const NodeSection& node = config->nodes[i];
    if (node.launch != LaunchMode::kLocal) continue;
    for (const StagePlan& s : plan->stages) {
     for (const TpMember& m : s.tp) {
      if (m.node != node.name) continue;
      // Debian's UCX disables error handling on its shared-memory transports unless
      // told otherwise: without these, peer-failure detection forces TCP on one host.
      WorkerLaunch wl{s.pp_stage, false, node.name, m.device.ToString(), static_cast<int>(*threads),
                      {"UCX_POSIX_ERROR_HANDLING=y", "UCX_SYSV_ERROR_HANDLING=y"}};
      if (absl::Status st = launcher.Launch(wl); !st.ok()) return Fail(st);
     }
    }
    if (draft_layers > 0 && node.name == draft.node) {
      WorkerLaunch wl{-1, true, node.name, draft.devices[0].ToString(), static_cast<int>(*threads),
                      {"UCX_POSIX_ERROR_HANDLING=y", "UCX_SYSV_ERROR_HANDLING=y"}};
      if (absl::Status st = launcher.Launch(wl); !st.ok()) return Fail(st);
    }
  }
  CASCADE_LOG(Info) << "waiting for " << cluster.n_workers() << " worker(s) on " << address;
  if (absl::Status st = cluster.BringUp(std::chrono::seconds(*startup)); !st.ok()) {
    CASCADE_LOG(Error) << st.ToString();
    return Fail(st);
  }
  if (cluster.kv_blocks() != n_blocks) {  // The GPUs hold fewer blocks than the budget.
    n_blocks = cluster.kv_blocks();
    max_context = std::min<int64_t>(mc.n_ctx_train, n_blocks * bs);
    engine.ResetKvBlocks(static_cast<int32_t>(std::min<int64_t>(n_blocks, INT32_MAX)));
    inference.SetMaxContext(max_context);
  }
  engine.Start();
  server->GetHealthCheckService()->SetServingStatus(true);
  CASCADE_LOG(Info) << "ready on " << address << " (" << cluster.n_stages() << " stage(s) x tp " << cluster.tp_size() << ", " << n_blocks
                    << " KV blocks of " << bs << ", context " << max_context
                    << (draft.kind == DraftKind::kNone ? std::string() : StrCat(", drafter ", DraftKindName(draft.kind)))
                    << ")";
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CASCADE_LOG(Info) << "shutting down";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  launcher.StopAll();
  return 0;
}
