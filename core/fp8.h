// OCP FP8 E4M3 (the "e4m3fn" of PyTorch and of FP8 checkpoints: DeepSeek-V3, Qwen3-FP8,
// compressed-tensors): a sign bit, 4 exponent bits with bias 7, 3 mantissa bits; no
// infinities; S.1111.111 is NaN, so the largest finite magnitude is 1.75 x 2^8 = 448.
// Exponent 0 holds the subnormals m x 2^-9. Every E4M3 value is exact in f32 (and in bf16).
// Thread-safe (pure functions).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cascade {

inline constexpr float kE4M3Max = 448.0f;

inline float E4M3ToF32(uint8_t q) {
  const int e = (q >> 3) & 0xf, m = q & 7;
  float v;
  if (e == 0xf && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  }
  return q & 0x80 ? -v : v;
}

// The values of all 256 codes (E4M3ToF32), for kernels that decode by table.
inline const std::array<float, 256>& E4M3Values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[c] = E4M3ToF32(static_cast<uint8_t>(c));
    return v;
  }();
  return values;
}

// Round to nearest, ties to even; magnitudes past 448 saturate to 448; NaN is 0x7f.
inline uint8_t F32ToE4M3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7e;
  if (a < std::ldexp(1.0f, -6)) {  // Subnormal range: multiples of 2^-9 (8 rounds up to 0x08).
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exponent e - 1.
  int m = static_cast<int>(std::nearbyint((2.0f * f - 1.0f) * 8.0f));
  int biased = e - 1 + 7;
  if (m == 8) {
    m = 0;
    ++biased;
  }
  if (biased > 15 || (biased == 15 && m == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>(biased << 3 | m);
}

}  // namespace cascade
