// Prefill attention on tensor cores (cuda_kernels.h, AttentionTilesF16), FlashAttention-2's
// scheme over the paged cache: block (tile of kTileRows rows, KV head and up to
// kHeadsPerBlock of its query heads), one warp per query head, so the heads of a GQA group
// share each K/V tile the block stages in shared memory (as f16, from any cache encoding).
// Per tile of kKeys keys a warp computes its 16 x kKeys scores S = Q K^T with
// mma.sync.m16n8k16 (f16 inputs, f32 accumulation), masks them as the f32 tiles do
// (causal, window, kept prefix), updates each row's running max and sum (the 4 lanes of a
// row reduce by shuffles), and adds P V with the probabilities rounded to f16, straight
// from S's registers (an m16n8 result's layout is the next product's A fragment). Q is
// scaled, then rounded to f16 once; the output is f32.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .f16; g = lane / 4, t = lane % 4): A (16 x
// 16, row-major) registers hold (row g, cols 2t, 2t+1), (g + 8, 2t..), (g, 2t + 8..),
// (g + 8, 2t + 8..); B (16 x 8, k x n) (k 2t, 2t+1; n g) and (k 2t + 8, 2t + 9; n g);
// C (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Staged rows are padded by 8 halves
// so that these loads fall in different banks.
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/kv_read.cuh"
#include "kernels/cuda/softmax_factor.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kKeys = 64;          // Keys per staged K/V tile.
constexpr int kHeadsPerBlock = 4;  // Query heads (warps) per block.
constexpr int kThreads = 32 * kHeadsPerBlock;
static_assert(kTileRows == 16, "one warp's m16 fragment holds a tile's rows");

__device__ __forceinline__ uint32_t Pack(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
// Two floats as f16, lo in the low half (the fragment's lower index).
__device__ __forceinline__ uint32_t PackFloats(float lo, float hi) { return Pack(__floats2half2_rn(lo, hi)); }
__device__ __forceinline__ uint32_t PackHalves(__half lo, __half hi) { return Pack(__halves2half2(lo, hi)); }

// d += A B for one 16 x 8 fragment over 16 of k.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // The backend refuses these tiles below compute capability 8.0.
#endif
}

template <int HD>
__global__ void __launch_bounds__(kThreads) AttentionTileF16Kernel(AttentionArgs a, const PrefillTile* tiles) {
  constexpr int kStride = HD + 8;  // Halves per staged row: 16-byte aligned rows, no bank conflicts.
  __shared__ __align__(16) __half ks[kKeys][kStride];
  __shared__ __align__(16) __half vs[kKeys][kStride];
  const PrefillTile tile = tiles[blockIdx.x];
  const int64_t group = a.n_heads / a.n_kv_heads, chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int64_t kvh = blockIdx.y / chunks;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t in_group = (blockIdx.y % chunks) * kHeadsPerBlock + warp;
  const bool active = in_group < group;  // A warp past the group stages tiles only.
  const int64_t h = kvh * group + (active ? in_group : 0);
  const int32_t* table = a.tables + tile.table;
  // This lane's Q fragments: rows g and g + 8 of the tile (zero past its rows), scaled.
  const float qscale = a.k_scale != nullptr ? a.scale * a.k_scale[kvh] : a.scale;
  const auto q_at = [&](int r, int d) {
    return r < tile.n_rows ? a.q[((tile.first_row + r) * a.n_heads + h) * HD + d] * qscale : 0.0f;
  };
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int d = 16 * kk + 2 * t;
    qf[kk][0] = PackFloats(q_at(g, d), q_at(g, d + 1));
    qf[kk][1] = PackFloats(q_at(g + 8, d), q_at(g + 8, d + 1));
    qf[kk][2] = PackFloats(q_at(g, d + 8), q_at(g, d + 9));
    qf[kk][3] = PackFloats(q_at(g + 8, d + 8), q_at(g + 8, d + 9));
  }
  // Rows g and g + 8 attend to keys [0, pos]; a padding row to none.
  const int64_t pos[2] = {g < tile.n_rows ? tile.pos0 + g : -1, g + 8 < tile.n_rows ? tile.pos0 + g + 8 : -1};
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};
  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const int64_t n_keys = static_cast<int64_t>(tile.pos0) + tile.n_rows;
  // The walk over key tiles of the f32 tiles (attention_prefill.cu): a kept prefix first,
  // then the window's tiles.
  const int64_t lowest = a.window > 0 && tile.pos0 + 1 > a.window ? tile.pos0 + 1 - a.window : 0;
  const int64_t start = lowest / kKeys * kKeys;
  for (int64_t k0 = a.kept_prefix > 0 ? 0 : start; k0 < n_keys;
       k0 = k0 + kKeys >= a.kept_prefix && k0 + kKeys < start ? start : k0 + kKeys) {
    __syncthreads();  // Every warp is done with the previous tile.
    for (int i = static_cast<int>(threadIdx.x); i < kKeys * HD / 2; i += kThreads) {
      const int c = i / (HD / 2), d = 2 * (i % (HD / 2));
      const int64_t j = k0 + c;
      __half2 kv = __float2half2_rn(0.0f), vv = kv;
      if (j < n_keys && (j >= lowest || j < a.kept_prefix)) {
        const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        const int64_t at = (slot * a.n_kv_heads + kvh) * HD + d;
        if (a.kv_code == kWF16) {  // The default cache: its pairs as they are.
          kv = *reinterpret_cast<const __half2*>(static_cast<const __half*>(a.k_cache) + at);
          vv = *reinterpret_cast<const __half2*>(static_cast<const __half*>(a.v_cache) + at);
        } else {
          kv = __floats2half2_rn(KvAt(a.k_cache, a.kv_code, at), KvAt(a.k_cache, a.kv_code, at + 1));
          vv = __floats2half2_rn(KvAt(a.v_cache, a.kv_code, at), KvAt(a.v_cache, a.kv_code, at + 1));
        }
      }
      *reinterpret_cast<__half2*>(&ks[c][d]) = kv;
      *reinterpret_cast<__half2*>(&vs[c][d]) = vv;
    }
    __syncthreads();
    if (!active) continue;
    // S = Q K^T: fragment nj holds keys k0 + 8 nj .. + 7.
    float s[kKeys / 8][4];
#pragma unroll
    for (int nj = 0; nj < kKeys / 8; ++nj) {
      s[nj][0] = s[nj][1] = s[nj][2] = s[nj][3] = 0.0f;
      const __half* krow = &ks[8 * nj + g][2 * t];
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        Mma(s[nj], qf[kk], *reinterpret_cast<const uint32_t*>(krow + 16 * kk),
            *reinterpret_cast<const uint32_t*>(krow + 16 * kk + 8));
      }
    }
    // Masks, then each row's max over the tile (its 4 lanes).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nj = 0; nj < kKeys / 8; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + 8 * nj + 2 * t + (e & 1), p = pos[e / 2];
        const bool seen = key <= p && (a.window == 0 || key > p - a.window || key < a.kept_prefix);
        s[nj][e] = seen ? s[nj][e] : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[nj][e]);
      }
    }
    float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // m starts at -FLT_MAX (finite): a row with every key masked so far keeps p = 0 and
      // corr = 1 instead of NaN.
      const float m_new = fmaxf(m[r], mx[r]);
      corr[r] = __expf(m[r] - m_new);
      m[r] = m_new;
    }
#pragma unroll
    for (int nj = 0; nj < kKeys / 8; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nj][e] = __expf(s[nj][e] - m[e / 2]);
        sum[e / 2] += s[nj][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l[r] = l[r] * corr[r] + sum[r];
    }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
    // O += P V over 16 keys at a time: P's A fragment is two S fragments' registers.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pf[4] = {PackFloats(s[2 * kk][0], s[2 * kk][1]), PackFloats(s[2 * kk][2], s[2 * kk][3]),
                              PackFloats(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackFloats(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int key = 16 * kk + 2 * t;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const int d = 8 * n + g;
        Mma(o[n], pf, PackHalves(vs[key][d], vs[key + 1][d]), PackHalves(vs[key + 8][d], vs[key + 9][d]));
      }
    }
  }
  if (!active) return;
  const float v_scale = a.v_scale != nullptr ? a.v_scale[kvh] : 1.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= tile.n_rows) continue;
    const float f = SoftmaxFactor(m[r], l[r], a.sinks != nullptr ? a.sinks + h : nullptr) * v_scale;
    float* out = a.out + ((tile.first_row + row) * a.n_heads + h) * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<float2*>(out + 8 * n + 2 * t) = make_float2(o[n][2 * r] * f, o[n][2 * r + 1] * f);
    }
  }
}

}  // namespace

void AttentionTilesF16(const AttentionArgs& args, const PrefillTile* tiles, int64_t n_tiles, cudaStream_t stream) {
  if (n_tiles <= 0) return;
  const int64_t group = args.n_heads / args.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(args.n_kv_heads * ((group + kHeadsPerBlock - 1) / kHeadsPerBlock)));
  if (args.head_dim == 64) {
    AttentionTileF16Kernel<64><<<grid, kThreads, 0, stream>>>(args, tiles);
  } else {
    AttentionTileF16Kernel<128><<<grid, kThreads, 0, stream>>>(args, tiles);
  }
}

}  // namespace cascade::kernels::cuda
