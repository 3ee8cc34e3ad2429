// AVX-512 VNNI kernels (`vpdpbusd`): Q8_0 / Q4_0 / Q4_1 in the GGUF layout, and every type
// PackedWeight packs.
//
// Few tokens (decode, short verify steps): linear_gemv_avx512.cc over the GGUF layout,
// linear_packed_avx512.cc over weights packed at load (packed_weight.h).
//
// Many tokens (prefill): 16 weight rows x up to 48 blocks are unpacked once into an
// L1-resident tile laid out so that one zmm holds 4 consecutive u8 weights of each of the
// 16 rows; a token's 4 matching activations are a 32-bit broadcast, so 8 `vpdpbusd` give
// the 16 rows' block dot products in the 16 lanes, and 8 tokens share each tile load.
// Where 32 rows remain, two tiles of 24 blocks run together, 4 tokens at a time, each
// broadcast feeding both tiles' `vpdpbusd` (TileTokens<2, ...>).
// Packed weights are already in the tile's row order, so their tiles are the GEMV's block
// unpacking stored to L1 (packed_avx512.h) instead of the GGUF path's scatters; the
// 16-element-group types keep two scales per block in the tile. A type's fixed offset
// enters each dot-product chain as an integer (OffsetSums), a stored min as a float FMA.
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/packed_avx512.h"

// GCC 12 warns about the `_mm512_undefined_*` placeholders inside its own intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cascade::kernels::cpu::internal {
namespace {

enum class Kind { kQ8_0, kQ4_0, kQ4_1 };

template <Kind K>
struct Traits;
template <>
struct Traits<Kind::kQ8_0> {
  using Block = BlockQ8_0;
};
template <>
struct Traits<Kind::kQ4_0> {
  using Block = BlockQ4_0;
};
template <>
struct Traits<Kind::kQ4_1> {
  using Block = BlockQ4_1;
};

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- Many tokens: unpacked tiles ---------------------------------------------------------

constexpr int kTileRows = 16;
constexpr int kTileBlocks = 48;  // 48 x 32 = 1536 elements per K chunk; ~30 KiB of tile.
constexpr int kTokenGroup = 8;

struct alignas(64) Tile {
  // Block b, group k (elements 4k..4k+3), row i: bytes at w[((b * 8 + k) * 16 + i) * 4].
  uint8_t w[kTileBlocks * 8 * kTileRows * 4];
  // Weight scale and, for a stored min, the value of u8 0 (x = d * u + off) per block (or
  // half block, for the 16-element-group types: index 2 b + h) and row; a fixed offset
  // enters the tile's dot products as an integer instead (OffsetSums).
  float d[2 * kTileBlocks * kTileRows];
  float off[2 * kTileBlocks * kTileRows];
};

template <Kind K>
void BuildTile(const GemmArgs& a, int64_t r0, int n_rows, int64_t b0, int n_blk, Tile* tile) {
  using B = typename Traits<K>::Block;
  const __m256i scatter_idx = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  if (n_rows < kTileRows) {
    std::memset(tile->w, 0, static_cast<size_t>(n_blk) * 8 * kTileRows * 4);
    std::memset(tile->d, 0, sizeof(float) * n_blk * kTileRows);
    if constexpr (K == Kind::kQ4_1) std::memset(tile->off, 0, sizeof(float) * n_blk * kTileRows);
  }
  for (int i = 0; i < n_rows; ++i) {
    const B* w = reinterpret_cast<const B*>(a.w + (r0 + i) * a.w_row_bytes) + b0;
    for (int b = 0; b < n_blk; ++b) {
      __m256i v;
      const float d = _cvtsh_ss(w[b].d);
      if constexpr (K == Kind::kQ8_0) {
        v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)), flip);
      } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
        v = _mm256_setr_m128i(_mm_and_si128(q, low4), _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        if constexpr (K == Kind::kQ4_1) tile->off[b * kTileRows + i] = _cvtsh_ss(w[b].m);
      }
      _mm256_i32scatter_epi32(tile->w + (b * 8 * kTileRows + i) * 4, scatter_idx, v, 1);
      tile->d[b * kTileRows + i] = d;
    }
  }
}

// A tile from packed weights (packed_weight.h): rows are already interleaved in the tile's
// order, so this is the block unpacking of the GEMV kernels stored to the tile plus the
// scale conversion; padding rows of the last group arrive as zeros.
template <DType D>
void BuildTileFromPacked(const GemmArgs& a, int64_t r0, int64_t b0, int n_blk, Tile* tile) {
  using L = PackedLayout<D>;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / kTileRows) * a.w_row_bytes;
  const BlockUnpacker<D> unpack;
  BlockScales<D> scales(g, nb);
  for (int b = 0; b < n_blk; ++b) {
    __m512i w[8];
    unpack(g + L::kGeo.QuantAt(b0 + b), w);
    __m512i* t = reinterpret_cast<__m512i*>(tile->w) + b * 8;
    for (int k = 0; k < 8; ++k) _mm512_store_si512(t + k, w[k]);
    __m512 dw[2], ow[2];
    scales(b0 + b, dw, ow);
    for (int h = 0; h < L::kHalves; ++h) {
      const int s = (b * L::kHalves + h) * kTileRows;
      _mm512_store_ps(tile->d + s, dw[h]);
      if constexpr (L::kStoredMin) _mm512_store_ps(tile->off + s, ow[h]);
    }
  }
}

// The fixed offset of a type without a stored min (x = d * (u + factor) for the u8
// operand u: Q8_0 -128, Q4_0 -8, Q6_K -32, ...), 0 for the stored-min types. In integers it
// is factor x the token's sum of quants over the group, which `OffsetSums` precomputes per
// token and group of 16 (kHalves 2) or 32 so that a tile's dot-product chain starts from it
// (a broadcast load) instead of adding d * factor * sum in a float FMA per token and group.
template <int kHalves>
void OffsetSums(const GemmArgs& a, int32_t factor, std::vector<int32_t>* out) {
  const int64_t nb = a.n_in / 32, per_token = kHalves * nb;
  out->resize(a.n_tokens * per_token);
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int16_t* xi = a.xi16 + t * 2 * nb;
    int32_t* o = out->data() + t * per_token;
    for (int64_t j = 0; j < per_token; ++j) {
      o[j] = factor * (kHalves == 2 ? xi[j] : xi[2 * j] + xi[2 * j + 1]);
    }
  }
}

// Tokens [t0, t0 + T) x G tiles of 16 rows (tile g holds rows r0 + 16 g .. under
// masks[g]) over their n_blk blocks (starting at block b0 of the activations); adds into
// `out` when `accumulate`. Per token and block: the `vpdpbusd` chains (per tile two 4 deep
// when alone, one 8 deep beside another; or one per half) start from the group's offset
// sum with kOffsets (else from 0, and the tile's stored min times the token's sum is added
// in float), one conversion per group, and one FMA by the token's scale (the two halves'
// sums scaled and added first). Each broadcast of a token's activations feeds every tile:
// one tile took 64 `vpdpbusd` and 64 broadcasts a block for 8 tokens, 55-62% of the
// `vpdpbusd` peak on Zen 5, and a throwaway kernel sharing them between two tiles ~75%.
// Two tiles run 4 tokens at a time (16 weight vectors and 8 accumulators in registers),
// one tile 8. Integer sums are exact, so every G gives the same bits.
template <int G, int T, int kHalves, bool kOffsets>
void TileTokens(const GemmArgs& a, const Tile* const* tiles, const int32_t* offsets, int64_t b0, int n_blk, int64_t r0,
                const __mmask16* masks, int64_t t0, bool accumulate) {
  constexpr int C = G == 1 ? 2 : 1;  // Chains a tile, without halves.
  const int64_t nb = a.n_in / 32;
  __m512 facc[T][G];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) facc[t][g] = _mm512_setzero_ps();
  const int8_t* xq = a.xq + t0 * a.n_in + b0 * 32;
  const float* xd = a.xd + t0 * nb + b0;
  const float* xs = kHalves == 2 ? a.xs16 + t0 * 2 * nb + 2 * b0 : a.xs + t0 * nb + b0;
  const int32_t* xo = kOffsets ? offsets + t0 * kHalves * nb + kHalves * b0 : nullptr;
  for (int b = 0; b < n_blk; ++b) {
    __m512i w[G][8];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        w[g][k] = _mm512_load_si512(reinterpret_cast<const __m512i*>(tiles[g]->w) + b * 8 + k);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq + t * a.n_in + b * 32;
      if constexpr (kHalves == 2) {
        // Elements 0..15 (operands 0-3) and 16..31 (4-7) have their own scales.
        __m512i s[G][2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i o = kOffsets ? _mm512_set1_epi32(xo[t * 2 * nb + 2 * b + h]) : _mm512_setzero_si512();
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) s[g][h] = o;
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m512i x0 = _mm512_set1_epi32(Load32(x + 4 * k)), x1 = _mm512_set1_epi32(Load32(x + 16 + 4 * k));
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) {
            s[g][0] = _mm512_dpbusd_epi32(s[g][0], w[g][k], x0);
            s[g][1] = _mm512_dpbusd_epi32(s[g][1], w[g][4 + k], x1);
          }
        }
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          const float* d = tiles[g]->d + 2 * b * kTileRows;
          const __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[g][1]), _mm512_load_ps(d + kTileRows),
                                           _mm512_mul_ps(_mm512_cvtepi32_ps(s[g][0]), _mm512_load_ps(d)));
          facc[t][g] = _mm512_fmadd_ps(u, _mm512_set1_ps(xd[t * nb + b]), facc[t][g]);
          if constexpr (!kOffsets) {
            const float* off = tiles[g]->off + 2 * b * kTileRows;
            facc[t][g] = _mm512_fmadd_ps(_mm512_load_ps(off), _mm512_set1_ps(xs[t * 2 * nb + 2 * b]), facc[t][g]);
            facc[t][g] = _mm512_fmadd_ps(_mm512_load_ps(off + kTileRows), _mm512_set1_ps(xs[t * 2 * nb + 2 * b + 1]),
                                         facc[t][g]);
          }
        }
      } else {
        __m512i s[G][C];
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          s[g][0] = kOffsets ? _mm512_set1_epi32(xo[t * nb + b]) : _mm512_setzero_si512();
          if constexpr (C == 2) s[g][C - 1] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m512i xk = _mm512_set1_epi32(Load32(x + 4 * k));
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) s[g][k % C] = _mm512_dpbusd_epi32(s[g][k % C], w[g][k], xk);
        }
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          const __m512i sum = C == 2 ? _mm512_add_epi32(s[g][0], s[g][C - 1]) : s[g][0];
          const __m512 dw = _mm512_load_ps(tiles[g]->d + b * kTileRows);
          facc[t][g] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(xd[t * nb + b])), facc[t][g]);
          if constexpr (!kOffsets) {
            facc[t][g] = _mm512_fmadd_ps(_mm512_load_ps(tiles[g]->off + b * kTileRows), _mm512_set1_ps(xs[t * nb + b]),
                                         facc[t][g]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* o = a.out + (t0 + t) * a.ld_out + r0;
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      __m512 v = facc[t][g];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(masks[g], o + 16 * g));
      _mm512_mask_storeu_ps(o + 16 * g, masks[g], v);
    }
  }
}

using TileTokensFn = void (*)(const GemmArgs&, const Tile* const*, const int32_t*, int64_t, int, int64_t,
                              const __mmask16*, int64_t, bool);
// Tokens a call of G tiles takes at most, and blocks a tile holds then: two tiles of 24
// (~30 KiB) stay in L1 as one of 48 does. 16 or 32 blocks a pair measured no better.
template <int G>
inline constexpr int kGroupTokens = G == 1 ? kTokenGroup : 4;
template <int G>
inline constexpr int kGroupBlocks = kTileBlocks / G;
// By token count; a table of two tiles holds its 4-token kernel past 4 (never called).
template <int G, int H, bool O>
constexpr TileTokensFn kTileTokens[kTokenGroup + 1] = {nullptr,
                                                       TileTokens<G, 1, H, O>,
                                                       TileTokens<G, 2, H, O>,
                                                       TileTokens<G, 3, H, O>,
                                                       TileTokens<G, 4, H, O>,
                                                       TileTokens<G, std::min(5, kGroupTokens<G>), H, O>,
                                                       TileTokens<G, std::min(6, kGroupTokens<G>), H, O>,
                                                       TileTokens<G, std::min(7, kGroupTokens<G>), H, O>,
                                                       TileTokens<G, std::min(8, kGroupTokens<G>), H, O>};

// The tiles of rows [rb, re), each filled by `build(r0, n_rows, b0, n_blk, &tile)`, for a
// type whose fixed offset is `offset_factor` (0: a stored min, in the tile's `off`): two
// at a time while 32 rows remain, then one.
template <int kHalves, typename Build>
void GemmTiled(const GemmArgs& a, int64_t rb, int64_t re, int32_t offset_factor, const Build& build) {
  const int64_t nb = a.n_in / 32;
  thread_local std::vector<int32_t> offset_sums;
  const int32_t* offsets = nullptr;
  if (offset_factor != 0) {
    OffsetSums<kHalves>(a, offset_factor, &offset_sums);
    offsets = offset_sums.data();
  }
  Tile tile_storage[2];
  const Tile* const tiles[2] = {&tile_storage[0], &tile_storage[1]};
  // Rows [r0, r0 + 16 G) (the last tile may have fewer) through G tiles.
  auto run = [&](auto group, int64_t r0) {
    constexpr int G = decltype(group)::value;
    __mmask16 masks[G];
    for (int g = 0; g < G; ++g) {
      const int64_t rows = std::min<int64_t>(kTileRows, re - r0 - g * kTileRows);
      masks[g] = static_cast<__mmask16>((1u << rows) - 1);
    }
    const TileTokensFn* tokens = offsets != nullptr ? kTileTokens<G, kHalves, true> : kTileTokens<G, kHalves, false>;
    for (int64_t b0 = 0; b0 < nb; b0 += kGroupBlocks<G>) {
      const int n_blk = static_cast<int>(std::min<int64_t>(kGroupBlocks<G>, nb - b0));
      for (int g = 0; g < G; ++g) {
        build(r0 + g * kTileRows, std::popcount(masks[g]), b0, n_blk, &tile_storage[g]);
      }
      int64_t t = 0;
      for (; t + kGroupTokens<G> <= a.n_tokens; t += kGroupTokens<G>) {
        tokens[kGroupTokens<G>](a, tiles, offsets, b0, n_blk, r0, masks, t, b0 > 0);
      }
      if (t < a.n_tokens) tokens[a.n_tokens - t](a, tiles, offsets, b0, n_blk, r0, masks, t, b0 > 0);
    }
  };
  int64_t r0 = rb;
  for (; r0 + kTileRows < re; r0 += 2 * kTileRows) run(std::integral_constant<int, 2>{}, r0);
  for (; r0 < re; r0 += kTileRows) run(std::integral_constant<int, 1>{}, r0);
}

// Below this many tokens the per-tile unpacking costs more than it saves.
constexpr int64_t kMinTiledTokens = 6;

template <Kind K>
void GemmQuantAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens >= kMinTiledTokens) {
    constexpr int32_t kFactor = K == Kind::kQ8_0 ? -128 : K == Kind::kQ4_0 ? -8 : 0;
    GemmTiled<1>(a, rb, re, kFactor, [&](int64_t r0, int n_rows, int64_t b0, int n_blk, Tile* tile) {
      BuildTile<K>(a, r0, n_rows, b0, n_blk, tile);
    });
  } else if constexpr (K == Kind::kQ8_0) {
    GemvQ8_0Avx512(a, rb, re);
  } else if constexpr (K == Kind::kQ4_0) {
    GemvQ4_0Avx512(a, rb, re);
  } else {
    GemvQ4_1Avx512(a, rb, re);
  }
}

// Packed weights: the matrix-vector kernels for few tokens, tiles for more.
template <DType D>
void GemmPackedAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens >= kMinTiledTokens) {
    using L = PackedLayout<D>;
    constexpr int32_t kFactor = L::kStoredMin ? 0 : static_cast<int32_t>(L::kOffsetFactor);
    static_assert(kFactor == L::kOffsetFactor || L::kStoredMin, "a fixed offset is a whole number");
    GemmTiled<L::kHalves>(a, rb, re, kFactor, [&](int64_t r0, int, int64_t b0, int n_blk, Tile* tile) {
      BuildTileFromPacked<D>(a, r0, b0, n_blk, tile);
    });
  } else {
    GemvPackedAvx512<D>(a, rb, re);
  }
}

KernelTable MakeAvx512() {
  KernelTable t;
  t.gemm[static_cast<int>(DType::kQ8_0)] = GemmQuantAvx512<Kind::kQ8_0>;
  t.gemm[static_cast<int>(DType::kQ4_0)] = GemmQuantAvx512<Kind::kQ4_0>;
  t.gemm[static_cast<int>(DType::kQ4_1)] = GemmQuantAvx512<Kind::kQ4_1>;
  t.gemm[static_cast<int>(DType::kF8_E4M3_B128)] = GemmF8Avx512;  // linear_f8_avx512.cc
  t.gemm[static_cast<int>(DType::kF32)] = GemmF32Avx512;          // linear_float_avx512.cc
  t.gemm[static_cast<int>(DType::kF16)] = GemmF16Avx512;
  t.gemm[static_cast<int>(DType::kBF16)] = GemmBF16Avx512;
#define CASCADE_PACKED_ENTRY(D) t.packed[static_cast<int>(D)] = GemmPackedAvx512<D>;
  CASCADE_FOR_EACH_PACKED_DTYPE(CASCADE_PACKED_ENTRY)
#undef CASCADE_PACKED_ENTRY
  return t;
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeAvx512();
  return table;
}

}  // namespace cascade::kernels::cpu::internal
