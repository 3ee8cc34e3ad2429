// The vector e^x of the CPU kernels: Cephes expf, its constants shared by the SIMD attention
// kernels (attention_avx2.cc, attention_avx512.cc) and written out once as ExpPoly for the
// `#pragma omp simd` row loops (elementwise.cc). x = n ln2 + r with n = round(x log2 e) and
// ln2 split in two so that r is exact, |r| <= ln2 / 2; e^r = 1 + r + r^2 P(r) with P of degree 5
// (relative error < 2e-7 over the range softmax feeds it); then times 2^n. Each kernel
// evaluates it at its own vector width.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace cascade::kernels::cpu::internal {

inline constexpr float kExpMinArg = -87.33654f;  // Below, e^x is under f32's normals: clamped here.
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
// P's coefficients, highest degree first (Horner's order).
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// e^x within 2e-7 relative for x in [kExpMinArg, 88] (x is clamped to that range: 2^n stays
// a normal float), in plain float and integer steps that GCC vectorizes inside an
// `omp simd` loop. libm's expf is a call per element there: SiLU's exp was 5-6% of a 1B
// prefill on one Zen 5 core. n is rounded to nearest by adding and subtracting 1.5 x 2^23.
inline float ExpPoly(float x) {
  x = std::min(88.0f, std::max(kExpMinArg, x));  // In this order a NaN becomes kExpMinArg: n stays a number.
  const float n = (x * kExpLog2e + 12582912.0f) - 12582912.0f;
  const float r = (x - n * kExpLn2Hi) - n * kExpLn2Lo;
  float y = kExpPoly[0];
  for (int i = 1; i < 6; ++i) y = y * r + kExpPoly[i];
  y = (y * (r * r) + r) + 1.0f;
  return y * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

}  // namespace cascade::kernels::cpu::internal
