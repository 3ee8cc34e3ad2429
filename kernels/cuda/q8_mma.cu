// Quantized weights times 8-bit activations for many tokens on int8 tensor cores
// (cuda_kernels.h, Q8Mma): the block's stages of q8_mma_tile.cuh, with the mma.sync
// instruction that multiplies one 16 x 8 fragment. Fragment layouts from the PTX ISA
// ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k32" with .s8): g = lane / 4, t = lane % 4;
// A (16 x K, row-major) register r holds 4 consecutive bytes of row g + 8 (r % 2), at byte
// 4 t + 16 (r / 2); B (K x 8, column-major: a token's row here) register r holds bytes
// 4 t + 16 r of token g; C holds (g, 2 t), (g, 2 t + 1), (g + 8, 2 t), (g + 8, 2 t + 1).
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/q8_mma_tile.cuh"

namespace cascade::kernels::cuda {
namespace {

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
    __trap();  // Q8Mma refuses devices below compute capability 8.0 before launching.
#endif
  }
};

// Block (token tile, row tile): the token tiles of one row tile run side by side and share
// its weights through L2.
template <bool kHalves>
__global__ void __launch_bounds__(kMmaThreads) Q8MmaKernel(Q8MmaArgs a) {
  __shared__ Q8MmaStage s;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kMmaTokens;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const bool offsets = ChunkOffsets(a.code);
  Q8MmaAcc acc{};
  for (int64_t c0 = 0; c0 < a.n_in / 32; c0 += kMmaChunks) {
    LoadStage(s, a, row0, tok0, c0, static_cast<int>(threadIdx.x));
    __syncthreads();
    ComputeStage<kHalves>(s, acc, warp, lane, offsets, DeviceMma{});
    __syncthreads();
  }
  StoreTile(a, acc, row0, tok0, warp, lane);
}

}  // namespace

void Q8Mma(const GemvOut& out, const Q8Block* xq, const void* w, int code, int64_t row_bytes, int64_t n_tokens,
           int64_t n_out, int64_t n_in, cudaStream_t stream) {
  if (n_tokens == 0 || n_out == 0) return;
  Q8MmaArgs a;
  a.out = out;
  a.xq = xq;
  a.w = static_cast<const uint8_t*>(w);
  a.code = code;
  a.row_bytes = row_bytes;
  a.n_tokens = n_tokens;
  a.n_out = n_out;
  a.n_in = n_in;
  const dim3 grid(static_cast<unsigned>((n_tokens + kMmaTokens - 1) / kMmaTokens),
                  static_cast<unsigned>((n_out + kMmaRows - 1) / kMmaRows));
  if (ChunkHalves(code)) {
    Q8MmaKernel<true><<<grid, kMmaThreads, 0, stream>>>(a);
  } else {
    Q8MmaKernel<false><<<grid, kMmaThreads, 0, stream>>>(a);
  }
}

}  // namespace cascade::kernels::cuda
