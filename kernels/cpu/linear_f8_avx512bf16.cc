// A prefill of F8_E4M3_B128 weights with its activations rounded to bf16, on AVX-512 with
// BF16 (`GemmArgs::xb`: `scheduler.cpu_prefill_activations: bf16`, opt-in and
// lossy). `vdpbf16ps` multiplies 32 pairs an instruction where an FMA multiplies 16, so the
// outer-product panels of panels_avx512.h, which hold one core at 76-84% of its f32 FMA
// peak, get twice the peak.
//
// The weights stay exact: every E4M3 value is a bf16 (3 mantissa bits; subnormals too), so
// a panel holds the codes' values unscaled and each 128-block's sums are multiplied by the
// block's scale once, as the GEMV does (linear_f8_avx512.cc). The products of two bf16s are
// exact in f32; the loss is the activations' rounding to nearest bf16 (8 significant bits,
// a relative error of 2^-9 at most each) and `vdpbf16ps` treating bf16 denormals (under
// 2^-126) as zero. That is the activation precision of GPU FP8 "W8A16" kernels in bf16
// and of llama.cpp's BF16 CPU path; its Q8_0 path rounds activations to 8 bits per block.
//
// Layout: a panel holds 32 rows over a chunk of k as pairs: 32-bit lane l of vector
// (p, h) is (w[16 h + l][2 p], w[16 h + l][2 p + 1]), so one `vdpbf16ps` with a token's
// pair (x[2 p], x[2 p + 1]) broadcast adds both products to 16 rows' sums.
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI + BF16; called only on CPUs with AVX512_BF16
// (GemmF8Avx512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/fp8_avx512.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/panels_avx512.h"

namespace cascade::kernels::cpu::internal {
namespace {

// A panel's rows, two vectors of 16; its blocks, chunks and tiles (12 tokens: 24
// accumulators) are panels_avx512.h's (PanelBlocks512).
constexpr int kRows = kPanel512Rows;

// Rows r0 .. r0 + rows - 1 (rows <= 32) over k in [k0, k0 + kc) (kc a multiple of 128) into
// `panel` [kc / 2][32] pairs and `scales` [kc / 128][32] (the block scales times 2^8, for
// E4M3x32Over256's values; 0 past `rows`).
void PackPanel(const GemmArgs& a, int64_t r0, int rows, int64_t k0, int64_t kc, uint32_t* panel, float* scales) {
  for (int h = 0; h < 2; ++h) {
    const int n = std::clamp(rows - 16 * h, 0, 16);
    for (int64_t k = k0; k < k0 + kc; k += 32) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = _mm512_setzero_ps();
        if (i >= n) continue;
        const uint8_t* block = a.w + (r0 + 16 * h + i) * a.w_row_bytes + F8BlockOffset(k);
        __m512 lo, hi;
        E4M3x32Over256(block + 4 + (k & 127), lo, hi);
        const __m512bh pairs = _mm512_cvtne2ps_pbh(hi, lo);  // Exact: 4 significant bits.
        r[i] = reinterpret_cast<const __m512&>(pairs);
      }
      Transpose16x16(r);  // Now r[j] holds pair j of the 32 codes of every row.
      for (int j = 0; j < 16; ++j) {
        _mm512_storeu_ps(reinterpret_cast<float*>(panel + ((k - k0) / 2 + j) * kRows + 16 * h), r[j]);
      }
    }
    for (int64_t kb = k0; kb < k0 + kc; kb += 128) {
      for (int i = 0; i < 16; ++i) {
        float d = 0.0f;
        if (i < n) std::memcpy(&d, a.w + (r0 + 16 * h + i) * a.w_row_bytes + F8BlockOffset(kb), 4);
        scales[((kb - k0) >> 7) * kRows + 16 * h + i] = d * 256.0f;
      }
    }
  }
}

// Tokens [t0, t0 + T) x the panel's rows r0 .. r0 + rows - 1 over k in [k0, k0 + kc): each
// 128-block's sums, times the rows' scales, are added to `out` (stored at k == 0).
template <int T>
void Tile(const GemmArgs& a, const uint16_t* xb, const uint32_t* panel, const float* scales, int64_t kc, int64_t k0,
          int64_t r0, int rows, int64_t t0) {
  const __mmask16 m0 = PanelMask(rows, 0), m1 = PanelMask(rows, 1);
  const uint32_t* x[T];
#pragma GCC unroll 12
  for (int j = 0; j < T; ++j) x[j] = reinterpret_cast<const uint32_t*>(xb + (t0 + j) * a.n_in + k0);
  for (int64_t kb = 0; kb < kc; kb += 128) {
    __m512 acc[T][2];
#pragma GCC unroll 12
    for (int j = 0; j < T; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    for (int64_t p = kb / 2; p < (kb + 128) / 2; ++p) {
      const __m512i w0 = _mm512_loadu_si512(panel + p * kRows);
      const __m512i w1 = _mm512_loadu_si512(panel + p * kRows + 16);
#pragma GCC unroll 12
      for (int j = 0; j < T; ++j) {
        const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[j][p]));
        acc[j][0] =
            _mm512_dpbf16_ps(acc[j][0], reinterpret_cast<const __m512bh&>(w0), reinterpret_cast<const __m512bh&>(xp));
        acc[j][1] =
            _mm512_dpbf16_ps(acc[j][1], reinterpret_cast<const __m512bh&>(w1), reinterpret_cast<const __m512bh&>(xp));
      }
    }
    const __m512 s0 = _mm512_loadu_ps(scales + (kb >> 7) * kRows);
    const __m512 s1 = _mm512_loadu_ps(scales + (kb >> 7) * kRows + 16);
    const bool first = k0 + kb == 0;
#pragma GCC unroll 12
    for (int j = 0; j < T; ++j) {
      float* o = a.out + (t0 + j) * a.ld_out + r0;
      const __m512 o0 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, o);
      const __m512 o1 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, o + 16);
      _mm512_mask_storeu_ps(o, m0, _mm512_fmadd_ps(acc[j][0], s0, o0));
      _mm512_mask_storeu_ps(o + 16, m1, _mm512_fmadd_ps(acc[j][1], s1, o1));
    }
  }
}

}  // namespace

void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(v));
  }
}

void GemmF8Bf16Avx512(const GemmArgs& a, int64_t rb, int64_t re) {
  // Panel p of a block over a chunk of kc: kc / 2 pairs of 32 rows, kc / 128 scales of 32.
  thread_local std::vector<uint32_t> panels;
  thread_local std::vector<float> scales;
  const int64_t block_values = Panel512BlockRows(a, 2) * std::min(a.n_in, kPanel512Chunk);
  panels.resize(static_cast<size_t>(block_values / 2));
  scales.resize(static_cast<size_t>(block_values / 128));
  PanelBlocks512(
      a, rb, re, 2,
      [&](int64_t p, const PanelSpan& s, const PanelSpan& next) {
        PrefetchF8Rows(a.w, a.w_row_bytes, next.r0, next.rows, next.k0, next.kc);
        PackPanel(a, s.r0, s.rows, s.k0, s.kc, panels.data() + p * (s.kc / 2) * kRows,
                  scales.data() + p * (s.kc / 128) * kRows);
      },
      [&](auto T, int64_t p, int64_t r0, int rows, int64_t k0, int64_t kc, int64_t t0) {
        Tile<decltype(T)::value>(a, a.xb, panels.data() + p * (kc / 2) * kRows, scales.data() + p * (kc / 128) * kRows,
                                 kc, k0, r0, rows, t0);
      });
}

}  // namespace cascade::kernels::cpu::internal
