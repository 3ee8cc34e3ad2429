// A sequence's KV moving between two workers that hold different parts of the model
// (disaggregated serving: a prefill replica hands its KV to a decode replica, whose
// pipeline and tensor-parallel split may differ). What moves between one sender and one
// receiver is a `KvSlice`: the layers and KV heads both hold, of every block of the
// sequence. The packed bytes are, for each block in table order, each layer of the slice
// in order, K then V, each of the block's positions in order, the slice's heads: the
// same order on both sides, whatever their splits, so a receiver of another TP size takes
// its heads from as many senders as hold them.
//
// Single owner, like the KvCache it reads or writes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"

namespace cascade::model {

// Global layers [first_layer, last_layer) and global KV heads [head_begin, head_end).
struct KvSlice {
  int64_t first_layer = 0, last_layer = 0;
  int64_t head_begin = 0, head_end = 0;
  bool operator==(const KvSlice&) const = default;
};

// Where a worker's KvCache sits in the model: the global index of its first layer and of
// its first KV head (a TP rank holds KV heads [kv_head_begin, kv_head_end)).
struct KvPlacement {
  int64_t first_layer = 0;
  int64_t head_begin = 0;
};

// Bytes `slice` takes over `n_blocks` blocks of a cache with `cache`'s geometry.
int64_t KvSliceBytes(const KvCacheOptions& cache, const KvSlice& slice, int64_t n_blocks);

// Packs `slice` of `blocks` of `cache` (placed at `at`) into `out` (resized to
// KvSliceBytes). `backend`: the one the cache was allocated from (null: host memory).
// InvalidArgument when the slice is not inside the cache or a block is out of range.
absl::Status PackKvSlice(const KvCache& cache, kernels::Backend* backend, KvPlacement at, const KvSlice& slice,
                         std::span<const int32_t> blocks, std::vector<uint8_t>* out);

// Writes packed `in` (KvSliceBytes of it) into `slice` of `blocks` of `cache`, leaving
// every other layer and head of those blocks as it was.
absl::Status UnpackKvSlice(KvCache& cache, kernels::Backend* backend, KvPlacement at, const KvSlice& slice,
                           std::span<const int32_t> blocks, std::span<const uint8_t> in);

}  // namespace cascade::model
