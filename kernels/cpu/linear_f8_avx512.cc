// F8_E4M3_B128 weights on AVX-512: 32 E4M3 codes to f16 bits per instruction group, then
// f32 (the values of core/fp8.h times 2^-8, exact; fp8_avx512.h), FMA tiles of rows x tokens as the AVX2 float
// kernels (linear_avx2.cc), twice as wide, each 128-block's sums scaled once by its scale.
// A prefill (6 tokens or more) instead decodes a block of rows to f32 once (each value times
// its scale, one rounding) and runs the F32 tiles (linear_float_avx512.cc) over it.
// Activations stay f32.
// Compiled with AVX-512 F/BW/VL/DQ; called only on such CPUs (linear_avx512.cc's table).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/fp8_avx512.h"
#include "kernels/cpu/linear_kernels.h"

namespace cascade::kernels::cpu::internal {
namespace {

// R rows x T tokens of output, full dot products over n_in (a multiple of 128). Each
// 128-block's products are summed unscaled, then added times the block's scale (x 2^8):
// one FMA per block instead of a multiply per 16 weights.
template <int R, int T>
inline void F8Tile(const GemmArgs& a, int64_t r0, int64_t t0) {
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
  for (int j = 0; j < T; ++j) x[j] = a.x + (t0 + j) * a.n_in;
  for (int64_t kb = 0; kb < a.n_in; kb += 128) {
    const int64_t block = (kb >> 7) * 132;  // f32 scale, then 128 codes.
    __m512 part[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) part[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < 128; k += 32) {
      __m512 lo[R], hi[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        if (k % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(w[i] + block + k + kPrefetchBytes), _MM_HINT_T1);
        E4M3x32Over256(w[i] + block + 4 + k, lo[i], hi[i]);
      }
      // Weights k..k+15 then k+16..k+31 into each chain: the order of 16 at a time.
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m512 xlo = _mm512_loadu_ps(x[j] + kb + k), xhi = _mm512_loadu_ps(x[j] + kb + k + 16);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) part[i][j] = _mm512_fmadd_ps(hi[i], xhi, _mm512_fmadd_ps(lo[i], xlo, part[i][j]));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float d;
      std::memcpy(&d, w[i] + block, 4);
      const __m512 scale = _mm512_set1_ps(d * 256.0f);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_fmadd_ps(part[i][j], scale, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.ld_out + r0 + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int R, int T>
void F8Tokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  for (; r + R <= re; r += R) F8Tile<R, T>(a, r, t0);
  for (; r < re; ++r) F8Tile<1, T>(a, r, t0);
}

// Rows [r0, r1) decoded to f32 (E4M3 value x its block's scale, one rounding) into `out`
// [r1 - r0, n_in].
void DecodeRows(const GemmArgs& a, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r, out += a.n_in) {
    const uint8_t* w = a.w + r * a.w_row_bytes;
    for (int64_t kb = 0; kb < a.n_in; kb += 128) {
      const uint8_t* block = w + (kb >> 7) * 132;
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

}  // namespace

void GemmF8Avx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens == 1) {
    F8Tokens<8, 1>(a, rb, re, 0);
    return;
  }
  if (a.n_tokens < kMinDecodedTokens) {
    int64_t t = 0;
    for (; t + 3 <= a.n_tokens; t += 3) F8Tokens<4, 3>(a, rb, re, t);
    if (a.n_tokens - t == 2) F8Tokens<4, 2>(a, rb, re, t);
    if (a.n_tokens - t == 1) F8Tokens<8, 1>(a, rb, re, t);
    return;
  }
  GemmDecodedRows(
      a, rb, re, [&](int64_t r0, int64_t r1, float* out) { DecodeRows(a, r0, r1, out); }, GemmF32Avx512);
}

}  // namespace cascade::kernels::cpu::internal
