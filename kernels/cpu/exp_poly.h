// The constants of the vector e^x the SIMD attention kernels share (attention_avx2.cc,
// attention_avx512.cc): Cephes expf. x = n ln2 + r with n = round(x log2 e) and ln2 split
// in two so that r is exact, |r| <= ln2 / 2; e^r = 1 + r + r^2 P(r) with P of degree 5
// (relative error < 2e-7 over the range softmax feeds it); then times 2^n. Each kernel
// evaluates it at its own vector width.
#pragma once

namespace cascade::kernels::cpu::internal {

inline constexpr float kExpMinArg = -87.33654f;  // Below, e^x is under f32's normals: clamped here.
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
// P's coefficients, highest degree first (Horner's order).
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace cascade::kernels::cpu::internal
