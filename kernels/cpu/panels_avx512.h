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
#include <type_traits>
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

// Calls f(std::integral_constant<int, T>{}) with T = n, for 1 <= n <= kPanel512Tokens: a
// tile template instantiated for each token count a prefill's last tile may have.
template <typename F>
void WithPanelTokens(int64_t n, const F& f) {
  switch (n) {
    case 12: f(std::integral_constant<int, 12>{}); break;
    case 11: f(std::integral_constant<int, 11>{}); break;
    case 10: f(std::integral_constant<int, 10>{}); break;
    case 9: f(std::integral_constant<int, 9>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 1: f(std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

// Rows of a weight per block of panels: the most whose panels over one k-chunk fit
// kPanel512BlockBytes, at `bytes_per_k` a row and input (4 for f32 panels), a multiple of
// kPanel512Rows.
inline int64_t Panel512BlockRows(const GemmArgs& a, int64_t bytes_per_k) {
  const int64_t chunk = std::min(a.n_in, kPanel512Chunk);
  return std::max<int64_t>(1, kPanel512BlockBytes / (chunk * bytes_per_k * kPanel512Rows)) * kPanel512Rows;
}

// A panel's place in the weight: rows [r0, r0 + rows) (rows <= 32) over k in [k0, k0 + kc).
struct PanelSpan {
  int64_t r0 = 0;
  int rows = 0;  // 0: no panel.
  int64_t k0 = 0, kc = 0;
};

// The blocking every panel prefill shares: rows [rb, re) in blocks of Panel512BlockRows(a,
// bytes_per_k), each over k-chunks of kPanel512Chunk. For a block and chunk, pack(p, span,
// next) packs panel p (`next`: the panel packed after it, in this chunk or the next, or
// none, for its rows to be prefetched), then tile(T, p, r0,
// rows, k0, kc, t0) multiplies it by tokens [t0, t0 + T) (T an std::integral_constant),
// every panel for kPanel512Tokens tokens at a time and a last tile of fewer.
template <typename Pack, typename Tile>
void PanelBlocks512(const GemmArgs& a, int64_t rb, int64_t re, int64_t bytes_per_k, const Pack& pack,
                    const Tile& tile) {
  const int64_t chunk = std::min(a.n_in, kPanel512Chunk), block_rows = Panel512BlockRows(a, bytes_per_k);
  for (int64_t b0 = rb; b0 < re; b0 += block_rows) {
    const int64_t b1 = std::min(re, b0 + block_rows);
    const int64_t n_panels = (b1 - b0 + kPanel512Rows - 1) / kPanel512Rows;
    // Panel p of the block starting at row `b` (rows to `e`) over the chunk at k0.
    auto span = [&](int64_t b, int64_t e, int64_t p, int64_t k0) {
      const int64_t r0 = b + p * kPanel512Rows;
      if (r0 >= e || k0 >= a.n_in) return PanelSpan{};
      return PanelSpan{r0, static_cast<int>(std::min<int64_t>(kPanel512Rows, e - r0)), k0,
                       std::min(chunk, a.n_in - k0)};
    };
    for (int64_t k0 = 0; k0 < a.n_in; k0 += chunk) {
      for (int64_t p = 0; p < n_panels; ++p) {
        PanelSpan next = span(b0, b1, p + 1, k0);
        if (next.rows == 0) next = span(b0, b1, 0, k0 + chunk);
        if (next.rows == 0) next = span(b1, std::min(re, b1 + block_rows), 0, 0);
        pack(p, span(b0, b1, p, k0), next);
      }
      auto tiles = [&](auto T, int64_t t0) {
        for (int64_t p = 0; p < n_panels; ++p) {
          const PanelSpan s = span(b0, b1, p, k0);
          tile(T, p, s.r0, s.rows, s.k0, s.kc, t0);
        }
      };
      int64_t t = 0;
      for (; t + kPanel512Tokens <= a.n_tokens; t += kPanel512Tokens) {
        tiles(std::integral_constant<int, kPanel512Tokens>{}, t);
      }
      if (t < a.n_tokens) WithPanelTokens(a.n_tokens - t, [&](auto T) { tiles(T, t); });
    }
  }
}

// Rows [rb, re) for every token. pack(span, next, panel) writes rows span.r0 .. span.r0 +
// span.rows - 1 of the weight over k in [span.k0, span.k0 + span.kc) as f32 into panel
// [kc][32], zeros in the lanes past `rows` (`next`: as PanelBlocks512's); kc is a multiple
// of 16. n_in must be a multiple of 16.
template <typename Pack>
void GemmPanels512(const GemmArgs& a, int64_t rb, int64_t re, const Pack& pack) {
  thread_local std::vector<float> panels;
  panels.resize(static_cast<size_t>(Panel512BlockRows(a, 4) * std::min(a.n_in, kPanel512Chunk)));
  PanelBlocks512(
      a, rb, re, 4,
      [&](int64_t p, const PanelSpan& s, const PanelSpan& next) {
        pack(s, next, panels.data() + p * s.kc * kPanel512Rows);
      },
      [&](auto T, int64_t p, int64_t r0, int rows, int64_t k0, int64_t kc, int64_t t0) {
        Panel512Tile<decltype(T)::value>(a, panels.data() + p * kc * kPanel512Rows, kc, k0, r0, rows, t0);
      });
}

}  // namespace cascade::kernels::cpu::internal
