// Storage for the paged KV cache of the layers one process holds: per layer, K and V
// of [n_blocks, block_size, n_kv_heads, head_dim] in the cache dtype: f32, f16 (the
// default: half the bytes, ~1e-3 relative rounding of each K/V element), q8_0 (a
// quarter plus scales: 34 bytes per 32 elements, ~1/254 of each 32-block's max) or
// fp8_e4m3 (a quarter: one E4M3 code per element, relative rounding up to 1/16, times a
// static scale per layer and KV head for K and for V; the range is 448 x scale, past which
// values saturate). The FP8 scales are the options' (a checkpoint's calibrated k_scale /
// v_scale) or, by the named rule kUnitKvScales, 1: vLLM's default, and harmless for a
// floating format whose relative precision does not depend on the scale while |K| and |V|
// stay under 448 and above its subnormals (2^-6). Which block belongs to which
// sequence is decided elsewhere (the coordinator's block allocator, or the local engine)
// and arrives as block tables. The storage is the backend's memory (device memory for a
// GPU backend), so attention reads it in place.
// Single owner; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/kv_cache_dtype.h"
#include "kernels/ops.h"

namespace cascade::model {

struct KvCacheOptions {
  int64_t n_layers = 0;     // Layers held here.
  int64_t n_blocks = 0;     // Blocks per layer.
  int64_t block_size = 16;  // Positions per block.
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kF16;  // IsKvCacheDType; kQ8_0 needs head_dim a multiple of 32.
  // FP8 only: [n_layers * n_kv_heads] scales of K and of V, layer-major; empty: 1 for all
  // (kUnitKvScales). Positive and finite.
  std::vector<float> k_scales, v_scales;
};

// The rule that names the FP8 cache's scales when the options give none (logged).
inline constexpr std::string_view kUnitKvScales = "unit scales (no calibrated k_scale / v_scale given)";

class KvCache {
 public:
  // Allocates from `backend` (borrowed only for the call; null: host memory).
  // ResourceExhausted when the buffers cannot be allocated.
  static absl::StatusOr<KvCache> Create(const KvCacheOptions& options, kernels::Backend* backend = nullptr);

  kernels::KvCacheLayer& layer(int64_t i) { return layers_[i]; }
  const KvCacheOptions& options() const { return options_; }
  int64_t bytes() const { return bytes_; }  // All of it: K, V and FP8's scales.
  // Bytes one block takes across all layers here (K and V).
  static int64_t BlockBytes(const KvCacheOptions& o) {
    return 2 * o.n_layers * o.block_size * RowBytes(o.dtype, o.n_kv_heads * o.head_dim);
  }

  // The host tier of the prefix cache (coordinator/serving/prefix_cache.h): block
  // `block`'s K and V of every layer here copied to `host` (BlockBytes bytes: each
  // layer's K then V), and back. A block's K (or V) is contiguous in its layer's tensor,
  // so a copy is 2 * n_layers contiguous runs. `backend`: the one Create allocated from
  // (null: host memory). REQUIRES block in [0, n_blocks).
  absl::Status SaveBlock(kernels::Backend* backend, int64_t block, void* host) const;
  absl::Status LoadBlock(kernels::Backend* backend, int64_t block, const void* host);

 private:
  absl::Status UploadScales(kernels::Backend* backend, int64_t offset);
  // Bytes of one block of one layer's K (or V).
  int64_t RunBytes() const {
    return options_.block_size * RowBytes(options_.dtype, options_.n_kv_heads * options_.head_dim);
  }
  // The 2 * n_layers runs of `block`, K then V per layer, in their order in BlockBytes.
  std::vector<uint8_t*> Runs(int64_t block) const;

  KvCacheOptions options_;
  // Left uninitialised: a large host allocation is fresh zero pages from the kernel, so
  // only the blocks sequences actually write become resident; attention reads only those.
  std::unique_ptr<kernels::Buffer> storage_;
  int64_t bytes_ = 0;
  std::vector<kernels::KvCacheLayer> layers_;
};

}  // namespace cascade::model
