// The Llama-family transformer forward, written once over kernels::Backend, for a
// contiguous range of layers: the whole model in one process, or one pipeline stage. It is
// the models level over the layers level (model/layers/) over the kernels:
//  * model/layers/weight_loader.h loads and owns the weights: matrices are prepared once at
//    load by the backend (`Backend::PrepareWeight`): the CPU backend repacks
//    Q8_0/Q4_0/Q4_1 into its own layout and the file pages behind them are dropped; other
//    matrices stay views into the model file's mapping (quantized types stay quantized).
//    Norms and biases that are not f32 are converted and owned.
//  * model/layers/linear.h: the projections, each knowing its tensor-parallel kind; Q/K/V
//    and gate/up are StackedLinear (one stacked weight and dispatch where they stack).
//  * model/layers/vocab_parallel.h: the embedding and the LM head.
//
// Tensor parallelism (docs/ARCHITECTURE.md §4): with `StageOptions::tp_size` > 1 each rank of the TP
// group loads only its shard (model/format/tp_shard.h): the rows of its Q/K/V heads, the columns
// of the O projection for its query heads, rows [f0, f1) of gate/up and those columns of
// down, and its vocabulary rows of the embedding and the LM head. Column slices are copied
// into owned buffers (whole quantization blocks). The O and down projections are
// row-parallel layers: their partial sums are all-reduced over the group inside the layer;
// RMSNorm and the residual are replicated (every rank holds the full hidden state). Embed,
// RunLayers and Logits are then collectives: every rank of the group calls them, with the
// same batch, in the same order.
//
// Memory: weights, norms, workspaces and the hidden states Embed/RunLayers/Logits take are
// the backend's memory (device memory on a GPU); token ids, positions and block tables are
// host memory, and so are the logits Logits/Forward return unless, without TP, the logits'
// view names the backend's device (then they stay there, to be sampled there). On a GPU the matrices are uploaded at
// load and the file pages behind them dropped.
//
// Thread-safety: single owner (the device thread). Forward calls run one at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "model/backend_comm.h"
#include "model/format/kv_cache_scales.h"
#include "model/format/model_files.h"
#include "model/format/tp_shard.h"
#include "model/kv_cache.h"
#include "model/layers/moe.h"
#include "model/layers/vocab_parallel.h"
#include "model/layers/weight_loader.h"

namespace cascade::comm {
class Communicator;
}

namespace cascade::model {

struct StageOptions {
  int64_t first_layer = 0;  // Layers [first_layer, last_layer) run here.
  int64_t last_layer = -1;  // -1: through the last layer.
  // Derived from the range unless forced: the first stage embeds, the last has the head.
  // This process's place in the stage's tensor-parallel group (1: no TP).
  int tp_rank = 0;
  int tp_size = 1;
  // Also load the final norm and LM head when last_layer is not the model's last layer:
  // an early-exit head, as the self-drafter uses (the target's first layers + its head).
  bool exit_head = false;
  // Stack Q/K/V and gate/up into one weight each (Backend::LinearParts: one pass over the
  // input, one dispatch) where their types agree and the rows split into whole groups of
  // Backend::kLinearPartRows; false keeps separate projections (tests compare the two).
  bool fuse_projections = true;
  // MoE layers under TP: shard whole experts over the group (parallel.expert) instead of
  // slicing every expert's FFN columns (TpShard).
  bool expert_parallel = false;
  // With expert_parallel, its all-to-all form (parallel.expert_comm: all_to_all;
  // TpShard::ForExpertGroup): attention is data parallel over the group (each rank loads
  // every weight but the other ranks' experts, and runs only its own sequences) and the
  // MoE layers dispatch and combine tokens over the group (model/layers/moe.h). A rank
  // whose batch is empty still runs RunLayers (with no rows) for the other ranks' tokens.
  bool expert_all_to_all = false;
  // scheduler.kv_policy `sink_window` (opt-in, lossy; StreamingLLM): a layer whose attention
  // reaches further than `kv_window_tokens` positions sees only the first `kv_sink_tokens`
  // and the last `kv_window_tokens` (kernels::AttentionParams::kept_prefix, window), so the
  // KV between may be freed; a layer with a narrower window of its own keeps it. Window 0:
  // off (exact attention).
  int64_t kv_window_tokens = 0;
  int64_t kv_sink_tokens = 0;
};

// One forward step over a batch of sequences. Rows are tokens, sequence by sequence.
struct ForwardBatch {
  std::span<const int32_t> tokens;              // [n_tokens]; used by the first stage.
  std::span<const int32_t> positions;           // [n_tokens]
  std::span<const kernels::AttentionSeq> seqs;  // Which rows belong to which sequence.
  std::span<const int64_t> logit_rows;          // Rows whose logits the last stage returns.
};

class Transformer {
 public:
  // Reads the stage's tensors from `files` (which must outlive the Transformer).
  // NotFound naming a missing tensor; InvalidArgument for a shape that does not match the
  // config; Unimplemented for a weight type the backend lacks. With options.tp_size > 1,
  // `tp_comm` is this rank's member of the TP group (rank tp_rank of tp_size; borrowed, it
  // must outlive the Transformer and is used only by its calls); InvalidArgument when it is
  // missing or does not match, or when the layout cannot split (TpShard::Plan's reasons).
  // `tp_comm` may be null when tp_size is 1.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const ModelFiles& files, kernels::Backend* backend,
                                                           const StageOptions& options,
                                                           comm::Communicator* tp_comm = nullptr);
  ~Transformer();

  const ModelConfig& config() const { return config_; }
  int64_t first_layer() const { return first_layer_; }
  int64_t last_layer() const { return last_layer_; }
  int64_t n_layers_here() const { return last_layer_ - first_layer_; }
  bool has_embedding() const { return first_layer_ == 0; }
  bool has_head() const { return exit_head_ || last_layer_ == config_.n_layers; }
  // This rank's share of the model (the whole model when tp_size is 1).
  const TpShard& tp_shard() const { return shard_; }
  // Bytes of weights this stage reads from the file.
  int64_t weight_bytes() const { return loader_->weight_bytes(); }
  // Reads one byte per page of every weight this stage still reads from the file (those the
  // backend did not copy at load), so the first step does not pay the page faults;
  // `progress` (optional) gets the fraction of bytes done. Only the stage's own tensors are
  // touched.
  void Prefault(const std::function<void(double)>& progress) const;

  // The KV cache geometry this stage needs for `n_blocks` blocks of `block_size`: with TP,
  // only this rank's KV heads (tp_shard().n_kv_heads()); an fp8_e4m3 cache takes the
  // checkpoint's calibrated scales when it has them (model/format/kv_cache_scales.h).
  KvCacheOptions CacheOptions(int64_t n_blocks, int64_t block_size, DType kv_dtype = DType::kF16) const;

  // Tokens routed to each expert of this stage's MoE layers since the last
  // ResetExpertLoad: [moe_layers().size() * n_experts], layer-major. Empty for a dense model.
  // (Counts of layers routed on the device are read from it here, once per call.)
  const std::vector<int64_t>& expert_load() const;
  // The global indices of this stage's MoE layers, in order.
  const std::vector<int64_t>& moe_layers() const { return moe_layers_; }
  // How many of them the backend can route on the device (Backend::PrepareExperts took
  // their experts; RoutesExperts still decides per step); the others route on the host.
  int64_t moe_layers_on_device() const;
  void ResetExpertLoad();
  // Expert parallelism's redundant experts (EPLB): the replicas of this stage's MoE layers
  // beyond each expert's own rank, as (layer, expert, rank), replacing the previous ones
  // (MoeBlock::SetReplicas); layers of other stages are ignored. Experts this rank newly
  // holds are read from the file now. The errors of SetReplicas.
  struct ExpertReplica {
    int64_t layer = 0;
    int32_t expert = 0;
    int32_t rank = 0;
  };
  absl::Status PlaceExperts(std::span<const ExpertReplica> replicas);
  // Bytes of the weights of this rank's own routed experts (as read from the file; replicas
  // that PlaceExperts reads apart).
  int64_t expert_bytes() const { return expert_bytes_; }

  // The backend the stage runs on (borrowed).
  kernels::Backend* backend() const { return backend_; }

  // hidden [n_tokens, n_embd] = embedding rows of `tokens`. First stage only.
  absl::Status Embed(std::span<const int32_t> tokens, TensorView hidden);
  // Runs this stage's layers over hidden [n_tokens, n_embd] in place, appending the new
  // tokens' K/V to `cache` at the positions and blocks the batch names.
  absl::Status RunLayers(TensorView hidden, const ForwardBatch& batch, KvCache& cache);
  // device_load_, allocated and zeroed at load when some MoE layer may route on the device.
  absl::Status AllocateDeviceLoad();
  // Adds device_load_'s counts into expert_load_ and zeroes them, when a step may have
  // counted there since the last drain.
  void DrainDeviceLoad() const;
  // logits [rows.size(), n_vocab] (host memory, or the backend's as above) for the given
  // rows of hidden. Last stage only. With TP, each rank computes its vocabulary rows and the
  // group all-gathers them, so every rank returns all the logits.
  absl::Status Logits(const TensorView& hidden, std::span<const int64_t> rows, TensorView logits);
  // Embed (when first) + RunLayers + Logits (when last) over the whole model.
  // REQUIRES: this stage holds every layer. logits [logit_rows.size(), n_vocab].
  absl::Status Forward(const ForwardBatch& batch, KvCache& cache, TensorView logits);

  // CUDA graphs for decode steps (model/graph_step.h): off by default. With them on, a
  // caller runs steps for which GraphsFor answers true through RunGraphStep (Forward
  // does so itself).
  void set_cuda_graphs(bool on) { cuda_graphs_ = on; }
  // Graphs are on, the model is dense without a TP group, and `batch` is decode-shaped.
  bool GraphsFor(const ForwardBatch& batch) const;

 private:
  struct Layer;
  Transformer() = default;
  absl::Status LoadWeights(const ModelFiles& files);
  // Layer `l`'s norms, biases and projections (this rank's shard of them).
  absl::StatusOr<Layer> LoadLayer(const ModelFiles& files, int64_t l);
  absl::Status EnsureWorkspace(int64_t n_tokens);
  // At load: how many MoE layers route on the device and why not the others, where the
  // backend routes experts itself.
  void LogMoeRouting() const;
  // The TP group the row-parallel and vocab-parallel layers reduce over; null without TP
  // and under all-to-all expert parallelism, where only the MoE layers use the group.
  BackendComm* tp_group() { return tp_comm_ != nullptr && !shard_.expert_all_to_all ? &tp_ : nullptr; }
  // The group the MoE layers use: the TP group, or the expert group.
  BackendComm* moe_group() { return tp_comm_ != nullptr ? &tp_ : nullptr; }
  // This rank's dense FFN columns, 0 when every layer here is MoE (MoE layers keep their
  // workspaces in moe_scratch_).
  int64_t DenseFfnColumns() const;
  // Tokens per pass of a dense FFN over a batch of n: at most kFfnSliceTokens on a host
  // backend, so that its gate and up workspaces (n x n_ff f32 each: 64 MB for a 1B at 512
  // tokens, 235 MB for an 8B at 2048) stay small; the whole batch on a device.
  int64_t FfnSlice(int64_t n) const;
  static constexpr int64_t kFfnSliceTokens = 256;
  // A view of `rows` x `cols` f32 at the start of a workspace buffer.
  TensorView View(const kernels::Buffer& b, int64_t rows, int64_t cols) const;

  ModelConfig config_;
  kernels::Backend* backend_ = nullptr;    // Borrowed.
  comm::Communicator* tp_comm_ = nullptr;  // Borrowed; null when shard_.tp_size is 1.
  bool cuda_graphs_ = false;
  BackendComm tp_;  // tp_comm_ over the backend's memory.
  TpShard shard_;
  int64_t first_layer_ = 0;
  int64_t last_layer_ = 0;
  bool exit_head_ = false;
  int64_t kv_window_tokens_ = 0;  // StageOptions' sink + window policy.
  int64_t kv_sink_tokens_ = 0;
  bool fuse_projections_ = true;
  kernels::RopeParams rope_;
  std::vector<float> inv_freq_;
  KvCacheScales kv_scales_;  // The checkpoint's FP8 KV-cache scales of this shard; often none.
  // Owns every weight the layers below borrow (declared first, so it outlives them).
  std::unique_ptr<WeightLoader> loader_;
  const ModelFiles* files_ = nullptr;  // Borrowed (Load's `files`): replicas read from it.
  VocabParallelEmbedding embedding_;   // First stage (or the tied head's table).
  VocabParallelHead head_;             // Last stage.
  TensorView output_norm_;
  std::vector<Layer> layers_;
  // Workspaces in the backend's memory, grown to the largest batch seen (never shrunk).
  int64_t ws_tokens_ = 0;
  std::unique_ptr<kernels::Buffer> norm_, q_, k_, v_, attn_, proj_, gate_, up_;
  std::unique_ptr<kernels::Buffer> hidden_;  // Forward()'s residual stream.
  std::vector<int32_t> picked_rows_;         // Logits' rows, as embedding ids into hidden.
  MoeScratch moe_scratch_;                   // Shared by the MoE layers.
  std::vector<int64_t> moe_layers_;          // Global indices of the MoE layers here.
  // See expert_load(); mutable: reading it adds the device's counts in.
  mutable std::vector<int64_t> expert_load_;
  // int32 [moe layers * n_experts], backend memory: what the layers routed on the device
  // counted since the last read (MoeBlock::Forward's device_load); null when no layer can.
  std::unique_ptr<kernels::Buffer> device_load_;
  mutable bool device_load_pending_ = false;
  int64_t expert_bytes_ = 0;
};

// Divides `inv_freq` [head_dim / 2] by the file's `rope_freqs.weight` when it has one
// (Llama 3.1 GGUF files; llama.cpp's `freq_factors`). InvalidArgument naming the tensor
// when it is not f32 [head_dim / 2] or holds a factor that is not positive.
absl::Status ApplyRopeFreqFactors(const ModelFiles& files, std::vector<float>& inv_freq);

}  // namespace cascade::model
