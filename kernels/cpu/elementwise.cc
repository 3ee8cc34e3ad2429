#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/simd.h"

namespace cascade::kernels::cpu {

CASCADE_SIMD_CLONES
void RmsNormRow(float* out, const float* x, const float* w, int64_t n, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

CASCADE_SIMD_CLONES
void SiluMulRow(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + internal::ExpPoly(-g)) * up[i];
  }
}

CASCADE_SIMD_CLONES
void ClampedSwigluRow(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * g / (1.0f + internal::ExpPoly(-alpha * g));
  }
}

CASCADE_SIMD_CLONES
void AddRow(float* out, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] += x[i];
}

CASCADE_SIMD_CLONES
float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

CASCADE_SIMD_CLONES
void ScaleAxpy(float* y, float scale, float w, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * scale + w * x[i];
}

void RopeRow(float* x, int64_t n_heads, int32_t position, const RopeParams& params) {
  const int64_t d = params.head_dim;
  const int64_t half = d / 2;
  // cos/sin per pair, computed in double so long positions keep their precision.
  float cs[512], sn[512];
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * params.inv_freq[i];
    cs[i] = static_cast<float>(std::cos(angle));
    sn[i] = static_cast<float>(std::sin(angle));
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * d;
    if (params.style == RopeStyle::kAdjacentPairs) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = a * sn[i] + b * cs[i];
      }
    }
  }
}

}  // namespace cascade::kernels::cpu
