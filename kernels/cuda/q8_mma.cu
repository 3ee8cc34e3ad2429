// Quantized weights times 8-bit activations for many tokens on int8 tensor cores
// (cuda_kernels.h, Q8Mma): one block per 64-row x 64-token tile (q8_mma_tile.cuh,
// q8_mma.cuh).
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/q8_mma.cuh"

namespace cascade::kernels::cuda {
namespace {

// Block (token tile, row tile): the token tiles of one row tile run side by side and share
// its weights through L2.
template <bool kHalves>
__global__ void __launch_bounds__(kMmaThreads) Q8MmaKernel(Q8MmaArgs a) {
  __shared__ Q8MmaStage s;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kMmaTokens;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
  Q8MmaAcc acc{};
  MultiplyTile<kHalves>(s, acc, DenseWeights(a), row0, a.xq, DenseRows(a, tok0), a.n_in / 32);
  StoreTile(a, acc, row0, tok0, static_cast<int>(threadIdx.x) / 32, static_cast<int>(threadIdx.x) % 32);
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
