// AVX-512 VNNI matrix-vector kernels over packed Q8_0 / Q4_0 / Q4_1 weights
// (packed_weight.h): the decode path (1 token) and short verify steps (up to 5 tokens).
//
// One group of 16 rows at a time, each row a dword lane of a zmm, accumulators in registers.
// Per block of 32 weights: Q4 loads 4 zmm of nibbles and masks each with 0x0f (elements
// 4k..4k+3 of all 16 rows) and 0xf0 (elements 16+4k..; they arrive multiplied by 16, which
// `vpdpbusd` does not mind and one arithmetic shift of the int32 sum undoes); Q8_0 loads 8
// zmm already biased to u8. Each of the 8 operands meets a broadcast dword of the token's Q8
// activations in one `vpdpbusd` (two chains), then the block's 16 f16 scales (one 32-byte
// load + `vcvtph2ps`) times the activation scale give one FMA into the row accumulators,
// and one more FMA adds the offset term (Q4_1: m * sum(x); Q4_0: d * sum(x), times -8 at
// the end; Q8_0: d * sum(x), times -128). No gathers, no shuffles, no horizontal sums: the
// 16 results are one masked store.
//
// The group stream is contiguous, so a software prefetch kPrefetchBytes ahead of the block
// being read covers the next groups. Measured on the whole-model decode pass of
// linear_bench (1 thread, a shared 2-core VM, so noisy): 2-8 KiB all reach ~11 GB/s from
// memory and up to ~16 GB/s when part of the model stays in L3; 1 KiB and no prefetch were
// no better, sometimes worse (the first load of each block then shows as the stall).
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/linear_kernels.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cascade::kernels::cpu::internal {
namespace {

enum class Kind { kQ8_0, kQ4_0, kQ4_1 };

template <Kind K>
constexpr int64_t kQuantBytes = K == Kind::kQ8_0 ? 512 : 256;

constexpr int64_t kPrefetchBytes = 4096;

inline __m512i Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Rows of group `g` x tokens [t0, t0 + T).
template <Kind K, int T>
void GemvGroup(const GemmArgs& a, int64_t r0, int64_t r_end, int64_t t0) {
  constexpr int64_t kQ = kQuantBytes<K>;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / 16) * a.w_row_bytes;
  const uint8_t* quants = g;
  const auto* dptr = reinterpret_cast<const __m256i*>(g + nb * kQ);
  const __m256i* mptr = dptr + nb;
  const uint8_t* pf = g + kPrefetchBytes;
  // Bytes of the stream per block: quants + scale vectors.
  constexpr int64_t kPerBlock = kQ + (K == Kind::kQ4_1 ? 64 : 32);

  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.n_in;
    xd[t] = a.xd + (t0 + t) * nb;
    xs[t] = a.xs + (t0 + t) * nb;
  }
  __m512 acc[T], oacc[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    oacc[t] = _mm512_setzero_ps();
  }
  const __m512i lo_mask = _mm512_set1_epi8(0x0f);
  const __m512i hi_mask = _mm512_set1_epi8(static_cast<char>(0xf0));

  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t l = 0; l < kPerBlock; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T0);
    }
    pf += kPerBlock;
    const __m512i* q = reinterpret_cast<const __m512i*>(quants + b * kQ);
    __m512i w[8];
    if constexpr (K == Kind::kQ8_0) {
      for (int k = 0; k < 8; ++k) w[k] = _mm512_load_si512(q + k);
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(q + k);
        w[k] = _mm512_and_si512(v, lo_mask);
        w[k + 4] = _mm512_and_si512(v, hi_mask);
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(dptr + b));
    __m512 ow;
    if constexpr (K == Kind::kQ4_1) {
      ow = _mm512_cvtph_ps(_mm256_load_si256(mptr + b));
    } else {
      ow = dw;
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq[t] + b * 32;
      __m512i ia = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], Bcast(x + 0));
      __m512i ib = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], Bcast(x + 4));
      ia = _mm512_dpbusd_epi32(ia, w[2], Bcast(x + 8));
      ib = _mm512_dpbusd_epi32(ib, w[3], Bcast(x + 12));
      __m512i sum;
      if constexpr (K == Kind::kQ8_0) {
        ia = _mm512_dpbusd_epi32(ia, w[4], Bcast(x + 16));
        ib = _mm512_dpbusd_epi32(ib, w[5], Bcast(x + 20));
        ia = _mm512_dpbusd_epi32(ia, w[6], Bcast(x + 24));
        ib = _mm512_dpbusd_epi32(ib, w[7], Bcast(x + 28));
        sum = _mm512_add_epi32(ia, ib);
      } else {
        __m512i ha = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[4], Bcast(x + 16));
        __m512i hb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[5], Bcast(x + 20));
        ha = _mm512_dpbusd_epi32(ha, w[6], Bcast(x + 24));
        hb = _mm512_dpbusd_epi32(hb, w[7], Bcast(x + 28));
        // The high products are exact multiples of 16.
        sum = _mm512_add_epi32(_mm512_add_epi32(ia, ib), _mm512_srai_epi32(_mm512_add_epi32(ha, hb), 4));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(xd[t][b])), acc[t]);
      oacc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(xs[t][b]), oacc[t]);
    }
  }
  const __mmask16 m = static_cast<__mmask16>(r_end - r0 >= 16 ? 0xffff : (1u << static_cast<unsigned>(r_end - r0)) - 1);
  const float off_scale = K == Kind::kQ4_1 ? 1.0f : (K == Kind::kQ4_0 ? -8.0f : -128.0f);
  for (int t = 0; t < T; ++t) {
    const __m512 v = _mm512_fmadd_ps(oacc[t], _mm512_set1_ps(off_scale), acc[t]);
    _mm512_mask_storeu_ps(a.out + (t0 + t) * a.ld_out + r0, m, v);
  }
}

template <Kind K, int T>
void GemvTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  for (int64_t r = rb; r < re; r += 16) GemvGroup<K, T>(a, r, re, t0);
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

void GemvPackedQ8_0Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ8_0>(a, rb, re); }
void GemvPackedQ4_0Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ4_0>(a, rb, re); }
void GemvPackedQ4_1Avx512(const GemmArgs& a, int64_t rb, int64_t re) { GemvAll<Kind::kQ4_1>(a, rb, re); }

}  // namespace cascade::kernels::cpu::internal
