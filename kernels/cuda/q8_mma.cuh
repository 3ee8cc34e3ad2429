// The device side of the int8 tensor-core tiles (q8_mma_tile.cuh): the mma.sync instruction
// that multiplies one 16 x 8 fragment, and a block's whole pass over a tile's inputs. Shared
// by the dense product (q8_mma.cu) and the MoE experts' (moe_mma.cu). Fragment layouts from
// the PTX ISA ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k32" with .s8): g = lane / 4,
// t = lane % 4; A (16 x K, row-major) register r holds 4 consecutive bytes of row
// g + 8 (r % 2), at byte 4 t + 16 (r / 2); B (K x 8, column-major: a token's row here)
// register r holds bytes 4 t + 16 r of token g; C holds (g, 2 t), (g, 2 t + 1), (g + 8, 2 t),
// (g + 8, 2 t + 1), Q8MmaAcc's order.
#pragma once

#include <cstdint>

#include "kernels/cuda/q8_mma_tile.cuh"

namespace cascade::kernels::cuda {

struct DeviceMma {
  template <int kWords>
  __device__ __forceinline__ void Run(const Q8MmaStage& s, int r0, int t0, int word0, int lane, int (&c)[4]) const {
    const int g = lane / 4, t = lane % 4;
    const int32_t* a_lo = &s.w[r0 + g][word0 + t];
    const int32_t* a_hi = &s.w[r0 + g + 8][word0 + t];
    const int32_t* b = &s.x[t0 + g][word0 + t];
    c[0] = c[1] = c[2] = c[3] = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (kWords == 4) {
      asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
          : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
          : "r"(a_lo[0]), "r"(a_hi[0]), "r"(b[0]));
    } else {
      asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
          : "r"(a_lo[0]), "r"(a_hi[0]), "r"(a_lo[4]), "r"(a_hi[4]), "r"(b[0]), "r"(b[4]));
    }
#else
    __trap();  // The backend refuses the int8 tiles below compute capability 8.0.
#endif
  }
};

// acc += the block's tile (weight rows from row0 of `w`, tile token t from row act_row(t) of
// xq [rows, n_chunks]) over all n_chunks chunks, stage by stage. Every thread of the block
// calls it (it synchronises them).
template <bool kHalves, typename ActRow>
__device__ __forceinline__ void MultiplyTile(Q8MmaStage& s, Q8MmaAcc& acc, const Q8MmaWeights& w, int64_t row0,
                                             const Q8Block* xq, const ActRow& act_row, int64_t n_chunks) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const bool offsets = ChunkOffsets(w.code);
  for (int64_t c0 = 0; c0 < n_chunks; c0 += kMmaChunks) {
    LoadStage(s, w, row0, xq, act_row, n_chunks, c0, tid);
    __syncthreads();
    ComputeStage<kHalves>(s, acc, warp, lane, offsets, DeviceMma{});
    __syncthreads();
  }
}

}  // namespace cascade::kernels::cuda
