// The coordinator's cluster configuration: the YAML file given to
// `cascade-coordinator --config FILE`, parsed and validated once at start-up
// (docs/ARCHITECTURE.md §8; the field reference is configs/README.md). Every knob the cluster reads
// lives here and is passed down from here; nothing reads it again later.
//
// Validation is strict: an unknown key, a wrong type or an out-of-range value is an
// `InvalidArgument` whose message names the source, the line and the key path
// (`nodes[1].devices[0]`), so a typo never passes silently.
//
// Thread safety: the structs are plain values; the functions are stateless and
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace cascade::coordinator {

// `model:` — the target model.
struct ModelSection {
  // `model.path` (REQUIRED): a GGUF file or a Hugging Face model directory. A relative
  // path in a file loaded by `LoadClusterConfig` is resolved against the directory of
  // that config file, so this field always holds the path to open. Existence is not
  // checked here (the coordinator reports that when it opens the model).
  std::string path;
};

// `parallel:` — how the model is cut.
// What a replica serves: whole requests, or one phase of disaggregated serving.
enum class ReplicaRole { kServe, kPrefill, kDecode };
std::string_view ReplicaRoleName(ReplicaRole role);  // "serve", "prefill", "decode".

// One replica's pipeline x tensor split and its role.
struct ReplicaShape {
  int pipeline = 1;
  int tensor = 1;
  ReplicaRole role = ReplicaRole::kServe;
};

struct ParallelSection {
  // `parallel.pipeline`: number of pipeline stages (contiguous layer ranges, one worker
  // process each when tensor = 1). Default 1. REQUIRES >= 1.
  int pipeline = 1;
  // `parallel.tensor`: tensor-parallel ranks per stage, all on one node (under
  // parallel.expert, an expert group that may span nodes). Default 1.
  // REQUIRES >= 1, and a split the model's heads and FFN allow (checked at start).
  int tensor = 1;
  // `parallel.expert`: in MoE layers, shard whole experts over each stage's tensor-parallel
  // ranks (expert parallelism; uneven counts allowed) instead of slicing every expert's
  // FFN columns. Attention stays tensor-parallel. A stage's group may then span nodes.
  // Default false; no effect on dense models.
  bool expert = false;
  // `parallel.redundant_experts`: with expert parallelism, replica slots per rank in every
  // MoE layer (EPLB): from the measured expert loads the coordinator places replicas of the
  // hottest experts on the least loaded ranks, and each expert's tokens are split among its
  // holders (coordinator/serving/expert_balance.h). Default 0: none. REQUIRES >= 0, and
  // parallel.expert with tensor >= 2 when > 0.
  int redundant_experts = 0;
  // `parallel.expert_comm`: how expert parallelism moves tokens. `all_reduce` (the default):
  // attention is tensor parallel, every rank sees every token and the MoE layer's partial
  // sums are all-reduced. `all_to_all`: attention is data parallel over the stage's ranks
  // (each runs its own sequences, a lane, with every KV head and all weights but the other
  // ranks' experts), and each MoE layer dispatches every token to the ranks holding its
  // experts and combines the results back (model/layers/moe.h). REQUIRES parallel.expert
  // with tensor >= 2 for all_to_all; not with disaggregation yet.
  bool expert_all_to_all = false;
  bool expert_comm_given = false;
  // All-to-all's lanes per stage (each rank runs its own sequences): tensor; else 1.
  int lanes() const { return expert_all_to_all ? tensor : 1; }
  // `parallel.eplb_interval_steps`: with redundant experts, steps between two placements,
  // each from the loads counted since the previous one. Default 100 when redundant_experts
  // is set (logged as defaulted). REQUIRES >= 1.
  int eplb_interval_steps = 0;
  bool eplb_interval_given = false;
  // `parallel.data`: data-parallel replicas, each a whole pipeline.tensor × pipeline
  // pipeline on its own devices (replica r takes the r-th run of pipeline × tensor devices
  // in node order), behind the one coordinator and its one queue. Default 1. REQUIRES
  // [1, 256]; not with a drafter worker (draft.self / draft.model) yet.
  int data = 1;
  // `parallel.route_by_prefix`: with replicas and prefix caching, send a request to the
  // replica that was sent its leading prompt blocks while it is not much busier
  // (coordinator/serving/replicas.h). Default false: by load alone (docs/PERFORMANCE.md measured
  // no gain at two replicas here).
  bool route_by_prefix = false;
  // `parallel.disaggregation: {prefill: {replicas: P, pipeline: p, tensor: t}, decode:
  // {replicas: D, pipeline: p', tensor: t'}}` (each key default 1): prefill and decode on
  // separate replicas (coordinator/serving/replicas.h). A request is prefilled on a prefill
  // replica, its KV moves to a decode replica over the workers' KV group, and it decodes
  // there. Replaces parallel.data, pipeline and tensor; not with a drafter worker yet.
  bool disaggregated = false;
  // `parallel.disaggregation.local_prefill_tokens`: a prompt of at most this many tokens is
  // prefilled on the decode replica that decodes it, and no KV moves (conditional
  // disaggregation, as NVIDIA Dynamo's max_local_prefill_length): short prompts need not wait
  // behind long ones on the prefill side. Default 0: every prompt is prefilled on a prefill
  // replica. REQUIRES >= 0.
  int local_prefill_tokens = 0;
  int prefill_replicas = 1, decode_replicas = 1;
  ReplicaShape prefill{1, 1, ReplicaRole::kPrefill}, decode{1, 1, ReplicaRole::kDecode};

  // Every replica in device order: `data` of {pipeline, tensor}, or the prefill replicas
  // then the decode ones.
  std::vector<ReplicaShape> Replicas() const;
};

// How the coordinator obtains a node's workers.
enum class LaunchMode {
  kLocal,     // `local`: the coordinator spawns them as its child processes.
  kExternal,  // `external`: started elsewhere (ssh, Slurm); the coordinator waits.
};

std::string_view LaunchModeName(LaunchMode mode);

// `HOST:PORT`, with an IPv6 host in brackets.
std::string HostPort(std::string_view host, int port);

// Whether `host` names this machine's loopback (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(std::string_view host);

// One entry of `nodes:` — a machine and the devices that run one worker each.
struct NodeSection {
  // `nodes[i].name` (REQUIRED): unique node name; workers register with
  // `--node NAME`.
  std::string name;
  // `nodes[i].host` (REQUIRED): host name or address at which the node's workers are
  // reachable (and, for `launch: local`, where the coordinator runs).
  std::string host;
  // `nodes[i].devices` (REQUIRED, non-empty): one worker per entry, `cpu` or `cuda:N`.
  // `cpu` may repeat (several CPU workers on one node); a `cuda:N` may not.
  std::vector<Device> devices;
  // `nodes[i].launch`: `local` or `external`. Default `local`.
  LaunchMode launch = LaunchMode::kLocal;
};

// `server:` — the public API endpoint and the control plane's.
struct ServerSection {
  // `server.listen`: `HOST:PORT` (IPv6 as `[ADDR]:PORT`) of the public gRPC API
  // (cascade.v1.Inference, health, reflection). Default `127.0.0.1:50051`. REQUIRES port
  // in [0, 65535]; 0 picks any free port (tests).
  std::string listen = "127.0.0.1:50051";
  // Parts of `listen` (derived).
  std::string listen_host = "127.0.0.1";
  int listen_port = 50051;
  // `server.cluster_listen`: `HOST:PORT` of the control plane (cascade.v1.Coordinator:
  // Join, Register, Heartbeat, rendezvous keys), which workers dial; mutual TLS unless
  // security.insecure. Default: `server.listen`'s host and the next port (any free port
  // when `server.listen`'s is 0). REQUIRES a port other than `server.listen`'s.
  std::string cluster_listen;
  std::string cluster_host;  // Parts of `cluster_listen` (derived).
  int cluster_port = 0;
  // `server.http_listen`: `HOST:PORT` of the HTTP front (OpenAI-compatible API, /health,
  // /metrics). Empty (the default): no HTTP front. Port 0 picks any free port.
  std::string http_listen;
  std::string http_host;  // Parts of `http_listen` (derived).
  int http_port = 0;
  // `server.http_threads`: HTTP connections served at once (a stream holds one for its
  // whole life). Default 64. REQUIRES in [1, 4096].
  int http_threads = 64;
  // `server.drain_timeout_s`: on SIGTERM or SIGINT the coordinator stops taking requests,
  // lets the ones it has finish for up to this many seconds (then ends the rest with
  // UNAVAILABLE), stops its workers and exits 0. Default 30. REQUIRES in [0, 3600].
  int drain_timeout_s = 30;
  // `server.recovery_timeout_s`: when a worker dies, its requests (and new arrivals) wait
  // this long for the cluster to rebuild with a restarted worker, then resume by
  // recomputing their KV; past it they fail with UNAVAILABLE. Default 60. REQUIRES in
  // [1, 86400].
  int recovery_timeout_s = 60;
  // `server.tool_call_format`: the syntax the OpenAI API reads function calls in and a
  // required tool_choice forces (text/tool_calls.h): "hermes", "llama3", "mistral",
  // "deepseek", "none",
  // or "auto" (the default): the one the model's chat template shows, logged at start.
  std::string tool_call_format = "auto";
  // `server.model_name`: the model's name in the OpenAI API (`model` in requests,
  // /v1/models). Default: the model file's or directory's name without `.gguf`.
  std::string model_name;
  // `server.tls_cert_file` / `server.tls_key_file`: a PEM certificate (chain) and its
  // private key; both or neither. When set, the public gRPC API (`listen`) and the HTTP
  // front (`http_listen`) serve TLS with them; the files are read and checked at start-up
  // (coordinator/front/public_tls.h). Relative to the config file. Empty (the default): plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// `scheduler:` — batching and KV cache limits.
struct SchedulerSection {
  // `scheduler.max_num_seqs`: most sequences in one batch (and running at once).
  // Default 64. REQUIRES >= 1.
  int max_num_seqs = 64;
  // `scheduler.max_batched_tokens`: most tokens fed in one batch (prefill tokens plus one
  // per decoding sequence). Default 2048. REQUIRES >= 1.
  int max_batched_tokens = 2048;
  // `scheduler.kv_block_size`: tokens per KV cache block (page). Default 16.
  // REQUIRES a power of two in [1, 1024].
  int kv_block_size = 16;
  // `scheduler.kv_cache_mb`: KV cache budget per worker in MiB (2^20 bytes), over the
  // layers that worker holds; the number of blocks follows from it and the model's
  // shape. Default 512 on CPU workers; on cuda:N workers it only caps the pool when given
  // (coordinator/control/kv_budget.h). REQUIRES >= 1.
  int64_t kv_cache_mb = 512;
  bool kv_cache_mb_given = false;
  // `scheduler.host_kv_cache_mb`: the host tier of the prefix cache, in MiB of host memory
  // per target worker (pinned on cuda:N workers): cached KV blocks evicted from the KV pool
  // are copied there, stay matchable, and are copied back on a hit instead of recomputed
  // (coordinator/serving/prefix_cache.h). Blocks: this over the largest block any stage
  // holds. Default 0: no host tier. REQUIRES >= 0, and prefix_caching.
  int64_t host_kv_cache_mb = 0;
  // `scheduler.gpu_memory_fraction`: share of a GPU's free memory (as its worker reported
  // it when registering) that the worker's weights and KV cache may take; the rest is left
  // for workspaces and the CUDA context. Default 0.9. REQUIRES (0, 1].
  double gpu_memory_fraction = 0.9;
  // `scheduler.kv_cache_dtype`: element type of the KV cache, f32 | f16 | q8_0 (q8_0
  // needs head_dim a multiple of 32). Default f16. The budget above counts its real bytes.
  DType kv_cache_dtype = DType::kF16;
  // `scheduler.prefix_caching`: reuse the KV of full blocks across requests that share a
  // prefix (automatic prefix caching, coordinator/serving/scheduler.h). Default true.
  bool prefix_caching = true;
  // `scheduler.device_sampling`: a cuda:N worker whose LM head needs no TP gather samples
  // on the GPU (model/step_sampler.h: only ids and asked-for logprobs leave it); false
  // copies the logits to the host and samples there, as CPU workers do. Greedy ids are the
  // same either way; a seed draws from the same law but names different tokens. Default true.
  bool device_sampling = true;
  // `scheduler.cuda_graphs`: a cuda:N worker runs each decode step of a dense model without
  // tensor parallelism as one CUDA graph, captured per step shape (model/graph_step.h).
  // Default false until measured on a GPU.
  bool cuda_graphs = false;
  // `scheduler.cpu_prefill_activations`: `f32` (the default: exact products) or `bf16`
  // (opt-in, lossy): a CPU worker's prefill of 8 or more tokens over FP8 weights rounds the
  // activations to bf16 and multiplies them by `vdpbf16ps` (AVX512_BF16 CPUs; others keep
  // f32 and say so), twice the f32 rate; the weights and their scales stay exact.
  bool cpu_bf16_prefill = false;
  // `scheduler.max_queued`: most requests waiting for admission (while the cluster is
  // busy, or rebuilds after a worker's death); more are refused with RESOURCE_EXHAUSTED.
  // Default 4096. REQUIRES in [1, 1000000].
  int max_queued = 4096;
  // `scheduler.kv_policy`: `full` (the default: exact attention, a sequence's context is
  // bounded by the KV pool) or `sink_window` (opt-in, lossy; StreamingLLM, Xiao et al. 2023):
  // every layer that would see further sees only the first `kv_sink_tokens` positions and the
  // last `kv_window_tokens`, the KV blocks between are freed (coordinator/serving/scheduler.h),
  // and the context is the model's however small the pool; a response whose attention it
  // narrowed says so in its usage (kv_hidden_tokens).
  bool kv_sink_window = false;
  // `scheduler.kv_window_tokens`: REQUIRED with sink_window, >= 1 (refused otherwise).
  int64_t kv_window_tokens = 0;
  // `scheduler.kv_sink_tokens`: with sink_window; default 4, StreamingLLM's four attention
  // sinks (logged as defaulted). REQUIRES >= 0.
  int64_t kv_sink_tokens = 0;
  bool kv_sink_tokens_given = false;
};

// Data-plane transport for hidden states between pipeline stages.
enum class ActivationTransport {
  kUcx,   // `ucx`: UCX tag send/recv over host memory (any node, any device; a GPU
          // worker copies through host buffers).
  kNccl,  // `nccl`: NCCL send/recv between GPUs; every device must be cuda:N.
};

std::string_view ActivationTransportName(ActivationTransport transport);

// How a stage hands its hidden states to the next under tensor parallelism.
enum class PpHandoff {
  kSplit,  // `split`: TP rank r sends its 1/t of the rows to TP rank r of the next stage,
           // whose TP group all-gathers them (each cross-stage link carries 1/t).
  kFull,   // `full`: every TP rank sends all the rows to its peer rank and the next stage
           // gathers nothing (t times the bytes across stages; the plain baseline).
};

std::string_view PpHandoffName(PpHandoff handoff);

// `transport:` — the data plane.
struct TransportSection {
  // `transport.activations`: `ucx` or `nccl` (all devices cuda:N). Default `ucx`. The
  // collectives inside a TP group use NCCL whenever all its devices are cuda:N and the
  // binary has NCCL, whatever this says.
  ActivationTransport activations = ActivationTransport::kUcx;
  // `transport.pp_handoff`: `split` or `full` (see PpHandoff). Default `split`. Without
  // tensor parallelism both send the same bytes.
  PpHandoff pp_handoff = PpHandoff::kSplit;
};

// Which drafter proposes tokens for speculative decoding (docs/ARCHITECTURE.md §5).
enum class DraftKind {
  kNone,   // No `draft:` section: plain decoding.
  kNgram,  // `draft.ngram`: prompt lookup in the coordinator, no model.
  kSelf,   // `draft.self`: the target's first layers and its LM head, on a drafter worker.
  kModel,  // `draft.model`: a smaller model with the same tokenizer, on a drafter worker.
};

std::string_view DraftKindName(DraftKind kind);

// `draft:` — speculative decoding. Exactly one of `ngram`, `self`, `model`.
struct DraftSection {
  DraftKind kind = DraftKind::kNone;
  // `draft.ngram.n`: longest suffix the prompt lookup matches. Default 3. REQUIRES [1, 16].
  int ngram_n = 3;
  // `draft.self.layers`: target layers the self-drafter runs before the head. REQUIRES
  // >= 1 (and fewer than the model's layers: checked when the model is opened).
  int self_layers = 0;
  // `draft.model`: the draft model (GGUF or HF directory), resolved like `model.path`.
  // Its tokenizer must be the target's (checked at start).
  std::string model_path;
  // `draft.node`: the node whose device runs the drafter worker (self and model). Default:
  // the first node.
  std::string node;
  // `draft.devices`: the drafter's device, one entry. Default `[cpu]`.
  std::vector<Device> devices;
  // `draft.tensor`: tensor-parallel ranks of the drafter. Default 1. REQUIRES == 1.
  int tensor = 1;
  // `draft.num_tokens`: most drafted tokens per verify step (k). Default 4. REQUIRES [1, 16].
  int num_tokens = 4;
  // `draft.adaptive`: k follows each sequence's acceptance. Default true.
  bool adaptive = true;
  // `draft.max_batch`: a hard cap; speculation is off while more sequences than this
  // decode at once. Default 0: no cap, the measured step cost switches it off when a
  // draft no longer pays (coordinator/serving/speculation.h). REQUIRES >= 0.
  int max_batch = 0;
};

// `security:` — who may call the public API, and how the cluster trusts its workers.
struct SecuritySection {
  // `security.insecure`: run the control plane in plaintext, with no worker
  // authentication (anyone who reaches `server.cluster_listen` can join). Default false:
  // mutual TLS with the cluster's own CA, and workers join with its token. A warning is
  // logged when set with a non-loopback `server.cluster_listen`.
  bool insecure = false;
  // `security.cluster_dir`: where the cluster's CA (`ca.pem`, `ca.key`) and join token
  // (`join.token`) live; created on first start (0700/0600) and reused afterwards, so
  // external workers can be given `ca.pem` and the token before or after the coordinator
  // starts. Relative to the config file. Empty (the default): a private directory for
  // this run, removed at exit. REQUIRED when a node is `launch: external` (unless
  // security.insecure).
  std::string cluster_dir;
  // `security.api_keys_file`: a file of API keys, one per line ('#' comments), 16+
  // characters each; callers send `authorization: Bearer KEY` (gRPC metadata or HTTP
  // header). Relative to the config file. Empty (the default): the public API is open.
  std::string api_keys_file;
  // `security.health_needs_key` / `security.metrics_needs_key`: whether HTTP /health and
  // /metrics also want a key (gRPC health stays open for load balancers). Default false.
  bool health_needs_key = false;
  bool metrics_needs_key = false;
};

struct ClusterConfig {
  ModelSection model;
  ParallelSection parallel;
  // `nodes:` (REQUIRED, non-empty), in order: stages map onto their devices in this
  // order. REQUIRES at least parallel.data × parallel.pipeline × parallel.tensor devices
  // in total; extra devices are left idle.
  std::vector<NodeSection> nodes;
  ServerSection server;
  SchedulerSection scheduler;
  TransportSection transport;
  DraftSection draft;
  SecuritySection security;
  // Where the config came from (the file path or the `source_name` given), for messages.
  std::string source;

  // Total devices over all nodes.
  int TotalDevices() const;
};

// Parses and validates YAML text. `source_name` prefixes error messages. A relative
// `model.path` is kept as written (there is no file to resolve it against).
// Errors: InvalidArgument for malformed YAML or any invalid field, naming the key.
absl::StatusOr<ClusterConfig> ParseClusterConfig(std::string_view yaml_text, std::string_view source_name);

// Reads `path` and parses it as above; a relative `model.path` is resolved against the
// directory containing `path`.
// Errors: NotFound when the file cannot be opened, otherwise as `ParseClusterConfig`.
absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path);

}  // namespace cascade::coordinator
