// The int8 tensor-core tiles of quantized prefill (cuda_kernels.h Q8Mma, q8_mma.cu): the
// idea of llama.cpp's MMQ, written here. A block of kMmaThreads threads computes a tile of
// kMmaRows weight rows by kMmaTokens tokens. Per stage of kMmaChunks chunks (32 inputs
// each), every thread unpacks its share of the weight chunks (q8_unpack.cuh: 32 signed
// bytes with the multipliers a0, a1, b, b1) and copies its share of the 8-bit activation
// blocks (Q8Block) into shared memory; then each warp multiplies its 32 x 32 part by
// mma.sync on int8 (m16n8k32, or two m16n8k16 for the types whose chunk halves carry their
// own scales) and scales the integer sums into F32 accumulators, as DotChunk does:
//     acc += dx * (a0 * dot(q[0:16], xq[0:16]) + a1 * dot(q[16:32], xq[16:32])) + b sx + b1 sx1.
// Everything but the mma instruction is plain C++ over these structs, so that the host test
// (tests/kernels/q8_mma_tile_test.cc) runs a whole block's stages, thread by thread, with a
// stand-in of the instruction computed from the same shared tile.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/q8_unpack.cuh"

namespace cascade::kernels::cuda {

constexpr int kMmaRows = 64, kMmaTokens = 64, kMmaChunks = 4, kMmaThreads = 128;
// Four warps, two by two, each 32 rows by 32 tokens: 2 x 4 fragments of 16 x 8.
constexpr int kMmaWarpRows = 32, kMmaWarpTokens = 32;
// Words per staged row: 8 per chunk, and 4 of padding so that a fragment's loads (8 rows,
// 4 consecutive words each) fall in 32 different banks.
constexpr int kMmaStride = kMmaChunks * 8 + 4;

// One stage of a block's operands in shared memory.
struct Q8MmaStage {
  int32_t w[kMmaRows][kMmaStride];      // Weight chunks as signed bytes, 4 to a word.
  float wa[kMmaRows][kMmaChunks][2];    // a0, a1: the chunk halves' multipliers.
  float wb[kMmaRows][kMmaChunks][2];    // b, b1: the offsets' multipliers.
  int32_t x[kMmaTokens][kMmaStride];    // Activation blocks' quants.
  float xd[kMmaTokens][kMmaChunks];     // Their scales d,
  float xs[kMmaTokens][kMmaChunks][2];  // and s, s1 (Q8Block).
};

struct Q8MmaArgs {
  GemvOut out;
  const Q8Block* xq = nullptr;  // [n_tokens, n_in / 32]
  const uint8_t* w = nullptr;   // [n_out] rows of row_bytes
  int code = 0;
  int64_t row_bytes = 0, n_tokens = 0, n_out = 0, n_in = 0;
};

// A thread's accumulators: [row fragment][token fragment][register of the 16 x 8 result:
// (row g, token 2 t), (g, 2 t + 1), (g + 8, 2 t), (g + 8, 2 t + 1); g = lane / 4, t = lane % 4].
struct Q8MmaAcc {
  float v[2][4][4];
};

// Whether a code's chunk halves have their own multipliers (a0 != a1).
__host__ __device__ inline bool ChunkHalves(int code) { return code == kWQ2_K || code == kWQ3_K || code == kWQ6_K; }
// Whether a code's chunks carry offsets (b or b1 non-zero).
__host__ __device__ inline bool ChunkOffsets(int code) {
  return code == kWQ4_1 || code == kWQ5_1 || code == kWQ4_K || code == kWQ5_K || code == kWQ2_K || code == kWI4G128;
}

// The weight side of a tile: rows [0, n_rows) of row_bytes each, in `code`.
struct Q8MmaWeights {
  const uint8_t* w = nullptr;
  int code = 0;
  int64_t row_bytes = 0, n_rows = 0;
};

// Thread `tid`'s share of staging chunks [chunk0, chunk0 + kMmaChunks) of weight rows [row0,
// row0 + kMmaRows) and of the tile's kMmaTokens activation rows: tile token t is row
// act_row(t) of xq [rows, n_chunks], or none when act_row(t) < 0. Past either: zeros.
template <typename ActRow>
__device__ __forceinline__ void LoadStage(Q8MmaStage& s, const Q8MmaWeights& w, int64_t row0, const Q8Block* xq,
                                          const ActRow& act_row, int64_t n_chunks, int64_t chunk0, int tid) {
  // Neighbouring threads take neighbouring chunks of a row: their reads are contiguous.
  for (int p = tid; p < kMmaRows * kMmaChunks; p += kMmaThreads) {
    const int r = p / kMmaChunks, k = p % kMmaChunks;
    const int64_t o = row0 + r, c = chunk0 + k;
    WeightChunk wc{};
    if (o < w.n_rows && c < n_chunks) Unpack(w.w + o * w.row_bytes, w.code, c, wc);
#pragma unroll
    for (int j = 0; j < 8; ++j) s.w[r][8 * k + j] = wc.q[j];
    s.wa[r][k][0] = wc.a0;
    s.wa[r][k][1] = wc.a1;
    s.wb[r][k][0] = wc.b;
    s.wb[r][k][1] = wc.b1;
  }
  for (int p = tid; p < kMmaTokens * kMmaChunks; p += kMmaThreads) {
    const int t = p / kMmaChunks, k = p % kMmaChunks;
    const int64_t row = act_row(t), c = chunk0 + k;
    const Q8Block b = row >= 0 && c < n_chunks ? xq[row * n_chunks + c] : Q8Block{};
#pragma unroll
    for (int j = 0; j < 8; ++j) s.x[t][8 * k + j] = b.q[j];
    s.xd[t][k] = b.d;
    s.xs[t][k][0] = b.s;
    s.xs[t][k][1] = b.s1;
  }
}

// The dense product's (Q8Mma) two sides: its weight, and its activation rows for the tile
// of tokens from tok0 (token tok0 + t, none past n_tokens).
__device__ __forceinline__ Q8MmaWeights DenseWeights(const Q8MmaArgs& a) {
  return Q8MmaWeights{a.w, a.code, a.row_bytes, a.n_out};
}
__device__ __forceinline__ auto DenseRows(const Q8MmaArgs& a, int64_t tok0) {
  const int64_t n_tokens = a.n_tokens;
  return [=](int t) { return tok0 + t < n_tokens ? tok0 + t : int64_t{-1}; };
}

// The dense product's stage: weight rows from row0, tokens from tok0.
__device__ __forceinline__ void LoadDenseStage(Q8MmaStage& s, const Q8MmaArgs& a, int64_t row0, int64_t tok0,
                                               int64_t chunk0, int tid) {
  LoadStage(s, DenseWeights(a), row0, a.xq, DenseRows(a, tok0), a.n_in / 32, chunk0, tid);
}

// Warp `warp`'s products over one stage, added into lane `lane`'s accumulators. `mma`
// computes one 16 x 8 integer fragment: mma.template Run<kWords>(s, r0, t0, word0, lane, c)
// sets c (in Q8MmaAcc's register order) to the products of rows [r0, r0 + 16) and tokens
// [t0, t0 + 8) over words [word0, word0 + kWords) of the stage.
template <bool kHalves, typename Mma>
__device__ __forceinline__ void ComputeStage(const Q8MmaStage& s, Q8MmaAcc& acc, int warp, int lane, bool offsets,
                                             const Mma& mma) {
  const int wr = (warp / 2) * kMmaWarpRows, wt = (warp % 2) * kMmaWarpTokens;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int k = 0; k < kMmaChunks; ++k) {
    float d[4][2];  // The scales of this lane's tokens: fragment j, token 2 t + e.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      d[j][0] = s.xd[wt + 8 * j + 2 * t][k];
      d[j][1] = s.xd[wt + 8 * j + 2 * t + 1][k];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r_lo = wr + 16 * i + g, r_hi = r_lo + 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float* v = acc.v[i][j];
        int c[4];
#pragma unroll
        for (int h = 0; h < (kHalves ? 2 : 1); ++h) {
          mma.template Run<kHalves ? 4 : 8>(s, wr + 16 * i, wt + 8 * j, 8 * k + 4 * h, lane, c);
          const float lo = s.wa[r_lo][k][h], hi = s.wa[r_hi][k][h];
          v[0] += static_cast<float>(c[0]) * lo * d[j][0];
          v[1] += static_cast<float>(c[1]) * lo * d[j][1];
          v[2] += static_cast<float>(c[2]) * hi * d[j][0];
          v[3] += static_cast<float>(c[3]) * hi * d[j][1];
        }
        if (offsets) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e < 2 ? r_lo : r_hi, tok = wt + 8 * j + 2 * t + e % 2;
            v[e] += s.wb[r][k][0] * s.xs[tok][k][0] + s.wb[r][k][1] * s.xs[tok][k][1];
          }
        }
      }
    }
  }
}

// f(i, j, e, row, tok) for each of lane `lane`'s accumulators acc.v[i][j][e] in warp `warp`,
// with its weight row and token within the block's tile.
template <typename F>
__device__ __forceinline__ void ForEachResult(int warp, int lane, const F& f) {
  const int wr = (warp / 2) * kMmaWarpRows, wt = (warp % 2) * kMmaWarpTokens;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(i, j, e, wr + 16 * i + g + 8 * (e / 2), wt + 8 * j + 2 * t + e % 2);
    }
  }
}

// The dense product's results of the block's tile at (row0, tok0) into the parts of `out`
// (GemvOut: rows of stacked projections, with their biases); past the matrix: nothing.
__device__ __forceinline__ void StoreTile(const Q8MmaArgs& a, const Q8MmaAcc& acc, int64_t row0, int64_t tok0, int warp,
                                          int lane) {
  ForEachResult(warp, lane, [&](int i, int j, int e, int row, int tok) {
    if (row0 + row < a.n_out && tok0 + tok < a.n_tokens) a.out.Store(row0 + row, tok0 + tok, acc.v[i][j][e]);
  });
}

}  // namespace cascade::kernels::cuda
