// The device MoE layer's experts by int8 tensor-core tiles (moe_mma.h): the dense product's
// tiles (q8_mma.cuh) over one expert's grouped rows. Block (row tile, listed tile): listed
// tile y belongs to the held expert whose span of work.expert_tiles holds it, and covers that
// expert's grouped rows from expert_rows[e] + 64 (y - expert_tiles[e]); blocks past the last
// listed tile return at once (the grid is sized for the most tiles m rows can make).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_mma.h"
#include "kernels/cuda/moe_rows.cuh"
#include "kernels/cuda/q8_mma.cuh"

namespace cascade::kernels::cuda {
namespace {

// Listed tile blockIdx.y: its expert and its grouped rows [rb, r1); false past the list.
struct ExpertTile {
  int64_t e = 0;
  int32_t rb = 0, r1 = 0;
};
__device__ __forceinline__ bool FindTile(const MoeArgs& a, const MoeWork& w, ExpertTile* t) {
  const auto y = static_cast<int32_t>(blockIdx.y);
  if (y >= w.expert_tiles[a.n_held]) return false;
  t->e = HeldExpertAt(w.expert_tiles, a.n_held, y);
  t->rb = w.expert_rows[t->e] + kMmaTokens * (y - w.expert_tiles[t->e]);
  t->r1 = w.expert_rows[t->e + 1];
  return true;
}

template <bool kHalves>
__global__ void __launch_bounds__(kMmaThreads)
    GateUpMmaKernel(MoeArgs a, MoeWork w, const Q8Block* xg, bool g_by_row, const Q8Block* xu, bool u_by_row) {
  __shared__ Q8MmaStage s;
  ExpertTile tile;
  if (!FindTile(a, w, &tile)) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const int32_t rb = tile.rb, r1 = tile.r1;
  const int32_t* token_of_row = w.token_of_row;
  const auto rows = [=](bool by_row) {
    return [=](int t) -> int64_t { return rb + t >= r1 ? -1 : by_row ? rb + t : token_of_row[rb + t]; };
  };
  const MoeExpertRows ex = a.experts[tile.e];
  Q8MmaAcc g{}, u{};
  MultiplyTile<kHalves>(s, g, Q8MmaWeights{ex.gate, a.gate_code, a.gate_row_bytes, a.n_ff}, row0, xg, rows(g_by_row),
                        a.n_embd / 32);
  MultiplyTile<kHalves>(s, u, Q8MmaWeights{ex.up, a.up_code, a.up_row_bytes, a.n_ff}, row0, xu, rows(u_by_row),
                        a.n_embd / 32);
  ForEachResult(static_cast<int>(threadIdx.x) / 32, static_cast<int>(threadIdx.x) % 32,
                [&](int i, int j, int e, int row, int tok) {
                  const int64_t o = row0 + row;
                  const int32_t r = rb + tok;
                  if (o >= a.n_ff || r >= r1) return;
                  const float gb = ex.gate_bias != nullptr ? ex.gate_bias[o] : 0.0f;
                  const float ub = ex.up_bias != nullptr ? ex.up_bias[o] : 0.0f;
                  w.h[r * a.n_ff + o] = Activation(a, g.v[i][j][e] + gb, u.v[i][j][e] + ub);
                });
}

template <bool kHalves>
__global__ void __launch_bounds__(kMmaThreads) DownMmaKernel(MoeArgs a, MoeWork w) {
  __shared__ Q8MmaStage s;
  ExpertTile tile;
  if (!FindTile(a, w, &tile)) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const int32_t rb = tile.rb, r1 = tile.r1;
  const MoeExpertRows ex = a.experts[tile.e];
  Q8MmaAcc acc{};
  MultiplyTile<kHalves>(
      s, acc, Q8MmaWeights{ex.down, a.down_code, a.down_row_bytes, a.n_embd}, row0, w.hq,
      [=](int t) -> int64_t { return rb + t < r1 ? rb + t : -1; }, a.n_ff / 32);
  ForEachResult(static_cast<int>(threadIdx.x) / 32, static_cast<int>(threadIdx.x) % 32,
                [&](int i, int j, int e, int row, int tok) {
                  const int64_t o = row0 + row;
                  const int32_t r = rb + tok;
                  if (o >= a.n_embd || r >= r1) return;
                  w.out[r * a.n_embd + o] = acc.v[i][j][e] + (ex.down_bias != nullptr ? ex.down_bias[o] : 0.0f);
                });
}

// The most tiles m grouped rows make over n_held experts: one partial tile per expert at most.
dim3 Grid(int64_t out_rows, int64_t n_held, int64_t m) {
  return dim3(static_cast<unsigned>((out_rows + kMmaRows - 1) / kMmaRows),
              static_cast<unsigned>(std::min(n_held, m) + (m + kMmaTokens - 1) / kMmaTokens));
}

}  // namespace

void MoeGateUpMma(const MoeArgs& a, const MoeWork& work, const Q8Block* xg, bool g_by_row, const Q8Block* xu,
                  bool u_by_row, int64_t m, cudaStream_t stream) {
  const dim3 grid = Grid(a.n_ff, a.n_held, m);
  if (ChunkHalves(a.gate_code)) {
    GateUpMmaKernel<true><<<grid, kMmaThreads, 0, stream>>>(a, work, xg, g_by_row, xu, u_by_row);
  } else {
    GateUpMmaKernel<false><<<grid, kMmaThreads, 0, stream>>>(a, work, xg, g_by_row, xu, u_by_row);
  }
}

void MoeDownMma(const MoeArgs& a, const MoeWork& work, int64_t m, cudaStream_t stream) {
  const dim3 grid = Grid(a.n_embd, a.n_held, m);
  if (ChunkHalves(a.down_code)) {
    DownMmaKernel<true><<<grid, kMmaThreads, 0, stream>>>(a, work);
  } else {
    DownMmaKernel<false><<<grid, kMmaThreads, 0, stream>>>(a, work);
  }
}

}  // namespace cascade::kernels::cuda
