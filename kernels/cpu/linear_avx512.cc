// AVX-512 VNNI kernels for Q8_0 / Q4_0 / Q4_1 weights (`vpdpbusd`).
//
// Few tokens (decode, short verify steps): linear_gemv_avx512.cc over the GGUF layout,
// linear_packed_avx512.cc over weights packed at load (packed_weight.h).
//
// Many tokens (prefill): 16 weight rows x up to 48 blocks are unpacked once into an
// L1-resident tile laid out so that one zmm holds 4 consecutive u8 weights of each of the
// 16 rows; a token's 4 matching activations are a 32-bit broadcast, so 8 `vpdpbusd` give
// the 16 rows' block dot products in the 16 lanes, and 8 tokens share each tile load.
// Packed weights are already in the tile's row order, so their tiles are plain vector
// copies (Q4: one AND / one shift+AND per 64 bytes) instead of the GGUF path's scatters.
// Compiled with AVX-512 F/BW/VL/DQ/VNNI (+AVX2/FMA/F16C); called only on such CPUs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "kernels/cpu/linear_kernels.h"

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
  float d[kTileBlocks * kTileRows];    // Weight scale per block and row.
  float off[kTileBlocks * kTileRows];  // Value of u8 0 per block and row (x = d * u + off).
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
    std::memset(tile->off, 0, sizeof(float) * n_blk * kTileRows);
  }
  for (int i = 0; i < n_rows; ++i) {
    const B* w = reinterpret_cast<const B*>(a.w + (r0 + i) * a.w_row_bytes) + b0;
    for (int b = 0; b < n_blk; ++b) {
      __m256i v;
      const float d = _cvtsh_ss(w[b].d);
      float off;
      if constexpr (K == Kind::kQ8_0) {
        v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)), flip);
        off = -128.0f * d;
      } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
        v = _mm256_setr_m128i(_mm_and_si128(q, low4), _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        if constexpr (K == Kind::kQ4_1) {
          off = _cvtsh_ss(w[b].m);
        } else {
          off = -8.0f * d;
        }
      }
      _mm256_i32scatter_epi32(tile->w + (b * 8 * kTileRows + i) * 4, scatter_idx, v, 1);
      tile->d[b * kTileRows + i] = d;
      tile->off[b * kTileRows + i] = off;
    }
  }
}

// A tile from packed weights (packed_weight.h): rows are already interleaved in the tile's
// order, so this is 4 (Q4) or 8 (Q8_0) vector copies per block plus the scale conversion;
// padding rows of the last group arrive as zeros.
template <Kind K>
void BuildTileFromPacked(const GemmArgs& a, int64_t r0, int64_t b0, int n_blk, Tile* tile) {
  constexpr int64_t kQ = K == Kind::kQ8_0 ? 512 : 256;
  const int64_t nb = a.n_in / 32;
  const uint8_t* g = a.w + (r0 / kTileRows) * a.w_row_bytes;
  const uint16_t* d = reinterpret_cast<const uint16_t*>(g + nb * kQ) + b0 * kTileRows;
  const uint16_t* m = d + nb * kTileRows;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int b = 0; b < n_blk; ++b) {
    const __m512i* q = reinterpret_cast<const __m512i*>(g + (b0 + b) * kQ);
    __m512i* t = reinterpret_cast<__m512i*>(tile->w) + b * 8;
    if constexpr (K == Kind::kQ8_0) {
      for (int k = 0; k < 8; ++k) _mm512_store_si512(t + k, _mm512_load_si512(q + k));
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(q + k);
        _mm512_store_si512(t + k, _mm512_and_si512(v, low4));
        _mm512_store_si512(t + k + 4, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * kTileRows)));
    __m512 off;
    if constexpr (K == Kind::kQ4_1) {
      off = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * kTileRows)));
    } else {
      off = _mm512_mul_ps(dw, _mm512_set1_ps(K == Kind::kQ4_0 ? -8.0f : -128.0f));
    }
    _mm512_store_ps(tile->d + b * kTileRows, dw);
    _mm512_store_ps(tile->off + b * kTileRows, off);
  }
}

// Tokens [t0, t0 + T) x the tile's 16 rows over its n_blk blocks (starting at block b0 of the
// activations); adds into `out` rows [r0, r0 + 16) under `rmask` when `accumulate`.
template <int T>
void TileTokens(const GemmArgs& a, const Tile& tile, int64_t b0, int n_blk, int64_t r0, __mmask16 rmask, int64_t t0,
                bool accumulate) {
  const int64_t nb = a.n_in / 32;
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.n_in + b0 * 32;
    xd[t] = a.xd + (t0 + t) * nb + b0;
    xs[t] = a.xs + (t0 + t) * nb + b0;
  }
  for (int b = 0; b < n_blk; ++b) {
    const __m512i* wp = reinterpret_cast<const __m512i*>(tile.w) + b * 8;
    const __m512i w0 = _mm512_load_si512(wp + 0), w1 = _mm512_load_si512(wp + 1);
    const __m512i w2 = _mm512_load_si512(wp + 2), w3 = _mm512_load_si512(wp + 3);
    const __m512i w4 = _mm512_load_si512(wp + 4), w5 = _mm512_load_si512(wp + 5);
    const __m512i w6 = _mm512_load_si512(wp + 6), w7 = _mm512_load_si512(wp + 7);
    const __m512 dw = _mm512_load_ps(tile.d + b * kTileRows);
    const __m512 ow = _mm512_load_ps(tile.off + b * kTileRows);
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq[t] + b * 32;
      __m512i ia = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_set1_epi32(Load32(x)));
      __m512i ib = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_set1_epi32(Load32(x + 4)));
      ia = _mm512_dpbusd_epi32(ia, w2, _mm512_set1_epi32(Load32(x + 8)));
      ib = _mm512_dpbusd_epi32(ib, w3, _mm512_set1_epi32(Load32(x + 12)));
      ia = _mm512_dpbusd_epi32(ia, w4, _mm512_set1_epi32(Load32(x + 16)));
      ib = _mm512_dpbusd_epi32(ib, w5, _mm512_set1_epi32(Load32(x + 20)));
      ia = _mm512_dpbusd_epi32(ia, w6, _mm512_set1_epi32(Load32(x + 24)));
      ib = _mm512_dpbusd_epi32(ib, w7, _mm512_set1_epi32(Load32(x + 28)));
      const __m512 p = _mm512_cvtepi32_ps(_mm512_add_epi32(ia, ib));
      facc[t] = _mm512_fmadd_ps(p, _mm512_mul_ps(dw, _mm512_set1_ps(xd[t][b])), facc[t]);
      facc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(xs[t][b]), facc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float* o = a.out + (t0 + t) * a.ld_out + r0;
    __m512 v = facc[t];
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rmask, o));
    _mm512_mask_storeu_ps(o, rmask, v);
  }
}

using TileTokensFn = void (*)(const GemmArgs&, const Tile&, int64_t, int, int64_t, __mmask16, int64_t, bool);
constexpr TileTokensFn kTileTokens[kTokenGroup + 1] = {nullptr,       TileTokens<1>, TileTokens<2>,
                                                       TileTokens<3>, TileTokens<4>, TileTokens<5>,
                                                       TileTokens<6>, TileTokens<7>, TileTokens<8>};

template <Kind K, bool kPacked>
void GemmTiled(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / 32;
  Tile tile;
  for (int64_t r0 = rb; r0 < re; r0 += kTileRows) {
    const int n_rows = static_cast<int>(std::min<int64_t>(kTileRows, re - r0));
    const __mmask16 rmask = static_cast<__mmask16>((1u << n_rows) - 1);
    for (int64_t b0 = 0; b0 < nb; b0 += kTileBlocks) {
      const int n_blk = static_cast<int>(std::min<int64_t>(kTileBlocks, nb - b0));
      if constexpr (kPacked) {
        BuildTileFromPacked<K>(a, r0, b0, n_blk, &tile);
      } else {
        BuildTile<K>(a, r0, n_rows, b0, n_blk, &tile);
      }
      const bool accumulate = b0 > 0;
      int64_t t = 0;
      for (; t + kTokenGroup <= a.n_tokens; t += kTokenGroup) {
        TileTokens<kTokenGroup>(a, tile, b0, n_blk, r0, rmask, t, accumulate);
      }
      if (t < a.n_tokens) {
        kTileTokens[a.n_tokens - t](a, tile, b0, n_blk, r0, rmask, t, accumulate);
      }
    }
  }
}

// Below this many tokens the per-tile unpacking costs more than it saves.
constexpr int64_t kMinTiledTokens = 6;

template <Kind K>
void GemmQuantAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens >= kMinTiledTokens) {
    GemmTiled<K, false>(a, rb, re);
  } else if constexpr (K == Kind::kQ8_0) {
    GemvQ8_0Avx512(a, rb, re);
  } else if constexpr (K == Kind::kQ4_0) {
    GemvQ4_0Avx512(a, rb, re);
  } else {
    GemvQ4_1Avx512(a, rb, re);
  }
}

// Packed weights: the matrix-vector kernels for few tokens, tiles for more.
template <Kind K>
void GemmPackedAvx512(const GemmArgs& a, int64_t rb, int64_t re) {
  if (a.n_tokens >= kMinTiledTokens) {
    GemmTiled<K, true>(a, rb, re);
  } else if constexpr (K == Kind::kQ8_0) {
    GemvPackedQ8_0Avx512(a, rb, re);
  } else if constexpr (K == Kind::kQ4_0) {
    GemvPackedQ4_0Avx512(a, rb, re);
  } else {
    GemvPackedQ4_1Avx512(a, rb, re);
  }
}

KernelTable MakeAvx512() {
  KernelTable t;
  t.gemm[static_cast<int>(DType::kQ8_0)] = GemmQuantAvx512<Kind::kQ8_0>;
  t.gemm[static_cast<int>(DType::kQ4_0)] = GemmQuantAvx512<Kind::kQ4_0>;
  t.gemm[static_cast<int>(DType::kQ4_1)] = GemmQuantAvx512<Kind::kQ4_1>;
  t.packed[static_cast<int>(DType::kQ8_0)] = GemmPackedAvx512<Kind::kQ8_0>;
  t.packed[static_cast<int>(DType::kQ4_0)] = GemmPackedAvx512<Kind::kQ4_0>;
  t.packed[static_cast<int>(DType::kQ4_1)] = GemmPackedAvx512<Kind::kQ4_1>;
  return t;
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeAvx512();
  return table;
}

}  // namespace cascade::kernels::cpu::internal
