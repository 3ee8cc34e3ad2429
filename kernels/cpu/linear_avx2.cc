// AVX2 + FMA + F16C kernels: f32/f16/bf16 weights (FMA; FP8 in linear_f8_avx2.cc),
// the activation quantizer, and Q8_0/Q4_0/Q4_1/I4_G128 integer dot products with `vpmaddubsw`.
// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them (linear.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/linear_kernels.h"

namespace cascade::kernels::cpu::internal {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- Activation quantizer --------------------------------------------------------------

void QuantQ8BlockAvx2(const float* x, int64_t n, int8_t* q, float* d, float* s, float* s16, int16_t* i16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / 32; ++b, x += 32, q += 32) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 amax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float max = _mm_cvtss_f32(m);
    const float scale = max / 127.0f;
    const __m256 inv = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, inv));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, inv));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, inv));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, inv));
    // The halves' sums: after two hadds each 128-bit lane holds [lo, hi, lo, hi] of its
    // elements (lo: 0..15, hi: 16..31), and the two lanes add up to the halves.
    __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    h = _mm256_hadd_epi32(h, h);
    const __m128i halves = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    const int32_t lo = _mm_cvtsi128_si32(halves), hi = _mm_extract_epi32(halves, 1);
    // packs work per 128-bit lane: restore element order with a dword permute.
    const __m256i p16a = _mm256_packs_epi32(i0, i1);
    const __m256i p16b = _mm256_packs_epi32(i2, i3);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), perm);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p8);
    StoreQ8BlockSums(b, scale, lo, hi, d, s, s16, i16);
  }
}

// ---- Float weights ---------------------------------------------------------------------

struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static __m256 Load8(const uint8_t* w, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + k); }
  static float Load1(const uint8_t* w, int64_t k) { return reinterpret_cast<const float*>(w)[k]; }
};
struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static __m256 Load8(const uint8_t* w, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + k)));
  }
  static float Load1(const uint8_t* w, int64_t k) { return F16ToF32(reinterpret_cast<const uint16_t*>(w)[k]); }
};
struct LoadBF16 {
  static constexpr int64_t kBytes = 2;
  static __m256 Load8(const uint8_t* w, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float Load1(const uint8_t* w, int64_t k) { return Bf16ToF32(reinterpret_cast<const uint16_t*>(w)[k]); }
};

// R rows x T tokens of output, full dot products over n_in. Each row is prefetched
// kPrefetchBytes ahead into L2, once per cache line, as the AVX-512 float tiles do
// (linear_float_avx512.cc). bf16 LM head [49152, 576] at batch 1 on a 2-core AMD EPYC
// without AVX-512 (`linear_bench --decode --dtype=bf16`): 13.5 / 22.4 GB/s at 1 / 2
// threads without it, 19.7 / 32.7 with it.
template <typename L, int R, int T>
inline void FloatTile(const GemmArgs& a, int64_t r0, int64_t t0) {
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  const uint8_t* w[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) w[i] = a.w + (r0 + i) * a.w_row_bytes;
  const float* x[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) x[j] = a.x + (t0 + j) * a.n_in;
  const int64_t n8 = a.n_in / 8 * 8;
  for (int64_t k = 0; k < n8; k += 8) {
    if ((k * L::kBytes) % 64 == 0) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(w[i] + k * L::kBytes + kPrefetchBytes), _MM_HINT_T1);
      }
    }
    __m256 wv[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::Load8(w[i], k);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m256 xv = _mm256_loadu_ps(x[j] + k);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      float sum = HorizontalSum(acc[i][j]);
      for (int64_t k = n8; k < a.n_in; ++k) sum += L::Load1(w[i], k) * x[j][k];
      a.out[(t0 + j) * a.ld_out + r0 + i] = sum;
    }
  }
}

template <typename L, int R, int T>
void FloatTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  int64_t r = rb;
  for (; r + R <= re; r += R) FloatTile<L, R, T>(a, r, t0);
  for (; r < re; ++r) FloatTile<L, 1, T>(a, r, t0);
}

template <typename L>
void GemmFloatAvx2(const GemmArgs& a, int64_t rb, int64_t re) {
  int64_t t = 0;
  if (a.n_tokens == 1) {
    FloatTokens<L, 8, 1>(a, rb, re, 0);
    return;
  }
  for (; t + 3 <= a.n_tokens; t += 3) FloatTokens<L, 4, 3>(a, rb, re, t);
  if (a.n_tokens - t == 2) FloatTokens<L, 4, 2>(a, rb, re, t);
  if (a.n_tokens - t == 1) FloatTokens<L, 8, 1>(a, rb, re, t);
}

// ---- Q8_0 / Q4_0 / Q4_1 with vpmaddubsw --------------------------------------------------

enum class Kind { kQ8_0, kQ4_0, kQ4_1, kI4G128 };

template <Kind K>
struct Block;
template <>
struct Block<Kind::kQ8_0> {
  using Type = BlockQ8_0;
};
template <>
struct Block<Kind::kQ4_0> {
  using Type = BlockQ4_0;
};
template <>
struct Block<Kind::kQ4_1> {
  using Type = BlockQ4_1;
};

// Up to 4 tokens per pass: each weight block is unpacked once for all of them.
template <Kind K, int T>
void QuantTokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  using B = typename Block<K>::Type;
  const int64_t nb = a.n_in / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = rb; r < re; ++r) {
    const B* w = reinterpret_cast<const B*>(a.w + r * a.w_row_bytes);
    __m256 acc[T];
    float offset_acc[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_setzero_ps();
      offset_acc[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const float dw = _cvtsh_ss(w[b].d);
      float offset;
      __m256i wv;  // u8 for Q4 (0..15); |q| for Q8_0 with the sign moved to x.
      if constexpr (K == Kind::kQ8_0) {
        wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
        offset = 0.0f;
      } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
        wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
        if constexpr (K == Kind::kQ4_1) {
          offset = _cvtsh_ss(w[b].m);
        } else {
          offset = -8.0f * dw;
        }
      }
      for (int t = 0; t < T; ++t) {
        const int64_t xt = (t0 + t) * nb + b;
        __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + xt * 32));
        __m256i wu = wv;
        if constexpr (K == Kind::kQ8_0) {
          wu = _mm256_sign_epi8(wv, wv);
          xv = _mm256_sign_epi8(xv, wv);
        }
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xv), ones);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.xd[xt]), acc[t]);
        if constexpr (K != Kind::kQ8_0) offset_acc[t] += offset * a.xs[xt];
      }
    }
    for (int t = 0; t < T; ++t) {
      a.out[(t0 + t) * a.ld_out + r] = HorizontalSum(acc[t]) + offset_acc[t];
    }
  }
}

template <Kind K, int T>
void Tokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0);

template <Kind K>
void GemmQuantAvx2(const GemmArgs& a, int64_t rb, int64_t re) {
  int64_t t = 0;
  for (; t + 4 <= a.n_tokens; t += 4) Tokens<K, 4>(a, rb, re, t);
  switch (a.n_tokens - t) {
    case 3: Tokens<K, 3>(a, rb, re, t); break;
    case 2: Tokens<K, 2>(a, rb, re, t); break;
    case 1: Tokens<K, 1>(a, rb, re, t); break;
    default: break;
  }
}

// ---- I4_G128 -------------------------------------------------------------------------------

// Each 16-byte quarter of a group's words holds 32 inputs as (even, odd) nibble pairs;
// interleaving the low and high nibbles restores input order for vpmaddubsw against the
// activation block. The zero point folds into one offset per group: -d z * sum(x).
template <int T>
void I4G128Tokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  const int64_t ng = a.n_in / kQG, nb = a.n_in / 32;
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = rb; r < re; ++r) {
    const BlockI4G128* w = reinterpret_cast<const BlockI4G128*>(a.w + r * a.w_row_bytes);
    __m256 acc[T];
    float offset_acc[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_setzero_ps();
      offset_acc[t] = 0.0f;
    }
    for (int64_t g = 0; g < ng; ++g) {
      const float dw = _cvtsh_ss(w[g].d);
      const float offset = -dw * _cvtsh_ss(w[g].z);
      const uint8_t* qs = reinterpret_cast<const uint8_t*>(w[g].qs);
      for (int sub = 0; sub < kQG / 32; ++sub) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * sub));
        const __m128i even = _mm_and_si128(q, low4), odd = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
        const __m256i wv = _mm256_set_m128i(_mm_unpackhi_epi8(even, odd), _mm_unpacklo_epi8(even, odd));
        const int64_t b = g * (kQG / 32) + sub;
        for (int t = 0; t < T; ++t) {
          const int64_t xt = (t0 + t) * nb + b;
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + xt * 32));
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), ones);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.xd[xt]), acc[t]);
          offset_acc[t] += offset * a.xs[xt];
        }
      }
    }
    for (int t = 0; t < T; ++t) a.out[(t0 + t) * a.ld_out + r] = HorizontalSum(acc[t]) + offset_acc[t];
  }
}

template <Kind K, int T>
void Tokens(const GemmArgs& a, int64_t rb, int64_t re, int64_t t0) {
  if constexpr (K == Kind::kI4G128) {
    I4G128Tokens<T>(a, rb, re, t0);
  } else {
    QuantTokens<K, T>(a, rb, re, t0);
  }
}

// ---- F32 weights for many tokens: 16-row panels, outer products ----------------------------

constexpr int kPanelRows = 16;
constexpr int kPanelTokens = 6;

// The 8 rows r (8 floats each) transposed into dst (rows 16 apart).
inline void Transpose8x8(__m256 r[8], float* dst) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * kPanelRows, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * kPanelRows, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Rows [r0, r0 + 16) of the weight (f32, f16 or bf16 by L) as a k-major f32 panel
// [n_in][16]; rows from re on are zero (their outputs are not stored). n_in % 8 == 0.
template <typename L>
void PackPanel(const GemmArgs& a, int64_t r0, int64_t re, float* panel) {
  for (int h = 0; h < 2; ++h) {
    const int64_t rows = std::clamp<int64_t>(re - r0 - 8 * h, 0, 8);
    for (int64_t k = 0; k < a.n_in; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = i < rows ? L::Load8(a.w + (r0 + 8 * h + i) * a.w_row_bytes, k) : _mm256_setzero_ps();
      }
      Transpose8x8(r, panel + k * kPanelRows + 8 * h);
    }
  }
}

// Tokens [t0, t0 + T) x the panel's 16 rows: out[t][r0 + i] = sum over k, one accumulator
// per output (12 independent FMA chains for T = 6, two panel loads and T broadcasts a k).
template <int T>
void PanelTile(const GemmArgs& a, const float* panel, int64_t r0, int rows, int64_t t0) {
  __m256 acc[T][2];
#pragma GCC unroll 6
  for (int j = 0; j < T; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  const float* x = a.x + t0 * a.n_in;
  for (int64_t k = 0; k < a.n_in; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * kPanelRows), w1 = _mm256_loadu_ps(panel + k * kPanelRows + 8);
#pragma GCC unroll 6
    for (int j = 0; j < T; ++j) {
      const __m256 xb = _mm256_broadcast_ss(x + j * a.n_in + k);
      acc[j][0] = _mm256_fmadd_ps(w0, xb, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(w1, xb, acc[j][1]);
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < T; ++j) {
    float* o = a.out + (t0 + j) * a.ld_out + r0;
    if (rows == kPanelRows) {
      _mm256_storeu_ps(o, acc[j][0]);
      _mm256_storeu_ps(o + 8, acc[j][1]);
    } else {
      alignas(32) float tmp[kPanelRows];
      _mm256_store_ps(tmp, acc[j][0]);
      _mm256_store_ps(tmp + 8, acc[j][1]);
      std::copy_n(tmp, rows, o);
    }
  }
}

// Rows [rb, re) in blocks of about 256 KiB of f32 panels (they stay in L2), each packed
// once and multiplied by every token, 6 at a time.
template <typename L>
void GemmPanels(const GemmArgs& a, int64_t rb, int64_t re) {
  constexpr int64_t kBlockBytes = 256 * 1024;
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / (a.n_in * 4 * kPanelRows)) * kPanelRows;
  thread_local std::vector<float> panels;
  panels.resize(static_cast<size_t>(std::min(block_rows, re - rb + kPanelRows) * a.n_in));
  for (int64_t b0 = rb; b0 < re; b0 += block_rows) {
    const int64_t b1 = std::min(re, b0 + block_rows);
    const int64_t n_panels = (b1 - b0 + kPanelRows - 1) / kPanelRows;
    for (int64_t p = 0; p < n_panels; ++p) {
      PackPanel<L>(a, b0 + p * kPanelRows, b1, panels.data() + p * a.n_in * kPanelRows);
    }
    for (int64_t t = 0; t < a.n_tokens; t += kPanelTokens) {
      const int64_t n = std::min<int64_t>(kPanelTokens, a.n_tokens - t);
      for (int64_t p = 0; p < n_panels; ++p) {
        const float* panel = panels.data() + p * a.n_in * kPanelRows;
        const int64_t r0 = b0 + p * kPanelRows;
        const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, b1 - r0));
        switch (n) {
          case 6: PanelTile<6>(a, panel, r0, rows, t); break;
          case 5: PanelTile<5>(a, panel, r0, rows, t); break;
          case 4: PanelTile<4>(a, panel, r0, rows, t); break;
          case 3: PanelTile<3>(a, panel, r0, rows, t); break;
          case 2: PanelTile<2>(a, panel, r0, rows, t); break;
          default: PanelTile<1>(a, panel, r0, rows, t); break;
        }
      }
    }
  }
}

}  // namespace

void GemmF32PanelsAvx2(const GemmArgs& a, int64_t rb, int64_t re) { GemmPanels<LoadF32>(a, rb, re); }

namespace {

KernelTable MakeAvx2() {
  KernelTable t;
  // Float weights keep the dot-product tiles at every token count: each output's sum in the
  // same order as the 1-token GEMV's, so a prefill recomputes a decode's bits (a stream moved
  // to another replica, a prefix re-read). The panels (GemmPanels) sum in another order:
  // 2x the F16 prefill here, kept to FP8, whose decode and prefill differ anyway.
  t.gemm[static_cast<int>(DType::kF32)] = GemmFloatAvx2<LoadF32>;
  t.gemm[static_cast<int>(DType::kF16)] = GemmFloatAvx2<LoadF16>;
  t.gemm[static_cast<int>(DType::kBF16)] = GemmFloatAvx2<LoadBF16>;
  t.gemm[static_cast<int>(DType::kQ8_0)] = GemmQuantAvx2<Kind::kQ8_0>;
  t.gemm[static_cast<int>(DType::kQ4_0)] = GemmQuantAvx2<Kind::kQ4_0>;
  t.gemm[static_cast<int>(DType::kQ4_1)] = GemmQuantAvx2<Kind::kQ4_1>;
  t.gemm[static_cast<int>(DType::kI4_G128)] = GemmQuantAvx2<Kind::kI4G128>;
  t.gemm[static_cast<int>(DType::kF8_E4M3_B128)] = GemmF8Avx2;  // linear_f8_avx2.cc
  t.quant_q8_block = QuantQ8BlockAvx2;
  // Packed weights: linear_packed_avx2.cc (the portable kernel, compiled for AVX2, was
  // 8-10x slower; the GGUF-layout kernels above 1.4-2.6x).
#define CASCADE_PACKED_AVX2_ENTRY(D) t.packed[static_cast<int>(D)] = GemmPackedAvx2<D>;
  CASCADE_FOR_EACH_PACKED_DTYPE(CASCADE_PACKED_AVX2_ENTRY)
#undef CASCADE_PACKED_AVX2_ENTRY
  return t;
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = MakeAvx2();
  return table;
}

}  // namespace cascade::kernels::cpu::internal
