// Row-wise CPU kernels: RMSNorm, SiLU-gated product, residual add, rotary embedding.
// Pure functions over caller-owned f32 buffers; thread-safe.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace cascade::kernels::cpu {

// out[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), one row of n; out may alias x.
void RmsNormRow(float* out, const float* x, const float* w, int64_t n, float eps);
// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]; out may alias gate or up.
void SiluMulRow(float* out, const float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU (Backend::ClampedSwiglu); out may alias gate or up.
void ClampedSwigluRow(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit);
// out[i] += x[i].
void AddRow(float* out, const float* x, int64_t n);
// Rotates the n_heads heads of one token at `position` in place.
void RopeRow(float* x, int64_t n_heads, int32_t position, const RopeParams& params);
// sum_i a[i] * b[i], accumulated in f32 lanes.
float Dot(const float* a, const float* b, int64_t n);
// y[i] = y[i] * scale + w * x[i].
void ScaleAxpy(float* y, float scale, float w, const float* x, int64_t n);

}  // namespace cascade::kernels::cpu
