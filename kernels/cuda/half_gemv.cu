// F16 / BF16 weights times F32 activations for a few tokens (cuda_kernels.h, HalfGemv):
// decode's matrix products, read once at the copy bandwidth, instead of converting the
// activations for cuBLAS (a launch and a pass) and a GEMM shaped for larger batches.
// One warp per output row: lane l reads the row's 16-byte chunks l, l + 32, ... (8 weights
// each, so a warp's loads are 512 contiguous bytes), converts them to F32 in registers and
// accumulates each token's dot product in F32; the warp then sums its lanes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// The 8 weights of a 16-byte chunk as floats. BF16 is the top half of an F32.
__device__ __forceinline__ void Unpack(const uint4& c, bool bf16, float w[8]) {
  const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (bf16) {
      w[2 * i] = __uint_as_float(words[i] << 16);
      w[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      __half2 h;
      memcpy(&h, &words[i], sizeof(h));
      const float2 f = __half22float2(h);
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  }
}

template <int T>
__global__ void HalfGemvKernel(GemvOut out, const float* x, const uint4* w, bool bf16, int64_t n_tokens, int64_t n_out,
                               int64_t n_in) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (o >= n_out) return;
  const int64_t n_chunks = n_in / 8;
  const uint4* row = w + o * n_chunks;
  const int n_t = static_cast<int>(n_tokens < T ? n_tokens : T);
  float acc[T];
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
#pragma unroll 4
  for (int64_t c = lane; c < n_chunks; c += kWarp) {
    float wf[8];
    Unpack(__ldg(row + c), bf16, wf);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= n_t) break;
      const float4* xv = reinterpret_cast<const float4*>(x + t * n_in + c * 8);
      const float4 a = xv[0], b = xv[1];
      acc[t] +=
          wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
    }
  }
  StoreGemvRow(out, o, acc, n_t, 0, lane);
}

}  // namespace

void HalfGemv(const GemvOut& out, const float* x, const void* w, int code, int64_t n_tokens, int64_t n_out,
              int64_t n_in, cudaStream_t stream) {
  if (n_tokens <= 0 || n_out <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const auto* wc = static_cast<const uint4*>(w);
  const bool bf16 = code == kWBF16;
  constexpr int kThreads = kWarpsPerBlock * kWarp;
  if (n_tokens == 1) {
    HalfGemvKernel<1><<<blocks, kThreads, 0, stream>>>(out, x, wc, bf16, n_tokens, n_out, n_in);
  } else if (n_tokens <= 2) {
    HalfGemvKernel<2><<<blocks, kThreads, 0, stream>>>(out, x, wc, bf16, n_tokens, n_out, n_in);
  } else if (n_tokens <= 4) {
    HalfGemvKernel<4><<<blocks, kThreads, 0, stream>>>(out, x, wc, bf16, n_tokens, n_out, n_in);
  } else {
    HalfGemvKernel<8><<<blocks, kThreads, 0, stream>>>(out, x, wc, bf16, n_tokens, n_out, n_in);
  }
}

}  // namespace cascade::kernels::cuda
