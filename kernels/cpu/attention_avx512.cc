// AVX-512 attention kernel: query rows against a KV head, 16 positions at a time.
//
// Per tile of 16 positions and per query head of the group, the 16 dot products q.k_t are
// kept as 16 partial vectors (d / 16 FMAs each, q held in registers, pre-scaled) and
// reduced together by a transpose-style tree (unpcklps / unpcklpd / shuf_f32x4 with adds:
// 30 shuffles and 15 adds for 16 sums instead of 16 separate horizontal reductions) into
// one vector of 16 scores. The online softmax then needs one horizontal max per tile; exp
// is a Cephes-style polynomial with range reduction (Exp below, relative error < 2e-7 over
// the range softmax feeds it); the row sum stays a vector until the end. P.V broadcasts
// each weight (from a small L1 table; a whole tile's 16 held in registers) into d / 16 FMAs.
//
// A tile shorter than 16 (the sequence's last block, or a block size under 16) reads its
// last valid K row in place of the missing ones and masks their scores, so no row past the
// sequence's end is ever touched (those slots may hold anything, NaN included).
//
// The K/V rows of a tile are loaded once per query head of the group; they are in L1 after
// the first head (16 rows x d floats), so the group costs one trip to memory per tile. A
// prefill's rows run up to 8 at a time (AttendArgs::n_rows; attention.cc's PlanUnits groups
// them), so that trip and the tile's conversion serve all of them: a row alone streams its
// whole history from L2 or beyond once per KV head.
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/quant_blocks.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/fp8_avx512.h"

namespace cascade::kernels::cpu::internal {
namespace {

// e^x for x <= 88.37 (softmax feeds it x <= 0); below kExpMinArg it gives ~e^-87.3, which
// callers mask or multiply by zero. exp_poly.h's polynomial, scaled by 2^n with vscalefps.
inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpMinArg)), _mm512_set1_ps(88.37626f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x));
  __m512 y = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpPoly[i]));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

// Lane t of the result = sum of the 16 lanes of p[t].
inline __m512 Reduce16(const __m512* p) {
  __m512 r1[8];  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] for the pair (a, b).
  for (int i = 0; i < 8; ++i) {
    r1[i] = _mm512_add_ps(_mm512_unpacklo_ps(p[2 * i], p[2 * i + 1]), _mm512_unpackhi_ps(p[2 * i], p[2 * i + 1]));
  }
  __m512 r2[4];  // Per 128-bit lane: positions 4i..4i+3, each summed within the lane.
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(r1[2 * i]), b = _mm512_castps_pd(r1[2 * i + 1]);
    r2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(r2[0], r2[1], kEven), _mm512_shuffle_f32x4(r2[0], r2[1], kOdd));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(r2[2], r2[3], kEven), _mm512_shuffle_f32x4(r2[2], r2[3], kOdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, kEven), _mm512_shuffle_f32x4(x0, x1, kOdd));
}

// `n` (<= 16) cache rows of d = 16 kD elements (F16, F8_E4M3 unscaled, or Q8_0 with kD
// even) to f32.
template <int kD>
void KvRowsToF32Avx512(DType dtype, const uint8_t* src, int64_t row_bytes, int n, float (*dst)[kD * 16]) {
  for (int r = 0; r < n; ++r, src += row_bytes) {
    if (dtype == DType::kF16) {
      for (int j = 0; j < kD; ++j) {
        _mm512_store_ps(dst[r] + 16 * j,
                        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src) + j)));
      }
    } else if (dtype == DType::kF8_E4M3) {
      for (int j = 0; j < kD; ++j) {
        _mm512_store_ps(dst[r] + 16 * j, _mm512_mul_ps(E4M3x16Over256(src + 16 * j), _mm512_set1_ps(256.0f)));
      }
    } else {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int j = 0; j < kD; ++j) {
        const BlockQ8_0& blk = b[j / 2];
        const __m512 scale = _mm512_set1_ps(_cvtsh_ss(blk.d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs + 16 * (j % 2)));
        _mm512_store_ps(dst[r] + 16 * j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale));
      }
    }
  }
}

// The scores of q (pre-scaled) against the tile's 16 K rows (row min(t, len - 1) for lane
// t): 16 partial vectors of kD FMAs, reduced together.
template <int kD>
inline __m512 Scores(const float* q, const float* kc, int64_t stride, int len) {
  __m512 qv[kD];
  for (int j = 0; j < kD; ++j) qv[j] = _mm512_load_ps(q + 16 * j);
  __m512 part[16];
  for (int t = 0; t < 16; ++t) {
    const float* kt = kc + std::min(t, len - 1) * stride;
    __m512 s = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kt));
    for (int j = 1; j < kD; ++j) s = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(kt + 16 * j), s);
    part[t] = s;
  }
  return Reduce16(part);
}

// kD = d / 16 vectors per head row. With several rows (a prefill's, AttendArgs::n_rows),
// each 16-position tile is converted and read once for all of their query heads, as in
// the AVX2 kernel (attention_avx2.cc): each row keeps its own causal end and window start,
// and every query's sums are those it gets alone (a decode row's bits). kF32: the cache is
// F32 and read in place, rows `kv_row_bytes` apart; otherwise converted tiles, whose
// constant row stride lets the P.V loop address its 16 rows by displacement (a run-time
// stride spent a register per row and spilled them).
template <int kD, bool kF32>
void AttendImpl(const AttendArgs& a) {
  const int64_t n_group = a.n_group, n_rows = a.n_rows, n_q = n_rows * n_group;
  constexpr bool f32 = kF32;
  const int64_t stride = f32 ? a.kv_row_bytes / static_cast<int64_t>(sizeof(float)) : kD * 16;
  // F16 / Q8_0 / F8_E4M3 caches: each 16-position chunk is converted once into these (L1), then
  // read by every query of the unit as f32.
  alignas(64) float k_tile[16][kD * 16];
  alignas(64) float v_tile[16][kD * 16];
  alignas(64) float acc[kAttnMaxQueries][kD * 16];  // Query q = row j * n_group + head g.
  alignas(64) float qs[kAttnMaxQueries][kD * 16];   // q * scale.
  alignas(64) float lsum[kAttnMaxQueries][16];      // Row sums, per lane.
  alignas(64) float scores[kAttnMaxQueries][16];    // A tile's scores, then weights, of its live queries.
  alignas(64) float corrs[kAttnMaxQueries][16];     // Their running sums' corrections.
  struct Live {
    int q, lo, len;
    __mmask16 valid;
  } live[kAttnMaxQueries];  // The queries that see some of the tile.
  float m[kAttnMaxQueries];
  int64_t row_first[kAttnMaxRows], row_end[kAttnMaxRows];
  for (int64_t j = 0; j < n_rows; ++j) {
    row_end[j] = a.pos_end + j;
    row_first[j] = a.window > 0 ? std::max(a.first_pos, row_end[j] - a.window) : a.first_pos;
  }
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int64_t q = 0; q < n_q; ++q) {
    const float* src = a.q + (q / n_group) * a.row_stride + (q % n_group) * kD * 16;
    for (int j = 0; j < kD; ++j) {
      _mm512_store_ps(qs[q] + 16 * j, _mm512_mul_ps(_mm512_loadu_ps(src + 16 * j), scale));
      _mm512_store_ps(acc[q] + 16 * j, _mm512_setzero_ps());
    }
    _mm512_store_ps(lsum[q], _mm512_setzero_ps());
    m[q] = kAttnNoMax;
  }
  const __m512 no_max = _mm512_set1_ps(kAttnNoMax);
  const int64_t last_end = row_end[n_rows - 1];
  for (int64_t start = a.pos_begin; start < last_end; start += a.bs) {
    const int64_t block_len = std::min(a.bs, last_end - start);
    const int64_t block = a.table[start / a.bs];
    const uint8_t* kb = a.k_base + block * a.bs * a.kv_row_bytes;
    const uint8_t* vb = a.v_base + block * a.bs * a.kv_row_bytes;
    for (int64_t c = 0; c < block_len; c += 16) {
      const int64_t tile = start + c;
      const int tile_len = static_cast<int>(std::min<int64_t>(16, block_len - c));
      if (tile + tile_len <= row_first[0]) continue;  // Every row's window starts later.
      const float* kc = reinterpret_cast<const float*>(kb + c * a.kv_row_bytes);
      const float* vc = reinterpret_cast<const float*>(vb + c * a.kv_row_bytes);
      if (!f32) {
        KvRowsToF32Avx512<kD>(a.kv_dtype, kb + c * a.kv_row_bytes, a.kv_row_bytes, tile_len, k_tile);
        KvRowsToF32Avx512<kD>(a.kv_dtype, vb + c * a.kv_row_bytes, a.kv_row_bytes, tile_len, v_tile);
        kc = k_tile[0];
        vc = v_tile[0];
      }
      // Three passes over the tile's queries, each query's arithmetic that of a query
      // alone (its bits do not depend on the others): their scores, then their softmax
      // steps, then their P.V sums. One query's work is a chain (scores, max, exp, then 16
      // dependent FMAs per output vector); in passes, the queries' chains are independent
      // neighbours that the core overlaps.
      int n_live = 0;
      for (int64_t j = 0; j < n_rows; ++j) {
        // Row j sees tile positions [lo, len): its last ones may lie past its causal end,
        // its first before its window's start.
        const int len = static_cast<int>(std::clamp<int64_t>(row_end[j] - tile, 0, tile_len));
        const int lo = static_cast<int>(std::clamp<int64_t>(row_first[j] - tile, 0, 16));
        if (lo >= len) continue;
        const __mmask16 valid = static_cast<__mmask16>(((1u << len) - 1) & ~((1u << lo) - 1));
        for (int64_t q = j * n_group; q < (j + 1) * n_group; ++q) {
          live[n_live] = {static_cast<int>(q), lo, len, valid};
          _mm512_store_ps(scores[n_live++], _mm512_mask_mov_ps(no_max, valid, Scores<kD>(qs[q], kc, stride, len)));
        }
      }
      for (int i = 0; i < n_live; ++i) {
        const int q = live[i].q;
        const __m512 s = _mm512_load_ps(scores[i]);
        const float m_new = std::max(m[q], _mm512_reduce_max_ps(s));
        // ~0 on the first tile; 1, without an exp, once the running max has settled
        // (Exp(0) is exactly 1, so the bits do not depend on which).
        const __m512 corr = m_new > m[q] ? Exp(_mm512_set1_ps(m[q] - m_new)) : _mm512_set1_ps(1.0f);
        const __m512 pv = _mm512_maskz_mov_ps(live[i].valid, Exp(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
        m[q] = m_new;
        _mm512_store_ps(lsum[q], _mm512_fmadd_ps(_mm512_load_ps(lsum[q]), corr, pv));
        _mm512_store_ps(scores[i], pv);  // Now the weights p.
        _mm512_store_ps(corrs[i], corr);
      }
      for (int i = 0; i < n_live; ++i) {
        const float* p = scores[i];
        const __m512 corr = _mm512_load_ps(corrs[i]);
        const int lo = live[i].lo, len = live[i].len;
        float* aq = acc[live[i].q];
        if (lo == 0 && len == 16) {  // A whole tile: the 16 weights stay in registers.
          __m512 w[16];
          for (int t = 0; t < 16; ++t) w[t] = _mm512_set1_ps(p[t]);
          for (int d = 0; d < kD; ++d) {
            __m512 o = _mm512_mul_ps(_mm512_load_ps(aq + 16 * d), corr);
            for (int t = 0; t < 16; ++t) o = _mm512_fmadd_ps(w[t], _mm512_loadu_ps(vc + t * stride + 16 * d), o);
            _mm512_store_ps(aq + 16 * d, o);
          }
          continue;
        }
        for (int d = 0; d < kD; ++d) {
          __m512 o = _mm512_mul_ps(_mm512_load_ps(aq + 16 * d), corr);
          for (int t = lo; t < len; ++t) {
            o = _mm512_fmadd_ps(_mm512_set1_ps(p[t]), _mm512_loadu_ps(vc + t * stride + 16 * d), o);
          }
          _mm512_store_ps(aq + 16 * d, o);
        }
      }
    }
  }
  for (int64_t q = 0; q < n_q; ++q) {
    const int64_t g = q % n_group;
    const float l = _mm512_reduce_add_ps(_mm512_load_ps(lsum[q]));
    float* oq = a.out + (q / n_group) * a.row_stride + g * kD * 16;
    float f = a.v_scale;
    if (a.normalize) {
      f = a.v_scale * SoftmaxFactor(m[q], l, a.sinks != nullptr ? a.sinks + g : nullptr);
    } else {  // One row.
      a.m[g] = m[q];
      a.l[g] = l;
    }
    for (int i = 0; i < kD; ++i) {
      _mm512_storeu_ps(oq + 16 * i, _mm512_mul_ps(_mm512_load_ps(acc[q] + 16 * i), _mm512_set1_ps(f)));
    }
  }
}

template <bool kF32, int... kDs>
constexpr std::array<AttendFn, sizeof...(kDs) + 1> MakeTable(std::integer_sequence<int, kDs...>) {
  return {nullptr, &AttendImpl<kDs + 1, kF32>...};
}

}  // namespace

void AttendAvx512(const AttendArgs& args) {
  static constexpr auto kF32Table = MakeTable<true>(std::make_integer_sequence<int, kAttnMaxHeadDim / 16>());
  static constexpr auto kTable = MakeTable<false>(std::make_integer_sequence<int, kAttnMaxHeadDim / 16>());
  (args.kv_dtype == DType::kF32 ? kF32Table : kTable)[args.d / 16](args);
}

}  // namespace cascade::kernels::cpu::internal
