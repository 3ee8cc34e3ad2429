#include "model/transformer.h"

#include <cmath>

#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/arch/llama.h"

namespace cascade::model {

using arch::LlamaTensor;
using kernels::RopeStyle;

struct Transformer::Layer {
  TensorView attn_norm, bq, bk, bv, ffn_norm;
  // Borrowed from `prepared_`.
  const kernels::PreparedWeight *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const kernels::PreparedWeight *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
};

Transformer::~Transformer() = default;

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
                                                               const StageOptions& options) {
  std::unique_ptr<Transformer> t(new Transformer());
  t->config_ = files.config;
  t->backend_ = backend;
  t->first_layer_ = options.first_layer;
  t->last_layer_ = options.last_layer < 0 ? files.config.n_layers : options.last_layer;
  if (t->first_layer_ < 0 || t->first_layer_ >= t->last_layer_ || t->last_layer_ > files.config.n_layers) {
    return absl::InvalidArgumentError(StrCat("stage layers [", t->first_layer_, ", ", t->last_layer_,
                                             ") are not a non-empty range of the model's ",
                                             files.config.n_layers, " layers"));
  }
  CASCADE_ASSIGN_OR_RETURN(t->inv_freq_, RopeInvFreq(t->config_));
  t->rope_.style = t->config_.rope_layout == RopeLayout::kAdjacentPairs ? RopeStyle::kAdjacentPairs
                                                                         : RopeStyle::kRotateHalf;
  t->rope_.head_dim = t->config_.head_dim;
  t->rope_.inv_freq = t->inv_freq_;
  CASCADE_RETURN_IF_ERROR(Annotate(t->LoadWeights(files), StrCat("loading ", files.path)));
  return t;
}

absl::Status Transformer::LoadWeights(const ModelFiles& files) {
  const WeightSource& w = *files.weights;
  const ModelConfig& c = config_;
  const auto name = [&](LlamaTensor tensor, int64_t layer = -1) {
    return arch::LlamaTensorName(files.format, tensor, layer);
  };
  // A matrix [rows, cols] in any type the backend can multiply by, prepared once by the
  // backend. When the backend keeps its own copy (the CPU repack), the file pages behind
  // the tensor are dropped right away, so the model is resident about once, not twice.
  const auto matrix = [&](const std::string& n, int64_t rows, int64_t cols)
      -> absl::StatusOr<const kernels::PreparedWeight*> {
    CASCADE_ASSIGN_OR_RETURN(TensorView v, w.Read(n));
    if (v.n_dims != 2 || v.dim(0) != rows || v.dim(1) != cols) {
      return absl::InvalidArgumentError(StrCat("tensor '", n, "' has shape ", v.ShapeString(),
                                               ", the config needs [", rows, ", ", cols, "]"));
    }
    if (!backend_->SupportsWeight(v.dtype)) {
      return absl::UnimplementedError(StrCat("tensor '", n, "': the backend has no kernel for ", DTypeName(v.dtype)));
    }
    weight_bytes_ += v.NumBytes();
    absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> prepared = backend_->PrepareWeight(v);
    if (!prepared.ok()) return Annotate(prepared.status(), StrCat("preparing tensor '", n, "'"));
    std::unique_ptr<kernels::PreparedWeight> p = *std::move(prepared);
    if (p->reads_source()) {
      used_.push_back(v);
    } else {
      w.ReleasePages(v);
    }
    return prepared_.emplace_back(std::move(p)).get();
  };
  // A vector [n] as f32 (converted and owned when stored otherwise).
  const auto vec = [&](const std::string& n, int64_t len) -> absl::StatusOr<TensorView> {
    CASCADE_ASSIGN_OR_RETURN(TensorView v, w.Read(n));
    if (v.NumElements() != len) {
      return absl::InvalidArgumentError(StrCat("tensor '", n, "' has shape ", v.ShapeString(), ", expected [", len, "]"));
    }
    weight_bytes_ += v.NumBytes();
    used_.push_back(v);
    if (v.dtype == DType::kF32) return TensorView(v.data, DType::kF32, {len});
    std::vector<float>& buf = owned_.emplace_back(len);
    CASCADE_RETURN_IF_ERROR(kernels::cpu::DequantizeRow(v.dtype, v.data, buf.data(), len));
    return TensorView(buf.data(), DType::kF32, {len});
  };

  // The embedding is also the LM head when tied; HF tied checkpoints may store only
  // lm_head.weight (tinystories-656k does).
  std::string embd_name = name(LlamaTensor::kTokenEmbd);
  if (w.FindTensor(embd_name) == nullptr && c.tied_embeddings) embd_name = name(LlamaTensor::kOutput);
  if (has_embedding() || (has_head() && c.tied_embeddings)) {
    CASCADE_ASSIGN_OR_RETURN(token_embd_, matrix(embd_name, c.n_vocab, c.n_embd));
  }
  if (has_head()) {
    CASCADE_ASSIGN_OR_RETURN(output_norm_, vec(name(LlamaTensor::kOutputNorm), c.n_embd));
    if (c.tied_embeddings) {
      output_ = token_embd_;
    } else {
      CASCADE_ASSIGN_OR_RETURN(output_, matrix(name(LlamaTensor::kOutput), c.n_vocab, c.n_embd));
    }
  }
  for (int64_t l = first_layer_; l < last_layer_; ++l) {
    Layer L;
    CASCADE_ASSIGN_OR_RETURN(L.attn_norm, vec(name(LlamaTensor::kAttnNorm, l), c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.wq, matrix(name(LlamaTensor::kAttnQ, l), c.q_dim(), c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.wk, matrix(name(LlamaTensor::kAttnK, l), c.kv_dim(), c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.wv, matrix(name(LlamaTensor::kAttnV, l), c.kv_dim(), c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.wo, matrix(name(LlamaTensor::kAttnOutput, l), c.n_embd, c.q_dim()));
    if (c.qkv_bias) {
      CASCADE_ASSIGN_OR_RETURN(L.bq, vec(name(LlamaTensor::kAttnQBias, l), c.q_dim()));
      CASCADE_ASSIGN_OR_RETURN(L.bk, vec(name(LlamaTensor::kAttnKBias, l), c.kv_dim()));
      CASCADE_ASSIGN_OR_RETURN(L.bv, vec(name(LlamaTensor::kAttnVBias, l), c.kv_dim()));
    }
    CASCADE_ASSIGN_OR_RETURN(L.ffn_norm, vec(name(LlamaTensor::kFfnNorm, l), c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.w_gate, matrix(name(LlamaTensor::kFfnGate, l), c.n_ff, c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.w_up, matrix(name(LlamaTensor::kFfnUp, l), c.n_ff, c.n_embd));
    CASCADE_ASSIGN_OR_RETURN(L.w_down, matrix(name(LlamaTensor::kFfnDown, l), c.n_embd, c.n_ff));
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
  return {n_layers_here(), n_blocks, block_size, config_.n_kv_heads, config_.head_dim};
}

void Transformer::EnsureWorkspace(int64_t n) {
  if (n <= ws_tokens_) return;
  const ModelConfig& c = config_;
  norm_.resize(n * c.n_embd);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  proj_.resize(n * c.n_embd);
  gate_.resize(n * c.n_ff);
  up_.resize(n * c.n_ff);
  ws_tokens_ = n;
}

absl::Status Transformer::Embed(std::span<const int32_t> tokens, TensorView hidden) {
  if (!has_embedding()) return absl::FailedPreconditionError("Embed called on a stage without the embedding");
  return backend_->Embedding(hidden, *token_embd_, tokens);
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
  EnsureWorkspace(n);
  kernels::Backend& b = *backend_;
  TensorView norm(norm_.data(), DType::kF32, {n, c.n_embd});
  TensorView q(q_.data(), DType::kF32, {n, c.q_dim()});
  TensorView k(k_.data(), DType::kF32, {n, c.kv_dim()});
  TensorView v(v_.data(), DType::kF32, {n, c.kv_dim()});
  TensorView attn(attn_.data(), DType::kF32, {n, c.q_dim()});
  TensorView proj(proj_.data(), DType::kF32, {n, c.n_embd});
  TensorView gate(gate_.data(), DType::kF32, {n, c.n_ff});
  TensorView up(up_.data(), DType::kF32, {n, c.n_ff});
  const kernels::AttentionParams attn_params{c.n_heads, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    kernels::KvCacheLayer& kv = cache.layer(static_cast<int64_t>(li));
    CASCADE_RETURN_IF_ERROR(b.RmsNorm(norm, hidden, L.attn_norm, static_cast<float>(c.norm_eps)));
    CASCADE_RETURN_IF_ERROR(b.Linear(q, norm, *L.wq, L.bq));
    CASCADE_RETURN_IF_ERROR(b.Linear(k, norm, *L.wk, L.bk));
    CASCADE_RETURN_IF_ERROR(b.Linear(v, norm, *L.wv, L.bv));
    CASCADE_RETURN_IF_ERROR(b.Rope(q, batch.positions, rope_));
    CASCADE_RETURN_IF_ERROR(b.Rope(k, batch.positions, rope_));
    CASCADE_RETURN_IF_ERROR(b.WriteKv(kv, k, v, batch.seqs));
    CASCADE_RETURN_IF_ERROR(b.Attention(attn, q, kv, batch.seqs, attn_params));
    CASCADE_RETURN_IF_ERROR(b.Linear(proj, attn, *L.wo, {}));
    CASCADE_RETURN_IF_ERROR(b.AddInPlace(hidden, proj));
    CASCADE_RETURN_IF_ERROR(b.RmsNorm(norm, hidden, L.ffn_norm, static_cast<float>(c.norm_eps)));
    CASCADE_RETURN_IF_ERROR(b.Linear(gate, norm, *L.w_gate, {}));
    CASCADE_RETURN_IF_ERROR(b.Linear(up, norm, *L.w_up, {}));
    CASCADE_RETURN_IF_ERROR(b.SiluMul(gate, gate, up));
    CASCADE_RETURN_IF_ERROR(b.Linear(proj, gate, *L.w_down, {}));
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
  EnsureWorkspace(m);
  // Gather the wanted rows, then norm + LM head on just those (prefill needs one row).
  TensorView picked(proj_.data(), DType::kF32, {m, c.n_embd});
  for (int64_t i = 0; i < m; ++i) {
    if (rows[i] < 0 || rows[i] >= hidden.Rows()) {
      return absl::InvalidArgumentError(StrCat("logits: row ", rows[i], " outside the batch of ", hidden.Rows()));
    }
    std::copy_n(hidden.As<float>() + rows[i] * c.n_embd, c.n_embd, picked.As<float>() + i * c.n_embd);
  }
  TensorView norm(norm_.data(), DType::kF32, {m, c.n_embd});
  CASCADE_RETURN_IF_ERROR(backend_->RmsNorm(norm, picked, output_norm_, static_cast<float>(c.norm_eps)));
  return backend_->Linear(logits, norm, *output_, {});
}

absl::Status Transformer::Forward(const ForwardBatch& batch, KvCache& cache, TensorView logits) {
  if (!has_embedding() || !has_head()) {
    return absl::FailedPreconditionError("Forward needs a stage holding the whole model");
  }
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  hidden_.resize(n * config_.n_embd);
  TensorView hidden(hidden_.data(), DType::kF32, {n, config_.n_embd});
  CASCADE_RETURN_IF_ERROR(Embed(batch.tokens, hidden));
  CASCADE_RETURN_IF_ERROR(RunLayers(hidden, batch, cache));
  return Logits(hidden, batch.logit_rows, logits);
}

}  // namespace cascade::model
