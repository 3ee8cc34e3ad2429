#include "model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {

namespace {

absl::Status CheckScales(const KvCacheOptions& o) {
  if (o.k_scales.empty() && o.v_scales.empty()) return absl::OkStatus();
  const size_t n = static_cast<size_t>(o.n_layers * o.n_kv_heads);
  if (o.dtype != DType::kF8_E4M3 || o.k_scales.size() != n || o.v_scales.size() != n) {
    return absl::InvalidArgumentError(StrCat(
        "kv cache: ", o.k_scales.size(), " K and ", o.v_scales.size(), " V scales for a ", KvCacheDTypeName(o.dtype),
        " cache of ", o.n_layers, " layers x ", o.n_kv_heads, " KV heads (only fp8_e4m3 takes scales, ", n, " each)"));
  }
  for (size_t i = 0; i < n; ++i) {
    for (const float s : {o.k_scales[i], o.v_scales[i]}) {
      if (!(s > 0 && std::isfinite(s))) {
        return absl::InvalidArgumentError(StrCat("kv cache: scale ", s, " at ", i, " is not positive and finite"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The scales sit after the tensors in the same allocation; written once, in host order.
absl::Status KvCache::UploadScales(kernels::Backend* backend, int64_t offset) {
  const size_t n = static_cast<size_t>(options_.n_layers * options_.n_kv_heads);
  std::vector<float> all(2 * n, 1.0f);
  if (!options_.k_scales.empty()) {
    std::copy(options_.k_scales.begin(), options_.k_scales.end(), all.begin());
    std::copy(options_.v_scales.begin(), options_.v_scales.end(), all.begin() + static_cast<int64_t>(n));
  }
  void* dst = static_cast<uint8_t*>(storage_->data()) + offset;
  if (backend == nullptr) {
    std::memcpy(dst, all.data(), all.size() * sizeof(float));
    return absl::OkStatus();
  }
  return backend->CopyIn(dst, all.data(), all.size() * sizeof(float));
}

std::vector<uint8_t*> KvCache::Runs(int64_t block) const {
  std::vector<uint8_t*> runs;
  for (const kernels::KvCacheLayer& l : layers_) {
    runs.push_back(static_cast<uint8_t*>(l.k.data) + block * RunBytes());
    runs.push_back(static_cast<uint8_t*>(l.v.data) + block * RunBytes());
  }
  return runs;
}

absl::Status KvCache::SaveBlock(kernels::Backend* backend, int64_t block, void* host) const {
  CASCADE_CHECK(block >= 0 && block < options_.n_blocks) << "saving KV block " << block;
  auto* out = static_cast<uint8_t*>(host);
  for (const uint8_t* run : Runs(block)) {
    if (backend == nullptr) {
      std::memcpy(out, run, static_cast<size_t>(RunBytes()));
    } else {
      CASCADE_RETURN_IF_ERROR(backend->CopyOut(out, run, static_cast<size_t>(RunBytes())));
    }
    out += RunBytes();
  }
  return absl::OkStatus();
}

absl::Status KvCache::LoadBlock(kernels::Backend* backend, int64_t block, const void* host) {
  CASCADE_CHECK(block >= 0 && block < options_.n_blocks) << "loading KV block " << block;
  const auto* in = static_cast<const uint8_t*>(host);
  for (uint8_t* run : Runs(block)) {
    if (backend == nullptr) {
      std::memcpy(run, in, static_cast<size_t>(RunBytes()));
    } else {
      CASCADE_RETURN_IF_ERROR(backend->CopyIn(run, in, static_cast<size_t>(RunBytes())));
    }
    in += RunBytes();
  }
  return absl::OkStatus();
}

absl::StatusOr<KvCache> KvCache::Create(const KvCacheOptions& o, kernels::Backend* backend) {
  if (o.n_layers < 0 || o.n_blocks <= 0 || o.block_size <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: bad geometry: ", o.n_layers, " layers, ", o.n_blocks, " blocks of ", o.block_size));
  }
  if (!IsKvCacheDType(o.dtype)) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: dtype ", DTypeName(o.dtype), " is not one of ", kKvCacheDTypeNames));
  }
  CASCADE_RETURN_IF_ERROR(CheckScales(o));
  if (o.dtype == DType::kQ8_0 && o.head_dim % BlockElems(DType::kQ8_0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("kv cache: q8_0 needs head_dim a multiple of 32 (blocks per head), got ", o.head_dim));
  }
  KvCache c;
  c.options_ = o;
  const int64_t per_tensor = o.n_blocks * o.block_size * RowBytes(o.dtype, o.n_kv_heads * o.head_dim);
  c.bytes_ = 2 * o.n_layers * per_tensor;
  const bool fp8 = o.dtype == DType::kF8_E4M3;
  // FP8: the scales follow the tensors, K's of every layer then V's.
  const int64_t n_scales = fp8 ? o.n_layers * o.n_kv_heads : 0;
  const int64_t tensor_bytes = c.bytes_;
  c.bytes_ += 2 * n_scales * static_cast<int64_t>(sizeof(float));
  const size_t bytes = static_cast<size_t>(c.bytes_);
  auto storage = backend != nullptr ? backend->Allocate(bytes) : kernels::AllocateHost(bytes);
  if (!storage.ok()) {
    return absl::ResourceExhaustedError(StrCat("kv cache: cannot allocate ", bytes, " bytes for ", o.n_blocks,
                                               " blocks: ", storage.status().message()));
  }
  c.storage_ = *std::move(storage);
  const Device device = backend != nullptr ? backend->device() : Device{};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    uint8_t* base = static_cast<uint8_t*>(c.storage_->data()) + 2 * l * per_tensor;
    kernels::KvCacheLayer layer = kernels::KvCacheLayer::Over(
        TensorView(base, o.dtype, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device),
        TensorView(base + per_tensor, o.dtype, {o.n_blocks, o.block_size, o.n_kv_heads, o.head_dim}, device));
    if (fp8) {
      auto* scales = reinterpret_cast<float*>(static_cast<uint8_t*>(c.storage_->data()) + tensor_bytes);
      layer.k_scale = TensorView(scales + l * o.n_kv_heads, DType::kF32, {o.n_kv_heads}, device);
      layer.v_scale = TensorView(scales + n_scales + l * o.n_kv_heads, DType::kF32, {o.n_kv_heads}, device);
    }
    c.layers_.push_back(layer);
  }
  if (fp8) {
    CASCADE_RETURN_IF_ERROR(c.UploadScales(backend, tensor_bytes));
    CASCADE_LOG(Info) << "KV cache fp8_e4m3: "
                      << (o.k_scales.empty() ? std::string(kUnitKvScales)
                                             : std::string("calibrated scales (the checkpoint's k_scale / v_scale)"));
  }
  return c;
}

}  // namespace cascade::model
