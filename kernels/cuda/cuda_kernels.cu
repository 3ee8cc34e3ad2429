// The CUDA kernels behind CudaBackend; see cuda_kernels.h for the contracts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>

#include "kernels/cuda/block_bytes.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/kv_read.cuh"
#include "kernels/cuda/softmax_factor.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = WarpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int n_warps = (blockDim.x + kWarp - 1) / kWarp;
  v = threadIdx.x < n_warps ? warp_sums[threadIdx.x] : 0.0f;
  if (warp == 0) v = WarpSum(v);
  if (threadIdx.x == 0) warp_sums[0] = v;
  __syncthreads();
  const float total = warp_sums[0];
  __syncthreads();
  return total;
}

// Elements and bytes per block of a quantized code (1 and the element size when dense).
// The K types and IQ4_XS have 256-element super-blocks (core/quant_blocks.h).
__host__ __device__ constexpr bool SuperBlockCode(int code) {
  return code == kWQ4_K || code == kWQ6_K || code == kWQ2_K || code == kWQ3_K || code == kWQ5_K || code == kWIQ4_XS;
}
__host__ __device__ constexpr int64_t BlockElems(int code) {
  return code == kWI4G128 || code == kWF8B128 ? 128 : SuperBlockCode(code) ? 256 : code >= kWQ8_0 ? 32 : 1;
}
__host__ __device__ constexpr int64_t BlockBytes(int code) {
  switch (code) {
    case kWQ8_0: return 34;
    case kWQ4_0: return 18;
    case kWQ4_1: return 20;
    case kWI4G128: return 68;
    case kWF32: return 4;
    case kWQ4_K: return 144;
    case kWQ6_K: return 210;
    case kWQ5_0: return 22;
    case kWQ5_1: return 24;
    case kWQ2_K: return 84;
    case kWQ3_K: return 110;
    case kWQ5_K: return 176;
    case kWIQ4_NL: return 18;
    case kWIQ4_XS: return 136;
    case kWF8B128: return 132;
    case kWMXFP4: return 17;
    default: return 2;
  }
}
// The codes decoded by CodeValue below (every block type but Q8_0, Q4_0, Q4_1, I4_G128).
__host__ __device__ constexpr bool CodeTypeCode(int code) {
  return SuperBlockCode(code) || code == kWQ5_0 || code == kWQ5_1 || code == kWIQ4_NL || code == kWMXFP4;
}
__host__ __device__ inline int64_t RowBytes(int code, int64_t n) { return n / BlockElems(code) * BlockBytes(code); }

// I4_G128 (core/quant_blocks.h): f16 d, f16 z, then 16 words of 8 nibbles.
__device__ __forceinline__ uint32_t I4Word(const uint8_t* block, int w) {
  return reinterpret_cast<const uint32_t*>(block + 4)[w];  // Blocks are 68 bytes: words stay 4-aligned.
}

__constant__ int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
__constant__ int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Element j of a 32-element block in Q4_0's nibble order (qs[j] low = j, high = j + 16).
__device__ __forceinline__ int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }
// Element i of a row of the Q5_0 / Q5_1 / IQ4_NL / MXFP4 / K / IQ4_XS types, from the bit layouts of
// core/quant_blocks.h (the same decoding as kernels/cpu/block_codes.cc, element by element).
__device__ float CodeValue(const uint8_t* row, int code, int64_t i) {
  const int64_t c = i / 32;
  const int j = static_cast<int>(i % 32);
  if (code == kWQ5_0 || code == kWQ5_1) {
    const uint8_t* b = row + c * BlockBytes(code);
    const int off = code == kWQ5_1 ? 4 : 2;
    const int q = Nibble(b + off + 4, j) | static_cast<int>((Le32(b + off) >> j) & 1) << 4;
    return code == kWQ5_0 ? Half(b) * static_cast<float>(q - 16) : Half(b) * static_cast<float>(q) + Half(b + 2);
  }
  if (code == kWIQ4_NL) {
    const uint8_t* b = row + c * 18;
    return Half(b) * static_cast<float>(kIq4nl[Nibble(b + 2, j)]);
  }
  if (code == kWMXFP4) {  // 2^(e - 128) * the doubled E2M1 value (core/quant_blocks.h).
    const uint8_t* b = row + c * 17;
    const uint32_t e = b[0];
    const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    return d * static_cast<float>(kMxfp4[Nibble(b + 1, j)]);
  }
  const uint8_t* sb = row + (c / 8) * BlockBytes(code);
  const int s = static_cast<int>(c % 8), g = 2 * s + j / 16;  // Sub-block of 32, group of 16.
  switch (code) {
    case kWQ4_K:
    case kWQ5_K: {
      int scale, mn;
      ScaleMinK4(sb + 4, s, &scale, &mn);
      const uint8_t* qs = sb + (code == kWQ4_K ? 16 : 48);
      int q = (qs[32 * (s / 2) + j] >> (4 * (s % 2))) & 0x0f;
      if (code == kWQ5_K) q |= ((sb[16 + j] >> s) & 1) << 4;
      return Half(sb) * static_cast<float>(scale * q) - Half(sb + 2) * static_cast<float>(mn);
    }
    case kWQ6_K: {
      const int h = s / 4, quarter = s % 4;
      const int low = (sb[64 * h + 32 * (quarter % 2) + j] >> (4 * (quarter / 2))) & 0x0f;
      const int high = (sb[128 + 32 * h + j] >> (2 * quarter)) & 3;
      const int8_t scale = static_cast<int8_t>(sb[192 + g]);
      return Half(sb + 208) * static_cast<float>(scale) * static_cast<float>((low | high << 4) - 32);
    }
    case kWQ2_K: {
      const int q = (sb[16 + 32 * (s / 4) + j] >> (2 * (s % 4))) & 3;
      const uint8_t sc = sb[g];
      return Half(sb + 80) * static_cast<float>((sc & 0x0f) * q) - Half(sb + 82) * static_cast<float>(sc >> 4);
    }
    case kWQ3_K: {
      const int q = ((sb[32 + 32 * (s / 4) + j] >> (2 * (s % 4))) & 3) | ((sb[j] >> s) & 1) << 2;
      return Half(sb + 108) * static_cast<float>(ScaleQ3K(sb + 96, g)) * static_cast<float>(q - 4);
    }
    default: {  // IQ4_XS
      const int scales_h = sb[2] | sb[3] << 8;
      const int ls = ((sb[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | ((scales_h >> (2 * s)) & 3) << 4;
      return Half(sb) * static_cast<float>(ls - 32) * static_cast<float>(kIq4nl[Nibble(sb + 8 + 16 * s, j)]);
    }
  }
}

// An E4M3 code's value (core/fp8.h; the NaN code does not occur in weights): normals by
// re-biasing the exponent (7 to 127), subnormals as m x 2^-9, both exact.
__device__ __forceinline__ float E4M3(uint8_t q) {
  const uint32_t e = (q >> 3) & 0xf, m = q & 7;
  const float v = e == 0 ? static_cast<float>(m) * 0.001953125f : __uint_as_float((e + 120) << 23 | m << 20);
  return q & 0x80 ? -v : v;
}

// Element i of a row in any encoding (the slow generic path: embedding, dequantize).
__device__ float Decode(const uint8_t* row, int code, int64_t i) {
  if (CodeTypeCode(code)) return CodeValue(row, code, i);
  if (code == kWF8B128) {
    const uint8_t* b = row + (i / 128) * 132;
    return __uint_as_float(Le32(b)) * E4M3(b[4 + i % 128]);
  }
  switch (code) {
    case kWF32: return reinterpret_cast<const float*>(row)[i];
    case kWF16: return __half2float(reinterpret_cast<const __half*>(row)[i]);
    case kWBF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
    default: break;
  }
  const uint8_t* b = row + (i / BlockElems(code)) * BlockBytes(code);
  const float d = Half(b);
  if (code == kWI4G128) {
    const int j = static_cast<int>(i % 128);
    const int q = static_cast<int>((I4Word(b, j / 8) >> (4 * (j % 8))) & 0xf);
    return d * (static_cast<float>(q) - Half(b + 2));
  }
  const int j = static_cast<int>(i % 32);
  if (code == kWQ8_0) return d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  const uint8_t* qs = b + (code == kWQ4_1 ? 4 : 2);
  const int q = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
  if (code == kWQ4_0) return d * static_cast<float>(q - 8);
  return d * static_cast<float>(q) + Half(b + 2);
}

// Weights [32 c, 32 c + 32) of a quantized row into w[32]: one block of the 32-element
// codes, a quarter of an I4_G128 group.
__device__ __forceinline__ void DecodeChunk(const uint8_t* row, int code, int64_t c, float* w) {
  if (CodeTypeCode(code)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = CodeValue(row, code, 32 * c + j);
    return;
  }
  if (code == kWF8B128) {
    const uint8_t* b = row + (c / 4) * 132;
    const float d = __uint_as_float(Le32(b));
    const uint8_t* qs = b + 4 + 32 * (c % 4);
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = d * E4M3(qs[j]);
    return;
  }
  if (code == kWI4G128) {
    const uint8_t* b = row + (c / 4) * 68;
    const float d = Half(b), z = Half(b + 2);
    const int w0 = static_cast<int>(c % 4) * 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t word = I4Word(b, w0 + k);
#pragma unroll
      for (int j = 0; j < 8; ++j) w[8 * k + j] = d * (static_cast<float>((word >> (4 * j)) & 0xf) - z);
    }
    return;
  }
  const uint8_t* b = row + c * BlockBytes(code);
  const float d = Half(b);
  if (code == kWQ8_0) {
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
    return;
  }
  const uint8_t* qs = b + (code == kWQ4_1 ? 4 : 2);
  const float m = code == kWQ4_1 ? Half(b + 2) : -8.0f * d;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    w[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    w[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// hidden += add, then out = RmsNorm(hidden): the sums and the products as AddKernel and
// RmsNormKernel do them, in one pass (each thread reads back only what it wrote).
__global__ void AddRmsNormKernel(float* out, float* hidden, const float* add, const float* w, int64_t n, float eps) {
  float* x = hidden + blockIdx.x * n;
  const float* a = add + blockIdx.x * n;
  float* y = out + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i] + a[i];
    x[i] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * inv * w[i];
}

__global__ void RmsNormKernel(float* out, const float* in, const float* w, int64_t n, float eps) {
  const float* x = in + blockIdx.x * n;
  float* y = out + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * inv * w[i];
}

// Row t of x [.., n_heads * head_dim] rotated by its position (every thread of the block
// takes a share of the (head, pair) items).
__device__ __forceinline__ void RopeRow(float* x, float pos, const float* inv_freq, int64_t n_heads, int64_t head_dim,
                                        int style) {
  const int64_t half = head_dim / 2;
  for (int64_t idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    float* head = x + h * head_dim;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    const int64_t a = style == 0 ? 2 * i : i, b = style == 0 ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

__global__ void RopeKernel(float* x, const int32_t* positions, const float* inv_freq, int64_t n_heads, int64_t head_dim,
                           int style) {
  const int64_t t = blockIdx.x;
  RopeRow(x + t * n_heads * head_dim, static_cast<float>(positions[t]), inv_freq, n_heads, head_dim, style);
}

__global__ void GatherColumnsKernel(float* out, const float* in, const int32_t* cols, int64_t d, int64_t n_cols) {
  const int64_t r = blockIdx.x;
  for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x) out[r * n_cols + j] = in[r * d + cols[j]];
}

__global__ void SiluMulKernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void ClampedSwigluKernel(float* out, const float* gate, const float* up, int64_t n, float alpha,
                                    float limit) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = fminf(gate[i], limit);
    const float u = fminf(fmaxf(up[i], -limit), limit);
    out[i] = (u + 1.0f) * g / (1.0f + expf(-alpha * g));
  }
}

__global__ void AddKernel(float* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += in[i];
}

__global__ void AddScaledRowsKernel(float* out, const float* in, const int32_t* rows, const float* scales,
                                    int64_t n_rows, int64_t d) {
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < d; c += gridDim.x * blockDim.x) {
    for (int64_t i = 0; i < n_rows; ++i) out[rows[i] * d + c] += scales[i] * in[i * d + c];
  }
}

__global__ void AddSigmoidGatedRowsKernel(float* out, const float* in, const float* gate, int64_t n_rows, int64_t d) {
  const int64_t n = n_rows * d;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float w = 1.0f / (1.0f + expf(-gate[i / d]));  // As Backend::AddSigmoidGatedRows.
    out[i] += w * in[i];
  }
}

__global__ void AddBiasKernel(float* out, const float* bias, int64_t n_tokens, int64_t n_out) {
  const int64_t n = n_tokens * n_out;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += bias[i % n_out];
}

__global__ void EmbeddingKernel(float* out, const uint8_t* table, int code, const int32_t* ids, int64_t n_embd) {
  const uint8_t* row = table + static_cast<int64_t>(ids[blockIdx.x]) * RowBytes(code, n_embd);
  for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) out[blockIdx.x * n_embd + i] = Decode(row, code, i);
}

__device__ __forceinline__ void Store(float* out, float v) { *out = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* out, float v) { *out = __float2bfloat16(v); }

template <typename Out>
__global__ void DequantizeKernel(Out* out, const uint8_t* w, int code, int64_t cols) {
  const uint8_t* row = w + blockIdx.x * RowBytes(code, cols);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) Store(out + blockIdx.x * cols + i, Decode(row, code, i));
}

__global__ void ToHalfKernel(__half* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __float2half(in[i]);
}

__global__ void ToBf16Kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

// One warp per output row o; lane l takes blocks l, l + 32, ...; T tokens per pass.
template <int T>
__global__ void QuantGemvKernel(GemvOut out, const float* x, const uint8_t* w, int code, int64_t n_tokens,
                                int64_t n_out, int64_t n_in, int64_t t0) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (o >= n_out) return;
  const int64_t nb = n_in / 32;
  const uint8_t* row = w + o * RowBytes(code, n_in);
  float acc[T];
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  const int n_t = static_cast<int>(n_tokens - t0 < T ? n_tokens - t0 : T);
  float wb[32];
  for (int64_t b = lane; b < nb; b += kWarp) {
    DecodeChunk(row, code, b, wb);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= n_t) break;
      const float4* xv = reinterpret_cast<const float4*>(x + (t0 + t) * n_in + b * 32);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 v = xv[j];
        s += wb[4 * j] * v.x + wb[4 * j + 1] * v.y + wb[4 * j + 2] * v.z + wb[4 * j + 3] * v.w;
      }
      acc[t] += s;
    }
  }
  StoreGemvRow(out, o, acc, n_t, t0, lane);
}

// One block per row; f32 / f16: a thread per element; q8_0: a thread per 32-block
// (amax / 127 scale, round to nearest as ggml's reference quantizer).
// Elements [e0, e1) of row r of k and v [.., kv_dim] into the caches at slot[r], in the
// cache's encoding (q8_0: e0 and e1 multiples of 32).
__device__ __forceinline__ void WriteKvRange(const KvCacheRef& c, const float* k, const float* v, const int32_t* slot,
                                             int64_t kv_dim, int64_t r, int64_t e0, int64_t e1) {
  const int64_t base = static_cast<int64_t>(slot[r]) * kv_dim;
  const int code = c.code;
  for (int which = 0; which < 2; ++which) {
    void* cache = which == 0 ? c.k : c.v;
    const float* src = (which == 0 ? k : v) + r * kv_dim;
    if (code == kWF8) {  // As the CPU: x times the reciprocal of the head's scale, RNE, saturated.
      const float* scale = which == 0 ? c.k_scale : c.v_scale;
      for (int64_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) {
        const float x = src[i] * (1.0f / scale[i / c.head_dim]);
        static_cast<uint8_t*>(cache)[base + i] =
            static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
      }
      continue;
    }
    if (code == kWF32 || code == kWF16) {
      for (int64_t i = e0 + threadIdx.x; i < e1; i += blockDim.x) {
        if (code == kWF32) {
          static_cast<float*>(cache)[base + i] = src[i];
        } else {
          static_cast<__half*>(cache)[base + i] = __float2half_rn(src[i]);
        }
      }
      continue;
    }
    for (int64_t blk = e0 / 32 + threadIdx.x; blk < e1 / 32; blk += blockDim.x) {
      const float* x = src + 32 * blk;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* out = static_cast<uint8_t*>(cache) + ((base / 32) + blk) * 34;
      const __half dh = __float2half_rn(d);
      memcpy(out, &dh, 2);
      for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x[j] * id)));
    }
  }
}

__device__ __forceinline__ void WriteKvRow(const KvCacheRef& c, const float* k, const float* v, const int32_t* slot,
                                           int64_t kv_dim, int64_t r) {
  WriteKvRange(c, k, v, slot, kv_dim, r, 0, kv_dim);
}

__global__ void WriteKvKernel(KvCacheRef c, const float* k, const float* v, const int32_t* slot, int64_t kv_dim) {
  WriteKvRow(c, k, v, slot, kv_dim, blockIdx.x);
}

// Rope of row r's q and k, then its KV write: the k the write reads is the rotated one,
// written by this block's threads (visible after the barrier).
__global__ void RopeWriteKvKernel(float* q, float* k, const float* v, const int32_t* positions, const float* inv_freq,
                                  int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int style, KvCacheRef c,
                                  const int32_t* slot) {
  const int64_t r = blockIdx.x;
  const float pos = static_cast<float>(positions[r]);
  RopeRow(q + r * n_heads * head_dim, pos, inv_freq, n_heads, head_dim, style);
  RopeRow(k + r * n_kv_heads * head_dim, pos, inv_freq, n_kv_heads, head_dim, style);
  __syncthreads();
  WriteKvRow(c, k, v, slot, n_kv_heads * head_dim, r);
}

// Block (row r, head j) of 256 threads, RmsNormKernel's block: head j of q (j < n_heads) or
// head j - n_heads of k normalised as RmsNormKernel does a row (the same sums in the same
// tree), rotated as RopeRow does, and a k head then written with its v head.
__global__ void NormRopeWriteKvKernel(float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                      float eps, const int32_t* positions, const float* inv_freq, int64_t n_heads,
                                      int64_t n_kv_heads, int64_t head_dim, int style, KvCacheRef c,
                                      const int32_t* slot) {
  const int64_t r = blockIdx.x, j = blockIdx.y, kh = j - n_heads;
  const bool is_q = j < n_heads;
  float* x = is_q ? q + (r * n_heads + j) * head_dim : k + (r * n_kv_heads + kh) * head_dim;
  const float* w = is_q ? q_norm : k_norm;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) ss += x[i] * x[i];
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(head_dim) + eps);
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) x[i] = x[i] * inv * w[i];
  __syncthreads();
  RopeRow(x, static_cast<float>(positions[r]), inv_freq, 1, head_dim, style);
  if (is_q) return;
  __syncthreads();
  WriteKvRange(c, k, v, slot, n_kv_heads * head_dim, r, kh * head_dim, (kh + 1) * head_dim);
}

// Block (row, head, split), 4 warps. Each warp walks its keys with its own online
// softmax; lane l holds dims l, l + 32, ... of q and of the accumulator.
constexpr int kAttnWarps = 4;
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256.

// One key j of a warp's walk: lane l adds its dimensions of q.k_j, and the warp folds
// e^(s - m) v_j into its running (m, l, acc).
__device__ __forceinline__ void AttendKey(const AttentionArgs& a, const int32_t* table, int64_t j, int64_t kvh,
                                          int64_t hd, int64_t per_lane, int lane, const float* q, float* acc, float& m,
                                          float& l) {
  const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
  const int64_t base = (slot * a.n_kv_heads + kvh) * hd;
  float s = 0.0f;
  for (int i = 0; i < per_lane; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < hd) s += q[i] * KvAt(a.k_cache, a.kv_code, base + d);
  }
  s = WarpSum(s);
  const float m_new = fmaxf(m, s);
  const float corr = __expf(m - m_new), p = __expf(s - m_new);
  l = l * corr + p;
  for (int i = 0; i < per_lane; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < hd) acc[i] = acc[i] * corr + p * KvAt(a.v_cache, a.kv_code, base + d);
  }
  m = m_new;
}

__global__ void AttentionSplitKernel(AttentionArgs a) {
  const int64_t r = a.split_rows != nullptr ? a.split_rows[blockIdx.x] : blockIdx.x;
  const int64_t h = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // Lane l holds dimensions l, l + 32, ...; a head_dim that is not a multiple of 32 (the
  // tiny models' 8 or 16) leaves the last lanes partly idle.
  const int64_t hd = a.head_dim, per_lane = (hd + kWarp - 1) / kWarp;
  const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t n_keys = static_cast<int64_t>(a.row_pos[r]) + 1;
  // The window's start, and the kept prefix [0, kept) read apart when the window left it.
  int64_t first = a.window > 0 && n_keys > a.window ? n_keys - a.window : 0;
  if (first <= a.kept_prefix) first = 0;
  const int64_t kept = first > 0 ? a.kept_prefix : 0;
  const int64_t k0 = split * a.keys_per_split;
  const int64_t k1 = n_keys < k0 + a.keys_per_split ? n_keys : k0 + a.keys_per_split;
  const int32_t* table = a.tables + a.row_table[r];
  float q[kMaxDimPerLane], acc[kMaxDimPerLane];
  const float* qrow = a.q + (r * a.n_heads + h) * hd;
  const float qscale = a.k_scale != nullptr ? a.scale * a.k_scale[kvh] : a.scale;
  for (int i = 0; i < per_lane; ++i) {
    const int64_t d = lane + kWarp * i;
    q[i] = d < hd ? qrow[d] * qscale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t j = k0 + warp; j < (k1 < kept ? k1 : kept); j += kAttnWarps) {
    AttendKey(a, table, j, kvh, hd, per_lane, lane, q, acc, m, l);
  }
  for (int64_t j = (k0 > first ? k0 : first) + warp; j < k1; j += kAttnWarps) {
    AttendKey(a, table, j, kvh, hd, per_lane, lane, q, acc, m, l);
  }
  // Merge the warps' (m, l, acc) in shared memory.
  __shared__ float sm[kAttnWarps], sl[kAttnWarps], sacc[kAttnWarps][256];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  for (int i = 0; i < per_lane; ++i) {
    if (lane + kWarp * i < hd) sacc[warp][lane + kWarp * i] = acc[i];
  }
  __syncthreads();
  float* part = a.partial + ((r * a.n_heads + h) * a.n_splits + split) * (hd + 2);
  float mx = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, sm[w]);
  const float vscale = a.v_scale != nullptr ? a.v_scale[kvh] : 1.0f;  // The combine is linear in it.
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) v += sl[w] > 0.0f ? sacc[w][d] * __expf(sm[w] - mx) : 0.0f;
    part[d] = v * vscale;
  }
  if (threadIdx.x == 0) {
    float lt = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) lt += sl[w] > 0.0f ? sl[w] * __expf(sm[w] - mx) : 0.0f;
    part[hd] = mx;
    part[hd + 1] = lt;
  }
}

__global__ void AttentionCombineKernel(AttentionArgs a) {
  const int64_t r = a.split_rows != nullptr ? a.split_rows[blockIdx.x] : blockIdx.x;
  const int64_t h = blockIdx.y, hd = a.head_dim;
  const float* parts = a.partial + (r * a.n_heads + h) * a.n_splits * (hd + 2);
  float mx = -FLT_MAX;
  for (int64_t s = 0; s < a.n_splits; ++s) {
    if (parts[s * (hd + 2) + hd + 1] > 0.0f) mx = fmaxf(mx, parts[s * (hd + 2) + hd]);
  }
  float lt = 0.0f;
  for (int64_t s = 0; s < a.n_splits; ++s) {
    const float ls = parts[s * (hd + 2) + hd + 1];
    if (ls > 0.0f) lt += ls * __expf(parts[s * (hd + 2) + hd] - mx);
  }
  const float f = SoftmaxFactor(mx, lt, a.sinks != nullptr ? a.sinks + h : nullptr);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int64_t s = 0; s < a.n_splits; ++s) {
      const float* p = parts + s * (hd + 2);
      if (p[hd + 1] > 0.0f) v += p[d] * __expf(p[hd] - mx);
    }
    a.out[(r * a.n_heads + h) * hd + d] = v * f;
  }
}

__global__ void ArgmaxKernel(int32_t* out, const float* logits, int64_t n_vocab) {
  const float* row = logits + blockIdx.x * n_vocab;
  float best = -FLT_MAX;
  int64_t best_i = 0;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    if (row[i] > best) {
      best = row[i];
      best_i = i;
    }
  }
  __shared__ float sv[1024];
  __shared__ int64_t si[1024];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float v = sv[threadIdx.x + s];
      const int64_t i = si[threadIdx.x + s];
      if (v > sv[threadIdx.x] || (v == sv[threadIdx.x] && i < si[threadIdx.x])) {
        sv[threadIdx.x] = v;
        si[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(si[0]);
}

__device__ __forceinline__ uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

__global__ void FillRandomKernel(uint8_t* w, int code, int64_t n_units, float scale, uint32_t seed) {
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < n_units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = Hash((static_cast<uint64_t>(seed) << 40) ^ static_cast<uint64_t>(u));
    const float r = scale * (static_cast<float>(h & 0xffff) / 32768.0f - 1.0f);
    switch (code) {
      case kWF32: reinterpret_cast<float*>(w)[u] = r; break;
      case kWF16: reinterpret_cast<__half*>(w)[u] = __float2half(r); break;
      case kWBF16: reinterpret_cast<__nv_bfloat16*>(w)[u] = __float2bfloat16(r); break;
      default: {
        // One byte of a quantized row; the first two bytes of a block are its f16 scale.
        const int64_t bb = BlockBytes(code), in_block = u % bb;
        if (in_block == 0) {
          const __half d = __float2half(scale / 16.0f);
          memcpy(w + u, &d, 2);
        } else if (code == kWQ4_1 && in_block < 4) {
          w[u] = 0;  // The block's f16 min: 0.
        } else if (code == kWI4G128 && in_block < 4) {
          w[u] = in_block == 2 ? 0x00 : 0x48;  // The group's f16 zero point: 8.0 (0x4800).
        } else if (in_block >= 2) {
          w[u] = static_cast<uint8_t>(h >> 24);
        }
      }
    }
  }
}

int Grid(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

}  // namespace

void RmsNorm(float* out, const float* in, const float* w, int64_t n_rows, int64_t n, float eps, cudaStream_t stream) {
  if (n_rows > 0) RmsNormKernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(out, in, w, n, eps);
}

void AddRmsNorm(float* out, float* hidden, const float* add, const float* w, int64_t n_rows, int64_t n, float eps,
                cudaStream_t stream) {
  if (n_rows > 0) AddRmsNormKernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(out, hidden, add, w, n, eps);
}

void Rope(float* x, const int32_t* positions, const float* inv_freq, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, int style, cudaStream_t stream) {
  if (n_tokens > 0)
    RopeKernel<<<static_cast<unsigned>(n_tokens), 256, 0, stream>>>(x, positions, inv_freq, n_heads, head_dim, style);
}

void AddScaledRows(float* out, const float* in, const int32_t* rows, const float* scales, int64_t n_rows, int64_t d,
                   cudaStream_t stream) {
  if (n_rows > 0 && d > 0) AddScaledRowsKernel<<<Grid(d, 128), 128, 0, stream>>>(out, in, rows, scales, n_rows, d);
}

void AddSigmoidGatedRows(float* out, const float* in, const float* gate, int64_t n_rows, int64_t d,
                         cudaStream_t stream) {
  if (n_rows > 0 && d > 0) {
    AddSigmoidGatedRowsKernel<<<Grid(n_rows * d, 256), 256, 0, stream>>>(out, in, gate, n_rows, d);
  }
}

void GatherColumns(float* out, const float* in, const int32_t* cols, int64_t n_rows, int64_t d, int64_t n_cols,
                   cudaStream_t stream) {
  if (n_rows > 0 && n_cols > 0) {
    GatherColumnsKernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(out, in, cols, d, n_cols);
  }
}

void SiluMul(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n > 0) SiluMulKernel<<<Grid(n, 256), 256, 0, stream>>>(out, gate, up, n);
}

void ClampedSwiglu(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit,
                   cudaStream_t stream) {
  if (n > 0) ClampedSwigluKernel<<<Grid(n, 256), 256, 0, stream>>>(out, gate, up, n, alpha, limit);
}

void Add(float* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n > 0) AddKernel<<<Grid(n, 256), 256, 0, stream>>>(out, in, n);
}

void AddBias(float* out, const float* bias, int64_t n_tokens, int64_t n_out, cudaStream_t stream) {
  if (n_tokens * n_out > 0) AddBiasKernel<<<Grid(n_tokens * n_out, 256), 256, 0, stream>>>(out, bias, n_tokens, n_out);
}

void Embedding(float* out, const void* table, int code, const int32_t* ids, int64_t n_ids, int64_t n_embd,
               cudaStream_t stream) {
  if (n_ids > 0) {
    EmbeddingKernel<<<static_cast<unsigned>(n_ids), 256, 0, stream>>>(out, static_cast<const uint8_t*>(table), code,
                                                                      ids, n_embd);
  }
}

void Dequantize(float* out, const void* w, int code, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0)
    DequantizeKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(out, static_cast<const uint8_t*>(w), code, cols);
}

void DequantizeBf16(void* out, const void* w, int code, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0) {
    DequantizeKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                                      static_cast<const uint8_t*>(w), code, cols);
  }
}

void ConvertActivations(void* out, const float* in, int code, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (code == kWF16) {
    ToHalfKernel<<<Grid(n, 256), 256, 0, stream>>>(static_cast<__half*>(out), in, n);
  } else {
    ToBf16Kernel<<<Grid(n, 256), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(out), in, n);
  }
}

void QuantGemv(const GemvOut& out, const float* x, const void* w, int code, int64_t n_tokens, int64_t n_out,
               int64_t n_in, cudaStream_t stream) {
  constexpr int kWarpsPerBlock = 4;
  const unsigned blocks = static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    const auto* wb = static_cast<const uint8_t*>(w);
    if (n_tokens - t0 == 1) {
      QuantGemvKernel<1><<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(out, x, wb, code, n_tokens, n_out, n_in, t0);
    } else if (n_tokens - t0 <= 4) {
      QuantGemvKernel<4><<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(out, x, wb, code, n_tokens, n_out, n_in, t0);
    } else {
      QuantGemvKernel<8><<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(out, x, wb, code, n_tokens, n_out, n_in, t0);
    }
  }
}

void WriteKv(const KvCacheRef& cache, const float* k, const float* v, const int32_t* slot_of_row, int64_t n_rows,
             int64_t kv_dim, cudaStream_t stream) {
  if (n_rows > 0) WriteKvKernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(cache, k, v, slot_of_row, kv_dim);
}

void RopeWriteKv(float* q, float* k, const float* v, const int32_t* positions, const float* inv_freq, int64_t n_rows,
                 int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int style, const KvCacheRef& cache,
                 const int32_t* slot_of_row, cudaStream_t stream) {
  if (n_rows > 0) {
    RopeWriteKvKernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(
        q, k, v, positions, inv_freq, n_heads, n_kv_heads, head_dim, style, cache, slot_of_row);
  }
}

void NormRopeWriteKv(float* q, float* k, const float* v, const float* q_norm, const float* k_norm, float eps,
                     const int32_t* positions, const float* inv_freq, int64_t n_rows, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, int style, const KvCacheRef& cache,
                     const int32_t* slot_of_row, cudaStream_t stream) {
  if (n_rows > 0) {
    const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_heads + n_kv_heads));
    NormRopeWriteKvKernel<<<grid, 256, 0, stream>>>(q, k, v, q_norm, k_norm, eps, positions, inv_freq, n_heads,
                                                    n_kv_heads, head_dim, style, cache, slot_of_row);
  }
}

void Attention(const AttentionArgs& args, cudaStream_t stream) {
  const int64_t rows = args.split_rows != nullptr ? args.n_split_rows : args.n_rows;
  if (rows <= 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(args.n_heads),
                  static_cast<unsigned>(args.n_splits));
  AttentionSplitKernel<<<grid, kAttnWarps * kWarp, 0, stream>>>(args);
  const dim3 grid2(static_cast<unsigned>(rows), static_cast<unsigned>(args.n_heads));
  AttentionCombineKernel<<<grid2, 128, 0, stream>>>(args);
}

void FillRandom(void* w, int code, int64_t n, float scale, uint32_t seed, cudaStream_t stream) {
  const int64_t units = code == kWF32 || code == kWF16 || code == kWBF16 ? n : RowBytes(code, n);
  if (units > 0)
    FillRandomKernel<<<Grid(units, 256), 256, 0, stream>>>(static_cast<uint8_t*>(w), code, units, scale, seed);
}

void Argmax(int32_t* out, const float* logits, int64_t n_rows, int64_t n_vocab, cudaStream_t stream) {
  if (n_rows > 0) ArgmaxKernel<<<static_cast<unsigned>(n_rows), 1024, 0, stream>>>(out, logits, n_vocab);
}

}  // namespace cascade::kernels::cuda
