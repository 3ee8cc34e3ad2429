// Prefill attention in tiles (cuda_kernels.h, AttentionTiles). Block (tile, head), 128
// threads: thread t owns row t / 8 of the tile and, of that row, the scores of keys
// t % 8 + 8i of each key tile and the output dims t % 8 + 8j. A row's 8 threads are lanes
// of one warp, so its max and sum reduce by shuffles. Shared memory holds the tile's
// queries (scaled), one K and one V tile (decoded to F32 from the cache's encoding) and the
// row's probabilities; the rows are padded by a float so that the 8 threads of a row, which
// read 8 different keys at one dim, hit 8 different banks.
#include <cfloat>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/kv_read.cuh"
#include "kernels/cuda/softmax_factor.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kTileKeys = 32;
constexpr int kThreads = 128;
constexpr int kThreadsPerRow = kThreads / kTileRows;  // 8
static_assert(kThreadsPerRow == 8 && kTileKeys % kThreadsPerRow == 0);

template <int HD>
__global__ void AttentionTileKernel(AttentionArgs a, const PrefillTile* tiles) {
  constexpr int kDims = HD / kThreadsPerRow;                  // Output dims per thread.
  constexpr int kKeysPerThread = kTileKeys / kThreadsPerRow;  // Scores per thread per tile.
  __shared__ float qs[kTileRows][HD + 1];
  __shared__ float ks[kTileKeys][HD + 1];
  __shared__ float vs[kTileKeys][HD];
  __shared__ float ps[kTileRows][kTileKeys + 1];
  const PrefillTile tile = tiles[blockIdx.x];
  const int64_t h = blockIdx.y, kvh = h / (a.n_heads / a.n_kv_heads);
  const int t = threadIdx.x, row = t / kThreadsPerRow, sub = t % kThreadsPerRow;
  const int32_t* table = a.tables + tile.table;
  const float qscale = a.k_scale != nullptr ? a.scale * a.k_scale[kvh] : a.scale;
  for (int i = t; i < kTileRows * HD; i += kThreads) {
    const int r = i / HD, d = i % HD;
    qs[r][d] = r < tile.n_rows ? a.q[((tile.first_row + r) * a.n_heads + h) * HD + d] * qscale : 0.0f;
  }
  // Row `row` attends to keys [0, pos]; a padding row (past n_rows) to none.
  const int64_t pos = row < tile.n_rows ? tile.pos0 + row : -1;
  const int64_t n_keys = static_cast<int64_t>(tile.pos0) + tile.n_rows;
  float m = -FLT_MAX, l = 0.0f, acc[kDims];
#pragma unroll
  for (int j = 0; j < kDims; ++j) acc[j] = 0.0f;
  // With a window, the tile's first row sees keys from pos0 - window + 1: earlier key tiles
  // are skipped, and keys outside a row's window masked below.
  // A kept prefix (AttentionParams::kept_prefix) is read first, then the walk jumps to the
  // window's tiles; the keys between are neither loaded nor seen.
  const int64_t lowest = a.window > 0 && tile.pos0 + 1 > a.window ? tile.pos0 + 1 - a.window : 0;
  const int64_t start = lowest / kTileKeys * kTileKeys;
  for (int64_t k0 = a.kept_prefix > 0 ? 0 : start; k0 < n_keys;
       k0 = k0 + kTileKeys >= a.kept_prefix && k0 + kTileKeys < start ? start : k0 + kTileKeys) {
    __syncthreads();  // The previous tile's ks, vs and ps are no longer read (and qs is in).
    for (int i = t; i < kTileKeys * HD; i += kThreads) {
      const int c = i / HD, d = i % HD;
      const int64_t j = k0 + c;
      float kv = 0.0f, vv = 0.0f;
      if (j < n_keys && (j >= lowest || j < a.kept_prefix)) {
        const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        const int64_t at = (slot * a.n_kv_heads + kvh) * HD + d;
        kv = KvAt(a.k_cache, a.kv_code, at);
        vv = KvAt(a.v_cache, a.kv_code, at);
      }
      ks[c][d] = kv;
      vs[c][d] = vv;
    }
    __syncthreads();
    float s[kKeysPerThread], tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kKeysPerThread; ++i) {
      const int c = sub + kThreadsPerRow * i;
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; ++d) dot += qs[row][d] * ks[c][d];
      const bool seen = k0 + c <= pos && (a.window == 0 || k0 + c > pos - a.window || k0 + c < a.kept_prefix);
      s[i] = seen ? dot : -INFINITY;
      tile_max = fmaxf(tile_max, s[i]);
    }
    for (int o = kThreadsPerRow / 2; o > 0; o >>= 1)
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
    // m starts at -FLT_MAX (finite), so a row with every key masked so far keeps p = 0 and
    // corr = 1 instead of NaN.
    const float m_new = fmaxf(m, tile_max), corr = __expf(m - m_new);
    float tile_sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kKeysPerThread; ++i) {
      const float p = __expf(s[i] - m_new);
      ps[row][sub + kThreadsPerRow * i] = p;
      tile_sum += p;
    }
    for (int o = kThreadsPerRow / 2; o > 0; o >>= 1) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, o);
    l = l * corr + tile_sum;
    m = m_new;
    __syncwarp();  // The row's probabilities, written by its 8 lanes, are read by all 8.
#pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int d = sub + kThreadsPerRow * j;
      float o = acc[j] * corr;
#pragma unroll 8
      for (int c = 0; c < kTileKeys; ++c) o += ps[row][c] * vs[c][d];
      acc[j] = o;
    }
  }
  if (row >= tile.n_rows) return;
  float* out = a.out + ((tile.first_row + row) * a.n_heads + h) * HD;
  const float f =
      SoftmaxFactor(m, l, a.sinks != nullptr ? a.sinks + h : nullptr) * (a.v_scale != nullptr ? a.v_scale[kvh] : 1.0f);
#pragma unroll
  for (int j = 0; j < kDims; ++j) out[sub + kThreadsPerRow * j] = acc[j] * f;
}

}  // namespace

void AttentionTiles(const AttentionArgs& args, const PrefillTile* tiles, int64_t n_tiles, cudaStream_t stream) {
  if (n_tiles <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(args.n_heads));
  if (args.head_dim == 64) {
    AttentionTileKernel<64><<<grid, kThreads, 0, stream>>>(args, tiles);
  } else {
    AttentionTileKernel<128><<<grid, kThreads, 0, stream>>>(args, tiles);
  }
}

}  // namespace cascade::kernels::cuda
