// AVX-512 VNNI matrix-vector kernels over packed weights (packed_weight.h): Q8_0 and every
// block-code type, for the decode path (1 token) and short verify steps (up to 5 tokens).
//
// One group of 16 rows at a time, each row a dword lane of a zmm, accumulators in registers.
// Per block of 32 weights: the 4-6-bit code types load 4 zmm of nibbles and split each
// into its low (elements 4k..4k+3 of all 16 rows) and high (16+4k..) nibbles; a fifth code
// bit is one masked byte add per operand from a 64-bit mask loaded straight into a
// k-register, bits 4-5 one shift and one `vpternlogd`, 2-bit codes (Q2_K, Q3_K) one shift
// and one AND from 2 zmm, and IQ4's table is one `vpshufb` (its values stored + 128, as
// u8) (packed_avx512.h). Q8_0 loads 8 zmm already biased to u8. Each of the 8 operands
// meets a broadcast dword of the token's Q8 activations in one `vpdpbusd` (two chains per
// half), then the block's 16 scales times the activation scale give one FMA into the row
// accumulators per scale (two for the 16-element-group types), and one more FMA adds the
// offset term: m * sum(x) for the types with a stored min, otherwise d * sum(x) times the
// type's fixed factor at the end (-8 Q4_0, -16 Q5_0, -32 Q6_K, -4 Q3_K, -128 Q8_0 and IQ4).
// The scales are one f16 vector per block (`vcvtph2ps`; MXFP4's exponent bytes widened and
// shifted into place), or for the super-block types 16 bytes of integer sub-scales per
// block widened and converted (`vpmovzxbd`, `vcvtdq2ps`; the 6-bit ones of Q3_K, Q4_K and
// Q5_K formed as bytes of the row lanes once per super-block, one byte per block) times the
// super-block's f16 d, loaded once per 8 blocks (BlockScales). Q2_K and Q3_K instead apply
// their sub-scales in integers (GemvGroupPairs, below).
// No gathers, no horizontal sums: the 16 results are one masked store.
//
// The group stream is contiguous, so a software prefetch PackedPrefetchBytes() ahead of the
// block being read covers the next groups, into L2 (`_MM_HINT_T1`). Measured streaming packed
// weights out of cache on one core (2-core Intel Xeon VM, AVX-512 VNNI; 128 Q4_K matrices
// [1024, 1024] as MoE experts, and one Q6_K [49152, 1024] LM head; runs interleaved):
// into L1 4 KiB ahead ~12 / ~13 GB/s; into L2 4-8 KiB ~12 / ~15, 16 KiB ~16 / ~19, 32 KiB
// ~16 / ~20 GB/s; two threads 16 KiB into L2 ~21 / ~45 GB/s against ~17 / ~26 into L1;
// Q8_0 alike. A prefetch into L1 that far ahead evicts the lines being used; Intel's
// few outstanding L1 misses per core want the long lead in L2. On the 2-core AMD EPYC VM
// (1 MiB L2 per core), one thread through Llama-3.2-1B's K-type matrices
// (`linear_bench --model=1b`, the chunked super-block layout, medians of 2-4 interleaved
// runs, GB/s of file bytes): Q4_K 17.6 / 20.8 / 24.7 / 27.4 / 28.4 / 29.6 / 27.0 / 24.8 /
// 21.6 / 22.0 / 21.9 at 3 / 4 / 5 / 5.5 / 6 / 6.5 / 7 / 7.5 / 8 / 10 / 16 KiB, Q6_K and Q2_K
// alike (Q6_K 30.4, Q2_K 25.7 at 6.5 KiB against 21.8 / 21.5 at 16 KiB); Q8_0 flat at ~21
// from 4.5 to 24 KiB; T0 no better. Hence a distance per vendor.
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/packed_avx512.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cascade::kernels::cpu::internal {
namespace {

inline __m512i Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The 8 broadcast dwords of one token's 32 int8 activations of a block.
struct BlockX {
  __m512i x[8];
  explicit BlockX(const int8_t* p) {
    for (int k = 0; k < 8; ++k) x[k] = Bcast(p + 4 * k);
  }
};

// One block of one group for one token: the 16 rows' dot products with the activations
// (chains ia/ib over elements 0..15, the low nibbles; ha/hb over 16..31), scaled into
// `acc` and the offset term into `oacc`.
template <DType D>
inline void BlockDot(const __m512i w[8], const BlockX& bx, const __m512 dw[2], const __m512 ow[2], float xd,
                     const float* xs, __m512& acc, __m512& oacc) {
  using L = PackedLayout<D>;
  __m512i ia = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bx.x[0]);
  __m512i ib = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bx.x[1]);
  ia = _mm512_dpbusd_epi32(ia, w[2], bx.x[2]);
  ib = _mm512_dpbusd_epi32(ib, w[3], bx.x[3]);
  __m512i ha = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[4], bx.x[4]);
  __m512i hb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[5], bx.x[5]);
  ha = _mm512_dpbusd_epi32(ha, w[6], bx.x[6]);
  hb = _mm512_dpbusd_epi32(hb, w[7], bx.x[7]);
  const __m512 sx = _mm512_set1_ps(xd);
  if constexpr (L::kHalves == 2) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(ia, ib)), _mm512_mul_ps(dw[0], sx), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(ha, hb)), _mm512_mul_ps(dw[1], sx), acc);
    oacc = _mm512_fmadd_ps(ow[0], _mm512_set1_ps(xs[0]), oacc);
    oacc = _mm512_fmadd_ps(ow[1], _mm512_set1_ps(xs[1]), oacc);
  } else {
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(ia, ib), _mm512_add_epi32(ha, hb));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw[0], sx), acc);
    oacc = _mm512_fmadd_ps(ow[0], _mm512_set1_ps(xs[0]), oacc);
  }
}

// Block b of the group at `g` unpacked into its 8 operands, the group's stream prefetched
// `ahead` bytes past it.
template <DType D>
inline void LoadBlock(const uint8_t* g, int64_t b, int64_t ahead, const BlockUnpacker<D>& unpack, __m512i w[8]) {
  using L = PackedLayout<D>;
  const uint8_t* pf = g + ahead + b * L::kStreamPerBlock;
  for (int64_t l = 0; l < L::kStreamPerBlock; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T1);
  unpack(g + L::kGeo.QuantAt(b), w);
}

// Rows [r0, r_end) of the group at r0 x tokens [t0, t0 + T). (Sharing one token's
// broadcasts between two groups measured no faster: broadcasts from memory issue on the
// load ports, and decode is bound by memory.)
template <DType D, int T>
void GemvGroup(const GemmArgs& a, int64_t r0, int64_t r_end, int64_t t0) {
  using L = PackedLayout<D>;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / 16) * a.w_row_bytes;
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  __m512 acc[T], oacc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.n_in;
    xd[t] = a.xd + (t0 + t) * nb;
    xs[t] = L::kHalves == 2 ? a.xs16 + (t0 + t) * 2 * nb : a.xs + (t0 + t) * nb;
    acc[t] = oacc[t] = _mm512_setzero_ps();
  }
  const BlockUnpacker<D> unpack;
  BlockScales<D> scales(g, nb);
  const int64_t prefetch_bytes = PackedPrefetchBytes();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
    LoadBlock<D>(g, b, prefetch_bytes, unpack, w);
    __m512 dw[2], ow[2];
    scales(b, dw, ow);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      BlockDot<D>(w, BlockX(xq[t] + b * 32), dw, ow, xd[t][b], xs[t] + b * L::kHalves, acc[t], oacc[t]);
    }
  }
  const int64_t rows = std::min<int64_t>(16, r_end - r0);
  const __mmask16 m = static_cast<__mmask16>(rows >= 16 ? 0xffff : (1u << static_cast<unsigned>(rows)) - 1);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 v = _mm512_fmadd_ps(oacc[t], _mm512_set1_ps(L::kOffsetFactor), acc[t]);
    _mm512_mask_storeu_ps(a.out + (t0 + t) * a.ld_out + r0, m, v);
  }
}

// Q2_K and Q3_K: codes of at most 3 bits with a sub-scale per 16. A half's sum of products
// fits int16 (16 x 7 x 128, less Q3_K's offset -4 x a sum of 16 quants: |22464|), so both
// halves' int32 sums are packed into one int16 pair per row, and one `vpdpwssd` against
// the rows' sub-scale pairs gives the block's sc0 * S0 + sc1 * S1 in int32: one conversion
// and one FMA by the token's scale a block and token, d applied once per super-block, in
// place of a float sub-scale built, multiplied and added per half (Q2_K's decode was bound
// by them on Intel). Q2_K's min term is likewise one `vpdpwssd` of the rows' min pairs
// with the token's integer sums per 16 (GemmArgs::xi16); Q3_K's offset -4 is subtracted
// from the pair as 4 x those sums.
template <DType D>
inline constexpr bool kIntPairs = PackedWeight::Halves(D) == 2 && CodeFormatOf(D).bits <= 3;

// The 16 rows' sub-scales of block `b`'s two halves (16 bytes each, packed_weight.h) as int16
// pairs, row i in dword i: Q2_K's scale nibbles, its mins into `mn`.
template <DType D>
inline __m512i SubScalePairs(const uint8_t* s, __m512i* mn) {
  alignas(64) static constexpr int16_t kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(s));
  const __m512i idx = _mm512_load_si512(kPairs);
  static_assert(CodeFormatOf(D).sub_scales == SubScales::kNibbles);
  const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_cvtepu8_epi16(bytes));
  *mn = _mm512_srli_epi16(v, 4);
  return _mm512_and_si512(v, _mm512_set1_epi16(0x0f));
}

// Q3_K's sub-scales as SubScalePairs gives them: row i's scales of halves 0 and 1 as the
// int16 pair of dword i. Once per super-block (SixBitHalfBytes) its SixBitPairBytes less
// the bias, as signed bytes; then per block t (SixBitHalfPairs) one `vpshufb` of each half's
// bytes puts byte t % 4 of every dword into the high byte of its int16 (the mask: bytes
// 1 and 3 of dword i select byte 4 i + t % 4 of the 128-bit lane, 0x80 zeroes 0 and 2), a
// blend takes int16 0 from half 0 and int16 1 from half 1, and an arithmetic shift by 8
// sign-extends them: 4 instructions a block (7 with a shift, AND and subtract per value).
template <DType D>
inline void SixBitHalfBytes(const uint8_t* sub, __m512i v[4]) {
  SixBitPairBytes(sub, v);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(CodeFormatOf(D).sub_bias));
  for (int q = 0; q < 4; ++q) v[q] = _mm512_sub_epi8(v[q], bias);
}

struct HalfPairMasks {
  alignas(64) int8_t m[4][64];
  constexpr HalfPairMasks() : m{} {
    for (int t = 0; t < 4; ++t) {
      for (int b = 0; b < 64; ++b)
        m[t][b] = b % 2 == 0 ? static_cast<int8_t>(-128) : static_cast<int8_t>(b % 16 / 4 * 4 + t);
    }
  }
};
inline constexpr HalfPairMasks kHalfPairMasks;

inline __m512i SixBitHalfPairs(const __m512i v[4], int t) {
  const __m512i mask = _mm512_load_si512(kHalfPairMasks.m[t % 4]);
  const __m512i h0 = _mm512_shuffle_epi8(v[t / 4], mask), h1 = _mm512_shuffle_epi8(v[2 + t / 4], mask);
  return _mm512_srai_epi16(_mm512_mask_blend_epi16(0xaaaaaaaa, h0, h1), 8);
}

template <DType D, int T>
void GemvGroupPairs(const GemmArgs& a, int64_t r0, int64_t r_end, int64_t t0) {
  using L = PackedLayout<D>;
  constexpr bool kMin = L::kStoredMin;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / 16) * a.w_row_bytes;
  const int8_t* xq[T];
  const float* xd[T];
  const int16_t* xi[T];
  __m512 out[T], acc[T], macc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.n_in;
    xd[t] = a.xd + (t0 + t) * nb;
    xi[t] = a.xi16 + (t0 + t) * 2 * nb;
    out[t] = acc[t] = macc[t] = _mm512_setzero_ps();
  }
  const BlockUnpacker<D> unpack;
  const int64_t prefetch_bytes = PackedPrefetchBytes();
  const __m512i zero = _mm512_setzero_si512();
  constexpr bool kSixBit = L::kFormat.sub_scales == SubScales::kSixBitPairs;  // Q3_K.
  __m512i six_bit[4];  // Q3_K: the super-block's sub-scales as signed bytes (SixBitHalfBytes).
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
    LoadBlock<D>(g, b, prefetch_bytes, unpack, w);
    __m512i mn, sc;
    if constexpr (kSixBit) {
      if (b % kBlocksPerSuper == 0) SixBitHalfBytes<D>(g + L::kGeo.SubAt(b / kBlocksPerSuper), six_bit);
      sc = SixBitHalfPairs(six_bit, static_cast<int>(b % kBlocksPerSuper));
    } else {
      sc = SubScalePairs<D>(g + L::kGeo.ScaleAt(nb, b), &mn);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockX bx(xq[t] + b * 32);
      __m512i s0 = _mm512_dpbusd_epi32(zero, w[0], bx.x[0]);
      __m512i s1 = _mm512_dpbusd_epi32(zero, w[4], bx.x[4]);
#pragma GCC unroll 4
      for (int k = 1; k < 4; ++k) {
        s0 = _mm512_dpbusd_epi32(s0, w[k], bx.x[k]);
        s1 = _mm512_dpbusd_epi32(s1, w[4 + k], bx.x[4 + k]);
      }
      __m512i pair = _mm512_mask_blend_epi16(0xaaaaaaaa, s0, _mm512_slli_epi32(s1, 16));
      int32_t xi_pair;
      std::memcpy(&xi_pair, xi[t] + 2 * b, 4);
      const __m512i xis = _mm512_set1_epi32(xi_pair);
      if constexpr (!kMin) pair = _mm512_sub_epi16(pair, _mm512_slli_epi16(xis, 2));  // Q3_K's -4.
      const __m512 sx = _mm512_set1_ps(xd[t][b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpwssd_epi32(zero, sc, pair)), sx, acc[t]);
      if constexpr (kMin)
        macc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpwssd_epi32(zero, mn, xis)), sx, macc[t]);
    }
    if (b % kBlocksPerSuper == kBlocksPerSuper - 1) {  // The super-block's d (and dmin).
      const uint8_t* sup = g + L::kGeo.SuperAt(b / kBlocksPerSuper);
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sup)));
      __m512 dmin = _mm512_setzero_ps();
      if constexpr (kMin) dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sup + 32)));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        out[t] = _mm512_fmadd_ps(acc[t], d, out[t]);
        if constexpr (kMin) out[t] = _mm512_fnmadd_ps(macc[t], dmin, out[t]);
        acc[t] = macc[t] = _mm512_setzero_ps();
      }
    }
  }
  const int64_t rows = std::min<int64_t>(16, r_end - r0);
  const __mmask16 m = static_cast<__mmask16>(rows >= 16 ? 0xffff : (1u << static_cast<unsigned>(rows)) - 1);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(a.out + (t0 + t) * a.ld_out + r0, m, out[t]);
}

template <DType D, int T>
void GemvTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  for (int64_t r = rb; r < re; r += 16) {
    if constexpr (kIntPairs<D>) {
      GemvGroupPairs<D, T>(a, r, re, t0);
    } else {
      GemvGroup<D, T>(a, r, re, t0);
    }
  }
}

}  // namespace

template <DType D>
void GemvPackedAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) GemvTokens<D, 4>(a, rb, re, t);
  switch (a.n_tokens - t) {
    case 3: GemvTokens<D, 3>(a, rb, re, t); break;
    case 2: GemvTokens<D, 2>(a, rb, re, t); break;
    case 1: GemvTokens<D, 1>(a, rb, re, t); break;
    default: break;
  }
}

#define CASCADE_GEMV_PACKED(D) template void GemvPackedAvx512<D>(const GemmArgs&, int64_t, int64_t);
CASCADE_FOR_EACH_PACKED_DTYPE(CASCADE_GEMV_PACKED)
#undef CASCADE_GEMV_PACKED

}  // namespace cascade::kernels::cpu::internal
