// AVX2 kernels over packed weights (packed_weight.h): Q8_0 and every block-code type (the
// K types, Q4_0 / Q4_1 / Q5_0 / Q5_1, IQ4_NL / IQ4_XS, MXFP4). Without them, AVX2-only CPUs
// ran the block-code types through the portable packed kernel, which unpacks 16 rows x 32
// codes to int16 element by element (Llama-3.2-1B's Q4_K matrices streamed 1.5 GB/s on one
// core of an AMD EPYC against Q8_0's 16), and Q8_0 / Q4_0 / Q4_1 through GGUF-layout
// kernels a row at a time (SmolLM2's Q4_1 matrices: 10 GB/s here against 27 packed).
//
// The layout was made for AVX-512's `vpdpbusd`: a block's 16 rows x 4 consecutive codes per
// 64 bytes. Here a ymm holds one 8-row half (rows 8 rh .. 8 rh + 7, a dword lane each), so a
// block is two passes of the same code as the AVX-512 unpacking (packed_avx512.h), 256 bits
// wide: nibbles by AND and shift, a fifth or third code bit and bits 4-5 of 6-bit codes
// from their planes by shift and AND, tables by
// `vpshufb`. AVX2 has no `vpdpbusd`: `vpmaddubsw` multiplies the u8 codes by a broadcast
// dword of the token's int8 activations into int16 pairs, several of those are summed in
// int16 while they cannot overflow (Layout::kSum16), and `vpmaddwd` widens to int32.
// Signed operands (IQ4's table values, Q8_0's codes - 128) go as |v| against the
// activations carrying v's sign (`vpsignb`), llama.cpp's way; MXFP4's small values are
// lifted to unsigned instead (Layout::kLift). Then, as on AVX-512, per block and half: one
// FMA of the int32 sums by scale x activation scale, and one of the offset term (the
// stored min times the activation sum, or the type's fixed multiple of d).
//
// Few tokens (decode, verify steps): each block is unpacked and met by every token at once.
// There the super-block types widen by their integer sub-scales instead of by ones and
// keep their offsets in int32 (IntScales8, IntScale; the 6-bit sub-scales of Q3_K, Q4_K and
// Q5_K are formed as bytes once per super-block, SixBitIntScales8): one f32 conversion per block and row,
// and d / dmin converted once per super-block (Q2_K decode +15-19%, the types with
// float-heavy scales gaining most). More tokens: 16 rows x up to 48 blocks are unpacked once
// into an L1 tile, then tokens stream over it, 4 at a time, in passes whose activations stay
// in L2. Compiled with -mavx2 -mfma -mf16c; called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/packed_weight.h"

namespace cascade::kernels::cpu::internal {
namespace {

constexpr int MaxAbs(const int8_t* table) {
  int m = 0;
  for (int i = 0; i < 16; ++i) m = std::max(m, table[i] < 0 ? -table[i] : int{table[i]});
  return m;
}

// `table` + lift (16 entries), or zeros without a table.
constexpr std::array<int8_t, 16> LiftedTable(const int8_t* table, int lift) {
  std::array<int8_t, 16> out{};
  for (int i = 0; table != nullptr && i < 16; ++i) out[i] = static_cast<int8_t>(table[i] + lift);
  return out;
}

template <DType D>
struct Layout {
  static constexpr bool kQ8 = D == DType::kQ8_0;  // Its codes stored + 128, as u8.
  static constexpr CodeFormat kFormat = kQ8 ? CodeFormat{.bits = 8} : CodeFormatOf(D);
  static constexpr PackedGeometry kGeo = PackedGeometryOf(D);
  static constexpr int kHalves = PackedWeight::Halves(D);
  static constexpr bool kTable = kFormat.table != nullptr;
  // A table whose values are small (MXFP4's E2M1, |V| <= 12) is lifted to unsigned, V +
  // kLift, so that `vpmaddubsw` takes it as it takes codes, without an |v| per operand and a
  // `vpsignb` per operand and token; the lift comes back as a fixed offset, -kLift x d.
  // (IQ4_NL's values reach 127: V + 127 times 127 overflows the int16 pair sums.)
  static constexpr int kLift = kTable && MaxAbs(kFormat.table) <= 63 ? MaxAbs(kFormat.table) : 0;
  static constexpr std::array<int8_t, 16> kLut = LiftedTable(kFormat.table, kLift);
  // Operands held as signed values (unlifted tables, and Q8_0's codes - 128), multiplied
  // as |v|.
  static constexpr bool kSigned = (kTable && kLift == 0) || kQ8;
  static constexpr bool kStoredMin = kFormat.stored_min;
  // How many `vpmaddubsw` results (each at most 2 x 128 x the largest |code value|) add up
  // in int16 without overflow: 8 for codes of up to 4 bits, 4 for 5 and for the lifted
  // MXFP4 (up to 24), 2 for 6, 1 for IQ4's table and Q8_0.
  static constexpr int kMaxAbs =
      kQ8 ? 127 : (kTable ? (kLift != 0 ? 2 * kLift : MaxAbs(kFormat.table)) : (1 << kFormat.bits) - 1);
  static constexpr int kSum16 = std::clamp(32767 / (256 * kMaxAbs), 1, 8);
  // x = d * V(code) + m with m = kOffsetFactor * (the offset vector): the stored min, or
  // the type's fixed multiple of d (the lift for a lifted table, none for the others).
  static constexpr float kOffsetFactor = kStoredMin ? 1.0f : (kLift != 0 ? -kLift : kFormat.min_factor);
  static constexpr bool kOffset = kStoredMin || kOffsetFactor != 0.0f;
  // The super-block types' GEMV applies their integer sub-scales to the int16 products
  // (IntScales8) and their fixed offset, min_factor x the sub-scale, in int32 as a left
  // shift by kMinShift (min_factor is -4 or -32 there).
  static constexpr bool kIntScales = kFormat.sub_scales != SubScales::kNone;
  static constexpr int kMinShift = kFormat.min_factor == -4.0f ? 2 : kFormat.min_factor == -32.0f ? 5 : 0;
  static_assert(!kIntScales || kStoredMin || kFormat.min_factor == 0.0f || kMinShift != 0);
  static_assert(!kIntScales || kLift == 0);
};

inline __m256i Load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m256i Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Bits [p, p + 8) of each byte of v moved to [p + s, ...): a 16-bit shift, which leaks a
// neighbour byte's bits only where the caller's AND drops them.
inline __m256i ShiftBits(__m256i v, int s) { return s >= 0 ? _mm256_slli_epi16(v, s) : _mm256_srli_epi16(v, -s); }

// Ors bit kPos into the bytes of lo (elements 4k..4k+3 of the 8 rows of half rh) and hi
// (16+4k..) where the mask plane at `plane` has it: the 5-bit codes' fifth bit (kPos 4; the
// 3-bit codes' third goes in with their fields, UnpackBlock). Byte 4 i + j of the plane
// holds in bit 2 k + h the bit of code 16 h + 4 k + j of row i (packed_weight.h), so the
// half's bytes are at 32 rh, and one shift and one AND put an operand's bits in place. The
// shifts' leaks stay outside kPos: left by at most kPos (into bits below it), right by at
// most 7 - kPos (into bits above).
template <int kPos>
inline void AddMaskedBit(const uint8_t* plane, int k, int rh, __m256i& lo, __m256i& hi) {
  const __m256i p = Load256(plane + 32 * rh), bit = _mm256_set1_epi8(1 << kPos);
  lo = _mm256_or_si256(lo, _mm256_and_si256(ShiftBits(p, kPos - 2 * k), bit));
  hi = _mm256_or_si256(hi, _mm256_and_si256(ShiftBits(p, kPos - 2 * k - 1), bit));
}

// Operands k (elements 4k..4k+3) and 4 + k (16 + 4k..) of rows [8 rh, 8 rh + 8) of the
// packed block at q (packed_weight.h), one dword lane per row: u8 codes, or the table's
// values. Not for the 3-bit codes (UnpackBlock unpacks those a whole block at a time).
template <DType D>
inline void UnpackPair(const uint8_t* q, int k, int rh, __m256i& lo, __m256i& hi) {
  using L = Layout<D>;
  if constexpr (L::kQ8) {  // 8 chunks of 64 bytes: chunk o holds elements 4 o .. 4 o + 3.
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    lo = _mm256_xor_si256(Load256(q + 64 * k + 32 * rh), flip);
    hi = _mm256_xor_si256(Load256(q + 64 * (4 + k) + 32 * rh), flip);
  } else if constexpr (L::kFormat.bits == 2) {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    lo = _mm256_and_si256(_mm256_srli_epi16(Load256(q + 32 * rh), 2 * k), low2);
    hi = _mm256_and_si256(_mm256_srli_epi16(Load256(q + 64 + 32 * rh), 2 * k), low2);
  } else {
    static_assert(L::kFormat.bits >= 4);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i v = Load256(q + 64 * k + 32 * rh);
    lo = _mm256_and_si256(v, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (L::kFormat.bits == 5) {
      AddMaskedBit<4>(q + 256, k, rh, lo, hi);
    } else if constexpr (L::kFormat.bits == 6) {
      // Bits [2k, 2k + 2) of each byte to [4, 6): a 16-bit shift leaks neighbour bits only
      // outside 0x30.
      const __m256i m30 = _mm256_set1_epi8(0x30);
      const __m256i plo = Load256(q + 256 + 32 * rh), phi = Load256(q + 320 + 32 * rh);
      const __m256i slo = 2 * k <= 4 ? _mm256_slli_epi16(plo, 4 - 2 * k) : _mm256_srli_epi16(plo, 2 * k - 4);
      const __m256i shi = 2 * k <= 4 ? _mm256_slli_epi16(phi, 4 - 2 * k) : _mm256_srli_epi16(phi, 2 * k - 4);
      lo = _mm256_or_si256(lo, _mm256_and_si256(slo, m30));
      hi = _mm256_or_si256(hi, _mm256_and_si256(shi, m30));
    }
    if constexpr (L::kTable) {  // The table's 16 values (lifted or signed), one 128-bit load.
      const __m256i lut =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(L::kLut.data())));
      lo = _mm256_shuffle_epi8(lut, lo);
      hi = _mm256_shuffle_epi8(lut, hi);
    }
  }
}

// All 8 operands w[o] (UnpackPair's lo as w[k], hi as w[4 + k]) of rows [8 rh, 8 rh + 8)
// of the packed block at q. The 3-bit codes first merge each 2-bit field with its third
// bit for two k at once (a byte then holds the codes of k and k + 2, or k + 1 and k + 3, in
// bits 0-2 and 4-6), 29 operations against UnpackPair's 37 (Q3_K's GEMV is bound by them).
template <DType D>
inline void UnpackBlock(const uint8_t* q, int rh, __m256i w[8]) {
  if constexpr (Layout<D>::kFormat.bits == 3) {
    const __m256i a0 = Load256(q + 32 * rh), a1 = Load256(q + 64 + 32 * rh), b = Load256(q + 128 + 32 * rh);
    const auto mask = [](int m) { return _mm256_set1_epi8(static_cast<char>(m)); };
    const auto both = [&](__m256i v, __m256i& low, __m256i& high) {  // Bits 0-2 and 4-6.
      low = _mm256_and_si256(v, mask(0x07));
      high = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask(0x07));
    };
    // Fields k = 0, 2 (bits 0-1, 4-5) with third bits 2k (lo) or 2k + 1 (hi) moved to 2, 6;
    // then k = 1, 3 shifted down by 2, their third bits 2k (lo) at 2, 6 already, or 2k + 1
    // (hi) one above. The 16-bit shifts move bits across bytes only where the masks drop them.
    const __m256i lo02 =
        _mm256_or_si256(_mm256_and_si256(a0, mask(0x33)), _mm256_slli_epi16(_mm256_and_si256(b, mask(0x11)), 2));
    const __m256i lo13 =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a0, 2), mask(0x33)), _mm256_and_si256(b, mask(0x44)));
    const __m256i hi02 =
        _mm256_or_si256(_mm256_and_si256(a1, mask(0x33)), _mm256_slli_epi16(_mm256_and_si256(b, mask(0x22)), 1));
    const __m256i hi13 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a1, 2), mask(0x33)),
                                         _mm256_and_si256(_mm256_srli_epi16(b, 1), mask(0x44)));
    both(lo02, w[0], w[2]);
    both(lo13, w[1], w[3]);
    both(hi02, w[4], w[6]);
    both(hi13, w[5], w[7]);
  } else {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) UnpackPair<D>(q, k, rh, w[k], w[4 + k]);
  }
}

// The 6-bit sub-scales (packed_weight.h, kSixBitPairBytes), rows [8 rh, 8 rh + 8): the
// values s (0: scales, 1: mins or Q3_K's half 1) of blocks 4 q .. 4 q + 3 as bytes of the row lanes
// (block 4 q + k in byte k), the low nibbles joined with the high bits moved to bits 4-5.
inline __m256i SixBitPairLanes8(const uint8_t* p, int s, int q, int rh) {
  const __m256i low = _mm256_srl_epi32(Load256(p + 64 * s + 32 * rh), _mm_cvtsi32_si128(4 * q));
  const __m256i high = _mm256_srl_epi32(Load256(p + 128 + 32 * rh), _mm_cvtsi32_si128(2 * (2 * s + q)));
  return _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi8(0x0f)),
                         _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi8(0x03)), 4));
}

// All of a super-block's as those lanes: out + 64 (2 s + q) + 32 rh, so that block t's
// value of a row is byte t % 4 of its dword at out + 64 (2 s + t / 4).
inline void SixBitPairBytes(const uint8_t* p, uint8_t* out) {
  for (int v = 0; v < 4; ++v) {
    for (int rh = 0; rh < 2; ++rh) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * v + 32 * rh), SixBitPairLanes8(p, v / 2, v % 2, rh));
    }
  }
}

// Byte t % 4 of each dword of `lanes` (a SixBitPairLanes8 vector of block t's 4) as int32.
inline __m256i LaneByte(__m256i lanes, int t) {
  return _mm256_and_si256(_mm256_srl_epi32(lanes, _mm_cvtsi32_si128(8 * (t % 4))), _mm256_set1_epi32(0xff));
}

// The 8 rows' (half rh's) scale dw[h] and offset vector ow[h] of each half h of block b
// (x = dw * V + kOffsetFactor * ow): f16 vectors, or for the super-block types the integer
// sub-scales times the super-block's f16 d (and -dmin), ggml's own f32 products.
template <DType D>
inline void Scales8(const uint8_t* g, int64_t nb, int64_t b, int rh, __m256 dw[2], __m256 ow[2]) {
  using L = Layout<D>;
  const uint8_t* s = g + L::kGeo.ScaleAt(nb, b);
  if constexpr (D == DType::kMXFP4) {  // Exponent bytes (packed_weight.h).
    const __m128i e = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 8 * rh));
    dw[0] = ow[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(e), 23));
  } else if constexpr (L::kFormat.sub_scales == SubScales::kNone) {
    dw[0] = LoadF16x8(s + 16 * rh);
    ow[0] = L::kStoredMin ? LoadF16x8(s + 32 + 16 * rh) : dw[0];
  } else {
    const uint8_t* sup = g + L::kGeo.SuperAt(b / kBlocksPerSuper);
    const __m256 d = LoadF16x8(sup + 16 * rh);
    if constexpr (L::kFormat.sub_scales == SubScales::kSixBitPairs) {
      const uint8_t* p = g + L::kGeo.SubAt(b / kBlocksPerSuper);
      const int t = static_cast<int>(b % kBlocksPerSuper);
      const auto value = [&](int s) {  // Less the bias Q3_K stores its signed scales with.
        const __m256i v = LaneByte(SixBitPairLanes8(p, s, t / 4, rh), t);
        return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(L::kFormat.sub_bias)));
      };
      if constexpr (L::kStoredMin) {
        dw[0] = _mm256_mul_ps(value(0), d);
        ow[0] = _mm256_mul_ps(value(1), _mm256_sub_ps(_mm256_setzero_ps(), LoadF16x8(sup + 32 + 16 * rh)));
      } else {  // Q3_K: the two halves' scales.
        for (int h = 0; h < 2; ++h) ow[h] = dw[h] = _mm256_mul_ps(value(h), d);
      }
    } else if constexpr (L::kFormat.sub_scales == SubScales::kNibbles) {
      const __m256 m = _mm256_sub_ps(_mm256_setzero_ps(), LoadF16x8(sup + 32 + 16 * rh));
      for (int h = 0; h < 2; ++h) {
        const __m256i both =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * h + 8 * rh)));
        dw[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(both, _mm256_set1_epi32(0x0f))), d);
        ow[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(both, 4)), m);
      }
    } else {
      for (int h = 0; h < L::kHalves; ++h) {
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * h + 8 * rh));
        dw[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
        ow[h] = dw[h];
      }
    }
  }
}

// The int16 pair products of operand w (u8 codes, or signed table values with wa = |w|)
// with the broadcast activations x.
template <DType D>
inline __m256i Product(__m256i w, __m256i wa, __m256i x) {
  if constexpr (Layout<D>::kSigned) {
    return _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w));
  } else {
    return _mm256_maddubs_epi16(w, x);
  }
}

// The int32 sums of p16's pairs, each times its multiplier in `mult` (ones, or a sub-scale).
inline __m256i Widen(__m256i p16, __m256i mult) { return _mm256_madd_epi16(p16, mult); }

// Adds the int16 products p of step k into `part`, and `part` widened by `mult` into the
// int32 `sum` every N steps (k is a constant once the caller's loop is unrolled).
template <int N>
inline void Accumulate(int k, __m256i p, __m256i mult, __m256i& part, __m256i& sum) {
  part = k % N == 0 ? p : _mm256_add_epi16(part, p);
  if (k % N == N - 1) sum = _mm256_add_epi32(sum, Widen(part, mult));
}

// One half-row's block dot products for one token: sums[h] (int32 per row) of half h,
// given the 8 operands w[o] (o = k: elements 4k.., o = 4 + k: 16 + 4k..) and |w| for
// tables, the token's 32 activations of the block at x, and each half's int16 multipliers
// (ones, or IntScales8's sub-scales, so that the sums come out times them).
template <DType D>
inline void BlockSums(const __m256i w[8], const __m256i wa[8], const int8_t* x, const __m256i mult[2],
                      __m256i sums[2]) {
  using L = Layout<D>;
  __m256i part[2];
  sums[0] = sums[1] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m256i plo = Product<D>(w[k], wa[k], Bcast(x + 4 * k));
    const __m256i phi = Product<D>(w[4 + k], wa[4 + k], Bcast(x + 16 + 4 * k));
    if constexpr (L::kHalves == 2) {
      Accumulate<std::min(4, L::kSum16)>(k, plo, mult[0], part[0], sums[0]);
      Accumulate<std::min(4, L::kSum16)>(k, phi, mult[1], part[1], sums[1]);
    } else if constexpr (L::kSum16 >= 2) {
      Accumulate<std::min(4, L::kSum16 / 2)>(k, _mm256_add_epi16(plo, phi), mult[0], part[0], sums[0]);
    } else {
      sums[0] = _mm256_add_epi32(sums[0], _mm256_add_epi32(Widen(plo, mult[0]), Widen(phi, mult[0])));
    }
  }
}

// Multipliers of one for BlockSums (the float-scaled paths).
inline void Ones(__m256i mult[2]) { mult[0] = mult[1] = _mm256_set1_epi16(1); }

// The super-block types' integer sub-scales of rows [8 rh, 8 rh + 8) of a block whose
// sub-scale bytes are at s (packed_weight.h), for the GEMV: mult[h], each row's sub-scale
// of half h in both int16 of its dword (BlockSums' multipliers), and `off`, per row a pair
// of int16 to meet the token's (sum of quants of half 0, of half 1) in one `vpmaddwd`: the
// two halves' mins (Q2_K) or sub-scales (Q3_K, Q6_K, whose fixed offset is min_factor x
// the sub-scale), or the block's min twice (Q4_K, Q5_K). IQ4_XS has no offset.
template <DType D>
inline void IntScales8(const uint8_t* s, int rh, __m256i mult[2], __m256i& off) {
  using L = Layout<D>;
  constexpr bool kSignedScales = L::kFormat.sub_scales == SubScales::kI8;
  const auto bytes8 = [](const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); };
  const auto widen = [](__m128i v) { return kSignedScales ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v); };
  if constexpr (L::kHalves == 2) {
    // Row r's bytes of halves 0 and 1 side by side: dword r = (byte of half 0, of half 1).
    __m256i pairs = widen(_mm_unpacklo_epi8(bytes8(s + 8 * rh), bytes8(s + 16 + 8 * rh)));
    off = pairs;
    if constexpr (L::kFormat.sub_scales == SubScales::kNibbles) {  // Scale low, min high.
      off = _mm256_srli_epi16(pairs, 4);
      pairs = _mm256_and_si256(pairs, _mm256_set1_epi16(0x0f));
    }
    // Each dword's int16 h in both of its halves.
    const __m256i dup0 = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8,
                                          9, 8, 9, 12, 13, 12, 13);
    const __m256i dup1 = _mm256_add_epi8(dup0, _mm256_set1_epi8(2));
    mult[0] = _mm256_shuffle_epi8(pairs, dup0);
    mult[1] = _mm256_shuffle_epi8(pairs, dup1);
  } else {
    const __m128i v = bytes8(s + 8 * rh);
    mult[0] = mult[1] = widen(_mm_unpacklo_epi8(v, v));
    if constexpr (L::kStoredMin) {
      const __m128i m = bytes8(s + 16 + 8 * rh);
      off = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    } else {
      off = _mm256_setzero_si256();
    }
  }
}

// The block's contribution for one token: acc += each half's sums times dw x xd, then
// oacc += each half's offset vector times its activation sum. (The AVX-512 kernels now sum
// in other orders: a fixed offset in their integer chains, Q2_K / Q3_K's halves paired;
// the two ISAs agree within f32 rounding, not bit for bit.) The GEMV keeps
// the offsets apart (scaled by kOffsetFactor at the end); the tiles pass acc as oacc.
template <DType D>
inline void Scale(const __m256i sums[2], const __m256 dw[2], const __m256 ow[2], float xd, const float* xs, __m256& acc,
                  __m256& oacc) {
  using L = Layout<D>;
  const __m256 sx = _mm256_set1_ps(xd);
#pragma GCC unroll 2
  for (int h = 0; h < L::kHalves; ++h)
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[h]), _mm256_mul_ps(dw[h], sx), acc);
  if constexpr (L::kOffset) {
#pragma GCC unroll 2
    for (int h = 0; h < L::kHalves; ++h) oacc = _mm256_fmadd_ps(ow[h], _mm256_set1_ps(xs[h]), oacc);
  }
}

// |w| of each operand (signed operands only; the codes are already unsigned).
template <DType D>
inline void Magnitudes(const __m256i w[8], __m256i wa[8]) {
  if constexpr (Layout<D>::kSigned) {
#pragma GCC unroll 8
    for (int o = 0; o < 8; ++o) wa[o] = _mm256_abs_epi8(w[o]);
  }
}

inline void Store(float* o, int rows, __m256 v) {
  if (rows >= 8) {
    _mm256_storeu_ps(o, v);
  } else if (rows > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::copy_n(tmp, rows, o);
  }
}

// ---- Few tokens: each block unpacked once, every token meets it ---------------------------

// The super-block types' f32 d (and -dmin) of the group's 16 rows for super-block sb, into
// d[16] (and m[16]): converted once per 8 blocks rather than per block.
template <DType D>
inline void SuperScales(const uint8_t* g, int64_t sb, float* d, float* m) {
  const uint8_t* sup = g + Layout<D>::kGeo.SuperAt(sb);
  for (int rh = 0; rh < 2; ++rh) {
    _mm256_store_ps(d + 8 * rh, LoadF16x8(sup + 16 * rh));
    if constexpr (Layout<D>::kStoredMin) {
      _mm256_store_ps(m + 8 * rh, _mm256_sub_ps(_mm256_setzero_ps(), LoadF16x8(sup + 32 + 16 * rh)));
    }
  }
}

// IntScales8 for the 6-bit types from a super-block's SixBitPairBytes at `sub`: block t's
// values of each row in both int16 halves of its dword, one `vpshufb` each (byte t % 4 of
// the dword to bytes 0 and 2, zeros to 1 and 3). Q4_K / Q5_K: the scale is the multiplier
// and the min the offset; Q3_K: the halves' scales (less their bias) are the multipliers,
// and its offset pair is (half 0's, half 1's), as IntScales8 makes it.
template <DType D>
inline void SixBitIntScales8(const uint8_t* sub, int t, int rh, __m256i mult[2], __m256i& off) {
  const __m256i dup0 = _mm256_setr_epi8(0, -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12, -128, 0,
                                        -128, 0, -128, 4, -128, 4, -128, 8, -128, 8, -128, 12, -128, 12, -128);
  const __m256i dup = _mm256_add_epi8(dup0, _mm256_set1_epi8(static_cast<char>(t % 4)));
  const uint8_t* v = sub + 64 * (t / 4) + 32 * rh;
  const __m256i v0 = _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(v)), dup);
  const __m256i v1 = _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(v + 128)), dup);
  if constexpr (Layout<D>::kStoredMin) {
    mult[0] = mult[1] = v0;
    off = v1;
  } else {
    const __m256i bias = _mm256_set1_epi16(static_cast<int16_t>(Layout<D>::kFormat.sub_bias));
    mult[0] = _mm256_sub_epi16(v0, bias);
    mult[1] = _mm256_sub_epi16(v1, bias);
    off = _mm256_blend_epi16(mult[0], mult[1], 0xaa);
  }
}

// The block's contribution for one token on the integer-scaled path: `sums` already carry
// the sub-scales (BlockSums with IntScales8's multipliers), so the fixed offsets join them
// in int32 (a shift), and a stored min's term is one more `vpmaddwd` with the token's
// integer sums per half `xi` (a dword: half 0, half 1); then acc += S x d x xd and
// oacc += O x (-dmin) x xd. Exact integers until the one conversion per block and row.
// (One chain for both, as the tiles have, measured 4% slower on Q2_K at one thread.)
template <DType D>
inline void IntScale(const __m256i sums[2], __m256i off, const float* d, const float* m, float xd, const int16_t* xi,
                     __m256& acc, __m256& oacc) {
  using L = Layout<D>;
  const __m256 sx = _mm256_set1_ps(xd);
  __m256i total = L::kHalves == 2 ? _mm256_add_epi32(sums[0], sums[1]) : sums[0];
  __m256i o;
  if constexpr (L::kOffset) {
    o = _mm256_madd_epi16(off, Bcast(reinterpret_cast<const int8_t*>(xi)));
    if constexpr (!L::kStoredMin) total = _mm256_sub_epi32(total, _mm256_slli_epi32(o, L::kMinShift));
  }
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(_mm256_load_ps(d), sx), acc);
  if constexpr (L::kStoredMin)
    oacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(o), _mm256_mul_ps(_mm256_load_ps(m), sx), oacc);
}

// Rows [r0, r_end) of the group at r0 x tokens [t0, t0 + T).
template <DType D, int T>
void GemvGroup(const GemmArgs& a, int64_t r0, int64_t r_end, int64_t t0) {
  using L = Layout<D>;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / kPackRows) * a.w_row_bytes;
  const int64_t prefetch = PackedPrefetchBytes(), stream = L::kGeo.StreamBytesPerBlock();
  __m256 acc[T][2], oacc[T][2];
  alignas(32) float sup_d[16] = {}, sup_m[16] = {};  // Filled at each super-block (b % 8 == 0).
  constexpr bool kSixBitPairs = L::kFormat.sub_scales == SubScales::kSixBitPairs;
  alignas(32) uint8_t sub[kSixBitPairs ? 256 : 1];  // The 6-bit types: the super-block's sub-scales as bytes.
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = oacc[t][0] = oacc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pf = g + prefetch + b * stream;
    for (int64_t l = 0; l < stream; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T1);
    if constexpr (L::kIntScales) {
      if (b % kBlocksPerSuper == 0) {
        SuperScales<D>(g, b / kBlocksPerSuper, sup_d, sup_m);
        if constexpr (kSixBitPairs) SixBitPairBytes(g + L::kGeo.SubAt(b / kBlocksPerSuper), sub);
      }
    }
    const uint8_t* q = g + L::kGeo.QuantAt(b);
#pragma GCC unroll 2
    for (int rh = 0; rh < 2; ++rh) {
      __m256i w[8], wa[8];
      UnpackBlock<D>(q, rh, w);
      Magnitudes<D>(w, wa);
      __m256i mult[2], off;
      __m256 dw[2], ow[2];
      if constexpr (L::kIntScales) {
        if constexpr (kSixBitPairs) {
          SixBitIntScales8<D>(sub, static_cast<int>(b % kBlocksPerSuper), rh, mult, off);
        } else {
          IntScales8<D>(g + L::kGeo.ScaleAt(nb, b), rh, mult, off);
        }
      } else {
        Ones(mult);
        Scales8<D>(g, nb, b, rh, dw, ow);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int64_t tb = (t0 + t) * nb + b;
        __m256i sums[2];
        BlockSums<D>(w, wa, a.xq + tb * 32, mult, sums);
        if constexpr (L::kIntScales) {
          IntScale<D>(sums, off, sup_d + 8 * rh, sup_m + 8 * rh, a.xd[tb], a.xi16 + 2 * tb, acc[t][rh], oacc[t][rh]);
        } else {
          const float* xs = L::kHalves == 2 ? a.xs16 + 2 * tb : a.xs + tb;
          Scale<D>(sums, dw, ow, a.xd[tb], xs, acc[t][rh], oacc[t][rh]);
        }
      }
    }
  }
  const int rows = static_cast<int>(std::min<int64_t>(kPackRows, r_end - r0));
  constexpr bool kApart = L::kOffset && (!L::kIntScales || L::kStoredMin);
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float* o = a.out + (t0 + t) * a.ld_out + r0;
    const __m256 factor = _mm256_set1_ps(L::kOffsetFactor);
    Store(o, rows, kApart ? _mm256_fmadd_ps(oacc[t][0], factor, acc[t][0]) : acc[t][0]);
    Store(o + 8, rows - 8, kApart ? _mm256_fmadd_ps(oacc[t][1], factor, acc[t][1]) : acc[t][1]);
  }
}

template <DType D, int T>
void GemvTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  for (int64_t r = rb; r < re; r += kPackRows) GemvGroup<D, T>(a, r, re, t0);
}

template <DType D>
void Gemv(const GemmArgs& a, int64_t rb, int64_t re) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) GemvTokens<D, 4>(a, rb, re, t);
  switch (a.n_tokens - t) {
    case 3: GemvTokens<D, 3>(a, rb, re, t); break;
    case 2: GemvTokens<D, 2>(a, rb, re, t); break;
    case 1: GemvTokens<D, 1>(a, rb, re, t); break;
    default: break;
  }
}

// ---- Many tokens: tiles unpacked once into L1 -------------------------------------------

constexpr int kTileBlocks = 48;  // 16 rows x 48 blocks: 24 KiB of operands.
constexpr int kTokenGroup = 4;

struct alignas(32) Tile {
  // Half rh, block b, operand o: 32 bytes (8 rows x 4 codes) at w + ((rh * kTileBlocks + b)
  // * 8 + o) * 32.
  uint8_t w[2 * kTileBlocks * 8 * 32];
  // Scale and offset (already times kOffsetFactor) of half rh, block b, half h, 8 rows.
  float d[2 * kTileBlocks * 2 * 8];
  float off[2 * kTileBlocks * 2 * 8];
  static constexpr int64_t W(int rh, int b) { return (rh * kTileBlocks + b) * 8 * 32; }
  static constexpr int64_t S(int rh, int b, int h) { return ((rh * kTileBlocks + b) * 2 + h) * 8; }
};

template <DType D>
void BuildTile(const GemmArgs& a, int64_t r0, int64_t b0, int n_blk, Tile* tile) {
  using L = Layout<D>;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / kPackRows) * a.w_row_bytes;
  for (int b = 0; b < n_blk; ++b) {
    const uint8_t* q = g + L::kGeo.QuantAt(b0 + b);
    for (int rh = 0; rh < 2; ++rh) {
      __m256i w[8];
      UnpackBlock<D>(q, rh, w);
      auto* tw = reinterpret_cast<__m256i*>(tile->w + Tile::W(rh, b));
      for (int o = 0; o < 8; ++o) _mm256_store_si256(tw + o, w[o]);
      __m256 dw[2], ow[2];
      Scales8<D>(g, nb, b0 + b, rh, dw, ow);
      for (int h = 0; h < L::kHalves; ++h) {
        _mm256_store_ps(tile->d + Tile::S(rh, b, h), dw[h]);
        _mm256_store_ps(tile->off + Tile::S(rh, b, h), _mm256_mul_ps(ow[h], _mm256_set1_ps(L::kOffsetFactor)));
      }
    }
  }
}

// Tokens [t0, t0 + T) x the tile's rows of half rh over its n_blk blocks (from block b0 of
// the activations); adds into `out` when `accumulate`.
template <DType D, int T>
void TileTokens(const GemmArgs& a, const Tile& tile, int rh, int64_t b0, int n_blk, int64_t r0, int rows, int64_t t0,
                bool accumulate) {
  using L = Layout<D>;
  const int64_t nb = a.n_in / 32;
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int b = 0; b < n_blk; ++b) {
    const auto* tw = reinterpret_cast<const __m256i*>(tile.w + Tile::W(rh, b));
    __m256i w[8], wa[8];
#pragma GCC unroll 8
    for (int o = 0; o < 8; ++o) w[o] = _mm256_load_si256(tw + o);
    Magnitudes<D>(w, wa);
    __m256i ones[2];
    Ones(ones);
    __m256 dw[2], ow[2];
#pragma GCC unroll 2
    for (int h = 0; h < L::kHalves; ++h) {
      dw[h] = _mm256_load_ps(tile.d + Tile::S(rh, b, h));
      ow[h] = _mm256_load_ps(tile.off + Tile::S(rh, b, h));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int64_t tb = (t0 + t) * nb + b0 + b;
      __m256i sums[2];
      BlockSums<D>(w, wa, a.xq + tb * 32, ones, sums);
      const float* xs = L::kHalves == 2 ? a.xs16 + 2 * tb : a.xs + tb;
      // One chain: both halves' products, then both offsets (the tile's are already times
      // kOffsetFactor).
      Scale<D>(sums, dw, ow, a.xd[tb], xs, acc[t], acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float* o = a.out + (t0 + t) * a.ld_out + r0 + 8 * rh;
    const int n = std::min(8, rows - 8 * rh);  // >= 1: GemmTiled runs half 1 only past 8 rows.
    __m256 v = acc[t];
    if (accumulate) {
      alignas(32) float prev[8] = {};
      std::copy_n(o, n, prev);
      v = _mm256_add_ps(v, _mm256_load_ps(prev));
    }
    Store(o, n, v);
  }
}

// Activation bytes a pass over the rows keeps in L2: its tokens' quants, scales and sums
// (1.375 bytes an element). Every row group reads them all, so a prefill's whole activation
// matrix (512 tokens x 2048 inputs: 1.4 MB) came from L3 once per 16 rows.
constexpr int64_t kPassActivationBytes = 256 * 1024;

template <DType D>
void GemmTiled(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / 32;
  const int64_t pass = std::max<int64_t>(16, kPassActivationBytes / (a.n_in * 11 / 8) / kTokenGroup * kTokenGroup);
  Tile tile;
  for (int64_t tp = 0; tp < a.n_tokens; tp += pass) {
    const int64_t tp_end = std::min(a.n_tokens, tp + pass);
    for (int64_t r0 = rb; r0 < re; r0 += kPackRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kPackRows, re - r0));
      for (int64_t b0 = 0; b0 < nb; b0 += kTileBlocks) {
        const int n_blk = static_cast<int>(std::min<int64_t>(kTileBlocks, nb - b0));
        BuildTile<D>(a, r0, b0, n_blk, &tile);
        for (int rh = 0; rh < (rows > 8 ? 2 : 1); ++rh) {
          int64_t t = tp;
          for (; t + kTokenGroup <= tp_end; t += kTokenGroup) {
            TileTokens<D, kTokenGroup>(a, tile, rh, b0, n_blk, r0, rows, t, b0 > 0);
          }
          switch (tp_end - t) {
            case 3: TileTokens<D, 3>(a, tile, rh, b0, n_blk, r0, rows, t, b0 > 0); break;
            case 2: TileTokens<D, 2>(a, tile, rh, b0, n_blk, r0, rows, t, b0 > 0); break;
            case 1: TileTokens<D, 1>(a, tile, rh, b0, n_blk, r0, rows, t, b0 > 0); break;
            default: break;
          }
        }
      }
    }
  }
}

// Below this many tokens unpacking into a tile costs more than it saves.
constexpr int64_t kMinTiledTokens = 6;

}  // namespace

template <DType D>
void GemmPackedAvx2(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens >= kMinTiledTokens) {
    GemmTiled<D>(a, rb, re);
  } else {
    Gemv<D>(a, rb, re);
  }
}

#define CASCADE_GEMM_PACKED_AVX2(D) template void GemmPackedAvx2<D>(const GemmArgs&, int64_t, int64_t);
CASCADE_FOR_EACH_PACKED_DTYPE(CASCADE_GEMM_PACKED_AVX2)
#undef CASCADE_GEMM_PACKED_AVX2

}  // namespace cascade::kernels::cpu::internal
