#include "model/kv_cache.h"

#include <optional>

#include "core/str_cat.h"

namespace cascade::model {

absl::StatusOr<DType> KvCacheDTypeFromName(std::string_view name) {
  const std::optional<DType> d = DTypeFromName(name);
  if (!d || (*d != DType::kF32 && *d != DType::kF16 && *d != DType::kQ8_0)) {
    return absl::InvalidArgumentError(StrCat("KV cache dtype '", name, "' is not one of f32, f16, q8_0"));
  }
  return *d;
}

absl::StatusOr<KvCache> KvCache::Create(const KvCacheOptions& o, kernels::Backend* backend) {
  if (o.n_layers < 0 || o.n_blocks <= 0 || o.block_size <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: bad geometry: ", o.n_layers, " layers, ", o.n_blocks, " blocks of ", o.block_size));
  }
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kQ8_0) {
    return absl::InvalidArgumentError(StrCat("kv cache: dtype ", DTypeName(o.dtype), " is not f32, f16 or q8_0"));
  }
  if (o.dtype == DType::kQ8_0 && o.head_dim % BlockElems(DType::kQ8_0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: q8_0 needs head_dim a multiple of 32 (blocks per head), got ", o.head_dim));
  }
  KvCache c;
  c.options_ = o;
  const int64_t per_tensor = o.n_blocks * o.block_size * RowBytes(o.dtype, o.n_kv_heads * o.head_dim);
  c.bytes_ = 2 * o.n_layers * per_tensor;
  const size_t bytes = static_cast<size_t>(c.bytes_);
  auto storage = backend != nullptr ? backend->Allocate(bytes) : kernels::AllocateHost(bytes);
  if (!storage.ok()) {
    return absl::ResourceExhaustedError(StrCat("kv cache: cannot allocate ", bytes, " bytes for ", o.n_blocks,
                                               " blocks: ", storage.status().message()));
  }
  c.storage_ = *std::move(storage);
  const Device device = backend != nullptr ? backend->device() : Device{};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    kernels::KvCacheLayer layer;
    uint8_t* base = static_cast<uint8_t*>(c.storage_->data()) + 2 * l * per_tensor;
    layer.k = TensorView(base, o.dtype, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device);
    layer.v = TensorView(base + per_tensor, o.dtype, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device);
    layer.block_size = o.block_size;
    layer.n_kv_heads = o.n_kv_heads;
    layer.head_dim = o.head_dim;
    c.layers_.push_back(layer);
  }
  return c;
}

}  // namespace cascade::model
