#include "model/transformer.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/status.h"
#include "comm/communicator.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/arch/llama.h"

namespace cascade::model {

using arch::LlamaTensor;
using kernels::GrowBuffer;
using kernels::RopeStyle;

struct Transformer::Layer {
  TensorView attn_norm, bq, bk, bv, ffn_norm;
  // Borrowed from `prepared_`.
  const kernels::PreparedWeight *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const kernels::PreparedWeight *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
  // Q/K/V and gate/up stacked by rows (LinearParts); when set, wq/wk/wv or w_gate/w_up
  // are null.
  const kernels::PreparedWeight *wqkv = nullptr, *w_gate_up = nullptr;
};

Transformer::~Transformer() = default;

void Transformer::FreeBytes::operator()(uint8_t* p) const { std::free(p); }

absl::StatusOr<std::vector<float>> RopeInvFreq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    switch (c.rope_scaling) {
      case RopeScaling::kNone: break;
      case RopeScaling::kLinear: f /= c.rope_scaling_factor; break;
      case RopeScaling::kLlama3: {
        // Llama 3.1: keep high frequencies, divide low ones by the factor, blend between.
        const double old_ctx = static_cast<double>(c.rope_original_ctx > 0 ? c.rope_original_ctx : 8192);
        const double low_wavelen = old_ctx / c.rope_low_freq_factor;
        const double high_wavelen = old_ctx / c.rope_high_freq_factor;
        const double wavelen = 2 * M_PI / f;
        if (wavelen > low_wavelen) {
          f /= c.rope_scaling_factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_ctx / wavelen - c.rope_low_freq_factor) /
                                (c.rope_high_freq_factor - c.rope_low_freq_factor);
          f = (1 - smooth) * f / c.rope_scaling_factor + smooth * f;
        }
        break;
      }
      case RopeScaling::kYarn:
        return absl::UnimplementedError("YaRN RoPE scaling is not supported yet");
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const ModelFiles& files,
                                                               kernels::Backend* backend,
                                                               const StageOptions& options,
                                                               comm::Communicator* tp_comm) {
  std::unique_ptr<Transformer> t(new Transformer());
  t->config_ = files.config;
  t->backend_ = backend;
  t->first_layer_ = options.first_layer;
  t->last_layer_ = options.last_layer < 0 ? files.config.n_layers : options.last_layer;
  t->exit_head_ = options.exit_head;
  t->fuse_projections_ = options.fuse_projections;
  if (t->first_layer_ < 0 || t->first_layer_ >= t->last_layer_ || t->last_layer_ > files.config.n_layers) {
    return absl::InvalidArgumentError(StrCat("stage layers [", t->first_layer_, ", ", t->last_layer_,
                                             ") are not a non-empty range of the model's ",
                                             files.config.n_layers, " layers"));
  }
  if (options.tp_size > 1) {
    if (tp_comm == nullptr || tp_comm->size() != options.tp_size || tp_comm->rank() != options.tp_rank) {
      return absl::InvalidArgumentError(StrCat("tensor parallel rank ", options.tp_rank, " of ", options.tp_size,
                                               " needs a communicator of that rank and size"));
    }
    t->tp_comm_ = tp_comm;
    CASCADE_ASSIGN_OR_RETURN(t->tp_, BackendComm::Create(backend, tp_comm));
  }
  CASCADE_ASSIGN_OR_RETURN(t->shard_, TpShard::ForFiles(files, t->first_layer_, t->last_layer_, options.tp_rank,
                                                        options.tp_size));
  CASCADE_ASSIGN_OR_RETURN(t->inv_freq_, RopeInvFreq(t->config_));
  t->rope_.style = t->config_.rope_layout == RopeLayout::kAdjacentPairs ? RopeStyle::kAdjacentPairs
                                                                         : RopeStyle::kRotateHalf;
  t->rope_.head_dim = t->config_.head_dim;
  t->rope_.inv_freq = t->inv_freq_;
  CASCADE_RETURN_IF_ERROR(Annotate(t->LoadWeights(files), StrCat("loading ", files.path)));
  return t;
}

absl::StatusOr<uint8_t*> Transformer::OwnBytes(const std::string& tensor, size_t bytes) {
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)));
  if (buf == nullptr) return absl::ResourceExhaustedError(StrCat("tensor '", tensor, "': cannot allocate ", bytes, " bytes"));
  owned_bytes_.emplace_back(buf);
  return buf;
}

absl::Status Transformer::LoadWeights(const ModelFiles& files) {
  const WeightSource& w = *files.weights;
  const ModelConfig& c = config_;
  const auto name = [&](LlamaTensor tensor, int64_t layer = -1) {
    return arch::LlamaTensorName(files.format, tensor, layer);
  };
  // A matrix [rows, cols] in any type the backend can multiply by, cut to rows [r0, r1)
  // and columns [c0, c1) (-1: to the end): a row slice is a view of just those rows of the
  // file; a column slice (whole blocks of the type) is copied into an owned buffer and the
  // file pages behind the rows are dropped.
  struct Slice {
    std::string name;
    TensorView file;  // What the source returned.
    TensorView kept;  // The file view, or the owned copy of its columns.
    bool owned = false;
  };
  const auto slice = [&](const std::string& n, int64_t rows, int64_t cols, int64_t r0 = 0, int64_t r1 = -1,
                         int64_t c0 = 0, int64_t c1 = -1) -> absl::StatusOr<Slice> {
    if (r1 < 0) r1 = rows;
    if (c1 < 0) c1 = cols;
    const TensorInfo* info = w.FindTensor(n);
    if (info == nullptr) return absl::NotFoundError(StrCat(w.path(), ": tensor '", n, "' is missing"));
    if (info->n_dims != 2 || info->shape[0] != rows || info->shape[1] != cols) {
      return absl::InvalidArgumentError(StrCat("tensor '", n, "' has shape ", info->ShapeString(),
                                               ", the config needs [", rows, ", ", cols, "]"));
    }
    if (!backend_->SupportsWeight(info->dtype)) {
      return absl::UnimplementedError(StrCat("tensor '", n, "': the backend has no kernel for ", DTypeName(info->dtype)));
    }
    const int64_t block = BlockElems(info->dtype);
    if (c0 % block != 0 || c1 % block != 0) {
      return absl::InvalidArgumentError(StrCat("tensor '", n, "': columns [", c0, ", ", c1,
                                               ") are not whole blocks of ", DTypeName(info->dtype)));
    }
    Slice sl;
    sl.name = n;
    CASCADE_ASSIGN_OR_RETURN(sl.file, w.ReadRows(n, r0, r1));
    sl.kept = sl.file;
    if (c0 != 0 || c1 != cols) {
      const int64_t src_row = RowBytes(info->dtype, cols), dst_row = RowBytes(info->dtype, c1 - c0);
      const int64_t skip = RowBytes(info->dtype, c0);
      CASCADE_ASSIGN_OR_RETURN(uint8_t* buf, OwnBytes(n, static_cast<size_t>((r1 - r0) * dst_row)));
      const auto* src = static_cast<const uint8_t*>(sl.file.data);
      for (int64_t r = 0; r < r1 - r0; ++r) std::memcpy(buf + r * dst_row, src + r * src_row + skip, dst_row);
      sl.kept = TensorView(buf, info->dtype, {r1 - r0, c1 - c0});
      w.ReleasePages(sl.file);
      sl.owned = true;
    }
    return sl;
  };
  // Prepares a slice once with the backend. When the backend keeps its own copy (the CPU
  // repack, a GPU upload), the file pages or the owned copy behind it are dropped right
  // away, so the model is resident about once, not twice.
  const auto prepare = [&](const Slice& sl) -> absl::StatusOr<const kernels::PreparedWeight*> {
    weight_bytes_ += sl.kept.NumBytes();
    absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> prepared = backend_->PrepareWeight(sl.kept);
    if (!prepared.ok()) return Annotate(prepared.status(), StrCat("preparing tensor '", sl.name, "'"));
    std::unique_ptr<kernels::PreparedWeight> p = *std::move(prepared);
    if (p->reads_source() && !backend_->host_memory()) {
      return absl::InternalError(StrCat("tensor '", sl.name, "': the backend left the weight in host memory"));
    }
    if (!p->reads_source()) {
      if (sl.owned) {
        owned_bytes_.pop_back();  // The backend made its own copy (the slice's is the latest).
      } else {
        w.ReleasePages(sl.file);
      }
    } else if (!sl.owned) {
      used_.push_back(sl.file);
    }
    return prepared_.emplace_back(std::move(p)).get();
  };
  const auto matrix = [&](const std::string& n, int64_t rows, int64_t cols, int64_t r0 = 0, int64_t r1 = -1,
                          int64_t c0 = 0, int64_t c1 = -1) -> absl::StatusOr<const kernels::PreparedWeight*> {
    CASCADE_ASSIGN_OR_RETURN(Slice sl, slice(n, rows, cols, r0, r1, c0, c1));
    return prepare(sl);
  };
  // Row slices of matrices of one input (Q/K/V, gate/up) stacked into one owned weight for
  // LinearParts, when they have the config's shapes and one type and every part but the
  // last is whole row groups of kLinearPartRows; null (and nothing read) otherwise, and
  // the caller loads them one by one (with `matrix`'s messages for a bad tensor).
  const auto stacked = [&](std::span<const std::string> names, std::span<const int64_t> rows, int64_t cols,
                           std::span<const std::pair<int64_t, int64_t>> ranges)
      -> absl::StatusOr<const kernels::PreparedWeight*> {
    if (!fuse_projections_) return nullptr;
    const TensorInfo* first = w.FindTensor(names[0]);
    if (first == nullptr || !backend_->SupportsWeight(first->dtype)) return nullptr;
    const DType dtype = first->dtype;
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const TensorInfo* a = w.FindTensor(names[i]);
      if (a == nullptr || a->dtype != dtype || a->n_dims != 2 || a->shape[0] != rows[i] || a->shape[1] != cols) {
        return nullptr;
      }
      const int64_t n = ranges[i].second - ranges[i].first;
      if (i + 1 < names.size() && n % kernels::Backend::kLinearPartRows != 0) return nullptr;
      total += n;
    }
    const int64_t row_bytes = RowBytes(dtype, cols);
    CASCADE_ASSIGN_OR_RETURN(uint8_t* buf, OwnBytes(names[0], static_cast<size_t>(total * row_bytes)));
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      CASCADE_ASSIGN_OR_RETURN(TensorView part, w.ReadRows(names[i], ranges[i].first, ranges[i].second));
      std::memcpy(buf + at * row_bytes, part.data, static_cast<size_t>(part.NumBytes()));
      w.ReleasePages(part);
      at += part.Rows();
    }
    Slice sl;
    sl.name = names[0] + " (stacked)";
    sl.kept = TensorView(buf, dtype, {total, cols});
    sl.owned = true;
    return prepare(sl);
  };
  // A vector [n] as f32 (converted and owned when stored otherwise); only elements
  // [e0, e1) are kept (-1: to the end).
  const auto vec = [&](const std::string& n, int64_t len, int64_t e0 = 0, int64_t e1 = -1) -> absl::StatusOr<TensorView> {
    if (e1 < 0) e1 = len;
    CASCADE_ASSIGN_OR_RETURN(TensorView v, w.Read(n));
    if (v.NumElements() != len) {
      return absl::InvalidArgumentError(StrCat("tensor '", n, "' has shape ", v.ShapeString(), ", expected [", len, "]"));
    }
    if (v.dtype == DType::kF32) {
      const std::span<const float> kept(static_cast<const float*>(v.data) + e0, static_cast<size_t>(e1 - e0));
      weight_bytes_ += static_cast<int64_t>(kept.size_bytes());
      if (backend_->host_memory()) used_.push_back(TensorView(const_cast<float*>(kept.data()), DType::kF32, {e1 - e0}));
      return Keep(kept);
    }
    weight_bytes_ += v.NumBytes();
    std::vector<float> full(len);
    CASCADE_RETURN_IF_ERROR(kernels::cpu::DequantizeRow(v.dtype, v.data, full.data(), len));
    std::vector<float>& buf = owned_.emplace_back(full.begin() + e0, full.begin() + e1);
    absl::StatusOr<TensorView> kept = Keep(buf);
    if (!backend_->host_memory()) owned_.pop_back();  // Keep uploaded it.
    return kept;
  };
  const TpShard& s = shard_;
  const int64_t hd = c.head_dim;

  // The embedding is also the LM head when tied; HF tied checkpoints may store only
  // lm_head.weight (tinystories-656k does).
  std::string embd_name = name(LlamaTensor::kTokenEmbd);
  if (w.FindTensor(embd_name) == nullptr && c.tied_embeddings) embd_name = name(LlamaTensor::kOutput);
  // Both are vocab-parallel: rows [vocab_begin, vocab_end) (all of them without TP).
  if (has_embedding() || (has_head() && c.tied_embeddings)) {
    CASCADE_ASSIGN_OR_RETURN(token_embd_, matrix(embd_name, c.n_vocab, c.n_embd, s.vocab_begin, s.vocab_end));
  }
  if (has_head()) {
    CASCADE_ASSIGN_OR_RETURN(output_norm_, vec(name(LlamaTensor::kOutputNorm), c.n_embd));
    if (c.tied_embeddings) {
      output_ = token_embd_;
    } else {
      CASCADE_ASSIGN_OR_RETURN(output_, matrix(name(LlamaTensor::kOutput), c.n_vocab, c.n_embd, s.vocab_begin,
                                               s.vocab_end));
    }
  }
  // Q rows of the owned query heads, K/V rows of the owned KV heads (GGUF's pair permutation
  // of Q/K rows stays inside each head), O columns of the owned query heads.
  const int64_t q0 = s.q_head_begin * hd, q1 = s.q_head_end * hd;
  const int64_t k0 = s.kv_head_begin * hd, k1 = s.kv_head_end * hd;
  for (int64_t l = first_layer_; l < last_layer_; ++l) {
    Layer L;
    CASCADE_ASSIGN_OR_RETURN(L.attn_norm, vec(name(LlamaTensor::kAttnNorm, l), c.n_embd));
    const std::string qkv[] = {name(LlamaTensor::kAttnQ, l), name(LlamaTensor::kAttnK, l), name(LlamaTensor::kAttnV, l)};
    const int64_t qkv_rows[] = {c.q_dim(), c.kv_dim(), c.kv_dim()};
    const std::pair<int64_t, int64_t> qkv_ranges[] = {{q0, q1}, {k0, k1}, {k0, k1}};
    CASCADE_ASSIGN_OR_RETURN(L.wqkv, stacked(qkv, qkv_rows, c.n_embd, qkv_ranges));
    if (L.wqkv == nullptr) {
      CASCADE_ASSIGN_OR_RETURN(L.wq, matrix(qkv[0], c.q_dim(), c.n_embd, q0, q1));
      CASCADE_ASSIGN_OR_RETURN(L.wk, matrix(qkv[1], c.kv_dim(), c.n_embd, k0, k1));
      CASCADE_ASSIGN_OR_RETURN(L.wv, matrix(qkv[2], c.kv_dim(), c.n_embd, k0, k1));
    }
    CASCADE_ASSIGN_OR_RETURN(L.wo, matrix(name(LlamaTensor::kAttnOutput, l), c.n_embd, c.q_dim(), 0, -1, q0, q1));
    if (c.qkv_bias) {
      CASCADE_ASSIGN_OR_RETURN(L.bq, vec(name(LlamaTensor::kAttnQBias, l), c.q_dim(), q0, q1));
      CASCADE_ASSIGN_OR_RETURN(L.bk, vec(name(LlamaTensor::kAttnKBias, l), c.kv_dim(), k0, k1));
      CASCADE_ASSIGN_OR_RETURN(L.bv, vec(name(LlamaTensor::kAttnVBias, l), c.kv_dim(), k0, k1));
    }
    CASCADE_ASSIGN_OR_RETURN(L.ffn_norm, vec(name(LlamaTensor::kFfnNorm, l), c.n_embd));
    const std::string gate_up[] = {name(LlamaTensor::kFfnGate, l), name(LlamaTensor::kFfnUp, l)};
    const int64_t ff_rows[] = {c.n_ff, c.n_ff};
    const std::pair<int64_t, int64_t> ff_ranges[] = {{s.ff_begin, s.ff_end}, {s.ff_begin, s.ff_end}};
    CASCADE_ASSIGN_OR_RETURN(L.w_gate_up, stacked(gate_up, ff_rows, c.n_embd, ff_ranges));
    if (L.w_gate_up == nullptr) {
      CASCADE_ASSIGN_OR_RETURN(L.w_gate, matrix(gate_up[0], c.n_ff, c.n_embd, s.ff_begin, s.ff_end));
      CASCADE_ASSIGN_OR_RETURN(L.w_up, matrix(gate_up[1], c.n_ff, c.n_embd, s.ff_begin, s.ff_end));
    }
    CASCADE_ASSIGN_OR_RETURN(L.w_down,
                             matrix(name(LlamaTensor::kFfnDown, l), c.n_embd, c.n_ff, 0, -1, s.ff_begin, s.ff_end));
    layers_.push_back(L);
  }
  return absl::OkStatus();
}

void Transformer::Prefault(const std::function<void(double)>& progress) const {
  int64_t total = 0, done = 0;
  for (const TensorView& v : used_) total += v.NumBytes();
  volatile uint8_t sink = 0;
  for (const TensorView& v : used_) {
    const auto* p = static_cast<const uint8_t*>(v.data);
    for (int64_t off = 0; off < v.NumBytes(); off += 4096) sink = sink + p[off];
    done += v.NumBytes();
    if (progress && total > 0) progress(static_cast<double>(done) / static_cast<double>(total));
  }
}

KvCacheOptions Transformer::CacheOptions(int64_t n_blocks, int64_t block_size) const {
  return {n_layers_here(), n_blocks, block_size, shard_.n_kv_heads(), config_.head_dim};
}

absl::StatusOr<TensorView> Transformer::Keep(std::span<const float> host) {
  const int64_t n = static_cast<int64_t>(host.size());
  if (backend_->host_memory()) return TensorView(const_cast<float*>(host.data()), DType::kF32, {n});
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> buf, backend_->Allocate(host.size_bytes()));
  CASCADE_RETURN_IF_ERROR(backend_->CopyIn(buf->data(), host.data(), host.size_bytes()));
  return TensorView(uploaded_.emplace_back(std::move(buf))->data(), DType::kF32, {n}, backend_->device());
}

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
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, gate_, f32(shard_.n_ff())));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, up_, f32(shard_.n_ff())));
  ws_tokens_ = n;
  return absl::OkStatus();
}

absl::Status Transformer::Embed(std::span<const int32_t> tokens, TensorView hidden) {
  if (!has_embedding()) return absl::FailedPreconditionError("Embed called on a stage without the embedding");
  if (tp_comm_ == nullptr) return backend_->Embedding(hidden, *token_embd_, tokens);
  // Vocab-parallel: each rank writes the rows of the ids it holds, zeros elsewhere; the
  // all-reduce then adds exactly one non-zero term per element.
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (hidden.Rows() != n || hidden.Cols() != c.n_embd) {
    return absl::InvalidArgumentError(StrCat("embedding: out ", hidden.ShapeString(), " for ", n, " ids"));
  }
  // Rows [0, k) of the workspace are the k local ids' embeddings, row k is zeros; hidden's
  // row i is then workspace row embd_map_[i], gathered by the backend (no host loop over
  // backend memory).
  local_ids_.clear();
  embd_map_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[i];
    if (id < 0 || id >= c.n_vocab) {  // Every rank sees the same ids, so all refuse together.
      return absl::InvalidArgumentError(StrCat("token id ", id, " is outside the vocabulary [0, ", c.n_vocab, ")"));
    }
    const bool local = id >= shard_.vocab_begin && id < shard_.vocab_end;
    if (local) local_ids_.push_back(static_cast<int32_t>(id - shard_.vocab_begin));
    embd_map_.push_back(local ? static_cast<int32_t>(local_ids_.size() - 1) : -1);
  }
  const int64_t k = static_cast<int64_t>(local_ids_.size());
  for (int32_t& row : embd_map_) {
    if (row < 0) row = static_cast<int32_t>(k);
  }
  const size_t row_bytes = static_cast<size_t>(c.n_embd) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(*backend_, embd_ws_, static_cast<size_t>(k + 1) * row_bytes));
  if (k > 0) CASCADE_RETURN_IF_ERROR(backend_->Embedding(View(*embd_ws_, k, c.n_embd), *token_embd_, local_ids_));
  zero_row_.assign(c.n_embd, 0.0f);
  CASCADE_RETURN_IF_ERROR(backend_->CopyIn(embd_ws_->f32() + k * c.n_embd, zero_row_.data(), row_bytes));
  CASCADE_RETURN_IF_ERROR(backend_->Embedding(hidden, View(*embd_ws_, k + 1, c.n_embd), embd_map_));
  return AllReduce(hidden);
}

absl::Status Transformer::AllReduce(TensorView x) {
  if (tp_comm_ == nullptr) return absl::OkStatus();
  return tp_.AllReduceSum(x.As<float>(), static_cast<size_t>(x.NumElements()));
}

absl::Status Transformer::RunLayers(TensorView hidden, const ForwardBatch& batch, KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t n = hidden.Rows();
  if (hidden.Cols() != c.n_embd || static_cast<int64_t>(batch.positions.size()) != n) {
    return absl::InvalidArgumentError(StrCat("forward: hidden ", hidden.ShapeString(), " with ",
                                             batch.positions.size(), " positions"));
  }
  if (cache.options().n_layers != n_layers_here()) {
    return absl::InvalidArgumentError(StrCat("forward: the cache holds ", cache.options().n_layers,
                                             " layers, this stage runs ", n_layers_here()));
  }
  if (cache.options().n_kv_heads != shard_.n_kv_heads() || cache.options().head_dim != c.head_dim) {
    return absl::InvalidArgumentError(StrCat("forward: the cache holds ", cache.options().n_kv_heads,
                                             " kv heads of ", cache.options().head_dim, ", this rank computes ",
                                             shard_.n_kv_heads(), " of ", c.head_dim));
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
  TensorView gate = View(*gate_, n, shard_.n_ff());
  TensorView up = View(*up_, n, shard_.n_ff());
  const kernels::AttentionParams attn_params{shard_.n_heads(), 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    kernels::KvCacheLayer& kv = cache.layer(static_cast<int64_t>(li));
    CASCADE_RETURN_IF_ERROR(b.RmsNorm(norm, hidden, L.attn_norm, static_cast<float>(c.norm_eps)));
    if (L.wqkv != nullptr) {
      const TensorView outs[] = {q, k, v}, biases[] = {L.bq, L.bk, L.bv};
      CASCADE_RETURN_IF_ERROR(b.LinearParts(outs, norm, *L.wqkv, biases));
    } else {
      CASCADE_RETURN_IF_ERROR(b.Linear(q, norm, *L.wq, L.bq));
      CASCADE_RETURN_IF_ERROR(b.Linear(k, norm, *L.wk, L.bk));
      CASCADE_RETURN_IF_ERROR(b.Linear(v, norm, *L.wv, L.bv));
    }
    CASCADE_RETURN_IF_ERROR(b.Rope(q, batch.positions, rope_));
    CASCADE_RETURN_IF_ERROR(b.Rope(k, batch.positions, rope_));
    CASCADE_RETURN_IF_ERROR(b.WriteKv(kv, k, v, batch.seqs));
    CASCADE_RETURN_IF_ERROR(b.Attention(attn, q, kv, batch.seqs, attn_params));
    CASCADE_RETURN_IF_ERROR(b.Linear(proj, attn, *L.wo, {}));
    CASCADE_RETURN_IF_ERROR(AllReduce(proj));  // Partial sums over the heads of each rank.
    CASCADE_RETURN_IF_ERROR(b.AddInPlace(hidden, proj));
    CASCADE_RETURN_IF_ERROR(b.RmsNorm(norm, hidden, L.ffn_norm, static_cast<float>(c.norm_eps)));
    if (L.w_gate_up != nullptr) {
      const TensorView outs[] = {gate, up};
      CASCADE_RETURN_IF_ERROR(b.LinearParts(outs, norm, *L.w_gate_up, {}));
    } else {
      CASCADE_RETURN_IF_ERROR(b.Linear(gate, norm, *L.w_gate, {}));
      CASCADE_RETURN_IF_ERROR(b.Linear(up, norm, *L.w_up, {}));
    }
    CASCADE_RETURN_IF_ERROR(b.SiluMul(gate, gate, up));
    CASCADE_RETURN_IF_ERROR(b.Linear(proj, gate, *L.w_down, {}));
    CASCADE_RETURN_IF_ERROR(AllReduce(proj));  // Partial sums over the FFN columns of each rank.
    CASCADE_RETURN_IF_ERROR(b.AddInPlace(hidden, proj));
  }
  return absl::OkStatus();
}

absl::Status Transformer::Logits(const TensorView& hidden, std::span<const int64_t> rows, TensorView logits) {
  if (!has_head()) return absl::FailedPreconditionError("Logits called on a stage without the LM head");
  const ModelConfig& c = config_;
  const int64_t m = static_cast<int64_t>(rows.size());
  if (logits.Rows() != m || logits.Cols() != c.n_vocab) {
    return absl::InvalidArgumentError(StrCat("logits: buffer ", logits.ShapeString(), " for ", m, " rows of ", c.n_vocab));
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
  const size_t logits_bytes = static_cast<size_t>(m * c.n_vocab) * sizeof(float);
  if (tp_comm_ == nullptr) {
    if (b.host_memory()) return b.Linear(logits, norm, *output_, {});
    CASCADE_RETURN_IF_ERROR(GrowBuffer(b, logits_ws_, logits_bytes));
    CASCADE_RETURN_IF_ERROR(b.Linear(View(*logits_ws_, m, c.n_vocab), norm, *output_, {}));
    return b.CopyOut(logits.data, logits_ws_->data(), logits_bytes);
  }
  // Vocab-parallel: this rank's [m, n_vocab_local] logits, gathered in equal pieces of
  // [m, vocab_chunk] (the last rank's rows are shorter; its padding is never read).
  const int64_t chunk = shard_.vocab_chunk, local = shard_.n_vocab(), tp = shard_.tp_size;
  const size_t piece = static_cast<size_t>(m * chunk) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, logits_local_, piece));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, logits_all_, tp * piece));
  CASCADE_RETURN_IF_ERROR(b.Linear(View(*logits_local_, m, local), norm, *output_, {}));
  CASCADE_RETURN_IF_ERROR(tp_.AllGather(logits_local_->data(), piece, logits_all_->data()));
  const float* all = logits_all_->f32();
  if (!b.host_memory()) {
    logits_host_.resize(tp * m * chunk);
    CASCADE_RETURN_IF_ERROR(b.CopyOut(logits_host_.data(), all, tp * piece));
    all = logits_host_.data();
  }
  for (int64_t r = 0; r < tp; ++r) {
    const int64_t v0 = r * chunk, len = std::min(chunk, c.n_vocab - v0);
    const float* src = all + r * m * chunk;
    for (int64_t i = 0; i < m; ++i) std::copy_n(src + i * len, len, logits.As<float>() + i * c.n_vocab + v0);
  }
  return absl::OkStatus();
}

absl::Status Transformer::Forward(const ForwardBatch& batch, KvCache& cache, TensorView logits) {
  if (!has_embedding() || !has_head()) {
    return absl::FailedPreconditionError("Forward needs a stage holding the whole model");
  }
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  CASCADE_RETURN_IF_ERROR(GrowBuffer(*backend_, hidden_, static_cast<size_t>(n * config_.n_embd) * sizeof(float)));
  TensorView hidden = View(*hidden_, n, config_.n_embd);
  CASCADE_RETURN_IF_ERROR(Embed(batch.tokens, hidden));
  CASCADE_RETURN_IF_ERROR(RunLayers(hidden, batch, cache));
  return Logits(hidden, batch.logit_rows, logits);
}

}  // namespace cascade::model
