// Paged causal attention on the CPU, flash-style: each query row walks its sequence's KV
// blocks once with an online softmax (Milakov & Gimelshein 2018; Dao et al. 2022), so no
// score matrix is ever materialised. The query heads that share a KV head (GQA) are
// processed together so every K/V row is loaded once per group.
// Pure functions over caller-owned buffers; thread-safe.
#pragma once

#include <span>

#include "kernels/ops.h"

namespace cascade {
class ThreadPool;
}

namespace cascade::kernels::cpu {

// Copies k/v [n_tokens, n_kv_heads * head_dim] into the cache slots of the new positions.
absl::Status WriteKvCpu(KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                        std::span<const AttentionSeq> seqs);

absl::Status AttentionCpu(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                          std::span<const AttentionSeq> seqs, const AttentionParams& params, ThreadPool& pool);

}  // namespace cascade::kernels::cpu
