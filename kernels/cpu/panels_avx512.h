// A prefill's matrix product as outer products over k-major f32 panels, on AVX-512: the
// AVX2 kernel's design (linear_avx2.cc, GemmPanels) at twice the width and with a k-chunk.
// A panel holds 32 rows of the weight for a chunk of k, k-major ([kc][32]: two vectors a
// k); a tile multiplies it by 12 tokens, 24 FMA chains with two panel loads and 12
// broadcasts a k, where the dot-product tiles (linear_float_avx512.cc) load an operand for
// every 2.4 FMAs and reduce each output across lanes at the end. Each output is one
// accumulator summed over k in order (a k-chunk goes on from the partial sum the previous
// one stored), so the AVX2 panels, which sum in the same order, give the same bits.
// Include only from files compiled with AVX-512 F (and AVX2); their callers run only on
// such CPUs.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/linear_kernels.h"

namespace cascade::kernels::cpu::internal {

inline constexpr int kPanel512Rows = 32;
inline constexpr int kPanel512Tokens = 12;
// k per chunk, and the bytes of f32 panels a block of rows packs per chunk: a block stays
// in L2 while every token runs over it, whatever n_in is.
inline constexpr int64_t kPanel512Chunk = 512;
inline constexpr int64_t kPanel512BlockBytes = 256 * 1024;

// r[i] (16 floats of row i) transposed: afterwards r[j] holds element j of every row.
inline void Transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 2]);
    const __m512d c = _mm512_castps_pd(t[i + 1]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // Now r[4 g + e] holds, in its 128-bit lane l, element 4 l + e of rows 4 g .. 4 g + 3; the
  // 128-bit shuffles gather lane l of the four groups into element 4 l + e's vector.
  for (int e = 0; e < 4; ++e) {
    const __m512 a = _mm512_shuffle_f32x4(r[e], r[4 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 b = _mm512_shuffle_f32x4(r[e], r[4 + e], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 c = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 d = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(3, 1, 3, 1));
    t[e] = _mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(2, 0, 2, 0));       // Element e.
    t[8 + e] = _mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(3, 1, 3, 1));   // Element 8 + e.
    t[4 + e] = _mm512_shuffle_f32x4(b, d, _MM_SHUFFLE(2, 0, 2, 0));   // Element 4 + e.
    t[12 + e] = _mm512_shuffle_f32x4(b, d, _MM_SHUFFLE(3, 1, 3, 1));  // Element 12 + e.
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// The lanes of a panel's rows 16 h .. 16 h + 15 that hold rows of the matrix (`rows` of the
// panel's 32 do).
inline __mmask16 PanelMask(int rows, int h) {
  const int n = std::clamp(rows - 16 * h, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1);
}

// Tokens [t0, t0 + T) x the panel's rows r0 .. r0 + rows - 1 over k in [k0, k0 + kc): each
// output goes on from the partial sum in `out` (from 0 when k0 == 0) and is stored back.
template <int T>
void Panel512Tile(const GemmArgs& a, const float* panel, int64_t kc, int64_t k0, int64_t r0, int rows, int64_t t0) {
  const __mmask16 m0 = PanelMask(rows, 0), m1 = PanelMask(rows, 1);
  __m512 acc[T][2];
#pragma GCC unroll 12
  for (int j = 0; j < T; ++j) {
    const float* o = a.out + (t0 + j) * a.ld_out + r0;
    acc[j][0] = k0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, o);
    acc[j][1] = k0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, o + 16);
  }
  const float* x = a.x + t0 * a.n_in + k0;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_loadu_ps(panel + k * kPanel512Rows);
    const __m512 w1 = _mm512_loadu_ps(panel + k * kPanel512Rows + 16);
#pragma GCC unroll 12
    for (int j = 0; j < T; ++j) {
      const __m512 xb = _mm512_set1_ps(x[j * a.n_in + k]);
      acc[j][0] = _mm512_fmadd_ps(w0, xb, acc[j][0]);
      acc[j][1] = _mm512_fmadd_ps(w1, xb, acc[j][1]);
    }
  }
#pragma GCC unroll 12
  for (int j = 0; j < T; ++j) {
    float* o = a.out + (t0 + j) * a.ld_out + r0;
    _mm512_mask_storeu_ps(o, m0, acc[j][0]);
    _mm512_mask_storeu_ps(o + 16, m1, acc[j][1]);
  }
}

template <int T>
void Panel512Tiles(const GemmArgs& a, const float* panels, int64_t n_panels, int64_t kc, int64_t k0, int64_t b0,
                   int64_t b1, int64_t t0) {
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t r0 = b0 + p * kPanel512Rows;
    const int rows = static_cast<int>(std::min<int64_t>(kPanel512Rows, b1 - r0));
    Panel512Tile<T>(a, panels + p * kc * kPanel512Rows, kc, k0, r0, rows, t0);
  }
}

// Rows [rb, re) for every token. pack(r0, rows, k0, kc, panel) writes rows r0 .. r0 + rows - 1
// (rows <= 32) of the weight over k in [k0, k0 + kc) as f32 into panel [kc][32], zeros in
// the lanes past `rows`; kc is a multiple of 16. n_in must be a multiple of 16.
template <typename Pack>
void GemmPanels512(const GemmArgs& a, int64_t rb, int64_t re, const Pack& pack) {
  const int64_t chunk = std::min(a.n_in, kPanel512Chunk);
  const int64_t block_rows = std::max<int64_t>(1, kPanel512BlockBytes / (chunk * 4 * kPanel512Rows)) * kPanel512Rows;
  thread_local std::vector<float> panels;
  panels.resize(static_cast<size_t>(block_rows * chunk));
  for (int64_t b0 = rb; b0 < re; b0 += block_rows) {
    const int64_t b1 = std::min(re, b0 + block_rows);
    const int64_t n_panels = (b1 - b0 + kPanel512Rows - 1) / kPanel512Rows;
    for (int64_t k0 = 0; k0 < a.n_in; k0 += chunk) {
      const int64_t kc = std::min(chunk, a.n_in - k0);
      for (int64_t p = 0; p < n_panels; ++p) {
        const int64_t r0 = b0 + p * kPanel512Rows;
        pack(r0, static_cast<int>(std::min<int64_t>(kPanel512Rows, b1 - r0)), k0, kc,
             panels.data() + p * kc * kPanel512Rows);
      }
      int64_t t = 0;
      for (; t + kPanel512Tokens <= a.n_tokens; t += kPanel512Tokens) {
        Panel512Tiles<kPanel512Tokens>(a, panels.data(), n_panels, kc, k0, b0, b1, t);
      }
      const float* p = panels.data();
      switch (a.n_tokens - t) {
        case 11: Panel512Tiles<11>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 10: Panel512Tiles<10>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 9: Panel512Tiles<9>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 8: Panel512Tiles<8>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 7: Panel512Tiles<7>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 6: Panel512Tiles<6>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 5: Panel512Tiles<5>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 4: Panel512Tiles<4>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 3: Panel512Tiles<3>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 2: Panel512Tiles<2>(a, p, n_panels, kc, k0, b0, b1, t); break;
        case 1: Panel512Tiles<1>(a, p, n_panels, kc, k0, b0, b1, t); break;
        default: break;
      }
    }
  }
}

}  // namespace cascade::kernels::cpu::internal
