#include "model/kv_cache.h"

#include "core/str_cat.h"

namespace cascade::model {

absl::StatusOr<KvCache> KvCache::Create(const KvCacheOptions& o, kernels::Backend* backend) {
  if (o.n_layers < 0 || o.n_blocks <= 0 || o.block_size <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: bad geometry: ", o.n_layers, " layers, ", o.n_blocks, " blocks of ", o.block_size));
  }
  KvCache c;
  c.options_ = o;
  const int64_t per_tensor = o.n_blocks * o.block_size * o.n_kv_heads * o.head_dim;
  c.n_floats_ = 2 * o.n_layers * per_tensor;
  const size_t bytes = static_cast<size_t>(c.n_floats_) * sizeof(float);
  auto storage = backend != nullptr ? backend->Allocate(bytes) : kernels::AllocateHost(bytes);
  if (!storage.ok()) {
    return absl::ResourceExhaustedError(StrCat("kv cache: cannot allocate ", bytes, " bytes for ", o.n_blocks,
                                               " blocks: ", storage.status().message()));
  }
  c.storage_ = *std::move(storage);
  const Device device = backend != nullptr ? backend->device() : Device{};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    kernels::KvCacheLayer layer;
    float* base = c.storage_->f32() + 2 * l * per_tensor;
    layer.k = TensorView(base, DType::kF32, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device);
    layer.v = TensorView(base + per_tensor, DType::kF32, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device);
    layer.block_size = o.block_size;
    layer.n_kv_heads = o.n_kv_heads;
    layer.head_dim = o.head_dim;
    c.layers_.push_back(layer);
  }
  return c;
}

}  // namespace cascade::model
