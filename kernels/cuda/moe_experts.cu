// A MoE layer's routed experts on the device, from the router's logits to the weighted
// sum (cuda_kernels.h, MoeRoutedExperts), in four to six launches and no host synchronisation:
//   1. the token activations quantized to 8 bits once (QuantizeActivations), for experts
//      of the block types; float experts (F32, F16, BF16, FP8 with 128-blocks) read them
//      in f32 as they are, and their chunks decoded to f32 (float_chunk.cuh); act-order GPTQ
//      matrices instead get each grouped row's inputs gathered in their own order and then
//      quantized (GatherQuantizeKernel, after 3; for down, before 5);
//   2. RouteKernel, one block per token: softmax statistics, the top k by k block-wide
//      argmax rounds (lower id first on ties, as RouteToken's sort), their weights;
//   3. GroupKernel, one block: the entries of held experts listed expert by expert (a
//      counting sort: counts and row slots by shared-memory atomics, so the order of an
//      expert's rows varies from run to run; no value depends on it, as each row is
//      computed alone and CombineKernel reads rows by entry), and each entry's row;
//   4. GateUpKernel, a block per (held expert, 4 output rows): each warp one row of the
//      expert's gate and of its up over that expert's rows, silu(gate) * up stored; or, with
//      MoeArgs::mma (CASCADE_CUDA_QUANT_GEMM=int8, prefill), the int8 tensor-core tiles of
//      moe_mma.cu over the tiles GroupKernel lists (block-type experts);
//   5. the products quantized (block-type down only), and DownKernel (or the tiles) the same
//      way over down;
//   6. CombineKernel, one block per token: acc += each chosen expert's row times its
//      weight, in the token's order of choice, so the sum is the same on every run.
// Blocks of experts that no token chose return at their first load. For a decode step the
// weights of the chosen experts are read once each, as the host-routed path reads them,
// without its copy of the logits to the host and its launches per expert.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/float_chunk.cuh"
#include "kernels/cuda/moe_mma.h"
#include "kernels/cuda/moe_rows.cuh"
#include "kernels/cuda/q8_mma_tile.cuh"
#include "kernels/cuda/q8_unpack.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kRouteWarps = kRouteThreads / kWarp;
constexpr int kGroupThreads = 1024;
static_assert(kGroupThreads >= kMaxMoeExperts, "GroupKernel scans one expert's count per thread");
constexpr int kWarpsPerBlock = 4;  // GEMV blocks: one output row per warp.
constexpr int kRowsPerPass = 8;    // An expert's rows per pass over its weight rows.
constexpr int kNone = 0x7fffffff;  // No expert yet, in an argmax.

// (v, i) becomes (v2, i2) when that is larger, or as large with a lower id.
__device__ __forceinline__ void Better(float& v, int& i, float v2, int i2) {
  if (i2 != kNone && (i == kNone || v2 > v || (v2 == v && i2 < i))) {
    v = v2;
    i = i2;
  }
}

__global__ void RouteKernel(const float* logits, int64_t n_experts, int64_t k, bool norm, int32_t* chosen,
                            float* weights, int32_t* load) {
  __shared__ float vals[kMaxMoeExperts];
  __shared__ unsigned char taken[kMaxMoeExperts];
  __shared__ float red_v[kRouteWarps];
  __shared__ int red_i[kRouteWarps];
  __shared__ double red_z[kRouteWarps];
  __shared__ int pick[kMaxMoeTopK];
  __shared__ float pick_v[kMaxMoeTopK];
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const float* row = logits + t * n_experts;
  float mx = -INFINITY;
  for (int64_t e = tid; e < n_experts; e += kRouteThreads) {
    vals[e] = row[e];
    taken[e] = 0;
    mx = fmaxf(mx, vals[e]);
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red_v[warp] = mx;
  __syncthreads();
  mx = red_v[0];
  for (int w = 1; w < kRouteWarps; ++w) mx = fmaxf(mx, red_v[w]);
  // The softmax's denominator in double, as RouteToken sums it.
  double z = 0.0;
  for (int64_t e = tid; e < n_experts; e += kRouteThreads) z += exp(static_cast<double>(vals[e] - mx));
  for (int o = kWarp / 2; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
  if (lane == 0) red_z[warp] = z;
  __syncthreads();  // Also: every thread has read red_v before the rounds below write it.
  for (int64_t c = 0; c < k; ++c) {
    float bv = -INFINITY;
    int bi = kNone;
    for (int64_t e = tid; e < n_experts; e += kRouteThreads) {
      if (!taken[e]) Better(bv, bi, vals[e], static_cast<int>(e));
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
      const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
      Better(bv, bi, v2, i2);
    }
    if (lane == 0) {
      red_v[warp] = bv;
      red_i[warp] = bi;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kRouteWarps; ++w) Better(bv, bi, red_v[w], red_i[w]);
      pick[c] = bi;
      pick_v[c] = bv;
      taken[bi] = 1;
    }
    __syncthreads();
  }
  if (tid != 0) return;
  double zs = 0.0;
  for (int w = 0; w < kRouteWarps; ++w) zs += red_z[w];
  double p[kMaxMoeTopK], sum = 0.0;
  for (int64_t c = 0; c < k; ++c) sum += p[c] = exp(static_cast<double>(pick_v[c] - mx)) / zs;
  for (int64_t c = 0; c < k; ++c) {
    chosen[t * k + c] = pick[c];
    weights[t * k + c] = static_cast<float>(norm ? p[c] / sum : p[c]);
    if (load != nullptr) atomicAdd(load + pick[c], 1);
  }
}

// An inclusive prefix sum of one value per thread over the block (kGroupThreads threads,
// all of them calling): warp scans by shuffles, then the warps' totals scanned by warp 0.
__device__ int32_t BlockInclusiveSum(int32_t v, int32_t* warp_totals) {
  constexpr int kWarps = kGroupThreads / kWarp;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = WarpInclusiveSum(v, lane);
  if (lane == kWarp - 1) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int32_t t = WarpInclusiveSum(lane < kWarps ? warp_totals[lane] : 0, lane);
    if (lane < kWarps) warp_totals[lane] = t;
  }
  __syncthreads();
  return warp > 0 ? v + warp_totals[warp - 1] : v;
}

// A counting sort of the m entries by held expert, for any m: counts by shared atomics, their
// prefix sum, then each entry takes the next row of its expert. Dynamic shared memory:
// 2 n_held + 1 ints.
__global__ void GroupKernel(const int32_t* chosen, int64_t m, int64_t k, int64_t expert_begin, int64_t n_held,
                            int32_t* entry_row, int32_t* expert_rows, int32_t* expert_tiles, int32_t* token_of_row) {
  extern __shared__ int32_t first[];   // [n_held + 1]: counts, then each expert's first row.
  int32_t* next = first + n_held + 1;  // [n_held]: each expert's next free row.
  __shared__ int32_t warp_totals[kGroupThreads / kWarp];
  const int tid = threadIdx.x;
  for (int64_t e = tid; e <= n_held; e += kGroupThreads) first[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < m; i += kGroupThreads) {
    const int64_t e = chosen[i] - expert_begin;  // Outside [0, n_held): not held here.
    if (e >= 0 && e < n_held) atomicAdd(first + e + 1, 1);
  }
  __syncthreads();
  const int32_t count = tid < n_held ? first[tid + 1] : 0;  // n_held <= kGroupThreads.
  const int32_t end = BlockInclusiveSum(count, warp_totals);
  if (tid < n_held) {
    first[tid + 1] = end;
    next[tid] = end - count;
  }
  __syncthreads();
  for (int64_t e = tid; e <= n_held; e += kGroupThreads) expert_rows[e] = first[e];
  // The int8 tiles' schedule (moe_mma.cu): each expert's first tile of kMmaTokens rows.
  __syncthreads();  // Every thread has read warp_totals before the second sum writes it.
  const int32_t tiles = BlockInclusiveSum((count + kMmaTokens - 1) / kMmaTokens, warp_totals);
  if (tid < n_held) expert_tiles[tid + 1] = tiles;
  if (tid == 0) expert_tiles[0] = 0;
  for (int64_t i = tid; i < m; i += kGroupThreads) {
    const int64_t e = chosen[i] - expert_begin;
    int32_t r = -1;
    if (e >= 0 && e < n_held) {
      r = atomicAdd(next + e, 1);
      token_of_row[r] = static_cast<int32_t>(i / k);
    }
    entry_row[i] = r;
  }
}

// Act-order GPTQ: each grouped row r's inputs (row token_of_row[r] of src, or row r when
// token_of_row is null) gathered in its expert's order [n_held, n_in] and quantized to
// blocks of 8 bits, row r of out [rows, n_in / 32]. One block per grouped row.
__global__ void GatherQuantizeKernel(Q8Block* out, const float* src, const int32_t* token_of_row,
                                     const int32_t* expert_rows, int64_t n_held, const int32_t* order, int64_t n_in) {
  const auto r = static_cast<int32_t>(blockIdx.x);
  if (r >= expert_rows[n_held]) return;  // Past the grouped rows of this pass.
  const float* row = src + (token_of_row != nullptr ? token_of_row[r] : r) * n_in;
  const int32_t* ord = order + HeldExpertAt(expert_rows, n_held, r) * n_in;
  const int64_t n_chunks = n_in / 32;
  for (int64_t c = threadIdx.x; c < n_chunks; c += blockDim.x) {
    float v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = row[ord[32 * c + j]];
    out[r * n_chunks + c] = QuantizeBlock([&v](int j) { return v[j]; });
  }
}

void GatherQuantize(Q8Block* out, const float* src, const int32_t* token_of_row, const int32_t* expert_rows,
                    int64_t n_held, const int32_t* order, int64_t n_in, int64_t m, cudaStream_t stream) {
  GatherQuantizeKernel<<<static_cast<unsigned>(m), 128, 0, stream>>>(out, src, token_of_row, expert_rows, n_held, order,
                                                                     n_in);
}

// The two sides of an expert's dot products, by the weights' encoding: the block types'
// 32-weight chunks (q8_unpack.cuh) against activations quantized to 8 bits, by __dp4a; or
// the float types' chunks (float_chunk.cuh) against the f32 activations as they are.
// `by_row`: the activations are one row per grouped row (gathered in an act-order
// matrix's order), not one per token.
struct IntRows {
  using Chunk = WeightChunk;
  const Q8Block* x;  // [rows, n_in / 32]
  int64_t n_chunks;
  bool by_row = false;
  __device__ __forceinline__ static void Load(const uint8_t* row, int code, int64_t c, Chunk& w) {
    Unpack(row, code, c, w);
  }
  __device__ __forceinline__ float Dot(const Chunk& w, int64_t r, int64_t c) const {
    return DotChunk(w, x[r * n_chunks + c]);
  }
};
struct FloatRows {
  struct Chunk {
    float v[32];
  };
  const float* x;  // [rows, n_in]
  int64_t n_in;
  bool by_row = false;
  __device__ __forceinline__ static void Load(const uint8_t* row, int code, int64_t c, Chunk& w) {
    FloatChunk(row, code, c, w.v);
  }
  __device__ __forceinline__ float Dot(const Chunk& w, int64_t r, int64_t c) const {
    const float4* xr = reinterpret_cast<const float4*>(x + r * n_in + 32 * c);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float4 v = xr[j];
      s += w.v[4 * j] * v.x + w.v[4 * j + 1] * v.y + w.v[4 * j + 2] * v.z + w.v[4 * j + 3] * v.w;
    }
    return s;
  }
};

// h[r, o] = act(gate_o . x_token(r) + gate_bias_o, up_o . x_token(r) + up_bias_o) for each row
// r of expert e, gate's activations from xg and up's from xu (the same unless act-order
// orders differ).
template <typename Rows>
__global__ void GateUpKernel(MoeArgs a, const int32_t* expert_rows, const int32_t* token_of_row, Rows xg, Rows xu,
                             float* h) {
  const int64_t e = blockIdx.x;
  const int r0 = expert_rows[e], r1 = expert_rows[e + 1];
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r0 == r1 || o >= a.n_ff) return;
  const int lane = threadIdx.x % kWarp;
  const MoeExpertRows ex = a.experts[e];
  const uint8_t* g = ex.gate + o * a.gate_row_bytes;
  const uint8_t* u = ex.up + o * a.up_row_bytes;
  const int64_t n_chunks = a.n_embd / 32;
  for (int rb = r0; rb < r1; rb += kRowsPerPass) {
    const int n_t = r1 - rb < kRowsPerPass ? r1 - rb : kRowsPerPass;
    float ag[kRowsPerPass], au[kRowsPerPass];
    int64_t tok[kRowsPerPass];
#pragma unroll
    for (int t = 0; t < kRowsPerPass; ++t) {
      ag[t] = au[t] = 0.0f;
      tok[t] = t < n_t ? token_of_row[rb + t] : 0;
    }
    for (int64_t c = lane; c < n_chunks; c += kWarp) {
      typename Rows::Chunk wg, wu;
      Rows::Load(g, a.gate_code, c, wg);
      Rows::Load(u, a.up_code, c, wu);
#pragma unroll
      for (int t = 0; t < kRowsPerPass; ++t) {
        if (t >= n_t) break;
        ag[t] += xg.Dot(wg, xg.by_row ? rb + t : tok[t], c);
        au[t] += xu.Dot(wu, xu.by_row ? rb + t : tok[t], c);
      }
    }
    const float gb = ex.gate_bias != nullptr ? ex.gate_bias[o] : 0.0f;
    const float ub = ex.up_bias != nullptr ? ex.up_bias[o] : 0.0f;
#pragma unroll
    for (int t = 0; t < kRowsPerPass; ++t) {
      if (t >= n_t) break;
      const float gs = WarpSum(ag[t]) + gb, us = WarpSum(au[t]) + ub;
      if (lane == 0) h[(rb + t) * a.n_ff + o] = Activation(a, gs, us);
    }
  }
}

// out[r, o] = down_o . h[r] (+ down_bias_o) for each row r of expert e.
template <typename Rows>
__global__ void DownKernel(MoeArgs a, const int32_t* expert_rows, Rows h, float* out) {
  const int64_t e = blockIdx.x;
  const int r0 = expert_rows[e], r1 = expert_rows[e + 1];
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r0 == r1 || o >= a.n_embd) return;
  const int lane = threadIdx.x % kWarp;
  const MoeExpertRows ex = a.experts[e];
  const uint8_t* d = ex.down + o * a.down_row_bytes;
  const float bias = ex.down_bias != nullptr ? ex.down_bias[o] : 0.0f;
  const int64_t n_chunks = a.n_ff / 32;
  for (int rb = r0; rb < r1; rb += kRowsPerPass) {
    const int n_t = r1 - rb < kRowsPerPass ? r1 - rb : kRowsPerPass;
    float acc[kRowsPerPass];
#pragma unroll
    for (int t = 0; t < kRowsPerPass; ++t) acc[t] = 0.0f;
    for (int64_t c = lane; c < n_chunks; c += kWarp) {
      typename Rows::Chunk w;
      Rows::Load(d, a.down_code, c, w);
#pragma unroll
      for (int t = 0; t < kRowsPerPass; ++t) {
        if (t >= n_t) break;
        acc[t] += h.Dot(w, rb + t, c);
      }
    }
#pragma unroll
    for (int t = 0; t < kRowsPerPass; ++t) {
      if (t >= n_t) break;
      const float s = WarpSum(acc[t]) + bias;
      if (lane == 0) out[(rb + t) * a.n_embd + o] = s;
    }
  }
}

__global__ void CombineKernel(float* acc, const float* out, const float* weights, const int32_t* entry_row, int64_t k,
                              int64_t n_embd) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < n_embd; c += blockDim.x) {
    float v = acc[t * n_embd + c];
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = entry_row[t * k + i];
      if (r >= 0) v += weights[t * k + i] * out[r * n_embd + c];
    }
    acc[t * n_embd + c] = v;
  }
}

}  // namespace

void MoeRoutedExperts(float* acc, const float* x, const float* logits, int32_t* load, int64_t n_tokens,
                      const MoeArgs& a, const MoeWork& w, cudaStream_t stream) {
  if (n_tokens == 0) return;
  const int64_t m = n_tokens * a.top_k;
  constexpr unsigned kGemvThreads = kWarpsPerBlock * kWarp;
  const auto held = static_cast<unsigned>(a.n_held);
  const bool float_gate_up = FloatChunkCode(a.gate_code);
  const bool shared_order = a.up_order == a.gate_order;  // Also when neither reorders.
  if (!float_gate_up && (a.gate_order == nullptr || a.up_order == nullptr)) {
    QuantizeActivations(w.xq, x, n_tokens, a.n_embd, stream);
  }
  RouteKernel<<<static_cast<unsigned>(n_tokens), kRouteThreads, 0, stream>>>(logits, a.n_experts, a.top_k, a.norm,
                                                                             w.chosen, w.weights, load);
  GroupKernel<<<1, kGroupThreads, static_cast<size_t>(2 * a.n_held + 1) * sizeof(int32_t), stream>>>(
      w.chosen, m, a.top_k, a.expert_begin, a.n_held, w.entry_row, w.expert_rows, w.expert_tiles, w.token_of_row);
  const dim3 gate_up(held, static_cast<unsigned>((a.n_ff + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (float_gate_up) {
    const FloatRows rows{x, a.n_embd};
    GateUpKernel<<<gate_up, kGemvThreads, 0, stream>>>(a, w.expert_rows, w.token_of_row, rows, rows, w.h);
  } else {
    const int64_t n_chunks = a.n_embd / 32;
    const IntRows tokens{w.xq, n_chunks};
    IntRows g = tokens, u = tokens;
    if (a.gate_order != nullptr) {
      GatherQuantize(w.xg, x, w.token_of_row, w.expert_rows, a.n_held, a.gate_order, a.n_embd, m, stream);
      g = IntRows{w.xg, n_chunks, true};
    }
    if (shared_order) {
      u = g;
    } else if (a.up_order != nullptr) {
      GatherQuantize(w.xu, x, w.token_of_row, w.expert_rows, a.n_held, a.up_order, a.n_embd, m, stream);
      u = IntRows{w.xu, n_chunks, true};
    }
    if (a.mma && a.gate_code == a.up_code) {
      MoeGateUpMma(a, w, g.x, g.by_row, u.x, u.by_row, m, stream);
    } else {
      GateUpKernel<<<gate_up, kGemvThreads, 0, stream>>>(a, w.expert_rows, w.token_of_row, g, u, w.h);
    }
  }
  const dim3 down(held, static_cast<unsigned>((a.n_embd + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (FloatChunkCode(a.down_code)) {
    DownKernel<<<down, kGemvThreads, 0, stream>>>(a, w.expert_rows, FloatRows{w.h, a.n_ff}, w.out);
  } else {
    if (a.down_order != nullptr) {
      GatherQuantize(w.hq, w.h, nullptr, w.expert_rows, a.n_held, a.down_order, a.n_ff, m, stream);
    } else {
      // Rows past the grouped ones hold stale values; their blocks are quantized and never read.
      QuantizeActivations(w.hq, w.h, m, a.n_ff, stream);
    }
    if (a.mma) {
      MoeDownMma(a, w, m, stream);
    } else {
      DownKernel<<<down, kGemvThreads, 0, stream>>>(a, w.expert_rows, IntRows{w.hq, a.n_ff / 32}, w.out);
    }
  }
  CombineKernel<<<static_cast<unsigned>(n_tokens), 256, 0, stream>>>(acc, w.out, w.weights, w.entry_row, a.top_k,
                                                                     a.n_embd);
}

}  // namespace cascade::kernels::cuda
