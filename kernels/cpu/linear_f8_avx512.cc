// F8_E4M3_B128 weights on AVX-512: 32 E4M3 codes to f16 bits per instruction group, then
// f32 (the values of core/fp8.h times 2^-8, exact; fp8_avx512.h), FMA tiles of rows x tokens as the AVX2 float
// kernels (linear_avx2.cc), twice as wide, each 128-block's sums scaled once by its scale.
// A prefill (6 tokens or more) instead decodes its rows to f32 once (each value times its
// scale, one rounding) and runs the F32 tiles (linear_float_avx512.cc) over them, or, from
// 32 tokens on, decodes them into k-major panels and multiplies those as outer products
// (panels_avx512.h): the AVX2 prefill's values and order, so the same bits.
// Activations stay f32.
//
// Where denormal operands are fast (kernels/cpu_features.h: AMD), the GEMV skips f16 as the
// AVX2 kernel does (linear_f8_avx2.cc, which says why the bits are the f32 of the value x
// 2^-120): 64 codes decoded in place in their 32-bit lanes (E4M3x64Over2p120, nine integer
// operations, no `vcvtph2ps`) against activations scaled by 2^64 and reordered to match
// once per call. It sums in another order than the f16 path: the two agree within f32
// rounding, not to the bit; activations of 2^60 or more take the f16 path.
// Compiled with AVX-512 F/BW/VL/DQ; called only on such CPUs (linear_avx512.cc's table).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/fp8_avx512.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/panels_avx512.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels::cpu::internal {
namespace {

// From this many tokens on, a prefill decodes its rows into panels (panels_avx512.h);
// fewer decode a block of rows to f32 once and run the F32 dot-product tiles over it, which
// cost less to set up: `linear_bench --resident --tokens=8,...,64` on Zen 5, G multiply-adds
// a second, panels / rows: 8 tokens 32-36 / 39-40, 16: 42-53 / 49-53, 24: 63-66 / 66-71,
// 32: 72-76 / 67-69, 64: 88-89 / 68-71. A MoE's experts see few tokens each.
constexpr int64_t kMinPanelTokens = 32;
// The same for the bf16 panels (GemmArgs::xb, linear_f8_avx512bf16.cc), which
// set up as cheaply and multiply twice as fast: [768, 2048] (a MoE expert), G
// multiply-adds a second, bf16 panels / f32 rows and dot tiles, two runs: 6 tokens 59-60 /
// 62-63, 8: 73 / 58-59, 12: 96-98 / 70-72, 16: 104-109 / 60, 32: 145-156 / 83-84.
constexpr int64_t kMinBf16PanelTokens = 8;

// 64 codes as f32 values x 2^-120 (denormal for the subnormal codes), a vector per byte
// position of the 32-bit lanes: v[j]'s lane l is code 4 l + j. linear_f8_avx2.cc's
// E4M3x32Over2p120 at twice the width: a code in a 16-bit word's high byte, shifted right
// arithmetically by 4, is in place for the upper word's f32 bits and one shift of 16 from
// them for the lower, so one AND with 0x87f00000 finishes each.
inline void E4M3x64Over2p120(const uint8_t* codes, __m512 v[4]) {
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(0x87f00000u));
  const __m512i raw = _mm512_loadu_si512(codes);
  const __m512i odd = _mm512_srai_epi16(raw, 4);                         // Codes 4l+1, 4l+3.
  const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(raw, 8), 4);  // Codes 4l, 4l+2.
  v[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(even, 16), mask));
  v[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(odd, 16), mask));
  v[2] = _mm512_castsi512_ps(_mm512_and_si512(even, mask));
  v[3] = _mm512_castsi512_ps(_mm512_and_si512(odd, mask));
}

// How a GEMV decodes its codes: through f16 (values x 2^-8, activations as they are), or
// into f32 bits (values x 2^-120, against activations x 2^64 in E4M3x64Over2p120's order).
enum class Decode { kF16, kF32Bits };

// R rows x T tokens of output, full dot products over n_in (a multiple of 128), against
// activations `xs` [n_tokens, n_in] as Decode D takes them. Each 128-block's products are
// summed unscaled, then added once times the block's scale (x 2^8 or x 2^56 for the
// decode's factor): one FMA per block instead of a multiply per 16 weights. The f32-bits
// decode sums in two FMA chains a row and token (its tiles are small); the f16 decode in
// one, 16 weights at a time in order. `re` ends the kernel's rows, past which it prefetches
// nothing (TileToPrefetch).
template <Decode D, int R, int T>
inline void F8Tile(const GemmArgs& a, const float* xs, int64_t r0, int64_t t0, int64_t re) {
  constexpr int C = D == Decode::kF32Bits ? 2 : 1;  // Chains.
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* w[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) w[i] = a.w + (r0 + i) * a.w_row_bytes;
  const float* x[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) x[j] = xs + (t0 + j) * a.n_in;
  const uint8_t* ahead = TileToPrefetch(w[0], R * a.w_row_bytes, a.w + re * a.w_row_bytes);
  for (int64_t kb = 0; kb < a.n_in; kb += 128) {
    const int64_t block = F8BlockOffset(kb);
    __m512 part[R][T][C];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j)
#pragma GCC unroll 2
        for (int c = 0; c < C; ++c) part[i][j][c] = _mm512_setzero_ps();
    for (int k = 0; k < 128; k += 64) {
      // 64 codes and, spread over them, half a 4-byte scale: 66 bytes a row.
      if (ahead != nullptr) PrefetchNextTile(ahead, (block + k) * R, R * 66);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        __m512 v[4];
        if constexpr (D == Decode::kF32Bits) {
          E4M3x64Over2p120(w[i] + block + 4 + k, v);
        } else {
          E4M3x32Over256(w[i] + block + 4 + k, v[0], v[1]);
          E4M3x32Over256(w[i] + block + 4 + k + 32, v[2], v[3]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            part[i][j][q % C] = _mm512_fmadd_ps(v[q], _mm512_loadu_ps(x[j] + kb + k + 16 * q), part[i][j][q % C]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float d;
      std::memcpy(&d, w[i] + block, 4);
      const __m512 scale = _mm512_set1_ps(d * (D == Decode::kF32Bits ? kF8BitsBlockScale : 256.0f));
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m512 sum = C == 2 ? _mm512_add_ps(part[i][j][0], part[i][j][C - 1]) : part[i][j][0];
        acc[i][j] = _mm512_fmadd_ps(sum, scale, acc[i][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.ld_out + r0 + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <Decode D, int R, int T>
void F8Tokens(const GemmArgs& a, const float* xs, int64_t rb, int64_t re, int64_t t0) {
  PrefetchRangeStart(a.w + rb * a.w_row_bytes, R * a.w_row_bytes, a.w + re * a.w_row_bytes);
  int64_t r = rb;
  for (; r + R <= re; r += R) F8Tile<D, R, T>(a, xs, r, t0, re);
  for (; r < re; ++r) F8Tile<D, 1, T>(a, xs, r, t0, re);
}

// 1..5 tokens. f32 bits: tokens two at a time over pairs of rows, a last one over four rows
// (more spilled its registers: 2 chains and 4 decoded vectors a row). f16: one token over 8
// rows, more 3 at a time over 4 rows.
template <Decode D>
void F8Gemv(const GemmArgs& a, const float* xs, int64_t rb, int64_t re) {
  int64_t t = 0;
  if constexpr (D == Decode::kF32Bits) {
    for (; t + 2 <= a.n_tokens; t += 2) F8Tokens<D, 2, 2>(a, xs, rb, re, t);
    if (t < a.n_tokens) F8Tokens<D, 4, 1>(a, xs, rb, re, t);
  } else {
    for (; a.n_tokens > 1 && t + 3 <= a.n_tokens; t += 3) F8Tokens<D, 4, 3>(a, xs, rb, re, t);
    if (a.n_tokens - t == 2) F8Tokens<D, 4, 2>(a, xs, rb, re, t);
    if (a.n_tokens - t == 1) F8Tokens<D, 8, 1>(a, xs, rb, re, t);
  }
}

// 64 activations reordered as E4M3x64Over2p120 orders its codes, out[16 q + l] = x[4 l + q]
// (a transpose of 16 x 4), each times `factor`.
inline void Reorder64(const float* x, __m512 factor, float* out) {
  const __m512 a0 = _mm512_loadu_ps(x), a1 = _mm512_loadu_ps(x + 16);
  const __m512 a2 = _mm512_loadu_ps(x + 32), a3 = _mm512_loadu_ps(x + 48);
  for (int q = 0; q < 4; ++q) {
    // Lanes 0..7: elements q, q + 4, ..., q + 28 of the pair (a0, a1), or of (a2, a3).
    const __m512i idx =
        _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(q));
    const __m512 lo = _mm512_permutex2var_ps(a0, idx, a1), hi = _mm512_permutex2var_ps(a2, idx, a3);
    _mm512_storeu_ps(out + 16 * q, _mm512_mul_ps(_mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)), factor));
  }
}

// a.x x 2^64 into `scaled`, exact, in E4M3x64Over2p120's order per 64; false (nothing to
// use) when some |x| >= 2^60 or is NaN, whose products could overflow where the f16
// path's do not.
bool ScaleActivations(const GemmArgs& a, std::vector<float>& scaled) {
  const int64_t n = a.n_tokens * a.n_in;
  scaled.resize(n);
  const __m512 factor = _mm512_set1_ps(kF8BitsXScale), limit = _mm512_set1_ps(0x1p60f);
  __mmask16 out_of_range = 0;
  for (int64_t i = 0; i < n; i += 64) {  // n_in is a multiple of 128.
    for (int64_t j = i; j < i + 64; j += 16) {
      // Not |v| < 2^60: too large, or NaN (unordered).
      out_of_range |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(a.x + j)), limit, _CMP_NLT_UQ);
    }
    Reorder64(a.x + i, factor, scaled.data() + i);
  }
  return out_of_range == 0;
}

// Rows [r0, r1) decoded to f32 (E4M3 value x its block's scale, one rounding) into `out`
// [r1 - r0, n_in].
void DecodeRows(const GemmArgs& a, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r, out += a.n_in) {
    const uint8_t* w = a.w + r * a.w_row_bytes;
    for (int64_t kb = 0; kb < a.n_in; kb += 128) {
      const uint8_t* block = w + F8BlockOffset(kb);
      float d;
      std::memcpy(&d, block, 4);
      const __m512 scale = _mm512_set1_ps(d * 256.0f);
      for (int k = 0; k < 128; k += 32) {
        __m512 lo, hi;
        E4M3x32Over256(block + 4 + k, lo, hi);
        _mm512_storeu_ps(out + kb + k, _mm512_mul_ps(lo, scale));
        _mm512_storeu_ps(out + kb + k + 16, _mm512_mul_ps(hi, scale));
      }
    }
  }
}

// Rows r0 .. r0 + rows - 1 (rows <= 32) over k in [k0, k0 + kc) as a k-major f32 panel
// [kc][32] (panels_avx512.h): each E4M3 value times its block's scale, one rounding (the
// values the AVX2 prefill decodes), 16 rows x 16 codes transposed at a time.
void PackF8Panel(const GemmArgs& a, int64_t r0, int rows, int64_t k0, int64_t kc, float* panel) {
  for (int h = 0; h < 2; ++h) {
    const int n = std::clamp(rows - 16 * h, 0, 16);
    for (int64_t k = k0; k < k0 + kc; k += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = _mm512_setzero_ps();
        if (i >= n) continue;
        const uint8_t* block = a.w + (r0 + 16 * h + i) * a.w_row_bytes + F8BlockOffset(k);
        float d;
        std::memcpy(&d, block, 4);
        r[i] = _mm512_mul_ps(E4M3x16Over256(block + 4 + (k & 127)), _mm512_set1_ps(d * 256.0f));
      }
      Transpose16x16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_ps(panel + (k - k0 + j) * kPanel512Rows + 16 * h, r[j]);
    }
  }
}

}  // namespace

bool F8Bf16PrefillRuns(int64_t n_tokens) {
  return ActiveCpuIsa() == CpuIsa::kAvx512 && GetCpuFeatures().avx512bf16 && n_tokens >= kMinBf16PanelTokens;
}

void GemmF8Avx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens < kMinDecodedTokens) {
    thread_local std::vector<float> scaled;
    if (DenormalOperandsFast() && ScaleActivations(a, scaled)) {
      F8Gemv<Decode::kF32Bits>(a, scaled.data(), rb, re);
    } else {
      F8Gemv<Decode::kF16>(a, a.x, rb, re);
    }
    return;
  }
  if (a.xb != nullptr) {  // Made only where F8Bf16PrefillRuns.
    GemmF8Bf16Avx512(a, rb, re);
    return;
  }
  if (a.n_tokens < kMinPanelTokens) {
    GemmDecodedRows(
        a, rb, re, [&](int64_t r0, int64_t r1, float* out) { DecodeRows(a, r0, r1, out); }, GemmF32Avx512);
    return;
  }
  GemmPanels512(a, rb, re, [&](const PanelSpan& s, const PanelSpan& next, float* panel) {
    PrefetchF8Rows(a.w, a.w_row_bytes, next.r0, next.rows, next.k0, next.kc);
    PackF8Panel(a, s.r0, s.rows, s.k0, s.kc, panel);
  });
}

}  // namespace cascade::kernels::cpu::internal
