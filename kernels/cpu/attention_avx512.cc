// AVX-512 attention kernel: one query row against a KV head, 16 positions at a time.
//
// Per tile of 16 positions and per query head of the group, the 16 dot products q.k_t are
// kept as 16 partial vectors (d / 16 FMAs each, q held in registers, pre-scaled) and
// reduced together by a transpose-style tree (unpcklps / unpcklpd / shuf_f32x4 with adds:
// 30 shuffles and 15 adds for 16 sums instead of 16 separate horizontal reductions) into
// one vector of 16 scores. The online softmax then needs one horizontal max per tile; exp
// is a Cephes-style polynomial with range reduction (Exp below, relative error < 2e-7 over
// the range softmax feeds it); the row sum stays a vector until the end. P.V broadcasts
// each weight from a small L1 table (a load, not a shuffle) into d / 16 FMAs.
//
// A tile shorter than 16 (the sequence's last block, or a block size under 16) reads its
// last valid K row in place of the missing ones and masks their scores, so no row past the
// sequence's end is ever touched (those slots may hold anything, NaN included).
//
// The K/V rows of a tile are loaded once per query head of the group; they are in L1 after
// the first head (16 rows x d floats), so the group costs one trip to memory per tile.
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>

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

// kD = d / 16 vectors per head row.
template <int kD>
void AttendImpl(const AttendArgs& a) {
  const int64_t n_group = a.n_group;
  const bool f32 = a.kv_dtype == DType::kF32;
  const int64_t stride = f32 ? a.kv_row_bytes / static_cast<int64_t>(sizeof(float)) : kD * 16;
  // F16 / Q8_0 / F8_E4M3 caches: each 16-position chunk is converted once into these (L1), then
  // read by every query head of the group as f32.
  alignas(64) float k_tile[16][kD * 16];
  alignas(64) float v_tile[16][kD * 16];
  alignas(64) float acc[kAttnMaxGroup][kD * 16];
  alignas(64) float qs[kAttnMaxGroup][kD * 16];  // q * scale.
  alignas(64) float lsum[kAttnMaxGroup][16];     // Row sums, per lane.
  alignas(64) float p[16];
  float m[kAttnMaxGroup];
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int64_t g = 0; g < n_group; ++g) {
    for (int j = 0; j < kD; ++j) {
      _mm512_store_ps(qs[g] + 16 * j, _mm512_mul_ps(_mm512_loadu_ps(a.q + g * kD * 16 + 16 * j), scale));
      _mm512_store_ps(acc[g] + 16 * j, _mm512_setzero_ps());
    }
    _mm512_store_ps(lsum[g], _mm512_setzero_ps());
    m[g] = kAttnNoMax;
  }
  const __m512 no_max = _mm512_set1_ps(kAttnNoMax);
  for (int64_t start = a.pos_begin; start < a.pos_end; start += a.bs) {
    const int64_t block_len = std::min(a.bs, a.pos_end - start);
    const int64_t block = a.table[start / a.bs];
    const uint8_t* kb = a.k_base + block * a.bs * a.kv_row_bytes;
    const uint8_t* vb = a.v_base + block * a.bs * a.kv_row_bytes;
    for (int64_t c = 0; c < block_len; c += 16) {
      const int len = static_cast<int>(std::min<int64_t>(16, block_len - c));
      // The chunk's first `lo` positions lie before the window's start: masked.
      const int lo = static_cast<int>(std::clamp<int64_t>(a.first_pos - (start + c), 0, 16));
      if (lo >= len) continue;
      const __mmask16 valid = static_cast<__mmask16>(((1u << len) - 1) & ~((1u << lo) - 1));
      const float* kc = reinterpret_cast<const float*>(kb + c * a.kv_row_bytes);
      const float* vc = reinterpret_cast<const float*>(vb + c * a.kv_row_bytes);
      if (!f32) {
        KvRowsToF32Avx512<kD>(a.kv_dtype, kb + c * a.kv_row_bytes, a.kv_row_bytes, len, k_tile);
        KvRowsToF32Avx512<kD>(a.kv_dtype, vb + c * a.kv_row_bytes, a.kv_row_bytes, len, v_tile);
        kc = k_tile[0];
        vc = v_tile[0];
      }
      for (int64_t g = 0; g < n_group; ++g) {
        __m512 q[kD];
        for (int j = 0; j < kD; ++j) q[j] = _mm512_load_ps(qs[g] + 16 * j);
        __m512 part[16];
        for (int t = 0; t < 16; ++t) {
          const float* kt = kc + std::min(t, len - 1) * stride;
          __m512 s = _mm512_mul_ps(q[0], _mm512_loadu_ps(kt));
          for (int j = 1; j < kD; ++j) s = _mm512_fmadd_ps(q[j], _mm512_loadu_ps(kt + 16 * j), s);
          part[t] = s;
        }
        const __m512 s = _mm512_mask_mov_ps(no_max, valid, Reduce16(part));
        const float m_new = std::max(m[g], _mm512_reduce_max_ps(s));
        const __m512 mv = _mm512_set1_ps(m_new);
        const __m512 corr = Exp(_mm512_set1_ps(m[g] - m_new));  // ~0 on the first tile.
        const __m512 pv = _mm512_maskz_mov_ps(valid, Exp(_mm512_sub_ps(s, mv)));
        m[g] = m_new;
        _mm512_store_ps(lsum[g], _mm512_fmadd_ps(_mm512_load_ps(lsum[g]), corr, pv));
        _mm512_store_ps(p, pv);
        __m512 o[kD];
        for (int j = 0; j < kD; ++j) o[j] = _mm512_mul_ps(_mm512_load_ps(acc[g] + 16 * j), corr);
        for (int t = lo; t < len; ++t) {
          const __m512 w = _mm512_set1_ps(p[t]);
          const float* vt = vc + t * stride;
          for (int j = 0; j < kD; ++j) o[j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vt + 16 * j), o[j]);
        }
        for (int j = 0; j < kD; ++j) _mm512_store_ps(acc[g] + 16 * j, o[j]);
      }
    }
  }
  for (int64_t g = 0; g < n_group; ++g) {
    const float l = _mm512_reduce_add_ps(_mm512_load_ps(lsum[g]));
    float* og = a.out + g * kD * 16;
    __m512 f = _mm512_set1_ps(a.v_scale);
    if (a.normalize) {
      f = _mm512_set1_ps(a.v_scale * SoftmaxFactor(m[g], l, a.sinks != nullptr ? a.sinks + g : nullptr));
    } else {
      a.m[g] = m[g];
      a.l[g] = l;
    }
    for (int j = 0; j < kD; ++j) _mm512_storeu_ps(og + 16 * j, _mm512_mul_ps(_mm512_load_ps(acc[g] + 16 * j), f));
  }
}

}  // namespace

void AttendAvx512(const AttendArgs& args) {
  static constexpr AttendFn kTable[] = {
      nullptr,         &AttendImpl<1>,  &AttendImpl<2>,  &AttendImpl<3>,  &AttendImpl<4>,  &AttendImpl<5>,
      &AttendImpl<6>,  &AttendImpl<7>,  &AttendImpl<8>,  &AttendImpl<9>,  &AttendImpl<10>, &AttendImpl<11>,
      &AttendImpl<12>, &AttendImpl<13>, &AttendImpl<14>, &AttendImpl<15>, &AttendImpl<16>};
  static_assert(sizeof(kTable) / sizeof(kTable[0]) == kAttnMaxHeadDim / 16 + 1);
  kTable[args.d / 16](args);
}

}  // namespace cascade::kernels::cpu::internal
