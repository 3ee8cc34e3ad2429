// Reading the fields of GGUF blocks and KV-cache blocks on the device, where they sit at
// any byte alignment: an f16 scale, an E4M3 code, four bytes little-endian, the K types'
// packed 6-bit scales. Shared by every kernel that decodes blocks (cuda_kernels.cu,
// q8_unpack.cuh, float_chunk.cuh, kv_read.cuh).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace cascade::kernels::cuda {

__device__ __forceinline__ float Half(const uint8_t* p) {
  __half h;
  memcpy(&h, p, 2);
  return __half2float(h);
}

// An E4M3 code's value (core/fp8.h) through f16: the 7 magnitude bits shifted into an f16's
// exponent and mantissa fields are the value times 2^-8 (bias 15 against 7), subnormals
// included; the sign moves to bit 15. Exact.
__device__ __forceinline__ float E4M3Value(uint8_t c) {
  const unsigned short h = static_cast<unsigned short>(((c & 0x7fu) << 7) | ((c & 0x80u) << 8));
  return __half2float(__ushort_as_half(h)) * 256.0f;
}

// The f32 whose bits are u (on the host too: the unpacking tests compile these headers).
#ifdef __CUDACC__
__device__ __forceinline__ float UintAsFloat(uint32_t u) { return __uint_as_float(u); }
#else
inline float UintAsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#endif

__device__ __forceinline__ uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// The 6-bit scale and min of sub-block s of a Q4_K / Q5_K super-block's 12 scale bytes
// (core/quant_blocks.h UnpackQ4KScaleMin).
__device__ __forceinline__ void ScaleMinK4(const uint8_t* sc, int s, int* scale, int* mn) {
  if (s < 4) {
    *scale = sc[s] & 63;
    *mn = sc[s + 4] & 63;
  } else {
    *scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
    *mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
  }
}

// The signed scale of group g (0..15) of a Q3_K super-block's 12 scale bytes
// (core/quant_blocks.h UnpackQ3KScales, less 32).
__device__ __forceinline__ int ScaleQ3K(const uint8_t* sc, int g) {
  const int low = g < 8 ? sc[g] & 0x0f : sc[g - 8] >> 4;
  return (low | ((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}

}  // namespace cascade::kernels::cuda
