// Portable C++ kernels for every weight dtype: the reference path, and the fallback on CPUs
// without AVX2. Same arithmetic as the SIMD kernels (int32 block dot products scaled in
// f32), in plain loops.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/linear_packed_portable.h"
#include "kernels/cpu/quantize.h"

namespace cascade::kernels::cpu::internal {
namespace {

inline int NearestInt(float x) { return static_cast<int>(std::lrintf(x)); }

void QuantQ8BlockGeneric(const float* x, int64_t n, int8_t* q, float* d, float* s, float* s16, int16_t* i16) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, q += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float scale = amax / 127.0f;
    const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
    int half[2] = {0, 0};
    for (int j = 0; j < kQK; ++j) {
      q[j] = static_cast<int8_t>(NearestInt(x[j] * inv));
      half[j / 16] += q[j];
    }
    StoreQ8BlockSums(b, scale, half[0], half[1], d, s, s16, i16);
  }
}

template <typename Load>
void GemmFloat(const GemmArgs& a, int64_t row_begin, int64_t row_end, Load load) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* w = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.x + t * a.n_in;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.n_in; ++k) acc += load(w, k) * x[k];
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

void GemmF32(const GemmArgs& a, int64_t rb, int64_t re) {
  GemmFloat(a, rb, re, [](const uint8_t* w, int64_t k) { return reinterpret_cast<const float*>(w)[k]; });
}
void GemmF16(const GemmArgs& a, int64_t rb, int64_t re) {
  GemmFloat(a, rb, re, [](const uint8_t* w, int64_t k) { return F16ToF32(reinterpret_cast<const uint16_t*>(w)[k]); });
}
void GemmBF16(const GemmArgs& a, int64_t rb, int64_t re) {
  GemmFloat(a, rb, re, [](const uint8_t* w, int64_t k) { return Bf16ToF32(reinterpret_cast<const uint16_t*>(w)[k]); });
}

// Row r, token t: per block of 128, the E4M3 values (by table) times the f32 activations,
// scaled by the block's d.
void GemmF8E4M3B128(const GemmArgs& a, int64_t rb, int64_t re) {
  const std::array<float, 256>& values = E4M3Values();
  const int64_t nb = a.n_in / 128;
  for (int64_t r = rb; r < re; ++r) {
    const auto* w = reinterpret_cast<const BlockF8E4M3B128*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.x + t * a.n_in;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        float s = 0.0f;
        for (int j = 0; j < 128; ++j) s += values[w[b].qs[j]] * x[b * 128 + j];
        acc += w[b].d * s;
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

// Row r, token t: sum over blocks of (weight scale * activation scale * int dot) plus the
// weight offset times the activation block sum.
void GemmQ8_0(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / kQK;
  for (int64_t r = rb; r < re; ++r) {
    const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.n_in;
      const float* xd = a.xd + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int dot = 0;
        for (int j = 0; j < kQK; ++j) dot += w[b].qs[j] * xq[b * kQK + j];
        acc += F16ToF32(w[b].d) * xd[b] * static_cast<float>(dot);
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

template <bool kHasMin, typename Block>
void GemmQ4(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / kQK;
  for (int64_t r = rb; r < re; ++r) {
    const Block* w = reinterpret_cast<const Block*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.n_in;
      const float* xd = a.xd + t * nb;
      const float* xs = a.xs + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int dot = 0;
        for (int j = 0; j < kQK / 2; ++j) {
          dot += (w[b].qs[j] & 0x0f) * xq[b * kQK + j];
          dot += (w[b].qs[j] >> 4) * xq[b * kQK + j + kQK / 2];
        }
        const float d = F16ToF32(w[b].d);
        float offset;
        if constexpr (kHasMin) {
          offset = F16ToF32(w[b].m);
        } else {
          offset = -8.0f * d;
        }
        acc += d * xd[b] * static_cast<float>(dot) + offset * xs[b];
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

void GemmQ4_0(const GemmArgs& a, int64_t rb, int64_t re) { GemmQ4<false, BlockQ4_0>(a, rb, re); }
void GemmQ4_1(const GemmArgs& a, int64_t rb, int64_t re) { GemmQ4<true, BlockQ4_1>(a, rb, re); }

// Each group of 128 is four activation blocks of 32 under one weight scale d and zero z:
// d * sum_b (xd_b * dot_b) - d * z * sum_b xs_b.
void GemmI4G128(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t ng = a.n_in / kQG;
  constexpr int kSub = kQG / kQK;
  for (int64_t r = rb; r < re; ++r) {
    const BlockI4G128* w = reinterpret_cast<const BlockI4G128*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.n_in;
      const float* xd = a.xd + t * (a.n_in / kQK);
      const float* xs = a.xs + t * (a.n_in / kQK);
      float acc = 0.0f;
      for (int64_t g = 0; g < ng; ++g) {
        float dots = 0.0f, sums = 0.0f;
        for (int s = 0; s < kSub; ++s) {
          const int64_t b = g * kSub + s;
          int dot = 0;
          for (int j = 0; j < kQK; ++j) dot += I4G128Quant(w[g], s * kQK + j) * xq[b * kQK + j];
          dots += xd[b] * static_cast<float>(dot);
          sums += xs[b];
        }
        const float d = F16ToF32(w[g].d);
        acc += d * dots - d * F16ToF32(w[g].z) * sums;
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

void GemmQ4_K(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / kQKK;
  for (int64_t r = rb; r < re; ++r) {
    const BlockQ4_K* w = reinterpret_cast<const BlockQ4_K*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const BlockQ8_K* x = a.xk + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int sum_scaled = 0;  // sum_j sc[j] * dot_j
        int sum_mins = 0;    // sum_j mn[j] * (sum of x quants of sub-block j)
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          UnpackQ4KScaleMin(w[b].scales, j, &sc, &mn);
          const uint8_t* q = w[b].qs + 32 * (j / 2);
          const int shift = (j % 2) * 4;
          int dot = 0;
          for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 0x0f) * x[b].qs[32 * j + l];
          sum_scaled += sc * dot;
          sum_mins += mn * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        acc += x[b].d *
               (F16ToF32(w[b].d) * static_cast<float>(sum_scaled) - F16ToF32(w[b].dmin) * static_cast<float>(sum_mins));
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

void GemmQ6_K(const GemmArgs& a, int64_t rb, int64_t re) {
  const int64_t nb = a.n_in / kQKK;
  for (int64_t r = rb; r < re; ++r) {
    const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(a.w + r * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const BlockQ8_K* x = a.xk + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int dots[16] = {};
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = w[b].ql + 64 * h;
          const uint8_t* qh = w[b].qh + 32 * h;
          const int8_t* xq = x[b].qs + 128 * h;
          for (int l = 0; l < 32; ++l) {
            const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            dots[8 * h + l / 16 + 0] += q0 * xq[l];
            dots[8 * h + l / 16 + 2] += q1 * xq[l + 32];
            dots[8 * h + l / 16 + 4] += q2 * xq[l + 64];
            dots[8 * h + l / 16 + 6] += q3 * xq[l + 96];
          }
        }
        int sum = 0;
        for (int g = 0; g < 16; ++g) sum += w[b].scales[g] * dots[g];
        acc += x[b].d * F16ToF32(w[b].d) * static_cast<float>(sum);
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

// Packed Q8_0 (packed_weight.h): the reference for the packed SIMD kernel, also used when
// a weight packed on an AVX-512 machine is run with a lower ISA (tests). The block-code
// types' portable packed kernel is linear_packed_portable.h.
void GemmPackedQ8_0(const GemmArgs& a, int64_t rb, int64_t re) {
  constexpr int kR = 16;
  constexpr PackedGeometry kGeo = PackedGeometryOf(DType::kQ8_0);
  const int64_t nb = a.n_in / kQK;
  for (int64_t r0 = rb; r0 < re; r0 += kR) {
    const uint8_t* g = a.w + (r0 / kR) * a.w_row_bytes;
    const int n_rows = static_cast<int>(std::min<int64_t>(kR, re - r0));
    for (int i = 0; i < n_rows; ++i) {
      for (int64_t t = 0; t < a.n_tokens; ++t) {
        const int8_t* x = a.xq + t * a.n_in;
        const float* xd = a.xd + t * nb;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* q = g + kGeo.QuantAt(b);
          const int8_t* xb = x + b * kQK;
          int dot = 0;
          for (int e = 0; e < kQK; ++e) dot += (q[64 * (e / 4) + 4 * i + e % 4] - 128) * xb[e];
          const float d = F16ToF32(reinterpret_cast<const uint16_t*>(g + kGeo.ScaleAt(nb, b))[i]);
          acc += d * xd[b] * static_cast<float>(dot);
        }
        a.out[t * a.ld_out + r0 + i] = acc;
      }
    }
  }
}

// GGUF layout of the types that normally run packed (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL,
// IQ4_XS): each row is dequantized to f32 (quantize.h) and dotted with the dequantized
// activations. Slow; it only serves `Linear` over an unprepared weight.
template <DType D>
void GemmDequant(const GemmArgs& a, int64_t rb, int64_t re) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(a.n_in));
  const int64_t nb = a.n_in / kQK;
  for (int64_t r = rb; r < re; ++r) {
    (void)DequantizeRow(D, a.w + r * a.w_row_bytes, row.data(), a.n_in);  // Shapes checked by the caller.
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int8_t* x = a.xq + t * a.n_in;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        float dot = 0.0f;
        for (int e = 0; e < kQK; ++e) dot += row[b * kQK + e] * static_cast<float>(x[b * kQK + e]);
        acc += a.xd[t * nb + b] * dot;
      }
      a.out[t * a.ld_out + r] = acc;
    }
  }
}

KernelTable MakeGeneric() {
  KernelTable t;
  t.gemm[static_cast<int>(DType::kF32)] = GemmF32;
  t.gemm[static_cast<int>(DType::kF16)] = GemmF16;
  t.gemm[static_cast<int>(DType::kBF16)] = GemmBF16;
  // The block-code types without a GGUF-layout kernel of their own dequantize (overridden
  // just below for Q4_0, Q4_1, Q4_K and Q6_K).
#define CASCADE_DEQUANT_ENTRY(D) t.gemm[static_cast<int>(D)] = GemmDequant<D>;
  CASCADE_FOR_EACH_CODE_DTYPE(CASCADE_DEQUANT_ENTRY)
#undef CASCADE_DEQUANT_ENTRY
  t.gemm[static_cast<int>(DType::kQ8_0)] = GemmQ8_0;
  t.gemm[static_cast<int>(DType::kQ4_0)] = GemmQ4_0;
  t.gemm[static_cast<int>(DType::kQ4_1)] = GemmQ4_1;
  t.gemm[static_cast<int>(DType::kQ4_K)] = GemmQ4_K;
  t.gemm[static_cast<int>(DType::kQ6_K)] = GemmQ6_K;
  t.gemm[static_cast<int>(DType::kI4_G128)] = GemmI4G128;
  t.gemm[static_cast<int>(DType::kF8_E4M3_B128)] = GemmF8E4M3B128;
  t.packed[static_cast<int>(DType::kQ8_0)] = GemmPackedQ8_0;
  portable::AddPackedCodeKernels(t);
  t.quant_q8_block = QuantQ8BlockGeneric;
  return t;
}

}  // namespace

const KernelTable& GenericKernels() {
  static const KernelTable table = MakeGeneric();
  return table;
}

void QuantizeQ8K(const float* x, int64_t n, BlockQ8_K* y) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax = 0.0f;
    for (int j = 0; j < kQKK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = amax / 127.0f;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt(x[16 * g + l] * inv);
        y[i].qs[16 * g + l] = static_cast<int8_t>(q);
        sum += q;
      }
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace cascade::kernels::cpu::internal
