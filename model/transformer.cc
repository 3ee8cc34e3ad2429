#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "comm/communicator.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/arch/llama.h"
#include "model/graph_step.h"
#include "model/layers/linear.h"

namespace cascade::model {

using arch::LlamaTensor;
using kernels::GrowBuffer;
using kernels::RopeStyle;

struct Transformer::Layer {
  TensorView attn_norm, bq, bk, bv, ffn_norm;
  TensorView q_norm, k_norm;      // Qwen3: [head_dim], over each head of Q and K; empty otherwise.
  TensorView bo, sinks;           // gpt-oss: O's bias [n_embd], this rank's heads' sinks; else empty.
  int64_t window = 0;             // Sliding-window attention: the window; 0: full.
  StackedLinear qkv;              // Column-parallel: this rank's Q, K and V heads.
  Linear o;                       // Row-parallel: the O columns of this rank's query heads.
  StackedLinear gate_up;          // Column-parallel: FFN columns [ff_begin, ff_end).
  Linear down;                    // Row-parallel: the same columns of down.
  std::unique_ptr<MoeBlock> moe;  // A MoE layer's FFN (then gate_up and down are empty).
  int64_t moe_index = -1;         // Its place in moe_layers_.
};

Transformer::~Transformer() = default;

absl::Status ApplyRopeFreqFactors(const ModelFiles& files, std::vector<float>& inv_freq) {
  const std::string name = arch::LlamaTensorName(files.format, LlamaTensor::kRopeFreqs);
  if (name.empty() || files.weights->FindTensor(name) == nullptr) return absl::OkStatus();
  CASCADE_ASSIGN_OR_RETURN(const TensorView f, files.weights->Read(name));
  if (f.dtype != DType::kF32 || f.NumElements() != static_cast<int64_t>(inv_freq.size())) {
    return absl::InvalidArgumentError(StrCat("tensor '", name, "' is ", DTypeName(f.dtype), " ", f.ShapeString(),
                                             ", RoPE needs f32 [", inv_freq.size(), "]"));
  }
  const auto* factors = static_cast<const float*>(f.data);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (!(factors[i] > 0)) {
      return absl::InvalidArgumentError(StrCat("tensor '", name, "': factor ", i, " is ", factors[i]));
    }
    inv_freq[i] /= factors[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const ModelFiles& files, kernels::Backend* backend,
                                                               const StageOptions& options,
                                                               comm::Communicator* tp_comm) {
  std::unique_ptr<Transformer> t(new Transformer());
  t->config_ = files.config;
  t->backend_ = backend;
  t->first_layer_ = options.first_layer;
  t->last_layer_ = options.last_layer < 0 ? files.config.n_layers : options.last_layer;
  t->exit_head_ = options.exit_head;
  if (options.kv_window_tokens < 0 || options.kv_sink_tokens < 0 ||
      (options.kv_window_tokens == 0 && options.kv_sink_tokens > 0)) {
    return absl::InvalidArgumentError(StrCat("KV policy: window ", options.kv_window_tokens, ", sink tokens ",
                                             options.kv_sink_tokens, " (sinks need a window > 0)"));
  }
  t->kv_window_tokens_ = options.kv_window_tokens;
  t->kv_sink_tokens_ = options.kv_sink_tokens;
  t->fuse_projections_ = options.fuse_projections;
  if (t->first_layer_ < 0 || t->first_layer_ >= t->last_layer_ || t->last_layer_ > files.config.n_layers) {
    return absl::InvalidArgumentError(StrCat("stage layers [", t->first_layer_, ", ", t->last_layer_,
                                             ") are not a non-empty range of the model's ", files.config.n_layers,
                                             " layers"));
  }
  if (options.tp_size > 1) {
    if (tp_comm == nullptr || tp_comm->size() != options.tp_size || tp_comm->rank() != options.tp_rank) {
      return absl::InvalidArgumentError(StrCat("tensor parallel rank ", options.tp_rank, " of ", options.tp_size,
                                               " needs a communicator of that rank and size"));
    }
    t->tp_comm_ = tp_comm;
    CASCADE_ASSIGN_OR_RETURN(t->tp_, BackendComm::Create(backend, tp_comm));
  }
  if (options.expert_all_to_all) {
    if (!options.expert_parallel) return absl::InvalidArgumentError("all-to-all needs expert parallelism");
    CASCADE_ASSIGN_OR_RETURN(t->shard_, TpShard::ForExpertGroup(t->config_, options.tp_rank, options.tp_size));
  } else {
    CASCADE_ASSIGN_OR_RETURN(t->shard_, TpShard::ForFiles(files, t->first_layer_, t->last_layer_, options.tp_rank,
                                                          options.tp_size, options.expert_parallel));
  }
  t->inv_freq_ = RopeInvFreq(t->config_);
  CASCADE_RETURN_IF_ERROR(Annotate(ApplyRopeFreqFactors(files, t->inv_freq_), StrCat("loading ", files.path)));
  t->rope_.style =
      t->config_.rope_layout == RopeLayout::kAdjacentPairs ? RopeStyle::kAdjacentPairs : RopeStyle::kRotateHalf;
  t->rope_.head_dim = t->config_.head_dim;
  t->rope_.inv_freq = t->inv_freq_;
  CASCADE_RETURN_IF_ERROR(Annotate(t->LoadWeights(files), StrCat("loading ", files.path)));
  t->LogMoeRouting();
  CASCADE_RETURN_IF_ERROR(t->AllocateDeviceLoad());
  return t;
}

absl::Status Transformer::LoadWeights(const ModelFiles& files) {
  const ModelConfig& c = config_;
  const TpShard& s = shard_;
  loader_ = std::make_unique<WeightLoader>(files.weights.get(), backend_);
  files_ = &files;
  BackendComm* group = tp_group();
  const auto name = [&](LlamaTensor tensor) { return arch::LlamaTensorName(files.format, tensor); };
  // The embedding is also the LM head when tied; HF tied checkpoints may store only
  // lm_head.weight (tinystories-656k does).
  std::string embd_name = name(LlamaTensor::kTokenEmbd);
  if (files.weights->FindTensor(embd_name) == nullptr && c.tied_embeddings) embd_name = name(LlamaTensor::kOutput);
  // Both are vocab-parallel: rows [vocab_begin, vocab_end) (all of them without TP).
  if (has_embedding() || (has_head() && c.tied_embeddings)) {
    CASCADE_ASSIGN_OR_RETURN(embedding_, VocabParallelEmbedding::Load(*loader_, embd_name, c.n_vocab, c.n_embd, s,
                                                                      group, !(has_head() && c.tied_embeddings)));
  }
  if (has_head()) {
    CASCADE_ASSIGN_OR_RETURN(output_norm_, loader_->Vector(name(LlamaTensor::kOutputNorm), c.n_embd));
    if (c.tied_embeddings) {
      head_ = VocabParallelHead(backend_, embedding_.table(), c.n_vocab, s, group);
    } else {
      CASCADE_ASSIGN_OR_RETURN(
          head_, VocabParallelHead::Load(*loader_, name(LlamaTensor::kOutput), c.n_vocab, c.n_embd, s, group));
    }
  }
  for (int64_t l = first_layer_; l < last_layer_; ++l) {
    CASCADE_ASSIGN_OR_RETURN(Layer layer, LoadLayer(files, l));
    layers_.push_back(std::move(layer));
  }
  CASCADE_ASSIGN_OR_RETURN(kv_scales_, ReadKvCacheScales(files, first_layer_, last_layer_, s));
  loader_->ReleaseSpare();
  return absl::OkStatus();
}

absl::StatusOr<Transformer::Layer> Transformer::LoadLayer(const ModelFiles& files, int64_t l) {
  const ModelConfig& c = config_;
  const TpShard& s = shard_;
  WeightLoader& w = *loader_;
  BackendComm* group = tp_group();
  const auto name = [&](LlamaTensor tensor) { return arch::LlamaTensorName(files.format, tensor, l); };
  // Q rows of the owned query heads, K/V rows of the owned KV heads (GGUF's pair permutation
  // of Q/K rows stays inside each head), O columns of the owned query heads.
  const IndexRange q{s.q_head_begin * c.head_dim, s.q_head_end * c.head_dim};
  const IndexRange kv{s.kv_head_begin * c.head_dim, s.kv_head_end * c.head_dim};
  const IndexRange ff{s.ff_begin, s.ff_end};
  Layer L;
  CASCADE_ASSIGN_OR_RETURN(L.attn_norm, w.Vector(name(LlamaTensor::kAttnNorm), c.n_embd));
  const std::string qkv[] = {name(LlamaTensor::kAttnQ), name(LlamaTensor::kAttnK), name(LlamaTensor::kAttnV)};
  const int64_t qkv_rows[] = {c.q_dim(), c.kv_dim(), c.kv_dim()};
  const IndexRange qkv_ranges[] = {q, kv, kv};
  CASCADE_ASSIGN_OR_RETURN(L.qkv, StackedLinear::LoadColumn(w, qkv, qkv_rows, c.n_embd, qkv_ranges, fuse_projections_));
  CASCADE_ASSIGN_OR_RETURN(L.o, Linear::LoadRow(w, name(LlamaTensor::kAttnOutput), c.n_embd, c.q_dim(), q, group));
  if (c.attn_out_bias) {
    CASCADE_ASSIGN_OR_RETURN(L.bo, w.Vector(name(LlamaTensor::kAttnOutputBias), c.n_embd));
  }
  if (c.attn_sinks) {
    CASCADE_ASSIGN_OR_RETURN(L.sinks,
                             w.Vector(name(LlamaTensor::kAttnSinks), c.n_heads, {s.q_head_begin, s.q_head_end}));
  }
  L.window = c.WindowOf(l);
  if (c.qkv_bias) {
    CASCADE_ASSIGN_OR_RETURN(L.bq, w.Vector(name(LlamaTensor::kAttnQBias), c.q_dim(), q));
    CASCADE_ASSIGN_OR_RETURN(L.bk, w.Vector(name(LlamaTensor::kAttnKBias), c.kv_dim(), kv));
    CASCADE_ASSIGN_OR_RETURN(L.bv, w.Vector(name(LlamaTensor::kAttnVBias), c.kv_dim(), kv));
  }
  if (c.qk_norm) {  // The same weights for every head: every rank holds them whole.
    CASCADE_ASSIGN_OR_RETURN(L.q_norm, w.Vector(name(LlamaTensor::kAttnQNorm), c.head_dim));
    CASCADE_ASSIGN_OR_RETURN(L.k_norm, w.Vector(name(LlamaTensor::kAttnKNorm), c.head_dim));
  }
  const LlamaTensor ffn_norm = c.arch == "gpt-oss" ? LlamaTensor::kPostAttentionNorm : LlamaTensor::kFfnNorm;
  CASCADE_ASSIGN_OR_RETURN(L.ffn_norm, w.Vector(name(ffn_norm), c.n_embd));
  if (c.IsMoeLayer(l)) {
    CASCADE_ASSIGN_OR_RETURN(MoeBlock moe, MoeBlock::Load(w, files, l, s, moe_group(), fuse_projections_));
    expert_bytes_ += moe.expert_bytes();
    L.moe = std::make_unique<MoeBlock>(std::move(moe));
    L.moe_index = static_cast<int64_t>(moe_layers_.size());
    moe_layers_.push_back(l);
    expert_load_.resize(moe_layers_.size() * c.n_experts, 0);
    return L;
  }
  const std::string gate_up[] = {name(LlamaTensor::kFfnGate), name(LlamaTensor::kFfnUp)};
  const int64_t ff_rows[] = {c.n_ff, c.n_ff};
  const IndexRange ff_ranges[] = {ff, ff};
  CASCADE_ASSIGN_OR_RETURN(L.gate_up,
                           StackedLinear::LoadColumn(w, gate_up, ff_rows, c.n_embd, ff_ranges, fuse_projections_));
  CASCADE_ASSIGN_OR_RETURN(L.down, Linear::LoadRow(w, name(LlamaTensor::kFfnDown), c.n_embd, c.n_ff, ff, group));
  return L;
}

void Transformer::Prefault(const std::function<void(double)>& progress) const { loader_->Prefault(progress); }

KvCacheOptions Transformer::CacheOptions(int64_t n_blocks, int64_t block_size, DType kv_dtype) const {
  if (!kv_scales_.empty() && kv_dtype != DType::kF8_E4M3) {
    CASCADE_LOG(Info) << "the checkpoint's FP8 KV-cache scales (self_attn.k_scale / v_scale) are unused: the KV cache "
                      << "is " << KvCacheDTypeName(kv_dtype) << " (scheduler.kv_cache_dtype: fp8_e4m3 uses them)";
  }
  return {.n_layers = n_layers_here(),
          .n_blocks = n_blocks,
          .block_size = block_size,
          .n_kv_heads = shard_.n_kv_heads(),
          .head_dim = config_.head_dim,
          .dtype = kv_dtype,
          .k_scales = kv_dtype == DType::kF8_E4M3 ? kv_scales_.k : std::vector<float>{},
          .v_scales = kv_dtype == DType::kF8_E4M3 ? kv_scales_.v : std::vector<float>{}};
}

int64_t Transformer::DenseFfnColumns() const { return moe_layers_.size() == layers_.size() ? 0 : shard_.n_ff(); }

// Each token's FFN is its own, so passes of fewer tokens give the same bits; the weights
// are read once more per pass (a 1B's FFN at 512 tokens: ~1% of its prefill time).
int64_t Transformer::FfnSlice(int64_t n) const { return backend_->host_memory() ? std::min(n, kFfnSliceTokens) : n; }

TensorView Transformer::View(const kernels::Buffer& b, int64_t rows, int64_t cols) const {
  return TensorView(b.data(), DType::kF32, {rows, cols}, backend_->device());
}

absl::Status Transformer::EnsureWorkspace(int64_t n) {
  if (n <= ws_tokens_) return absl::OkStatus();
  const ModelConfig& c = config_;
  kernels::Backend& b = *backend_;
  const auto f32 = [n](int64_t cols) { return static_cast<size_t>(n * cols) * sizeof(float); };
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, norm_, f32(c.n_embd)));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, q_, f32(shard_.q_dim())));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, k_, f32(shard_.kv_dim())));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, v_, f32(shard_.kv_dim())));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, attn_, f32(shard_.q_dim())));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, proj_, f32(c.n_embd)));
  const size_t ffn = static_cast<size_t>(FfnSlice(n) * DenseFfnColumns()) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, gate_, ffn));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, up_, ffn));
  ws_tokens_ = n;
  return absl::OkStatus();
}

absl::Status Transformer::Embed(std::span<const int32_t> tokens, TensorView hidden) {
  if (!has_embedding()) return absl::FailedPreconditionError("Embed called on a stage without the embedding");
  return embedding_.Forward(hidden, tokens);
}

const std::vector<int64_t>& Transformer::expert_load() const {
  DrainDeviceLoad();
  return expert_load_;
}

absl::Status Transformer::PlaceExperts(std::span<const ExpertReplica> replicas) {
  for (size_t li = 0; li < layers_.size(); ++li) {
    MoeBlock* moe = layers_[li].moe.get();
    if (moe == nullptr) continue;
    const int64_t layer = first_layer_ + static_cast<int64_t>(li);
    std::vector<std::pair<int32_t, int32_t>> extra;
    for (const ExpertReplica& r : replicas) {
      if (r.layer == layer) extra.emplace_back(r.expert, r.rank);
    }
    CASCADE_RETURN_IF_ERROR(moe->SetReplicas(*loader_, *files_, layer, extra));
  }
  loader_->ReleaseSpare();
  return absl::OkStatus();
}

void Transformer::ResetExpertLoad() {
  DrainDeviceLoad();
  std::fill(expert_load_.begin(), expert_load_.end(), 0);
}

int64_t Transformer::moe_layers_on_device() const {
  return std::count_if(layers_.begin(), layers_.end(),
                       [](const Layer& L) { return L.moe != nullptr && L.moe->routes_on_device(); });
}

void Transformer::LogMoeRouting() const {
  // Where the backend routes experts itself, say which layers it takes and why not the others.
  if (moe_layers_.empty() || !backend_->RoutesExperts(1)) return;
  const auto host = std::find_if(layers_.begin(), layers_.end(),
                                 [](const Layer& L) { return L.moe != nullptr && !L.moe->routes_on_device(); });
  CASCADE_LOG(Info) << "MoE layers routed on the device: " << moe_layers_on_device() << " of " << moe_layers_.size()
                    << (host == layers_.end()
                            ? std::string()
                            : StrCat("; the others on the host (", host->moe->host_routing_reason(), ")"));
}

absl::Status Transformer::AllocateDeviceLoad() {
  if (moe_layers_on_device() == 0) return absl::OkStatus();
  const std::vector<int32_t> zeros(expert_load_.size(), 0);
  CASCADE_ASSIGN_OR_RETURN(device_load_, backend_->Allocate(zeros.size() * sizeof(int32_t)));
  return backend_->CopyIn(device_load_->data(), zeros.data(), zeros.size() * sizeof(int32_t));
}

void Transformer::DrainDeviceLoad() const {
  if (!device_load_pending_) return;
  device_load_pending_ = false;
  std::vector<int32_t> counts(expert_load_.size(), 0);
  const size_t bytes = counts.size() * sizeof(int32_t);
  if (absl::Status s = backend_->CopyOut(counts.data(), device_load_->data(), bytes); !s.ok()) {
    CASCADE_LOG(Warning) << "expert load counts not read from the device: " << s;
    return;
  }
  for (size_t i = 0; i < counts.size(); ++i) expert_load_[i] += counts[i];
  const std::vector<int32_t> zeros(counts.size(), 0);
  if (absl::Status s = backend_->CopyIn(device_load_->data(), zeros.data(), bytes); !s.ok()) {
    CASCADE_LOG(Warning) << "expert load counts not reset on the device: " << s;
  }
}

absl::Status Transformer::RunLayers(TensorView hidden, const ForwardBatch& batch, KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t n = hidden.Rows();
  if (hidden.Cols() != c.n_embd || static_cast<int64_t>(batch.positions.size()) != n) {
    return absl::InvalidArgumentError(
        StrCat("forward: hidden ", hidden.ShapeString(), " with ", batch.positions.size(), " positions"));
  }
  if (cache.options().n_layers != n_layers_here()) {
    return absl::InvalidArgumentError(
        StrCat("forward: the cache holds ", cache.options().n_layers, " layers, this stage runs ", n_layers_here()));
  }
  if (cache.options().n_kv_heads != shard_.n_kv_heads() || cache.options().head_dim != c.head_dim) {
    return absl::InvalidArgumentError(StrCat("forward: the cache holds ", cache.options().n_kv_heads, " kv heads of ",
                                             cache.options().head_dim, ", this rank computes ", shard_.n_kv_heads(),
                                             " of ", c.head_dim));
  }
  if (n == 0) {
    // All-to-all expert parallelism: no sequence of this rank in the step, but the other
    // ranks' tokens may need its experts.
    for (const Layer& L : layers_) {
      if (L.moe != nullptr) CASCADE_RETURN_IF_ERROR(L.moe->Forward(hidden, hidden, moe_scratch_, {}));
    }
    return absl::OkStatus();
  }
  CASCADE_RETURN_IF_ERROR(EnsureWorkspace(n));
  kernels::Backend& b = *backend_;
  TensorView norm = View(*norm_, n, c.n_embd);
  // This rank's heads and FFN columns (all of them without TP).
  TensorView q = View(*q_, n, shard_.q_dim());
  TensorView k = View(*k_, n, shard_.kv_dim());
  TensorView v = View(*v_, n, shard_.kv_dim());
  TensorView attn = View(*attn_, n, shard_.q_dim());
  TensorView proj = View(*proj_, n, c.n_embd);
  const int64_t ffn_slice = FfnSlice(n);
  // YaRN and LongRoPE scale cos and sin by the attention factor, so q.k by its square.
  const float attn_scale =
      static_cast<float>(c.rope_attention_factor * c.rope_attention_factor) / std::sqrt(static_cast<float>(c.head_dim));
  kernels::AttentionParams attn_params{.n_heads = shard_.n_heads(), .scale = attn_scale, .window = 0, .sinks = {}};

  const float eps = static_cast<float>(c.norm_eps);
  // A dense FFN's output waits in proj to be added to hidden by the next layer's norm
  // (Backend::AddRmsNorm: one pass where the backend fuses them), or after the last layer.
  bool ffn_pending = false;
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    kernels::KvCacheLayer& kv = cache.layer(static_cast<int64_t>(li));
    CASCADE_RETURN_IF_ERROR(ffn_pending ? b.AddRmsNorm(norm, hidden, proj, L.attn_norm, eps)
                                        : b.RmsNorm(norm, hidden, L.attn_norm, eps));
    ffn_pending = false;
    const TensorView qkv[] = {q, k, v}, qkv_bias[] = {L.bq, L.bk, L.bv};
    CASCADE_RETURN_IF_ERROR(L.qkv.Forward(qkv, norm, qkv_bias));
    CASCADE_RETURN_IF_ERROR(
        b.RopeWriteKv(q, k, v, batch.positions, rope_, {.q = L.q_norm, .k = L.k_norm, .eps = eps}, kv, batch.seqs));
    // The sink + window policy narrows every layer that sees further than its window.
    const bool policy = kv_window_tokens_ > 0 && (L.window == 0 || L.window > kv_window_tokens_);
    attn_params.window = policy ? kv_window_tokens_ : L.window;
    attn_params.kept_prefix = policy ? kv_sink_tokens_ : 0;
    attn_params.sinks = L.sinks;
    CASCADE_RETURN_IF_ERROR(b.Attention(attn, q, kv, batch.seqs, attn_params));
    CASCADE_RETURN_IF_ERROR(L.o.Forward(proj, attn, L.bo));  // Reduced over the group's heads.
    CASCADE_RETURN_IF_ERROR(b.AddRmsNorm(norm, hidden, proj, L.ffn_norm, eps));
    if (L.moe != nullptr) {  // Adds its (reduced) output to hidden itself.
      const std::span<int64_t> load = std::span(expert_load_).subspan(L.moe_index * c.n_experts, c.n_experts);
      void* device_load = nullptr;
      if (device_load_ != nullptr) {
        device_load = static_cast<int32_t*>(device_load_->data()) + L.moe_index * c.n_experts;
        device_load_pending_ = true;  // The layer may have counted there: the next read drains.
      }
      CASCADE_RETURN_IF_ERROR(L.moe->Forward(hidden, norm, moe_scratch_, load, device_load));
      continue;
    }
    for (int64_t t0 = 0; t0 < n; t0 += ffn_slice) {
      const int64_t m = std::min(ffn_slice, n - t0);
      const TensorView gate = View(*gate_, m, DenseFfnColumns()), up = View(*up_, m, DenseFfnColumns());
      const TensorView gate_up[] = {gate, up};
      CASCADE_RETURN_IF_ERROR(L.gate_up.Forward(gate_up, norm.RowSlice(t0, t0 + m), {}));
      CASCADE_RETURN_IF_ERROR(b.SiluMul(gate, gate, up));
      // Reduced over the group's FFN columns.
      CASCADE_RETURN_IF_ERROR(L.down.Forward(proj.RowSlice(t0, t0 + m), gate));
    }
    ffn_pending = true;
  }
  return ffn_pending ? b.AddInPlace(hidden, proj) : absl::OkStatus();
}

absl::Status Transformer::Logits(const TensorView& hidden, std::span<const int64_t> rows, TensorView logits) {
  if (!has_head()) return absl::FailedPreconditionError("Logits called on a stage without the LM head");
  const ModelConfig& c = config_;
  const int64_t m = static_cast<int64_t>(rows.size());
  if (logits.Rows() != m || logits.Cols() != c.n_vocab) {
    return absl::InvalidArgumentError(
        StrCat("logits: buffer ", logits.ShapeString(), " for ", m, " rows of ", c.n_vocab));
  }
  CASCADE_RETURN_IF_ERROR(EnsureWorkspace(m));
  // Gather the wanted rows (hidden read as an f32 table), then norm + LM head on just
  // those (prefill needs one row).
  picked_rows_.clear();
  for (int64_t r : rows) {
    if (r < 0 || r >= hidden.Rows()) {
      return absl::InvalidArgumentError(StrCat("logits: row ", r, " outside the batch of ", hidden.Rows()));
    }
    picked_rows_.push_back(static_cast<int32_t>(r));
  }
  kernels::Backend& b = *backend_;
  TensorView picked = View(*proj_, m, c.n_embd);
  CASCADE_RETURN_IF_ERROR(b.Embedding(picked, hidden, picked_rows_));
  TensorView norm = View(*norm_, m, c.n_embd);
  CASCADE_RETURN_IF_ERROR(b.RmsNorm(norm, picked, output_norm_, static_cast<float>(c.norm_eps)));
  return head_.Forward(logits, norm);
}

absl::Status Transformer::Forward(const ForwardBatch& batch, KvCache& cache, TensorView logits) {
  if (!has_embedding() || !has_head()) {
    return absl::FailedPreconditionError("Forward needs a stage holding the whole model");
  }
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const auto ops = [&]() -> absl::Status {
    CASCADE_RETURN_IF_ERROR(GrowBuffer(*backend_, hidden_, static_cast<size_t>(n * config_.n_embd) * sizeof(float)));
    TensorView hidden = View(*hidden_, n, config_.n_embd);
    CASCADE_RETURN_IF_ERROR(Embed(batch.tokens, hidden));
    CASCADE_RETURN_IF_ERROR(RunLayers(hidden, batch, cache));
    return Logits(hidden, batch.logit_rows, logits);
  };
  return GraphsFor(batch) ? RunGraphStep(*backend_, ops) : ops();
}

bool Transformer::GraphsFor(const ForwardBatch& batch) const {
  return cuda_graphs_ && moe_layers_.empty() && tp_comm_ == nullptr && GraphableBatch(batch);
}

}  // namespace cascade::model
