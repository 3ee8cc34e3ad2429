// F8_E4M3_B128 weights on AVX-512: 16 E4M3 codes to f32 per instruction group (normals by
// re-biasing the exponent from 7 to 127, subnormals as m x 2^-9, the sign or-ed in: the
// values of core/fp8.h, exact), times their block's scale, then FMA tiles of rows x tokens
// as the AVX2 float kernels (linear_avx2.cc), twice as wide. Activations stay f32.
// Compiled with AVX-512 F/BW/VL/DQ; called only on such CPUs (linear_avx512.cc's table).
#include <immintrin.h>

#include <cstring>

#include "core/fp8.h"
#include "kernels/cpu/linear_kernels.h"

namespace cascade::kernels::cpu::internal {
namespace {

inline __m512 LoadF8x16(const uint8_t* row, int64_t k) {
  const uint8_t* b = row + (k >> 7) * 132;
  float d;
  std::memcpy(&d, b, 4);
  const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + (k & 127))));
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x80)), 24);
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.0f / 512.0f));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
  const __m512 v = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
  return _mm512_mul_ps(_mm512_or_ps(v, _mm512_castsi512_ps(sign)), _mm512_set1_ps(d));
}

// R rows x T tokens of output, full dot products over n_in (a multiple of 128).
template <int R, int T>
inline void F8Tile(const GemmArgs& a, int64_t r0, int64_t t0) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* w[R];
  for (int i = 0; i < R; ++i) w[i] = a.w + (r0 + i) * a.w_row_bytes;
  const float* x[T];
  for (int j = 0; j < T; ++j) x[j] = a.x + (t0 + j) * a.n_in;
  for (int64_t k = 0; k < a.n_in; k += 16) {
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = LoadF8x16(w[i], k);
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_loadu_ps(x[j] + k);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.ld_out + r0 + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int R, int T>
void F8Tokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  for (; r + R <= re; r += R) F8Tile<R, T>(a, r, t0);
  for (; r < re; ++r) F8Tile<1, T>(a, r, t0);
}

}  // namespace

void GemmF8Avx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens == 1) {
    F8Tokens<8, 1>(a, rb, re, 0);
    return;
  }
  int64_t t = 0;
  for (; t + 3 <= a.n_tokens; t += 3) F8Tokens<4, 3>(a, rb, re, t);
  if (a.n_tokens - t == 2) F8Tokens<4, 2>(a, rb, re, t);
  if (a.n_tokens - t == 1) F8Tokens<8, 1>(a, rb, re, t);
}

}  // namespace cascade::kernels::cpu::internal
