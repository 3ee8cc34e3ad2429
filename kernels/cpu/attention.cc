#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/str_cat.h"
#include "core/thread_pool.h"
#include "kernels/cpu/simd.h"

namespace cascade::kernels::cpu {
namespace {

constexpr int64_t kMaxGroup = 16;     // Query heads per KV head handled in one pass.
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxBlock = 256;

absl::Status CheckSeqs(const KvCacheLayer& cache, std::span<const AttentionSeq> seqs,
                       int64_t n_rows) {
  const int64_t n_blocks = cache.k.dim(0);
  for (const AttentionSeq& s : seqs) {
    if (s.row_begin < 0 || s.n_new < 0 || s.row_begin + s.n_new > n_rows || s.n_past < 0) {
      return absl::InvalidArgumentError(StrCat("attention: sequence rows [", s.row_begin, ", ",
                                               s.row_begin + s.n_new, ") outside the batch of ", n_rows));
    }
    const int64_t need = (s.n_past + s.n_new + cache.block_size - 1) / cache.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < need) {
      return absl::InvalidArgumentError(StrCat("attention: block table has ", s.block_table.size(),
                                               " blocks, positions need ", need));
    }
    for (int64_t b = 0; b < need; ++b) {
      if (s.block_table[b] < 0 || s.block_table[b] >= n_blocks) {
        return absl::InvalidArgumentError(StrCat("attention: block id ", s.block_table[b],
                                                 " outside the cache's ", n_blocks, " blocks"));
      }
    }
  }
  return absl::OkStatus();
}

// One query row against positions [0, n_ctx) of one KV head, for the `n_group` query
// heads that share it. q and out point at the first of those heads ([n_group, d]).
// This file is built with -ffast-math so the exp over a tile vectorises (glibc's
// libmvec); the running max therefore starts at a large finite value, never -inf.
CASCADE_SIMD_CLONES
void AttendRow(float* out, const float* q, const float* k_base, const float* v_base,
               std::span<const int32_t> table, int64_t n_ctx, int64_t bs, int64_t kv_stride,
               int64_t n_group, int64_t d, float scale) {
  constexpr float kNoMax = -1e30f;
  float m[kMaxGroup], l[kMaxGroup];
  float acc[kMaxGroup][kMaxHeadDim];
  float s[kMaxBlock];
  for (int64_t g = 0; g < n_group; ++g) {
    m[g] = kNoMax;
    l[g] = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc[g][i] = 0.0f;
  }
  for (int64_t start = 0; start < n_ctx; start += bs) {
    const int64_t len = std::min(bs, n_ctx - start);
    const int64_t block = table[start / bs];
    const float* kb = k_base + block * bs * kv_stride;
    const float* vb = v_base + block * bs * kv_stride;
    for (int64_t g = 0; g < n_group; ++g) {
      const float* qg = q + g * d;
      for (int64_t t = 0; t < len; ++t) {
        const float* kt = kb + t * kv_stride;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < d; ++i) dot += qg[i] * kt[i];
        s[t] = dot * scale;
      }
      float tile_max = m[g];
#pragma omp simd reduction(max : tile_max)
      for (int64_t t = 0; t < len; ++t) tile_max = std::max(tile_max, s[t]);
      const float corr = expf(m[g] - tile_max);  // 0 on the first tile.
      m[g] = tile_max;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < len; ++t) {
        s[t] = expf(s[t] - tile_max);
        sum += s[t];
      }
      l[g] = l[g] * corr + sum;
      float* ag = acc[g];
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) ag[i] *= corr;
      for (int64_t t = 0; t < len; ++t) {
        const float p = s[t];
        const float* vt = vb + t * kv_stride;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) ag[i] += p * vt[i];
      }
    }
  }
  for (int64_t g = 0; g < n_group; ++g) {
    const float inv = l[g] > 0 ? 1.0f / l[g] : 0.0f;
    for (int64_t i = 0; i < d; ++i) out[g * d + i] = acc[g][i] * inv;
  }
}

}  // namespace

absl::Status WriteKvCpu(KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                        std::span<const AttentionSeq> seqs) {
  const int64_t kv_dim = cache.n_kv_heads * cache.head_dim;
  if (k.Cols() != kv_dim || v.Cols() != kv_dim || k.Rows() != v.Rows()) {
    return absl::InvalidArgumentError(StrCat("write_kv: k ", k.ShapeString(), " / v ", v.ShapeString(),
                                             " do not match the cache's ", kv_dim, " columns"));
  }
  if (absl::Status s = CheckSeqs(cache, seqs, k.Rows()); !s.ok()) return s;
  const int64_t bs = cache.block_size;
  for (const AttentionSeq& s : seqs) {
    for (int64_t i = 0; i < s.n_new; ++i) {
      const int64_t pos = s.n_past + i;
      const int64_t slot = static_cast<int64_t>(s.block_table[pos / bs]) * bs + pos % bs;
      std::copy_n(k.As<float>() + (s.row_begin + i) * kv_dim, kv_dim, cache.k.As<float>() + slot * kv_dim);
      std::copy_n(v.As<float>() + (s.row_begin + i) * kv_dim, kv_dim, cache.v.As<float>() + slot * kv_dim);
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionCpu(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                          std::span<const AttentionSeq> seqs, const AttentionParams& params,
                          ThreadPool& pool) {
  const int64_t d = cache.head_dim;
  const int64_t n_kv = cache.n_kv_heads;
  if (n_kv <= 0 || params.n_heads % n_kv != 0 || params.n_heads / n_kv > kMaxGroup ||
      d > kMaxHeadDim || cache.block_size > kMaxBlock) {
    return absl::UnimplementedError(StrCat("attention: ", params.n_heads, " heads over ", n_kv,
                                           " KV heads of dim ", d, ", block ", cache.block_size,
                                           " is outside the CPU kernel's limits"));
  }
  if (q.Cols() != params.n_heads * d || out.Cols() != q.Cols() || out.Rows() != q.Rows()) {
    return absl::InvalidArgumentError(StrCat("attention: q ", q.ShapeString(), " / out ",
                                             out.ShapeString(), " do not match ", params.n_heads,
                                             " heads of ", d));
  }
  if (absl::Status s = CheckSeqs(cache, seqs, q.Rows()); !s.ok()) return s;

  // Work items: (row, kv head) pairs, rows listed sequence by sequence.
  struct RowRef { int32_t seq; int32_t i; };
  std::vector<RowRef> rows;
  for (size_t si = 0; si < seqs.size(); ++si) {
    for (int64_t i = 0; i < seqs[si].n_new; ++i) rows.push_back({static_cast<int32_t>(si), static_cast<int32_t>(i)});
  }
  const int64_t n_group = params.n_heads / n_kv;
  const int64_t kv_stride = n_kv * d;
  const int64_t n_items = static_cast<int64_t>(rows.size()) * n_kv;
  // Later rows of a prefill attend to more positions: hand out small chunks.
  pool.ParallelForChunked(n_items, 4, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const RowRef r = rows[item / n_kv];
      const int64_t h = item % n_kv;
      const AttentionSeq& s = seqs[r.seq];
      const int64_t row = s.row_begin + r.i;
      const int64_t off = row * params.n_heads * d + h * n_group * d;
      AttendRow(out.As<float>() + off, q.As<float>() + off, cache.k.As<float>() + h * d,
                cache.v.As<float>() + h * d, s.block_table, s.n_past + r.i + 1, cache.block_size,
                kv_stride, n_group, d, params.scale);
    }
  });
  return absl::OkStatus();
}

}  // namespace cascade::kernels::cpu
