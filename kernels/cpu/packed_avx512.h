// Private to the AVX-512 kernel files (linear_packed_avx512.cc, linear_avx512.cc): the
// compile-time geometry of each packed dtype, the unpacking of one packed block of
// 16 rows x 32 weights into the 8 `vpdpbusd` operands, and the reading of its 16 rows'
// scales (packed_weight.h has the layout).
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
  static constexpr int kHalves = PackedWeight::Halves(D);
  static constexpr bool kStoredMin = PackedWeight::StoredMin(D);
  static constexpr bool kSuper = PackedWeight::SuperScaled(D);
  static constexpr PackedGeometry kGeo = PackedGeometryOf(D);
  // Bytes of the group's stream per block (quants, scales, a share of the super-scales).
  static constexpr int64_t kStreamPerBlock = kGeo.StreamBytesPerBlock();
  // x = d * u + factor * d for the u8 operand u when the min is not stored (Q8_0 and IQ4
  // are stored + 128); 1 when the offset vector is the stored min itself.
  static constexpr float kOffsetFactor =
      kStoredMin ? 1.0f : (kQ8 || kFormat.table != nullptr ? -128.0f : kFormat.min_factor);
};

// Adds `bit` to the bytes of lo (elements 4k..4k+3 of the 16 rows) and hi (16+4k..) that
// the mask plane at `plane` marks (bits 2k and 2k + 1 of its bytes, packed_weight.h): the
// 5-bit codes' fifth bit, the 3-bit codes' third.
inline void AddMaskedBit(const uint8_t* plane, int k, __m512i bit, __m512i& lo, __m512i& hi) {
  const __m512i p = _mm512_loadu_si512(plane);
  const __mmask64 mlo = _mm512_test_epi8_mask(p, _mm512_set1_epi8(static_cast<char>(1 << (2 * k))));
  const __mmask64 mhi = _mm512_test_epi8_mask(p, _mm512_set1_epi8(static_cast<char>(1 << (2 * k + 1))));
  lo = _mm512_mask_add_epi8(lo, mlo, lo, bit);
  hi = _mm512_mask_add_epi8(hi, mhi, hi, bit);
}

// Unpacks one block into w[0..7]: w[k] = elements 4k..4k+3, w[4 + k] = 16+4k..16+4k+3, of
// all 16 rows, as u8 (row i in dword lane i). Loads are unaligned: a chunk may start 32
// bytes into a cache line (packed_weight.h).
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
      for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(q + k);
      return;
    } else if constexpr (L::kFormat.bits <= 3) {
      // Bits [2k, 2k + 2) of each byte: a 16-bit shift leaks the neighbour byte's bits only
      // above bit 1, which the AND drops; the third bit is a masked add of 4.
      const __m512i p0 = _mm512_loadu_si512(q), p1 = _mm512_loadu_si512(q + 1);
      const __m512i low2 = _mm512_set1_epi8(0x03);
      for (int k = 0; k < 4; ++k) {
        __m512i lo = _mm512_and_si512(_mm512_srli_epi16(p0, 2 * k), low2);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p1, 2 * k), low2);
        if constexpr (L::kFormat.bits == 3) AddMaskedBit(block + 128, k, _mm512_set1_epi8(0x04), lo, hi);
        w[k] = lo;
        w[k + 4] = hi;
      }
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(q + k);
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if constexpr (L::kFormat.bits == 5) {
          AddMaskedBit(block + 256, k, _mm512_set1_epi8(0x10), lo, hi);
        } else if constexpr (L::kFormat.bits == 6) {
          // Bits [2k, 2k + 2) of each byte to [4, 6): 16-bit shifts leak neighbour bits only
          // outside the 0x30 mask; vpternlogd computes lo | (shifted & 0x30) (imm 0xf8).
          const __m512i plo = _mm512_loadu_si512(block + 256), phi = _mm512_loadu_si512(block + 320);
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

// The 6-bit sub-scales of one super-block (packed_weight.h, kSixBitPairBytes) as bytes of
// the 16 row lanes: v[0] the values 0 (scales; Q3_K: of half 0) of blocks 0-3 (block k in
// byte k of each lane), v[1] of blocks 4-7, v[2] and v[3] the values 1 (mins; Q3_K: half 1). Per vector one
// ternary-logic OR of the low nibbles and the high bits moved to bits 4-5 (the shifts leak neighbour bits only outside
// the masks).
inline void SixBitPairBytes(const uint8_t* p, __m512i v[4]) {
  const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 64), c = _mm512_loadu_si512(p + 128);
  const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const auto join = [&](__m512i low, __m512i high) {  // (low & 0x0f) | (high & 0x30).
    return _mm512_ternarylogic_epi32(_mm512_and_si512(low, m0f), high, m30, 0xf8);
  };
  v[0] = join(a, _mm512_slli_epi32(c, 4));
  v[1] = join(_mm512_srli_epi32(a, 4), _mm512_slli_epi32(c, 2));
  v[2] = join(b, c);
  v[3] = join(_mm512_srli_epi32(b, 4), _mm512_srli_epi32(c, 2));
}

// The 16 rows' scales of each block of one group (packed_weight.h), as f32: dw[h] the
// scale and ow[h] the offset vector of half h, such that x = dw * u + ow * factor for the u8
// operand u (PackedLayout::kOffsetFactor: the stored min itself, or a fixed multiple of d).
// Super-block types form d * sc from their integer sub-scales, ggml's own f32 product.
template <DType D>
class BlockScales {
 public:
  using L = PackedLayout<D>;
  static constexpr bool kSixBitPairs = L::kFormat.sub_scales == SubScales::kSixBitPairs;
  BlockScales(const uint8_t* group, int64_t nb) : g_(group), nb_(nb) {}

  inline void operator()(int64_t b, __m512 dw[2], __m512 ow[2]) {
    const uint8_t* s = g_ + L::kGeo.ScaleAt(nb_, b);
    if constexpr (kSixBitPairs) {
      SixBitPairScales(b, dw, ow);
    } else if constexpr (D == DType::kMXFP4) {  // Exponent bytes (packed_weight.h).
      dw[0] = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s))), 23));
      ow[0] = dw[0];
    } else if constexpr (!L::kSuper) {
      dw[0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(s)));
      ow[0] = L::kStoredMin ? _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(s + 32))) : dw[0];
    } else {
      if (b / kBlocksPerSuper != super_) LoadSuper(b / kBlocksPerSuper);
      for (int h = 0; h < L::kHalves; ++h) {
        const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(s + 16 * h));
        if constexpr (L::kFormat.sub_scales == SubScales::kNibbles) {
          const __m512i both = _mm512_cvtepu8_epi32(v);
          const __m512i sc = _mm512_and_si512(both, _mm512_set1_epi32(0x0f));
          dw[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), d_);
          ow[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(both, 4)), m_);
        } else {
          dw[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), d_);
          ow[h] = dw[h];
        }
      }
    }
  }

 private:
  // Block b's scales from the super-block's bytes (SixBitPairBytes), in registers: lanes
  // hold 4 blocks' bytes, shifted down one byte per block; re-read at blocks 0 and 4 of a
  // super-block and wherever a caller skips a block. sc_ / mn_ hold the values 0 / 1.
  inline void SixBitPairScales(int64_t b, __m512 dw[2], __m512 ow[2]) {
    if (b / kBlocksPerSuper != super_) LoadSuper(b / kBlocksPerSuper);
    const int t = static_cast<int>(b % kBlocksPerSuper);
    if (b != next_ || t % 4 == 0) {
      const __m128i shift = _mm_cvtsi32_si128(8 * (t % 4));
      sc_ = _mm512_srl_epi32(t < 4 ? pairs_[0] : pairs_[1], shift);
      mn_ = _mm512_srl_epi32(t < 4 ? pairs_[2] : pairs_[3], shift);
    }
    const __m512i ff = _mm512_set1_epi32(0xff);
    if constexpr (L::kStoredMin) {
      dw[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(sc_, ff)), d_);
      ow[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(mn_, ff)), m_);
    } else {  // Q3_K: the halves' scales, each stored + sub_bias.
      const __m512i bias = _mm512_set1_epi32(L::kFormat.sub_bias);
      dw[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(sc_, ff), bias)), d_);
      dw[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(mn_, ff), bias)), d_);
      ow[0] = dw[0];
      ow[1] = dw[1];
    }
    sc_ = _mm512_srli_epi32(sc_, 8);
    mn_ = _mm512_srli_epi32(mn_, 8);
    next_ = b + 1;
  }

  // The f16 d and -dmin of super-block `sb` (the sign makes the offset -(dmin * mn)).
  void LoadSuper(int64_t sb) {
    const uint8_t* p = g_ + L::kGeo.SuperAt(sb);
    if constexpr (kSixBitPairs) SixBitPairBytes(g_ + L::kGeo.SubAt(sb), pairs_);
    d_ = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    if constexpr (L::kStoredMin) {
      m_ = _mm512_sub_ps(_mm512_setzero_ps(),
                         _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32))));
    }
    super_ = sb;
  }

  const uint8_t* g_;
  int64_t nb_;
  int64_t super_ = -1;
  __m512 d_ = _mm512_setzero_ps();
  __m512 m_ = _mm512_setzero_ps();
  // The 6-bit types: the super-block's sub-scales as bytes, and the current block's lanes.
  __m512i pairs_[4];
  __m512i sc_ = _mm512_setzero_si512();
  __m512i mn_ = _mm512_setzero_si512();
  int64_t next_ = -1;
};

}  // namespace cascade::kernels::cpu::internal
