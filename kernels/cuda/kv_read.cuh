// Reading the paged KV cache in any of its encodings, shared by the attention kernels.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// Element i (flat index) of a KV cache in encoding `code` (kWF32, kWF16, kWQ8_0: blocks
// of 32 int8 with an f16 scale first, or kWF8: unscaled, the caller applies the head's).
__device__ __forceinline__ float KvAt(const void* cache, int code, int64_t i) {
  if (code == kWF32) return static_cast<const float*>(cache)[i];
  if (code == kWF16) return __half2float(static_cast<const __half*>(cache)[i]);
  if (code == kWF8) return E4M3Value(static_cast<const uint8_t*>(cache)[i]);
  const uint8_t* b = static_cast<const uint8_t*>(cache) + (i / 32) * 34;  // Q8_0.
  return Half(b) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
}

}  // namespace cascade::kernels::cuda
