// Private to the AVX-512 kernel files (linear_packed_avx512.cc, linear_avx512.cc): the
// compile-time geometry of each packed dtype and the unpacking of one packed block of
// 16 rows x 32 weights into the 8 `vpdpbusd` operands (packed_weight.h has the layout).
// Include only from files compiled with AVX-512 F/BW/VL/DQ/VNNI.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "kernels/cpu/block_codes.h"
#include "kernels/cpu/packed_weight.h"

namespace cascade::kernels::cpu::internal {

template <DType D>
struct PackedLayout {
  static constexpr bool kQ8 = D == DType::kQ8_0;
  static constexpr CodeFormat kFormat = kQ8 ? CodeFormat{} : CodeFormatOf(D);
  static constexpr int64_t kQuant = PackedWeight::QuantBytes(D);
  static constexpr int kHalves = static_cast<int>(PackedWeight::ScaleVectors(D));
  static constexpr bool kStoredMin = PackedWeight::MinVectors(D) > 0;
  // Bytes of the group's stream per block (quants + f16 scale and min vectors).
  static constexpr int64_t kStreamPerBlock =
      kQuant + (PackedWeight::ScaleVectors(D) + PackedWeight::MinVectors(D)) * 32;
  // x = d * u + factor * d for the u8 operand u when the min is not stored (Q8_0 and IQ4
  // are stored + 128); 1 when the offset vector is the stored min itself.
  static constexpr float kOffsetFactor =
      kStoredMin ? 1.0f : (kQ8 || kFormat.table != nullptr ? -128.0f : kFormat.min_factor);
};

// Unpacks one block into w[0..7]: w[k] = elements 4k..4k+3, w[4 + k] = 16+4k..16+4k+3, of
// all 16 rows, as u8 (row i in dword lane i).
template <DType D>
struct BlockUnpacker {
  using L = PackedLayout<D>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i lut = _mm512_broadcast_i32x4(TableU8());

  // The table types' values + 128 (the u8 operand); unused by the others.
  static __m128i TableU8() {
    alignas(16) uint8_t t[16] = {};
    if constexpr (L::kFormat.table != nullptr) {
      for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(L::kFormat.table[i] + 128);
    }
    return _mm_load_si128(reinterpret_cast<const __m128i*>(t));
  }

  inline void operator()(const uint8_t* block, __m512i w[8]) const {
    const auto* q = reinterpret_cast<const __m512i*>(block);
    if constexpr (L::kQ8) {
      for (int k = 0; k < 8; ++k) w[k] = _mm512_load_si512(q + k);
      return;
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(q + k);
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if constexpr (L::kFormat.bits == 5) {
          uint64_t mlo, mhi;
          std::memcpy(&mlo, block + 256 + 16 * k, 8);
          std::memcpy(&mhi, block + 256 + 16 * k + 8, 8);
          const __m512i bit = _mm512_set1_epi8(0x10);
          lo = _mm512_mask_add_epi8(lo, mlo, lo, bit);
          hi = _mm512_mask_add_epi8(hi, mhi, hi, bit);
        } else if constexpr (L::kFormat.bits == 6) {
          // Bits [2k, 2k + 2) of each byte to [4, 6): 16-bit shifts leak neighbour bits only
          // outside the 0x30 mask; vpternlogd computes lo | (shifted & 0x30) (imm 0xf8).
          const __m512i plo = _mm512_load_si512(block + 256), phi = _mm512_load_si512(block + 320);
          const __m512i m30 = _mm512_set1_epi8(0x30);
          const __m512i slo = 2 * k <= 4 ? _mm512_slli_epi16(plo, 4 - 2 * k) : _mm512_srli_epi16(plo, 2 * k - 4);
          const __m512i shi = 2 * k <= 4 ? _mm512_slli_epi16(phi, 4 - 2 * k) : _mm512_srli_epi16(phi, 2 * k - 4);
          lo = _mm512_ternarylogic_epi32(lo, slo, m30, 0xf8);
          hi = _mm512_ternarylogic_epi32(hi, shi, m30, 0xf8);
        }
        if constexpr (L::kFormat.table != nullptr) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        w[k] = lo;
        w[k + 4] = hi;
      }
    }
  }
};

}  // namespace cascade::kernels::cpu::internal
