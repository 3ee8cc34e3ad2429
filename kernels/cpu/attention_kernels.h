// Private to kernels/cpu/attention*.cc: the per-ISA kernels behind `AttentionCpu`.
// A kernel runs one query row of one KV head's group of query heads over a range of
// positions with an online softmax. The dispatcher (attention.cc) validates shapes and
// block tables first, so kernels assume them.
// Thread-safety: pure functions of their arguments; calls with disjoint outputs may run
// concurrently.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace cascade::kernels::cpu::internal {

inline constexpr int64_t kAttnMaxGroup = 16;  // Query heads per KV head handled in one pass.
// Query vectors (rows x the group's heads) of a unit of several rows (AttendArgs::n_rows).
inline constexpr int64_t kAttnMaxQueries = 32;
inline constexpr int64_t kAttnMaxRows = 8;
inline constexpr int64_t kAttnMaxHeadDim = 256;
inline constexpr int64_t kAttnMaxBlock = 256;
// Stand-in for -inf as the running max before any score: keeps the arithmetic finite.
inline constexpr float kAttnNoMax = -1e30f;

struct AttendArgs {
  const float* q = nullptr;  // [n_group, d]: the group's query heads, contiguous.
  // Cache K at this KV head: position p of block b at base + (b * bs + p) * kv_row_bytes,
  // d elements of `kv_dtype` (F32, F16, Q8_0 with d % 32 == 0, or F8_E4M3). Same for V.
  // An F8_E4M3 head's K scale is folded into `scale`, its V scale is `v_scale`.
  const uint8_t* k_base = nullptr;
  const uint8_t* v_base = nullptr;
  DType kv_dtype = DType::kF32;
  const int32_t* table = nullptr;  // Block table of the sequence.
  int64_t pos_begin = 0;           // Positions [pos_begin, pos_end); pos_begin a multiple of bs,
  int64_t pos_end = 0;             //   pos_end > pos_begin.
  // Positions below it are not seen (a sliding window's start, inside the first block of
  // the range or before it).
  int64_t first_pos = 0;
  int64_t bs = 16;
  int64_t kv_row_bytes = 0;  // Bytes between consecutive positions (all KV heads).
  int64_t n_group = 1;       // <= kAttnMaxGroup.
  int64_t d = 0;             // <= kAttnMaxHeadDim.
  float scale = 1.0f;
  float v_scale = 1.0f;  // Multiplies out (normalised or not).
  // Consecutive rows of one sequence (a prefill's) run together so that each K/V tile read
  // serves them all: row j's query heads at q + j * row_stride, its output at
  // out + j * row_stride; it sees positions [first_j, pos_end + j), first_j = window > 0 ?
  // max(first_pos, pos_end + j - window) : first_pos. n_rows * n_group <= kAttnMaxQueries,
  // n_rows <= kAttnMaxRows; more than one row only with `normalize` and the kernels that
  // say so (attention.cc's MaxRowsPerUnit).
  int64_t n_rows = 1;
  int64_t row_stride = 0;
  int64_t window = 0;
  // Attention sinks of the group's query heads [n_group], or null; used when normalising
  // (a split item's merge adds them instead).
  const float* sinks = nullptr;
  // normalize: out [n_group, d] = softmax-weighted sum of V (m, l unused).
  // Otherwise a partial for a later merge: out = sum_t exp(s_t - m[g]) v_t unnormalised,
  // m[g] = max score, l[g] = sum_t exp(s_t - m[g]).
  bool normalize = true;
  float* out = nullptr;
  float* m = nullptr;
  float* l = nullptr;
};

using AttendFn = void (*)(const AttendArgs& args);

// The factor that turns an unnormalised output (sum_t e^(s_t - m) v_t, with l = sum_t
// e^(s_t - m)) into the softmax's: 1 / l, or with a sink logit (`sink` non-null)
// e^(m - M) / (l e^(m - M) + e^(sink - M)) with M = max(m, sink), so that no exponent
// overflows. 0 when there is nothing to divide by.
inline float SoftmaxFactor(float m, float l, const float* sink) {
  if (sink == nullptr) return l > 0 ? 1.0f / l : 0.0f;
  const float big = m > *sink ? m : *sink;
  const float c = __builtin_expf(m - big);
  const float denom = l * c + __builtin_expf(*sink - big);
  return denom > 0 ? c / denom : 0.0f;
}

// Converts `n` cache rows of d elements of `dtype` (F16, Q8_0 or F8_E4M3, unscaled), `row_bytes` apart from
// `src`, to f32 rows of d floats at `dst`. Portable version (attention.cc).
void KvRowsToF32(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t n, int64_t d, float* dst);
// The same with F16C (attention_avx2.cc); REQUIRES an AVX2 CPU.
void KvRowsToF32Avx2(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t n, int64_t d, float* dst);

void AttendGeneric(const AttendArgs& args);  // attention.cc; any shape.
// attention_avx2.cc; REQUIRES d % 8 == 0 and an AVX2 CPU. Takes several rows.
void AttendAvx2(const AttendArgs& args);
// attention_avx512.cc; REQUIRES d % 16 == 0 and an AVX-512 CPU. Takes several rows.
void AttendAvx512(const AttendArgs& args);

}  // namespace cascade::kernels::cpu::internal
