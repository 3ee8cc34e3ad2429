// KV cache sizing. Every stage (and the drafter) holds the same block ids, so the pool is
// as large as the tightest worker allows: `scheduler.kv_cache_mb` on CPU workers (and on
// GPU workers when it is given), and on a `cuda:N` worker what its GPU holds after its
// weights (`scheduler.gpu_memory_fraction` of the free memory it reported when it
// registered). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace cascade::coordinator {

// Bytes of one KV block (K and V, f32) over `n_layers` layers of `n_kv_heads` heads.
int64_t KvBlockBytes(int64_t n_layers, int64_t block_size, int64_t n_kv_heads, int64_t head_dim, DType dtype);

// Blocks a GPU worker can hold: (fraction * free_bytes - weight_bytes) / block_bytes,
// rounded down. FailedPrecondition naming `who` (e.g. "stage 0 tp 1 on node a, cuda:1")
// when the weights alone do not fit the fraction, or not one block is left over.
absl::StatusOr<int64_t> GpuKvBlocks(int64_t free_bytes, int64_t weight_bytes, int64_t block_bytes, double fraction,
                                    const std::string& who);

}  // namespace cascade::coordinator
