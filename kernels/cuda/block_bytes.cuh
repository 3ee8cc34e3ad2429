// Reading the fields of GGUF blocks and KV-cache blocks on the device, where they sit at
// any byte alignment: an f16 scale, four bytes little-endian. Shared by every kernel that
// decodes blocks (cuda_kernels.cu, q8_gemv.cu, kv_read.cuh).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace cascade::kernels::cuda {

__device__ __forceinline__ float Half(const uint8_t* p) {
  __half h;
  memcpy(&h, p, 2);
  return __half2float(h);
}

__device__ __forceinline__ uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace cascade::kernels::cuda
