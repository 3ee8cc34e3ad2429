// F32, F16 and BF16 weights on AVX-512: the AVX2 float kernels' tiles (linear_avx2.cc) at
// twice the width. Each weight row streams 16 elements per load, widened to f32 exactly
// (F16 by `vcvtph2ps`, BF16 by a zero-extension and a 16-bit shift), and meets the f32
// activations in one FMA; a tile of R rows x T tokens shares each activation load across
// its rows. The last n_in % 16 elements take masked loads, so any n_in works. Activations
// and accumulation stay f32: the same numbers as the AVX2 kernels up to summation order.
// The next tile's rows are prefetched into L2 as one stream while a tile runs
// (PrefetchNextTile): without a prefetch, batch-1 decode read a third of the bandwidth the
// packed kernels reach, and with a stream per row (kPrefetchBytes ahead of each) 75%.
// Measured by build/bin/linear_bench --decode (docs/PERFORMANCE.md).
// Compiled with AVX-512 F/BW/VL/DQ (+AVX2/F16C); called only on such CPUs (linear_avx512.cc's table).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/linear_kernels.h"

namespace cascade::kernels::cpu::internal {
namespace {

// Measured with a prefetch per row kPrefetchBytes ahead, bf16 LM head [49152, 576] at
// batch 1 on a 2-core AMD VM (Zen 3): no prefetch 10.0 / 20.8 GB/s (1 / 2 threads), 1 KiB
// 10.3 / 21.7, 4 KiB 13.9 / 28.2, 16 KiB 27.9 / 50.5, 32 KiB 29.7 / 63.0 (noisy); the next
// tile's rows as one stream instead: linear_kernels.h (measured on Zen 5 only).

// Rows [row_begin, row_end) in blocks of about kRowBlockBytes of weights (a multiple of 4
// rows), each passed whole to fn(r0, r1): a prefill runs every token over one block while
// it sits in L2, instead of streaming the whole matrix from memory once per tile of tokens.
constexpr int64_t kRowBlockBytes = 256 * 1024;
template <typename Fn>
void ForRowBlocks(const GemmArgs& a, int64_t row_begin, int64_t row_end, Fn&& fn) {
  const int64_t rows = std::max<int64_t>(4, kRowBlockBytes / std::max<int64_t>(a.w_row_bytes, 1) / 4 * 4);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += rows) fn(r0, std::min(row_end, r0 + rows));
}

// 16 weights from element k on, f32; lanes outside `m` are 0 (masked loads touch no
// memory there).
struct Load16F32 {
  static constexpr int kBytes = 4;
  static __m512 Load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(w) + k);
  }
};
struct Load16F16 {
  static constexpr int kBytes = 2;
  static __m512 Load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k));
  }
};
struct Load16BF16 {
  static constexpr int kBytes = 2;
  static __m512 Load(const uint8_t* w, int64_t k, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

// R rows x T tokens of output, full dot products over n_in.
template <typename L, int R, int T>
inline void FloatTile(const GemmArgs& a, int64_t r0, int64_t t0) {
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
  // The last step's mask covers the n_in % 16 elements left (all 16 otherwise). Plain
  // loops, not a lambda over `acc`: GCC kept a lambda's captured accumulators on the
  // stack, a store of every one per step (2.3x slower prefill).
  const int64_t n16 = a.n_in / 16 * 16;
  for (int64_t k = 0; k < a.n_in; k += 16) {
    const __mmask16 m = k < n16 ? 0xffff : static_cast<__mmask16>((1u << (a.n_in - n16)) - 1);
    __m512 wv[R];
    PrefetchNextTile(w[0] + R * a.w_row_bytes, k * R * L::kBytes, R * 16 * L::kBytes);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::Load(w[i], k, m);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[j] + k);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.ld_out + r0 + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <typename L, int R, int T>
void FloatTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  for (; r + R <= re; r += R) FloatTile<L, R, T>(a, r, t0);
  for (; r < re; ++r) FloatTile<L, 1, T>(a, r, t0);
}

// The AVX2 kernels' tile shapes: 8 rows for one token (decode), 4 x 3 for more.
template <typename L>
void GemmFloatAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens == 1) {
    FloatTokens<L, 8, 1>(a, rb, re, 0);
    return;
  }
  ForRowBlocks(a, rb, re, [&](int64_t r0, int64_t r1) {
    int64_t t = 0;
    for (; t + 6 <= a.n_tokens; t += 6) FloatTokens<L, 4, 6>(a, r0, r1, t);
    for (; t + 3 <= a.n_tokens; t += 3) FloatTokens<L, 4, 3>(a, r0, r1, t);
    if (a.n_tokens - t == 2) FloatTokens<L, 4, 2>(a, r0, r1, t);
    if (a.n_tokens - t == 1) FloatTokens<L, 8, 1>(a, r0, r1, t);
  });
}

}  // namespace

void GemmF32Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemmFloatAvx512<Load16F32>(a, rb, re); }
void GemmF16Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemmFloatAvx512<Load16F16>(a, rb, re); }
void GemmBF16Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemmFloatAvx512<Load16BF16>(a, rb, re); }

}  // namespace cascade::kernels::cpu::internal
