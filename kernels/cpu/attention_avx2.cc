// AVX2 (+FMA, F16C) attention: the AVX-512 kernel's design (attention_avx512.cc) at 8
// positions per tile, and the conversion of a block's cache rows to f32 that the portable
// kernel (attention.cc) uses for head sizes that are not a multiple of 8. In the portable
// form (one software half-to-float per element) that conversion cost 70% of a 2048-token
// prefill on an AVX2-only CPU; F16C converts eight at once.
//
// Per tile of 8 positions and per query head of the group, the 8 dot products q.k_t are 8
// partial vectors (d / 8 FMAs each against q pre-scaled) reduced together by pairwise
// adds into one vector of scores; the online softmax needs one horizontal max per tile and
// an exp polynomial over the vector (the AVX-512 kernel's Cephes expf, 2^n built in the
// exponent bits); P.V is broadcast FMAs into the group's accumulators. A prefill's rows run
// several at a time (AttendArgs::n_rows; attention.cc's PlanUnits groups them), each tile
// converted and read once for all of them. A tile shorter than
// 8 reads its last valid K row in place of the missing ones and masks their scores, so no
// row past the sequence's end is read (those slots may hold anything, NaN included).
//
// Compiled with AVX2/FMA/F16C; called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/quant_blocks.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/exp_poly.h"

namespace cascade::kernels::cpu::internal {

void KvRowsToF32Avx2(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t n, int64_t d, float* dst) {
  if (dtype == DType::kF8_E4M3 || d % 8 != 0) {  // A table lookup per code either way.
    KvRowsToF32(dtype, src, row_bytes, n, d, dst);
    return;
  }
  for (int64_t r = 0; r < n; ++r, src += row_bytes, dst += d) {
    if (dtype == DType::kF16) {
      for (int64_t i = 0; i < d; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
      }
    } else {  // Q8_0: d / 32 blocks of an f16 scale and 32 int8.
      const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < d; i += 8) {
        const BlockQ8_0& blk = b[i / kQK];
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + i % kQK));
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, _mm256_set1_ps(_cvtsh_ss(blk.d))));
      }
    }
  }
}

namespace {

// e^x for x <= 88 (softmax feeds it x <= 0); below kExpMinArg it gives ~e^-87.3, which
// callers mask or multiply by zero. exp_poly.h's polynomial, 2^n built in the exponent bits
// (-126 <= n <= 127 after the clamp, so always a normal float).
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpMinArg)), _mm256_set1_ps(88.0f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x));
  __m256 y = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpPoly[i]));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// Lane t of the result = sum of the 8 lanes of p[t] (three rounds of pairwise adds).
inline __m256 Reduce8(const __m256* p) {
  const __m256 s01 = _mm256_hadd_ps(p[0], p[1]), s23 = _mm256_hadd_ps(p[2], p[3]);
  const __m256 s45 = _mm256_hadd_ps(p[4], p[5]), s67 = _mm256_hadd_ps(p[6], p[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// The scores of q against the tile's 8 K rows (row min(t, len - 1) for lane t): 8 partial
// vectors of d / 8 FMAs, reduced together. (Keeping q in registers for d <= 64, positions
// 4 at a time, measured no faster on Zen 3.)
template <int kD>
inline __m256 Scores(const float* q, const float* kc, int64_t stride, int len) {
  __m256 part[8];
  for (int t = 0; t < 8; ++t) {
    const float* kt = kc + std::min(t, len - 1) * stride;
    __m256 s = _mm256_mul_ps(_mm256_load_ps(q), _mm256_loadu_ps(kt));
    for (int i = 1; i < kD; ++i) s = _mm256_fmadd_ps(_mm256_load_ps(q + 8 * i), _mm256_loadu_ps(kt + 8 * i), s);
    part[t] = s;
  }
  return Reduce8(part);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// kD = d / 8 vectors per head row. The AVX-512 kernel's structure (attention_avx512.cc) at
// 8 positions per tile: the 8 dot products of a tile reduced together, one horizontal max
// per tile, P.V as broadcast FMAs. A tile shorter than 8 reads its last valid K row in place
// of the missing ones and masks their scores, so no row past the sequence's end is read.
// With several rows (a prefill's), each tile is converted and read once for all of their
// query heads: a row alone streams its whole history from L3 once per KV head (SmolLM2's
// 1.4 MB of f16 K/V per layer at 1800 tokens), which held the one-row kernel at ~2.5
// multiply-adds a cycle.
template <int kD, bool kF32>
void AttendImpl(const AttendArgs& a) {
  const int64_t n_group = a.n_group, n_rows = a.n_rows, n_q = n_rows * n_group;
  constexpr bool f32 = kF32;  // The AVX-512 kernel's reason: a constant stride for converted tiles.
  const int64_t stride = f32 ? a.kv_row_bytes / static_cast<int64_t>(sizeof(float)) : kD * 8;
  alignas(32) float k_tile[8][kD * 8];
  alignas(32) float v_tile[8][kD * 8];
  alignas(32) float acc[kAttnMaxQueries][kD * 8];  // Query q = row j * n_group + head g.
  alignas(32) float qs[kAttnMaxQueries][kD * 8];   // q * scale.
  alignas(32) float lsum[kAttnMaxQueries][8];      // Row sums, per lane.
  alignas(32) float scores[kAttnMaxQueries][8];    // A tile's scores, then weights, of its live queries.
  alignas(32) float corrs[kAttnMaxQueries][8];     // Their running sums' corrections.
  alignas(32) float valids[kAttnMaxQueries][8];    // Their masks of positions seen.
  struct Live {
    int q, lo, len;
  } live[kAttnMaxQueries];  // The queries that see some of the tile.
  float m[kAttnMaxQueries];
  int64_t row_first[kAttnMaxRows], row_end[kAttnMaxRows];
  for (int64_t j = 0; j < n_rows; ++j) {
    row_end[j] = a.pos_end + j;
    row_first[j] = a.window > 0 ? std::max(a.first_pos, row_end[j] - a.window) : a.first_pos;
  }
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int64_t q = 0; q < n_q; ++q) {
    const float* src = a.q + (q / n_group) * a.row_stride + (q % n_group) * kD * 8;
    for (int j = 0; j < kD; ++j) {
      _mm256_store_ps(qs[q] + 8 * j, _mm256_mul_ps(_mm256_loadu_ps(src + 8 * j), scale));
      _mm256_store_ps(acc[q] + 8 * j, _mm256_setzero_ps());
    }
    _mm256_store_ps(lsum[q], _mm256_setzero_ps());
    m[q] = kAttnNoMax;
  }
  const __m256 no_max = _mm256_set1_ps(kAttnNoMax);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t last_end = row_end[n_rows - 1];
  for (int64_t start = a.pos_begin; start < last_end; start += a.bs) {
    const int64_t block_len = std::min(a.bs, last_end - start);
    const int64_t block = a.table[start / a.bs];
    const uint8_t* kb = a.k_base + block * a.bs * a.kv_row_bytes;
    const uint8_t* vb = a.v_base + block * a.bs * a.kv_row_bytes;
    for (int64_t c = 0; c < block_len; c += 8) {
      const int64_t tile = start + c;
      const int tile_len = static_cast<int>(std::min<int64_t>(8, block_len - c));
      // A row's last positions lie past the tile or its first before the window: masked.
      if (tile + tile_len <= row_first[0]) continue;  // Every row's window starts later.
      const float* kc = reinterpret_cast<const float*>(kb + c * a.kv_row_bytes);
      const float* vc = reinterpret_cast<const float*>(vb + c * a.kv_row_bytes);
      if (!f32) {
        KvRowsToF32Avx2(a.kv_dtype, kb + c * a.kv_row_bytes, a.kv_row_bytes, tile_len, kD * 8, k_tile[0]);
        KvRowsToF32Avx2(a.kv_dtype, vb + c * a.kv_row_bytes, a.kv_row_bytes, tile_len, kD * 8, v_tile[0]);
        kc = k_tile[0];
        vc = v_tile[0];
      }
      // The AVX-512 kernel's three passes: scores, softmax steps, then P.V sums.
      int n_live = 0;
      for (int64_t j = 0; j < n_rows; ++j) {
        const int len = static_cast<int>(std::clamp<int64_t>(row_end[j] - tile, 0, tile_len));
        const int lo = static_cast<int>(std::clamp<int64_t>(row_first[j] - tile, 0, 8));
        if (lo >= len) continue;
        const __m256 valid = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(len), lane),
                                                                  _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - 1))));
        for (int64_t q = j * n_group; q < (j + 1) * n_group; ++q) {
          live[n_live] = {static_cast<int>(q), lo, len};
          _mm256_store_ps(valids[n_live], valid);
          _mm256_store_ps(scores[n_live++], _mm256_blendv_ps(no_max, Scores<kD>(qs[q], kc, stride, len), valid));
        }
      }
      for (int i = 0; i < n_live; ++i) {
        const int q = live[i].q;
        const __m256 s = _mm256_load_ps(scores[i]);
        const float m_new = std::max(m[q], HorizontalMax(s));
        // ~0 on the first tile; 1, without an exp, once the running max has settled.
        const __m256 corr = m_new > m[q] ? Exp(_mm256_set1_ps(m[q] - m_new)) : _mm256_set1_ps(1.0f);
        const __m256 pv = _mm256_and_ps(_mm256_load_ps(valids[i]), Exp(_mm256_sub_ps(s, _mm256_set1_ps(m_new))));
        m[q] = m_new;
        _mm256_store_ps(lsum[q], _mm256_fmadd_ps(_mm256_load_ps(lsum[q]), corr, pv));
        _mm256_store_ps(scores[i], pv);  // Now the weights p.
        _mm256_store_ps(corrs[i], corr);
      }
      for (int i = 0; i < n_live; ++i) {
        const float* p = scores[i];
        const __m256 corr = _mm256_load_ps(corrs[i]);
        const int lo = live[i].lo, len = live[i].len;
        float* aq = acc[live[i].q];
        if (lo == 0 && len == 8) {  // A whole tile: the 8 weights stay in registers.
          __m256 w[8];
          for (int t = 0; t < 8; ++t) w[t] = _mm256_broadcast_ss(p + t);
          for (int d = 0; d < kD; ++d) {
            __m256 o = _mm256_mul_ps(_mm256_load_ps(aq + 8 * d), corr);
            for (int t = 0; t < 8; ++t) o = _mm256_fmadd_ps(w[t], _mm256_loadu_ps(vc + t * stride + 8 * d), o);
            _mm256_store_ps(aq + 8 * d, o);
          }
          continue;
        }
        for (int d = 0; d < kD; ++d) {
          __m256 o = _mm256_mul_ps(_mm256_load_ps(aq + 8 * d), corr);
          for (int t = lo; t < len; ++t) {
            o = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(vc + t * stride + 8 * d), o);
          }
          _mm256_store_ps(aq + 8 * d, o);
        }
      }
    }
  }
  for (int64_t q = 0; q < n_q; ++q) {
    const int64_t g = q % n_group;
    const float l = HorizontalSum(_mm256_load_ps(lsum[q]));
    float* oq = a.out + (q / n_group) * a.row_stride + g * kD * 8;
    float f = a.v_scale;
    if (a.normalize) {
      f = a.v_scale * SoftmaxFactor(m[q], l, a.sinks != nullptr ? a.sinks + g : nullptr);
    } else {  // One row.
      a.m[g] = m[q];
      a.l[g] = l;
    }
    for (int i = 0; i < kD; ++i)
      _mm256_storeu_ps(oq + 8 * i, _mm256_mul_ps(_mm256_load_ps(acc[q] + 8 * i), _mm256_set1_ps(f)));
  }
}

template <bool kF32, int... kDs>
constexpr std::array<AttendFn, sizeof...(kDs) + 1> MakeTable(std::integer_sequence<int, kDs...>) {
  return {nullptr, &AttendImpl<kDs + 1, kF32>...};
}

}  // namespace

void AttendAvx2(const AttendArgs& args) {
  static constexpr auto kF32Table = MakeTable<true>(std::make_integer_sequence<int, kAttnMaxHeadDim / 8>());
  static constexpr auto kTable = MakeTable<false>(std::make_integer_sequence<int, kAttnMaxHeadDim / 8>());
  (args.kv_dtype == DType::kF32 ? kF32Table : kTable)[args.d / 8](args);
}

}  // namespace cascade::kernels::cpu::internal
