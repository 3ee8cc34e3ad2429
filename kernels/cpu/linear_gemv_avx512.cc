// AVX-512 VNNI matrix-vector kernels for Q8_0 / Q4_0 / Q4_1 weights in their GGUF layout:
// the decode path (1 token) and short verify steps (up to 5 tokens).
//
// Four weight rows are processed together. Per chunk of up to 64 blocks (kChunkBlocks), a pre-pass gathers
// each row's f16 block scales (and Q4_1 mins) 16 at a time, multiplies them by the
// activation scales into a small L1 table (one f32 per row, block and token) and folds the
// offset term (Q4_1: m * sum(x); Q4_0: -8 d * sum(x); Q8_0: -128 d * sum(x), undoing the
// +128 that makes the weights unsigned) into a per-row vector. The main loop then costs
// four vector ops per block, row and token: the block's 16 nibble bytes are broadcast to
// both 128-bit halves of a ymm and masked with [0x0f x 16, 0xf0 x 16] (the high nibbles
// arrive multiplied by 16, harmless for `vpdpbusd`, undone once per row by scaling the upper
// four accumulator lanes by 1/16), one `vpdpbusd` against the activation block, a convert
// and an FMA whose scale is a broadcast load from the table (a load, not a shuffle). The
// four rows' accumulators are reduced together by one `vhaddps` tree at the end.
//
// Why software prefetch (kPrefetchRows): the gathers touch 16 lines of 4 rows at once and
// the hardware prefetchers alone left the kernel waiting on memory (+35% with it). Tried and
// dropped: zmm with two blocks per register (port-5 shuffles to build [b, b, b+1, b+1] and
// its scale vector; the old kernel's comment measured it 1.5x slower), and pulling the f16
// scales out of a 128-byte window with `vpermt2w` instead of the gather (~20% slower here).
// The pre-pass still costs about a third of the main loop. The engine's weights avoid it:
// they are repacked at load (packed_weight.h, kernels in linear_packed_avx512.cc); this
// kernel serves weights used in place (`Linear` on a plain view).
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/linear_kernels.h"

// GCC 12 warns about the `_mm512_undefined_*` placeholders inside its own intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cascade::kernels::cpu::internal {
namespace {

enum class Kind { kQ8_0, kQ4_0, kQ4_1 };

template <Kind K>
constexpr int kBlockBytes = K == Kind::kQ8_0 ? 34 : (K == Kind::kQ4_0 ? 18 : 20);
template <Kind K>
constexpr int kQuantOffset = K == Kind::kQ4_1 ? 4 : 2;  // Byte offset of qs in the block.

constexpr int kChunkBlocks = 64;  // Blocks per pre-pass: the scale table stays in L1.

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows [r, r + R) x tokens [t0, t0 + T).
template <Kind K, int R, int T>
void GemvTile(const GemmArgs& a, int64_t r, int64_t t0) {
  constexpr int kBytes = kBlockBytes<K>;
  constexpr bool kQ4 = K != Kind::kQ8_0;
  const int64_t nb = a.n_in / 32;
  const __m512i gidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(kBytes / 2));
  const __m256i nib_mask = _mm256_setr_m128i(_mm_set1_epi8(0x0f), _mm_set1_epi8(static_cast<char>(0xf0)));
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));

  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = a.w + (r + i) * a.w_row_bytes;
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.n_in;
    xd[t] = a.xd + (t0 + t) * nb;
    xs[t] = a.xs + (t0 + t) * nb;
  }

  alignas(64) float sc[T][R][kChunkBlocks];
  __m256 ovec[T][R];
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < R; ++i) {
      acc[t][i] = _mm256_setzero_ps();
      ovec[t][i] = _mm256_setzero_ps();
    }
  }

  for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
    const int n_chunk = static_cast<int>(std::min<int64_t>(kChunkBlocks, nb - b0));
    // Pre-pass: combined scales into `sc`, offset terms into `ovec`.
    for (int i = 0; i < R; ++i) {
      __m512 o[T];
      for (int t = 0; t < T; ++t) o[t] = _mm512_setzero_ps();
      for (int c = 0; c < n_chunk; c += 16) {
        const int n = std::min(16, n_chunk - c);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
        const __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, gidx, rows[i] + (b0 + c) * kBytes, 2);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        __m512 off;
        if constexpr (K == Kind::kQ4_1) {
          off = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        } else if constexpr (K == Kind::kQ4_0) {
          off = _mm512_mul_ps(dw, _mm512_set1_ps(-8.0f));
        } else {
          off = _mm512_mul_ps(dw, _mm512_set1_ps(-128.0f));
        }
        for (int t = 0; t < T; ++t) {
          _mm512_store_ps(sc[t][i] + c, _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(m, xd[t] + b0 + c)));
          o[t] = _mm512_fmadd_ps(off, _mm512_maskz_loadu_ps(m, xs[t] + b0 + c), o[t]);
        }
      }
      for (int t = 0; t < T; ++t) {
        ovec[t][i] =
            _mm256_add_ps(ovec[t][i], _mm256_add_ps(_mm512_castps512_ps256(o[t]), _mm512_extractf32x8_ps(o[t], 1)));
      }
    }
    // Main loop: four vector ops per block, row and token.
#pragma GCC unroll 2
    for (int b = 0; b < n_chunk; ++b) {
      __m256i wv[R];
      for (int i = 0; i < R; ++i) {
        const uint8_t* q = rows[i] + (b0 + b) * kBytes + kQuantOffset<K>;
        if constexpr (kQ4) {
          wv[i] = _mm256_and_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
                                   nib_mask);
        } else {
          wv[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), flip);
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + (b0 + b) * 32));
        for (int i = 0; i < R; ++i) {
          const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv[i], xv);
          acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[t][i][b]), acc[t][i]);
        }
      }
    }
  }

  const __m256 hi_fix =
      kQ4 ? _mm256_setr_ps(1, 1, 1, 1, 1.0f / 16, 1.0f / 16, 1.0f / 16, 1.0f / 16) : _mm256_set1_ps(1.0f);
  for (int t = 0; t < T; ++t) {
    float* o = a.out + (t0 + t) * a.ld_out + r;
    __m256 v[R];
    for (int i = 0; i < R; ++i) v[i] = _mm256_fmadd_ps(acc[t][i], hi_fix, ovec[t][i]);
    if constexpr (R == 4) {
      // [r0 r1 r2 r3] sums from one hadd tree instead of four horizontal sums.
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
      _mm_storeu_ps(o, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    } else {
      for (int i = 0; i < R; ++i) o[i] = HorizontalSum(v[i]);
    }
  }
}

// Software prefetch distance in rows. The matrix is one contiguous stream, but the
// pre-pass gathers touch 16 lines of 4 rows at once, and the hardware prefetchers alone
// left the kernel waiting on memory.
constexpr int64_t kPrefetchRows = 16;

template <Kind K, int T>
void GemvTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  const uint8_t* w_end = a.w + re * a.w_row_bytes;
  for (; r + 4 <= re; r += 4) {
    const uint8_t* p = a.w + (r + kPrefetchRows) * a.w_row_bytes;
    const uint8_t* p_end = std::min(w_end, p + 4 * a.w_row_bytes);
    for (; p < p_end; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    GemvTile<K, 4, T>(a, r, t0);
  }
  for (; r < re; ++r) GemvTile<K, 1, T>(a, r, t0);
}

template <Kind K>
void GemvAll(const GemmArgs& a, int64_t rb, int64_t re) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) GemvTokens<K, 4>(a, rb, re, t);
  switch (a.n_tokens - t) {
    case 3: GemvTokens<K, 3>(a, rb, re, t); break;
    case 2: GemvTokens<K, 2>(a, rb, re, t); break;
    case 1: GemvTokens<K, 1>(a, rb, re, t); break;
    default: break;
  }
}

}  // namespace

void GemvQ8_0Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ8_0>(a, rb, re); }
void GemvQ4_0Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ4_0>(a, rb, re); }
void GemvQ4_1Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ4_1>(a, rb, re); }

}  // namespace cascade::kernels::cpu::internal
