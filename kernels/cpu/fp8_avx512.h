// E4M3 codes to f32 on AVX-512, shared by the FP8 GEMM (linear_f8_avx512.cc) and the FP8
// KV cache's attention (attention_avx512.cc). Include only from files compiled with
// AVX-512 F (and AVX2); their callers run only on such CPUs.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/quant_blocks.h"

namespace cascade::kernels::cpu::internal {

// 16 E4M3 codes to f32 times 2^-8, exactly: the code's 7 magnitude bits shifted into an
// f16's exponent and mantissa fields (a 5-bit exponent field holding E4M3's 4 bits: bias
// 15 against 7), subnormals included, and the sign to bit 15; one vcvtph2ps. Callers fold
// the 2^8 into a scale.
inline __m512 E4M3x16Over256(const uint8_t* codes) {
  const __m256i u = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m256i h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(u, 7), _mm256_set1_epi16(0x3f80)),
                                    _mm256_and_si256(_mm256_slli_epi16(u, 8), _mm256_set1_epi16(-0x8000)));
  return _mm512_cvtph_ps(h);
}

// 32 E4M3 codes to f32 times 2^-8 (the same values as two E4M3x16Over256): the codes
// sign-extended to 16 bits put the sign in bits 14 and 15 after a shift by 7, so one AND
// (0xbf80) leaves the f16 bits of all 32 at once; then a `vcvtph2ps` per half. 8 uops
// against 16 for two calls of the 16-code form, which bounded the FP8 GEMV on Intel.
inline void E4M3x32Over256(const uint8_t* codes, __m512& lo, __m512& hi) {
  const __m512i s = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(s, 7), _mm512_set1_epi16(static_cast<int16_t>(0xbf80)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// Prefetches into L2 rows [r0, r0 + rows) of an F8_E4M3_B128 weight (rows `row_bytes`
// apart, 132 bytes a 128-block: scale, then codes) over k in [k0, k0 + kc): the next
// panel's bytes, fetched while a prefill packs this one. A panel reads 32 rows a k-chunk
// each (528 bytes at 512 inputs), too short for the hardware's stream prefetcher: without
// this, packing waited on memory for every line.
inline void PrefetchF8Rows(const uint8_t* w, int64_t row_bytes, int64_t r0, int rows, int64_t k0, int64_t kc) {
  const int64_t bytes = F8BlockOffset(kc);
  for (int i = 0; i < rows; ++i) {
    const uint8_t* row = w + (r0 + i) * row_bytes + F8BlockOffset(k0);
    for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(row + bytes - 1), _MM_HINT_T1);
  }
}

}  // namespace cascade::kernels::cpu::internal
