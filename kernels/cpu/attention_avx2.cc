// AVX2 (+F16C) pieces of the portable attention kernel (attention.cc): the conversion of a
// block's cache rows to f32, which the kernel does once per query row and KV head. In the
// portable form (one software half-to-float per element) it cost 70% of a 2048-token
// prefill on an AVX2-only CPU; F16C converts eight at once.
//
// Compiled with AVX2/FMA/F16C; called only on such CPUs.
#include <immintrin.h>

#include "core/quant_blocks.h"
#include "kernels/cpu/attention_kernels.h"

namespace cascade::kernels::cpu::internal {

void KvRowsToF32Avx2(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t n, int64_t d, float* dst) {
  if (dtype == DType::kF8_E4M3 || d % 8 != 0) {  // A table lookup per code either way.
    KvRowsToF32(dtype, src, row_bytes, n, d, dst);
    return;
  }
  for (int64_t r = 0; r < n; ++r, src += row_bytes, dst += d) {
    if (dtype == DType::kF16) {
      for (int64_t i = 0; i < d; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
      }
    } else {  // Q8_0: d / 32 blocks of an f16 scale and 32 int8.
      const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < d; i += 8) {
        const BlockQ8_0& blk = b[i / kQK];
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + i % kQK));
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, _mm256_set1_ps(_cvtsh_ss(blk.d))));
      }
    }
  }
}

}  // namespace cascade::kernels::cpu::internal
