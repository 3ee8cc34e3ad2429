// A checkpoint's calibrated FP8 KV-cache scales: `model.layers.L.self_attn.k_scale` and
// `v_scale`, as compressed-tensors' kv_cache_scheme (llm-compressor) and ModelOpt write
// them and vLLM reads them: one per layer ([] or [1], the per-tensor strategy) or one per
// KV head ([n_kv_heads], the per-head strategy); F32, BF16 or F16. A stored K element is
// E4M3(k / k_scale) (model/kv_cache.h). GGUF files have none.
// Thread-safe (a pure function of the files).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/format/model_files.h"
#include "model/format/tp_shard.h"

namespace cascade::model {

struct KvCacheScales {
  // [n_layers * n_kv_heads] of layers [first, last) and the shard's KV heads, layer-major;
  // both empty when the checkpoint has none.
  std::vector<float> k, v;
  bool empty() const { return k.empty(); }
};

// The scales of layers [first_layer, last_layer) for the KV heads `shard` holds (a
// per-tensor scale is every head's). Empty when no layer has them; DataLoss naming the
// tensor when only some layers or only K or V have them, a shape fits neither form, or a
// value is not positive and finite.
absl::StatusOr<KvCacheScales> ReadKvCacheScales(const ModelFiles& files, int64_t first_layer, int64_t last_layer,
                                                const TpShard& shard);

}  // namespace cascade::model
