#include "kernels/cpu/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "core/kv_cache_dtype.h"
#include "core/quant_blocks.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels::cpu {
namespace {

using internal::AttendArgs;
using internal::AttendFn;
using internal::kAttnMaxBlock;
using internal::kAttnMaxGroup;
using internal::kAttnMaxHeadDim;

// Flash-decoding split (Dao et al. 2023): when a batch has fewer (row, KV head) items than
// twice the threads (decode), each item's positions are cut into up to that many ranges of
// whole blocks, at least this many positions each, and the partial softmaxes are merged.
constexpr int64_t kMinSplitPositions = 128;

// The first position row i of `s` sees past the kept prefix: 0, or its window's start
// (0 as well when the window reaches back into the kept prefix).
int64_t FirstVisible(const AttentionSeq& s, int64_t i, int64_t window, int64_t kept_prefix) {
  if (window <= 0) return 0;
  const int64_t first = std::max<int64_t>(0, s.n_past + i + 1 - window);
  return first <= kept_prefix ? 0 : first;
}

// Checks the table of every sequence covers its positions, and that the blocks read are
// in the cache: those of the new positions (`new_only`: a KV write), or those every row
// sees (attention under `params`' window and kept prefix; the blocks between are skipped).
absl::Status CheckSeqs(const KvCacheLayer& cache, std::span<const AttentionSeq> seqs, int64_t n_rows,
                       const AttentionParams* params) {
  const int64_t n_blocks = cache.k.dim(0);
  for (const AttentionSeq& s : seqs) {
    if (s.row_begin < 0 || s.n_new < 0 || s.row_begin + s.n_new > n_rows || s.n_past < 0) {
      return absl::InvalidArgumentError(StrCat("attention: sequence rows [", s.row_begin, ", ", s.row_begin + s.n_new,
                                               ") outside the batch of ", n_rows));
    }
    const int64_t need = (s.n_past + s.n_new + cache.block_size - 1) / cache.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < need) {
      return absl::InvalidArgumentError(
          StrCat("attention: block table has ", s.block_table.size(), " blocks, positions need ", need));
    }
    const int64_t bs = cache.block_size;
    // Blocks [0, kept) and [first, need) are read.
    int64_t kept = 0, first = s.n_past / bs;
    if (params != nullptr) {
      const int64_t from = FirstVisible(s, 0, params->window, params->kept_prefix);
      kept = from > 0 ? (std::min(params->kept_prefix, from) + bs - 1) / bs : 0;
      first = from / bs;
    }
    for (int64_t b = 0; b < need; ++b) {
      if (b >= kept && b < first) continue;
      if (s.block_table[b] < 0 || s.block_table[b] >= n_blocks) {
        return absl::InvalidArgumentError(
            StrCat("attention: block id ", s.block_table[b], " outside the cache's ", n_blocks, " blocks"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckKvDtype(const KvCacheLayer& cache) {
  const DType t = cache.k.dtype;
  if (cache.v.dtype != t || !IsKvCacheDType(t)) {
    return absl::UnimplementedError(StrCat("attention: KV cache of ", DTypeName(t), " / ", DTypeName(cache.v.dtype),
                                           " (the CPU kernels read ", kKvCacheDTypeNames, ")"));
  }
  const bool scaled = cache.k_scale.data != nullptr && cache.v_scale.data != nullptr &&
                      cache.k_scale.NumElements() == cache.n_kv_heads &&
                      cache.v_scale.NumElements() == cache.n_kv_heads;
  if (t == DType::kF8_E4M3 && !scaled) {
    return absl::InvalidArgumentError(
        StrCat("attention: an fp8_e4m3 KV cache needs k_scale and v_scale of ", cache.n_kv_heads, " heads"));
  }
  if (t == DType::kQ8_0 && cache.head_dim % kQK != 0) {
    return absl::UnimplementedError(
        StrCat("attention: a q8_0 KV cache needs head_dim a multiple of 32, got ", cache.head_dim));
  }
  return absl::OkStatus();
}

// KV head h's FP8 scale, 1 for the other dtypes (no scales).
float HeadScale(const TensorView& scales, int64_t h) { return scales.data != nullptr ? scales.As<float>()[h] : 1.0f; }

AttendFn PickAttend(int64_t d) {
  if (ActiveCpuIsa() == CpuIsa::kAvx512 && d % 16 == 0) return internal::AttendAvx512;
  if (ActiveCpuIsa() >= CpuIsa::kAvx2 && d % 8 == 0) return internal::AttendAvx2;
  return internal::AttendGeneric;
}

// How many rows of a sequence one call of `attend` may take (AttendArgs::n_rows).
int64_t MaxRowsPerUnit(AttendFn attend, int64_t n_group) {
  if (attend != internal::AttendAvx2 && attend != internal::AttendAvx512) return 1;
  return std::min(internal::kAttnMaxRows, internal::kAttnMaxQueries / n_group);
}

}  // namespace

namespace internal {

// The portable kernel. This file is built with -ffast-math so the exp over a tile
// vectorises (glibc's libmvec); the running max therefore starts at a large finite value,
// never -inf.
CASCADE_SIMD_CLONES
void AttendGeneric(const AttendArgs& a) {
  const int64_t bs = a.bs, n_group = a.n_group, d = a.d;
  const bool f32 = a.kv_dtype == DType::kF32;
  // F16 / Q8_0 / F8_E4M3 caches: each block's rows are converted once into these, then read as f32.
  thread_local std::vector<float> k_tile, v_tile;
  if (!f32) {
    k_tile.resize(static_cast<size_t>(bs * d));
    v_tile.resize(static_cast<size_t>(bs * d));
  }
  const int64_t kv_stride = f32 ? a.kv_row_bytes / static_cast<int64_t>(sizeof(float)) : d;
  const auto to_f32 = ActiveCpuIsa() >= CpuIsa::kAvx2 ? KvRowsToF32Avx2 : KvRowsToF32;
  float m[kAttnMaxGroup], l[kAttnMaxGroup];
  float acc[kAttnMaxGroup][kAttnMaxHeadDim];
  float s[kAttnMaxBlock];
  for (int64_t g = 0; g < n_group; ++g) {
    m[g] = kAttnNoMax;
    l[g] = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc[g][i] = 0.0f;
  }
  for (int64_t block_start = a.pos_begin; block_start < a.pos_end; block_start += bs) {
    // Rows before first_pos (a window's start) are skipped: the tile is the rest.
    const int64_t skip = std::max<int64_t>(0, a.first_pos - block_start);
    const int64_t len = std::min(bs, a.pos_end - block_start) - skip;
    if (len <= 0) continue;
    const int64_t block = a.table[block_start / bs];
    const uint8_t* kraw = a.k_base + (block * bs + skip) * a.kv_row_bytes;
    const uint8_t* vraw = a.v_base + (block * bs + skip) * a.kv_row_bytes;
    const float* kb = reinterpret_cast<const float*>(kraw);
    const float* vb = reinterpret_cast<const float*>(vraw);
    if (!f32) {
      to_f32(a.kv_dtype, kraw, a.kv_row_bytes, len, d, k_tile.data());
      to_f32(a.kv_dtype, vraw, a.kv_row_bytes, len, d, v_tile.data());
      kb = k_tile.data();
      vb = v_tile.data();
    }
    for (int64_t g = 0; g < n_group; ++g) {
      const float* qg = a.q + g * d;
      for (int64_t t = 0; t < len; ++t) {
        const float* kt = kb + t * kv_stride;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < d; ++i) dot += qg[i] * kt[i];
        s[t] = dot * a.scale;
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
    float f = a.v_scale;
    if (a.normalize) {
      f = a.v_scale * SoftmaxFactor(m[g], l[g], a.sinks != nullptr ? a.sinks + g : nullptr);
    } else {
      a.m[g] = m[g];
      a.l[g] = l[g];
    }
    for (int64_t i = 0; i < d; ++i) a.out[g * d + i] = acc[g][i] * f;
  }
}

void KvRowsToF32(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t n, int64_t d, float* dst) {
  for (int64_t r = 0; r < n; ++r, src += row_bytes, dst += d) {
    if (dtype == DType::kF16) {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < d; ++i) dst[i] = F16ToF32(h[i]);
    } else if (dtype == DType::kF8_E4M3) {
      const std::array<float, 256>& values = E4M3Values();
      for (int64_t i = 0; i < d; ++i) dst[i] = values[src[i]];
    } else {  // Q8_0: d / 32 blocks of an f16 scale and 32 int8.
      const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < d; ++i) dst[i] = F16ToF32(b[i / kQK].d) * static_cast<float>(b[i / kQK].qs[i % kQK]);
    }
  }
}

}  // namespace internal

namespace {

// One position's row of every KV head as E4M3 codes of x / scale[head].
void WriteF8Row(const float* x, const float* scale, int64_t n_heads, int64_t d, uint8_t* dst) {
  for (int64_t h = 0; h < n_heads; ++h) {
    const float inv = 1.0f / scale[h];
    for (int64_t i = 0; i < d; ++i) dst[h * d + i] = F32ToE4M3(x[h * d + i] * inv);
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
  if (absl::Status s = CheckSeqs(cache, seqs, k.Rows(), /*params=*/nullptr); !s.ok()) return s;
  CASCADE_RETURN_IF_ERROR(CheckKvDtype(cache));
  const DType dtype = cache.k.dtype;
  const int64_t bs = cache.block_size, row_bytes = RowBytes(dtype, kv_dim);
  auto* kc = static_cast<uint8_t*>(cache.k.data);
  auto* vc = static_cast<uint8_t*>(cache.v.data);
  for (const AttentionSeq& s : seqs) {
    for (int64_t i = 0; i < s.n_new; ++i) {
      const int64_t pos = s.n_past + i;
      const int64_t slot = static_cast<int64_t>(s.block_table[pos / bs]) * bs + pos % bs;
      const float* kr = k.As<float>() + (s.row_begin + i) * kv_dim;
      const float* vr = v.As<float>() + (s.row_begin + i) * kv_dim;
      if (dtype == DType::kF8_E4M3) {
        WriteF8Row(kr, cache.k_scale.As<float>(), cache.n_kv_heads, cache.head_dim, kc + slot * row_bytes);
        WriteF8Row(vr, cache.v_scale.As<float>(), cache.n_kv_heads, cache.head_dim, vc + slot * row_bytes);
        continue;
      }
      CASCADE_RETURN_IF_ERROR(QuantizeRow(dtype, kr, kc + slot * row_bytes, kv_dim));  // F32: a copy.
      CASCADE_RETURN_IF_ERROR(QuantizeRow(dtype, vr, vc + slot * row_bytes, kv_dim));
    }
  }
  return absl::OkStatus();
}

namespace {

// One (row, kv head) item of a step's attention runs as one unit, or as several units over
// ranges of its positions (see kMinSplitPositions) merged after.
struct RowRef {
  int32_t seq;
  int32_t i;
};
struct Unit {
  int32_t item;
  int32_t partial;  // Index of its partial result, or -1: writes `out` directly.
  int64_t pos_begin, pos_end;
  int64_t first_pos;  // Positions before it are skipped (a window's start).
  // Rows item's, item's + 1, ... of the same sequence and KV head (AttendArgs::n_rows, whose
  // windows slide by `window` when > 0); pos_end is the first row's.
  int32_t n_rows = 1;
  int64_t window = 0;
};
struct Split {
  int32_t item;
  int32_t first_partial;
  int32_t n;
};
struct AttentionPlan {
  std::vector<RowRef> rows;  // Listed sequence by sequence; item = row * n_kv + kv head.
  std::vector<Unit> units;
  std::vector<Split> splits;  // Items run as several units.
  int32_t n_partials = 0;
};

absl::Status CheckAttention(const TensorView& out, const TensorView& q, const KvCacheLayer& cache,
                            std::span<const AttentionSeq> seqs, const AttentionParams& params) {
  const int64_t d = cache.head_dim;
  const int64_t n_kv = cache.n_kv_heads;
  if (n_kv <= 0 || params.n_heads % n_kv != 0 || params.n_heads / n_kv > kAttnMaxGroup || d > kAttnMaxHeadDim ||
      cache.block_size > kAttnMaxBlock) {
    return absl::UnimplementedError(StrCat("attention: ", params.n_heads, " heads over ", n_kv, " KV heads of dim ", d,
                                           ", block ", cache.block_size, " is outside the CPU kernel's limits"));
  }
  if (q.Cols() != params.n_heads * d || out.Cols() != q.Cols() || out.Rows() != q.Rows()) {
    return absl::InvalidArgumentError(StrCat("attention: q ", q.ShapeString(), " / out ", out.ShapeString(),
                                             " do not match ", params.n_heads, " heads of ", d));
  }
  if (params.window < 0 || params.kept_prefix < 0 ||
      (params.sinks.data != nullptr &&
       (params.sinks.dtype != DType::kF32 || params.sinks.NumElements() != params.n_heads))) {
    return absl::InvalidArgumentError(StrCat("attention: window ", params.window, ", kept prefix ", params.kept_prefix,
                                             ", sinks ", params.sinks.ShapeString(), " for ", params.n_heads,
                                             " heads"));
  }
  CASCADE_RETURN_IF_ERROR(CheckSeqs(cache, seqs, q.Rows(), &params));
  return CheckKvDtype(cache);
}

// Splits an item's positions only when there are too few items to keep every thread busy.
// A row whose window has left the kept prefix behind runs the prefix as one more unit.
// Otherwise (a prefill), up to `max_rows` consecutive rows of a sequence run as one unit per
// KV head, sharing each K/V tile, where none of them has a prefix unit.
AttentionPlan PlanUnits(std::span<const AttentionSeq> seqs, int64_t n_kv, int64_t bs, int64_t n_threads, int64_t window,
                        int64_t kept_prefix, int64_t max_rows) {
  AttentionPlan plan;
  for (size_t si = 0; si < seqs.size(); ++si) {
    for (int64_t i = 0; i < seqs[si].n_new; ++i) {
      plan.rows.push_back({static_cast<int32_t>(si), static_cast<int32_t>(i)});
    }
  }
  const int64_t n_items = static_cast<int64_t>(plan.rows.size()) * n_kv;
  const int64_t max_splits = n_threads > 1 && n_items < 2 * n_threads ? (2 * n_threads + n_items - 1) / n_items : 1;
  const auto has_prefix_unit = [&](RowRef r) {
    return kept_prefix > 0 && FirstVisible(seqs[r.seq], r.i, window, kept_prefix) > 0;
  };
  const auto add_item = [&](int64_t item) {
    const RowRef r = plan.rows[item / n_kv];
    const int64_t n_ctx = seqs[r.seq].n_past + r.i + 1;
    const int64_t first = FirstVisible(seqs[r.seq], r.i, window, kept_prefix);
    const bool prefix_unit = has_prefix_unit(r);
    const int64_t first_block = first / bs, n_blocks = (n_ctx + bs - 1) / bs - first_block;
    const int64_t n_split =
        std::clamp<int64_t>((n_ctx - first) / kMinSplitPositions, 1, std::min(max_splits, n_blocks));
    if (n_split == 1 && !prefix_unit) {
      plan.units.push_back({static_cast<int32_t>(item), -1, first_block * bs, n_ctx, first});
      return;
    }
    plan.splits.push_back(
        {static_cast<int32_t>(item), plan.n_partials, static_cast<int32_t>(n_split + (prefix_unit ? 1 : 0))});
    if (prefix_unit) plan.units.push_back({static_cast<int32_t>(item), plan.n_partials++, 0, kept_prefix, 0});
    for (int64_t sp = 0; sp < n_split; ++sp) {
      const int64_t b0 = first_block + n_blocks * sp / n_split, b1 = first_block + n_blocks * (sp + 1) / n_split;
      plan.units.push_back({static_cast<int32_t>(item), plan.n_partials++, b0 * bs, std::min(b1 * bs, n_ctx), first});
    }
  };
  // Rows a unit: as many as the kernel takes, while every thread keeps two units or more
  // (a verify step's 5 rows at one KV head stay 5 units on 2 threads).
  max_rows = std::clamp<int64_t>(n_items / (2 * n_threads), 1, max_rows);
  if (max_splits > 1 || max_rows <= 1) {
    for (int64_t item = 0; item < n_items; ++item) add_item(item);
    return plan;
  }
  for (int64_t row = 0; row < static_cast<int64_t>(plan.rows.size());) {
    const RowRef r = plan.rows[row];
    const int64_t n = std::min<int64_t>(max_rows, seqs[r.seq].n_new - r.i);
    bool together = n > 1;
    for (int64_t j = 0; j < n && together; ++j) together = !has_prefix_unit(plan.rows[row + j]);
    for (int64_t h = 0; h < n_kv; ++h) {
      if (!together) {
        for (int64_t j = 0; j < n; ++j) add_item((row + j) * n_kv + h);
        continue;
      }
      // With a kept prefix every row here sees from 0; without one, each row's window.
      const int64_t first = FirstVisible(seqs[r.seq], r.i, window, kept_prefix);
      plan.units.push_back({static_cast<int32_t>(row * n_kv + h), -1, first / bs * bs, seqs[r.seq].n_past + r.i + 1, 0,
                            static_cast<int32_t>(n), kept_prefix > 0 ? 0 : window});
    }
    row += n;
  }
  return plan;
}

// Merges each split item: out = sum_i e^(m_i - M) acc_i / sum_i e^(m_i - M) l_i, M = max_i m_i.
// A partial holds n_group maxima, n_group sums, then [n_group, d] unnormalised outputs.
void MergeSplits(const AttentionPlan& plan, std::span<const AttentionSeq> seqs, const std::vector<float>& partials,
                 int64_t n_kv, int64_t n_heads, int64_t d, const float* sinks, float* out) {
  const int64_t n_group = n_heads / n_kv;
  const int64_t partial_floats = n_group * (d + 2);
  for (const Split& sp : plan.splits) {
    const RowRef r = plan.rows[sp.item / n_kv];
    const int64_t h = sp.item % n_kv;
    float* o = out + (seqs[r.seq].row_begin + r.i) * n_heads * d + h * n_group * d;
    for (int64_t g = 0; g < n_group; ++g) {
      float mx = internal::kAttnNoMax;
      for (int32_t i = 0; i < sp.n; ++i) mx = std::max(mx, partials[(sp.first_partial + i) * partial_floats + g]);
      float l = 0.0f;
      float* og = o + g * d;
      std::fill_n(og, d, 0.0f);
      for (int32_t i = 0; i < sp.n; ++i) {
        const float* p = partials.data() + (sp.first_partial + i) * partial_floats;
        const float w = std::exp(p[g] - mx);
        l += w * p[n_group + g];
        const float* acc = p + 2 * n_group + g * d;
        for (int64_t x = 0; x < d; ++x) og[x] += w * acc[x];
      }
      const float f = internal::SoftmaxFactor(mx, l, sinks != nullptr ? sinks + h * n_group + g : nullptr);
      for (int64_t x = 0; x < d; ++x) og[x] *= f;
    }
  }
}

}  // namespace

absl::Status AttentionCpu(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                          std::span<const AttentionSeq> seqs, const AttentionParams& params, ThreadPool& pool) {
  CASCADE_RETURN_IF_ERROR(CheckAttention(out, q, cache, seqs, params));
  const int64_t d = cache.head_dim;
  const int64_t n_kv = cache.n_kv_heads;
  const int64_t n_group = params.n_heads / n_kv;
  const DType kv_dtype = cache.k.dtype;
  const int64_t kv_row_bytes = RowBytes(kv_dtype, n_kv * d);
  const int64_t head_bytes = RowBytes(kv_dtype, d);  // Offset of one KV head within a position.
  const int64_t bs = cache.block_size;
  const int64_t n_threads = pool.n_threads();
  const AttendFn attend = PickAttend(d);
  const AttentionPlan plan =
      PlanUnits(seqs, n_kv, bs, n_threads, params.window, params.kept_prefix, MaxRowsPerUnit(attend, n_group));
  const float* sinks = params.sinks.data != nullptr ? params.sinks.As<float>() : nullptr;
  const int64_t partial_floats = n_group * (d + 2);
  std::vector<float> partials(plan.n_partials * partial_floats);
  const int64_t n_units = static_cast<int64_t>(plan.units.size());
  // Later rows of a prefill attend to more positions: hand out small chunks.
  const int64_t chunk = n_units >= 8 * n_threads ? 4 : 1;
  pool.ParallelForChunked(n_units, chunk, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end; ++u) {
      const Unit& unit = plan.units[u];
      const RowRef r = plan.rows[unit.item / n_kv];
      const int64_t h = unit.item % n_kv;
      const AttentionSeq& s = seqs[r.seq];
      const int64_t off = (s.row_begin + r.i) * params.n_heads * d + h * n_group * d;
      AttendArgs args{.q = q.As<float>() + off,
                      .k_base = static_cast<const uint8_t*>(cache.k.data) + h * head_bytes,
                      .v_base = static_cast<const uint8_t*>(cache.v.data) + h * head_bytes,
                      .kv_dtype = kv_dtype,
                      .table = s.block_table.data(),
                      .pos_begin = unit.pos_begin,
                      .pos_end = unit.pos_end,
                      .first_pos = unit.first_pos,
                      .bs = bs,
                      .kv_row_bytes = kv_row_bytes,
                      .n_group = n_group,
                      .d = d,
                      .scale = params.scale * HeadScale(cache.k_scale, h),
                      .v_scale = HeadScale(cache.v_scale, h),
                      .n_rows = unit.n_rows,
                      .row_stride = params.n_heads * d,
                      .window = unit.window,
                      .sinks = sinks != nullptr ? sinks + h * n_group : nullptr};
      if (unit.partial < 0) {
        args.out = out.As<float>() + off;
      } else {
        float* p = partials.data() + unit.partial * partial_floats;
        args.normalize = false;
        args.m = p;
        args.l = p + n_group;
        args.out = p + 2 * n_group;
      }
      attend(args);
    }
  });
  MergeSplits(plan, seqs, partials, n_kv, params.n_heads, d, sinks, out.As<float>());
  return absl::OkStatus();
}

}  // namespace cascade::kernels::cpu
