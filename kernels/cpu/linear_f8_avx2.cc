// F8_E4M3_B128 weights on AVX2 + F16C: the AVX-512 kernel's design (linear_f8_avx512.cc)
// at 256 bits. 16 E4M3 codes become f16 bits in three operations: an E4M3 code's bits moved
// into an f16's (sign to bit 15, exponent and mantissa to bits 13..7) are the f16 of its
// value x 2^-8, subnormals included (both formats' subnormals are linear in the code), and
// a sign-extended byte shifted left by 7 has its sign at bit 15 and a copy at bit 14, which
// one AND clears. `vcvtph2ps` makes the f32s; each 128-block's products are summed
// unscaled and added once times its scale x 2^8. (The float tiles' per-8-codes bit
// arithmetic on f32, with a scale multiply each time, was 2x the operations: Llama-3.2-1B's
// FP8 matrices streamed ~5 GB/s on one core of an AMD EPYC.) A prefill decodes a block of
// rows to f32 once and runs the F32 tiles over it. Activations stay f32. The E4M3FN NaN
// codes (0x7f, 0xff) read as +-480: checkpoints hold none (the quantizers saturate).
//
// Where denormal operands are fast (kernels/cpu_features.h: AMD), the GEMV skips f16: an
// E4M3 code's bits moved into an f32's (sign to bit 31, the rest to bits 26..20) are the
// f32 of its value x 2^-120 (again subnormals included, as f32 denormals), against
// activations scaled by 2^64 once per call, each block's sums times its scale x 2^56. The
// products are the f16 path's times 2^-48 exactly. Its codes are decoded 32 at a time in
// place in their 32-bit lanes (E4M3x32Over2p120: nine integer operations, no shuffle), so
// the activations are reordered to match when they are scaled, and each output is summed
// in another order than the f16 path's: the two agree within f32 rounding, not to the bit.
// The f16 path runs instead for activations of 2^60 or more in magnitude (x 2^64 could
// overflow). The f32 path exists because the GEMV's conversion, not memory, bounds it on
// Zen 3, whose `vcvtph2ps` is two uops: a weight block in L2 streamed at ~12 GB/s a core
// through f16, 16.6 with codes sign-extended to 32 bits 8 at a time (three operations per
// 8, two of them on the shift / shuffle pipes), and with 32 in place and two rows a tile a
// [4096, 4096] matrix in L3 takes 902 us a token on one thread against 1043
// (`linear_bench --resident`, ~18 GB/s: still under one core's read bandwidth, ~20).
// Compiled with -mavx2 -mfma -mf16c; called only on such CPUs (linear_avx2.cc's table).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels::cpu::internal {
namespace {

// 16 codes as f32 values x 2^-8: lo the first 8, hi the next.
inline void E4M3x16Over256(const uint8_t* codes, __m256& lo, __m256& hi) {
  const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(c, 7), _mm256_set1_epi16(static_cast<int16_t>(0xbf80)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// 32 codes as f32 values x 2^-120 (denormal for the subnormal codes), a vector per byte
// position of the 32-bit lanes: v[j]'s lane l is code 4 l + j. An E4M3 code moved into
// an f32's bits (sign to bit 31, exponent and mantissa to bits 26..20) is that f32; a code
// in a 16-bit word's high byte, shifted right arithmetically by 4, has its sign at bit
// 15, copies at bits 14..12 and the rest at bits 10..4, in place for the upper word and
// one shift of 16 from it for the lower, so one AND with 0x87f00000 finishes each. Nine
// integer operations for 32 codes, five of them shifts, and no widening shuffle (the
// per-8 sign extension took twelve, eight of them shifts or shuffles, which Zen 3 runs on
// two of its four vector pipes).
inline void E4M3x32Over2p120(const uint8_t* codes, __m256 v[4]) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87f00000u));
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  const __m256i odd = _mm256_srai_epi16(raw, 4);                         // Codes 4l+1, 4l+3.
  const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(raw, 8), 4);  // Codes 4l, 4l+2.
  v[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(even, 16), mask));
  v[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(odd, 16), mask));
  v[2] = _mm256_castsi256_ps(_mm256_and_si256(even, mask));
  v[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, mask));
}

// How a GEMV decodes its codes: through f16, or into f32 bits against activations x 2^64.
enum class Decode { kF16, kF32Bits };

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows x T tokens of output, full dot products over n_in (a multiple of 128), against
// activations `xs` [n_tokens, n_in]: a.x, or a.x x 2^64 for Decode::kF32Bits.
template <Decode D, int R, int T>
inline void F8Tile(const GemmArgs& a, const float* xs, int64_t r0, int64_t t0) {
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  const uint8_t* w[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) w[i] = a.w + (r0 + i) * a.w_row_bytes;
  const float* x[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) x[j] = xs + (t0 + j) * a.n_in;
  for (int64_t kb = 0; kb < a.n_in; kb += 128) {
    const int64_t block = F8BlockOffset(kb);
    // Two FMA chains a row and token (the even and the odd vectors of 8).
    __m256 part[R][T][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) part[i][j][0] = part[i][j][1] = _mm256_setzero_ps();
    for (int k = 0; k < 128; k += 32) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        if (k % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(w[i] + block + k + kPrefetchBytes), _MM_HINT_T1);
        __m256 v[4];
        if constexpr (D == Decode::kF32Bits) {
          E4M3x32Over2p120(w[i] + block + 4 + k, v);
        } else {
          E4M3x16Over256(w[i] + block + 4 + k, v[0], v[1]);
          E4M3x16Over256(w[i] + block + 4 + k + 16, v[2], v[3]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            part[i][j][q & 1] = _mm256_fmadd_ps(v[q], _mm256_loadu_ps(x[j] + kb + k + 8 * q), part[i][j][q & 1]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float d;
      std::memcpy(&d, w[i] + block, 4);
      const __m256 scale = _mm256_set1_ps(d * (D == Decode::kF32Bits ? kF8BitsBlockScale : 256.0f));
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j)
        acc[i][j] = _mm256_fmadd_ps(_mm256_add_ps(part[i][j][0], part[i][j][1]), scale, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.ld_out + r0 + i] = HorizontalSum(acc[i][j]);
}

template <Decode D, int R, int T>
void F8Tokens(const GemmArgs& a, const float* xs, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  for (; r + R <= re; r += R) F8Tile<D, R, T>(a, xs, r, t0);
  for (; r < re; ++r) F8Tile<D, 1, T>(a, xs, r, t0);
}

// Two rows a tile at one token: at four the tile's registers spilled (the new decode in
// an L1-resident microbenchmark on Zen 3: 15 GB/s at four rows, 21 at two, 20 at three).
template <Decode D>
void F8Gemv(const GemmArgs& a, const float* xs, int64_t rb, int64_t re) {
  int64_t t = 0;
  for (; t + 2 <= a.n_tokens; t += 2) F8Tokens<D, 2, 2>(a, xs, rb, re, t);
  if (t < a.n_tokens) F8Tokens<D, 2, 1>(a, xs, rb, re, t);
}

// 32 activations reordered as E4M3x32Over2p120 orders its codes: out[8 q + l] = x[4 l + q]
// (a transpose of 8 x 4), each times `factor`.
inline void Reorder32(const float* x, __m256 factor, float* out) {
  const __m256 a0 = _mm256_loadu_ps(x), a1 = _mm256_loadu_ps(x + 8);
  const __m256 a2 = _mm256_loadu_ps(x + 16), a3 = _mm256_loadu_ps(x + 24);
  // Lane halves l and l + 4 side by side: b0 = x[4 l + q] for l in {0, 4}, b1 {1, 5}, ...
  const __m256 b0 = _mm256_permute2f128_ps(a0, a2, 0x20), b1 = _mm256_permute2f128_ps(a0, a2, 0x31);
  const __m256 b2 = _mm256_permute2f128_ps(a1, a3, 0x20), b3 = _mm256_permute2f128_ps(a1, a3, 0x31);
  const __m256 t0 = _mm256_unpacklo_ps(b0, b1), t1 = _mm256_unpackhi_ps(b0, b1);
  const __m256 t2 = _mm256_unpacklo_ps(b2, b3), t3 = _mm256_unpackhi_ps(b2, b3);
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0x44), factor));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0xee), factor));
  _mm256_storeu_ps(out + 16, _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0x44), factor));
  _mm256_storeu_ps(out + 24, _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0xee), factor));
}

// a.x x 2^64 into `scaled`, exact, in E4M3x32Over2p120's order per 32; false (nothing to
// use) when some |x| >= 2^60 or is NaN, whose products could overflow where the f16
// path's do not.
bool ScaleActivations(const GemmArgs& a, std::vector<float>& scaled) {
  const int64_t n = a.n_tokens * a.n_in;
  scaled.resize(n);
  const __m256 factor = _mm256_set1_ps(kF8BitsXScale), limit = _mm256_set1_ps(0x1p60f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 out_of_range = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 32) {  // n_in is a multiple of 128.
    for (int64_t j = i; j < i + 32; j += 8) {
      const __m256 v = _mm256_loadu_ps(a.x + j);
      // Not |v| < 2^60: too large, or NaN (unordered).
      out_of_range = _mm256_or_ps(out_of_range, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLT_UQ));
    }
    Reorder32(a.x + i, factor, scaled.data() + i);
  }
  return _mm256_movemask_ps(out_of_range) == 0;
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
      const __m256 scale = _mm256_set1_ps(d * 256.0f);
      for (int k = 0; k < 128; k += 16) {
        __m256 lo, hi;
        E4M3x16Over256(block + 4 + k, lo, hi);
        _mm256_storeu_ps(out + kb + k, _mm256_mul_ps(lo, scale));
        _mm256_storeu_ps(out + kb + k + 8, _mm256_mul_ps(hi, scale));
      }
    }
  }
}

}  // namespace

void GemmF8Avx2(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens < kMinDecodedTokens) {
    thread_local std::vector<float> scaled;
    if (DenormalOperandsFast() && ScaleActivations(a, scaled)) {
      F8Gemv<Decode::kF32Bits>(a, scaled.data(), rb, re);
    } else {
      F8Gemv<Decode::kF16>(a, a.x, rb, re);
    }
    return;
  }
  GemmDecodedRows(
      a, rb, re, [&](int64_t r0, int64_t r1, float* out) { DecodeRows(a, r0, r1, out); }, GemmF32PanelsAvx2);
}

}  // namespace cascade::kernels::cpu::internal
