#include "model/format/model_size.h"

#include <charconv>
#include <string_view>

#include "model/format/arch/llama.h"
#include "model/format/arch/moe.h"

namespace cascade::model {
namespace {

using arch::LlamaTensor;

// The stored bytes of `name`, 0 when the file has no such tensor (optional ones: biases).
int64_t BytesOf(const WeightSource& w, const std::string& name) {
  const TensorInfo* t = w.FindTensor(name);
  return t == nullptr ? 0 : static_cast<int64_t>(t->n_bytes);
}

// The bytes of `rows` of an expert slice of `t`, whose stored rows (or, flat, elements) are
// `stored`.
int64_t SliceBytes(const TensorInfo& t, int64_t stored, int64_t rows) {
  return static_cast<int64_t>(t.n_bytes) / stored * rows;
}

}  // namespace

int64_t ModelSize::PrefixBytes(int64_t n_layers) const {
  int64_t total = embedding_bytes + head_bytes;
  for (int64_t l = 0; l < n_layers && l < static_cast<int64_t>(layer_bytes.size()); ++l) total += layer_bytes[l];
  return total;
}

int64_t ModelSize::DecodeStepBytes(const ModelConfig& config) const {
  int64_t total = head_bytes;
  for (int64_t b : layer_bytes) total += b;
  if (config.n_experts > 0) {
    total -= routed_expert_bytes - routed_expert_bytes * config.n_experts_used / config.n_experts;
  }
  return total;
}

ModelSize MeasureModel(const ModelFiles& files) {
  const WeightSource& w = *files.weights;
  const auto name = [&](LlamaTensor t, int64_t layer = -1) { return arch::LlamaTensorName(files.format, t, layer); };
  ModelSize size;
  size.layer_bytes.assign(files.config.n_layers, 0);
  // Every tensor under a layer's prefix is that layer's: attention, dense FFN and MoE
  // experts alike (an HF MoE layer has hundreds of per-expert tensors).
  const std::string_view prefix = files.format == ModelFormat::kGguf ? "blk." : "model.layers.";
  for (const TensorInfo& t : w.tensors()) {
    std::string_view n = t.name;
    if (n.substr(0, prefix.size()) != prefix) continue;
    n.remove_prefix(prefix.size());
    int64_t layer = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), layer);
    if (ec != std::errc() || end == n.data() || *end != '.' || layer >= files.config.n_layers) continue;
    size.layer_bytes[layer] += static_cast<int64_t>(t.n_bytes);
  }
  // The routed experts' matrices, by the MoE name table: a GGUF merged tensor's slice per
  // expert, a Hugging Face tensor per expert.
  for (int64_t l = 0; files.config.is_moe() && l < files.config.n_layers; ++l) {
    if (!files.config.IsMoeLayer(l)) continue;
    for (arch::MoeTensor part : {arch::MoeTensor::kGate, arch::MoeTensor::kUp, arch::MoeTensor::kDown}) {
      const int64_t rows = part == arch::MoeTensor::kDown ? files.config.n_embd : files.config.n_ff_expert;
      for (int64_t e = 0; e < files.config.n_experts; ++e) {
        const arch::ExpertMatrix m = arch::ExpertMatrixOf(files.config, files.format, part, l, e);
        const TensorInfo* t = w.FindTensor(m.name);
        if (t != nullptr && t->Rows() == m.stored_rows) size.routed_expert_bytes += SliceBytes(*t, m.stored_rows, rows);
        // gpt-oss's expert biases, read flat (its elements are its "rows").
        const arch::ExpertMatrix b = arch::ExpertBiasOf(files.config, files.format, part, l, e);
        const TensorInfo* bt = w.FindTensor(b.name);
        if (bt != nullptr && bt->NumElements() == b.stored_rows)
          size.routed_expert_bytes += SliceBytes(*bt, b.stored_rows, rows);
      }
    }
  }
  // HF tied checkpoints may store only lm_head.weight (as the transformer's loader knows).
  size.embedding_bytes = BytesOf(w, name(LlamaTensor::kTokenEmbd));
  const int64_t output_bytes = BytesOf(w, name(LlamaTensor::kOutput));
  if (size.embedding_bytes == 0 && files.config.tied_embeddings) size.embedding_bytes = output_bytes;
  size.head_bytes = BytesOf(w, name(LlamaTensor::kOutputNorm));
  size.head_bytes += files.config.tied_embeddings ? size.embedding_bytes : output_bytes;
  return size;
}

}  // namespace cascade::model
