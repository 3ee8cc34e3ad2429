#include "model/format/kv_cache_scales.h"

#include <cmath>
#include <string>

#include "core/half.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/arch/llama.h"

namespace cascade::model {
namespace {

using arch::LlamaTensor;

absl::StatusOr<float> ScalarAt(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: return static_cast<const float*>(t.data)[i];
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(t.data)[i]);
    default: return absl::DataLossError(StrCat("is ", DTypeName(t.dtype), ", not F32, BF16 or F16"));
  }
}

// Appends the shard's heads of one layer's scale tensor `name` to `out`.
absl::Status AppendLayer(const ModelFiles& files, const std::string& name, const TpShard& shard,
                         std::vector<float>& out) {
  CASCADE_ASSIGN_OR_RETURN(const TensorView t, files.weights->Read(name));
  const int64_t n = t.NumElements(), n_kv = files.config.n_kv_heads;
  if (n != 1 && n != n_kv) {
    return absl::DataLossError(
        StrCat("tensor '", name, "' ", t.ShapeString(), " is neither one scale nor one per ", "KV head (", n_kv, ")"));
  }
  for (int64_t h = shard.kv_head_begin; h < shard.kv_head_end; ++h) {
    absl::StatusOr<float> s = ScalarAt(t, n == 1 ? 0 : h);
    if (!s.ok()) return absl::DataLossError(StrCat("tensor '", name, "' ", s.status().message()));
    if (!(*s > 0 && std::isfinite(*s))) {
      return absl::DataLossError(StrCat("tensor '", name, "': scale ", *s, " is not positive and finite"));
    }
    out.push_back(*s);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvCacheScales> ReadKvCacheScales(const ModelFiles& files, int64_t first_layer, int64_t last_layer,
                                                const TpShard& shard) {
  KvCacheScales scales;
  int64_t found = 0, layers = 0;
  for (int64_t l = first_layer; l < last_layer; ++l, ++layers) {
    const std::string k = arch::LlamaTensorName(files.format, LlamaTensor::kAttnKScale, l);
    const std::string v = arch::LlamaTensorName(files.format, LlamaTensor::kAttnVScale, l);
    const bool has_k = !k.empty() && files.weights->FindTensor(k) != nullptr;
    const bool has_v = !v.empty() && files.weights->FindTensor(v) != nullptr;
    if (has_k != has_v) {
      return absl::DataLossError(StrCat("layer ", l, " has '", has_k ? k : v, "' without '", has_k ? v : k, "'"));
    }
    if (!has_k) continue;
    ++found;
    CASCADE_RETURN_IF_ERROR(AppendLayer(files, k, shard, scales.k));
    CASCADE_RETURN_IF_ERROR(AppendLayer(files, v, shard, scales.v));
  }
  if (found != 0 && found != layers) {
    return absl::DataLossError(StrCat(found, " of layers [", first_layer, ", ", last_layer,
                                      ") have KV-cache scales (self_attn.k_scale / v_scale); all or none must"));
  }
  return scales;
}

}  // namespace cascade::model
