// The 32-weight chunks of the float weight encodings as 32 f32 values, for the device MoE
// layers' float experts (moe_experts.cu): F32, F16, BF16 and F8_E4M3_B128 (an f32 scale
// then 128 E4M3 codes per 132-byte block, core/fp8.h), which no integer dot product takes.
// Every conversion is exact. Like q8_unpack.cuh it compiles for the host too, so
// tests/kernels/float_chunk_test.cc checks the chunks against the CPU's own decoders
// without a GPU.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// N 4-byte words from p, which is 4-byte aligned (16-byte aligned with kVec16: loaded 16
// bytes at a time on the device).
template <int N, bool kVec16>
__device__ __forceinline__ void LoadWords(const uint8_t* p, uint32_t* out) {
#ifdef __CUDACC__
  if constexpr (kVec16) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      out[4 * i] = v.x;
      out[4 * i + 1] = v.y;
      out[4 * i + 2] = v.z;
      out[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = reinterpret_cast<const uint32_t*>(p)[i];
  }
#else
  memcpy(out, p, 4 * N);
#endif
}

// Weights [32 c, 32 c + 32) of a row of `code` (cuda_kernels.h FloatChunkCode) into w. F32 / F16 / BF16
// rows start at 16-byte boundaries (n_in a multiple of 32); F8_E4M3_B128's 132-byte blocks
// at 4-byte ones.
__device__ __forceinline__ void FloatChunk(const uint8_t* row, int code, int64_t c, float w[32]) {
  if (code == kWF32) {
    uint32_t v[32];
    LoadWords<32, true>(row + 128 * c, v);
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = UintAsFloat(v[j]);
    return;
  }
  if (code == kWF8B128) {
    const uint8_t* b = row + (c / 4) * 132;
    uint32_t q[9];  // The block's scale, then the chunk's 32 codes.
    LoadWords<1, false>(b, q);
    LoadWords<8, false>(b + 4 + 32 * (c % 4), q + 1);
    const float d = UintAsFloat(q[0]);
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = d * E4M3Value(static_cast<uint8_t>(q[1 + j / 4] >> (8 * (j % 4))));
    return;
  }
  uint32_t h[16];
  LoadWords<16, true>(row + 64 * c, h);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const uint32_t bits = (h[j / 2] >> (16 * (j % 2))) & 0xffffu;
    w[j] = code == kWBF16 ? UintAsFloat(bits << 16) : __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

}  // namespace cascade::kernels::cuda
