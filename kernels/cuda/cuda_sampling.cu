// Sampling and speculative verification on the GPU (kernels/sample_row.h says the
// semantics). One 1024-thread block per row. Top-k and top-p thresholds are selected
// bit by bit over the order-preserving 32-bit key of each logit (radix select: 32
// counting or summing passes, exact, no sort); the kept tokens are then walked in
// vocabulary order with a block-wide prefix sum. Probability masses accumulate in double
// so that the inverse CDF agrees with a double-precision reference.
#include <cfloat>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace cascade::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

// Maps a float to an unsigned key with the same order (negative values below positive).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct Min {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

// Reduces v over the block; every thread gets the result. `sh` holds 32 T.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T identity, T* sh) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // `sh` may still be read by the previous reduction.
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? sh[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

struct RowState {
  const float* z;
  int64_t n;
  float m;      // The largest logit.
  float inv_t;  // 1 / temperature.
  __device__ double Weight(int64_t i) const { return exp(static_cast<double>((z[i] - m) * inv_t)); }
};

// The largest key K with count(Key(z) >= K) >= k: the k-th largest logit's key.
__device__ uint32_t SelectTopK(const RowState& row, int64_t k, unsigned long long* shc) {
  uint32_t res = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = res | (1u << bit);
    unsigned long long c = 0;
    for (int64_t i = threadIdx.x; i < row.n; i += blockDim.x) c += Key(row.z[i]) >= cand;
    if (static_cast<int64_t>(BlockReduce(c, Sum(), 0ull, shc)) >= k) res = cand;
  }
  return res;
}

// Mass (unnormalised) of the tokens with key >= floor.
__device__ double MassFrom(const RowState& row, uint32_t floor, double* shd) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < row.n; i += blockDim.x) {
    if (Key(row.z[i]) >= floor) s += row.Weight(i);
  }
  return BlockReduce(s, Sum(), 0.0, shd);
}

// The largest key K >= floor whose upper set still holds `target` mass (the nucleus).
__device__ uint32_t SelectTopP(const RowState& row, uint32_t floor, double target, double* shd) {
  uint32_t res = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = res | (1u << bit);
    if (MassFrom(row, cand > floor ? cand : floor, shd) >= target) res = cand;
  }
  return res > floor ? res : floor;
}

// The kept token (key >= floor, != excluded) where the running mass in vocabulary order
// passes target; the last kept one if rounding leaves target beyond the total.
__device__ int32_t InverseCdf(const RowState& row, uint32_t floor, int32_t excluded, double target, double* shd,
                              long long* shl) {
  const int64_t chunk = (row.n + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * chunk, end = begin + chunk < row.n ? begin + chunk : row.n;
  double mine = 0;
  long long last = -1;
  for (int64_t i = begin; i < end; ++i) {
    if (Key(row.z[i]) >= floor && i != excluded) {
      mine += row.Weight(i);
      last = i;
    }
  }
  // Inclusive scan of the per-thread masses: within warps, then over warp totals.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = WarpInclusiveSum(mine, lane);
  __shared__ double warp_total[32];
  __shared__ int found;
  if (threadIdx.x == 0) found = -1;
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  double offset = 0;
  for (int w = 0; w < warp; ++w) offset += warp_total[w];
  incl += offset;
  const double excl = incl - mine;
  if (mine > 0 && target >= excl && target < incl) {
    double acc = excl;
    for (int64_t i = begin; i < end; ++i) {
      if (Key(row.z[i]) >= floor && i != excluded) {
        acc += row.Weight(i);
        if (target < acc) {
          found = static_cast<int>(i);
          break;
        }
      }
    }
    // This thread's running sum may round below the scan's: its last kept token then.
    if (found < 0) found = static_cast<int>(last);
  }
  __syncthreads();
  const long long last_kept = BlockReduce(last, Max(), -1ll, shl);
  return found >= 0 ? found : static_cast<int32_t>(last_kept);
}

// Thread 0's row result is the block's: every value below is block-reduced or shared.
__device__ SampleResult Choose(RowState row, const SampleRow& r, double* shd, unsigned long long* shc, long long* shl) {
  const int64_t n_vocab = row.n;
  // Argmax, first on ties: the largest (key << 32 | ~index).
  unsigned long long best = 0;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    const unsigned long long v =
        (static_cast<unsigned long long>(Key(row.z[i])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
    best = v > best ? v : best;
  }
  best = BlockReduce(best, Max(), 0ull, shc);
  const int32_t argmax = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best & 0xffffffffu));
  SampleResult res;
  if (r.temperature <= 0.0f) {
    res.accepted = r.draft >= 0 && r.draft == argmax;
    res.id = argmax;
    return res;
  }
  row.m = row.z[argmax];
  row.inv_t = 1.0f / r.temperature;
  uint32_t floor = 0;
  if (r.top_k > 0 && r.top_k < n_vocab) floor = SelectTopK(row, r.top_k, shc);
  const double top_k_mass = MassFrom(row, floor, shd);
  if (r.min_p > 0.0f) {
    // Weights fall with the logit, so min-p keeps an upper set too: its lowest key.
    unsigned long long lowest = 0xffffffffull;
    for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
      const uint32_t k = Key(row.z[i]);
      if (k >= floor && row.Weight(i) >= static_cast<double>(r.min_p) && k < lowest) lowest = k;
    }
    const uint32_t min_p_floor = static_cast<uint32_t>(BlockReduce(lowest, Min(), 0xffffffffull, shc));
    floor = min_p_floor > floor ? min_p_floor : floor;
  }
  if (r.top_p < 1.0f) {
    const double target = static_cast<double>(r.top_p) * top_k_mass;
    if (MassFrom(row, floor, shd) >= target) floor = SelectTopP(row, floor, target, shd);
  }
  const double kept = MassFrom(row, floor, shd);
  double excluded_mass = 0;
  if (r.draft >= 0 && r.draft < n_vocab && Key(row.z[r.draft]) >= floor) excluded_mass = row.Weight(r.draft);
  // Rejection rule for a one-hot q: accept with probability p(draft).
  if (r.draft >= 0 && static_cast<double>(r.u_accept) < excluded_mass / kept) return SampleResult{r.draft, 1};
  const double target = static_cast<double>(r.u_sample) * (kept - excluded_mass);
  res.id = InverseCdf(row, floor, r.draft, target, shd, shl);
  res.accepted = 0;
  return res;
}

// The chosen token's logprob and the top n under the raw row z (log-softmax: the largest
// logit, then the sum of exponentials in double). The top n are n rounds of a block-wide
// maximum of (key << 32 | ~index), each below the last: largest first, the lower id first
// on ties, as the CPU's TopK orders them.
__device__ void Describe(SampleResult& res, const float* z, int64_t n_vocab, int n, double* shd,
                         unsigned long long* shc) {
  float m = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) m = fmaxf(m, z[i]);
  __shared__ float shf[32];
  m = BlockReduce(m, Max(), -FLT_MAX, shf);
  double s = 0;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) s += exp(static_cast<double>(z[i] - m));
  const double lse = static_cast<double>(m) + log(BlockReduce(s, Sum(), 0.0, shd));
  res.logprob = static_cast<float>(z[res.id] - lse);
  res.n_top = n;
  unsigned long long prev = ~0ull;
  for (int j = 0; j < n; ++j) {
    unsigned long long best = 0;
    for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
      const unsigned long long v =
          (static_cast<unsigned long long>(Key(z[i])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
      if (v < prev && v > best) best = v;
    }
    prev = BlockReduce(best, Max(), 0ull, shc);
    const int32_t id = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(prev & 0xffffffffu));
    res.top_ids[j] = id;
    res.top_logprobs[j] = static_cast<float>(z[id] - lse);
  }
}

// shaped row = raw row with the row's penalties (sampling::PenalisedLogit, without
// contractions so that it rounds as the host does), then its mask (sampling::MaskLogits:
// refused tokens at -inf); rows with neither are skipped.
__global__ void ShapeKernel(float* shaped, const float* logits, const SampleRow* rows, const SamplePenalty* penalties,
                            const uint8_t* masks, int64_t n_vocab) {
  const SampleRow r = rows[blockIdx.x];
  if (r.n_penalties == 0 && r.mask_offset < 0) return;
  const float* src = logits + blockIdx.x * n_vocab;
  float* dst = shaped + blockIdx.x * n_vocab;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
  for (int j = threadIdx.x; j < r.n_penalties; j += blockDim.x) {
    const SamplePenalty p = penalties[r.penalty_begin + j];  // Distinct tokens: no races.
    float x = src[p.token];
    if (r.repetition_penalty != 1.0f)
      x = x > 0 ? __fdiv_rn(x, r.repetition_penalty) : __fmul_rn(x, r.repetition_penalty);
    dst[p.token] =
        __fsub_rn(x, __fadd_rn(r.presence_penalty, __fmul_rn(r.frequency_penalty, static_cast<float>(p.count))));
  }
  if (r.mask_offset < 0) return;
  __syncthreads();
  const uint8_t* mask = masks + r.mask_offset;
  for (int64_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    if (i >= r.mask_bits || ((mask[i / 8] >> (i % 8)) & 1) == 0) dst[i] = -INFINITY;
  }
}

__global__ void SampleKernel(SampleResult* out, const float* logits, const float* shaped, const SampleRow* rows,
                             int64_t n_vocab) {
  __shared__ double shd[32];
  __shared__ unsigned long long shc[32];
  __shared__ long long shl[32];
  const SampleRow r = rows[blockIdx.x];
  const float* raw = logits + blockIdx.x * n_vocab;
  const bool shaped_row = r.n_penalties > 0 || r.mask_offset >= 0;
  const RowState row{shaped_row ? shaped + blockIdx.x * n_vocab : raw, n_vocab, 0.0f, 0.0f};
  SampleResult res = Choose(row, r, shd, shc, shl);
  if (r.n_logprobs > 0) Describe(res, raw, n_vocab, r.n_logprobs, shd, shc);
  if (threadIdx.x == 0) out[blockIdx.x] = res;
}

}  // namespace

void Sample(SampleResult* out, const float* logits, float* shaped, const SampleRow* rows,
            const SamplePenalty* penalties, const uint8_t* masks, bool shape, int64_t n_rows, int64_t n_vocab,
            cudaStream_t stream) {
  if (n_rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(n_rows);
  if (shape) ShapeKernel<<<blocks, kThreads, 0, stream>>>(shaped, logits, rows, penalties, masks, n_vocab);
  SampleKernel<<<blocks, kThreads, 0, stream>>>(out, logits, shaped, rows, n_vocab);
}

}  // namespace cascade::kernels::cuda
