// FP8 E4M3 (core/fp8.h) against the OCP definition in double (tests/test_support.h): every one of
// the 256 codes decodes to its value, every finite value encodes back to its code, values
// between two neighbours round to the nearer (ties to the even code), and out-of-range
// values saturate.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/test_support.h"

namespace cascade {
namespace {

using testing::OcpE4M3;  // The definition, written apart from core/fp8.h.

TEST(Fp8Test, EveryCodeDecodesToItsOcpValue) {
  for (int q = 0; q < 256; ++q) {
    const double want = OcpE4M3(q);
    const float got = E4M3ToF32(static_cast<uint8_t>(q));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << q;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << q;
    }
  }
  EXPECT_EQ(E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4M3ToF32(0x08), std::ldexp(1.0f, -6));
}

TEST(Fp8Test, EncodingRoundsToTheNearestCodeTiesToEven) {
  for (int q = 0; q < 256; ++q) {
    const double v = OcpE4M3(q);
    if (std::isnan(v) || q == 0x80) continue;  // -0 encodes as -0 below.
    EXPECT_EQ(F32ToE4M3(static_cast<float>(v)), q) << q;
  }
  EXPECT_EQ(F32ToE4M3(-0.0f), 0x80);
  // Between neighbours of the positive codes: below the midpoint to the lower, above to
  // the upper, at it to the one with an even mantissa.
  for (int q = 0; q < 0x7e; ++q) {
    const double lo = OcpE4M3(q), hi = OcpE4M3(q + 1), mid = (lo + hi) / 2;
    EXPECT_EQ(F32ToE4M3(static_cast<float>(lo + (hi - lo) * 0.25)), q) << q;
    EXPECT_EQ(F32ToE4M3(static_cast<float>(lo + (hi - lo) * 0.75)), q + 1) << q;
    EXPECT_EQ(F32ToE4M3(static_cast<float>(mid)), (q % 2 == 0) ? q : q + 1) << q;
  }
  EXPECT_EQ(F32ToE4M3(1000.0f), 0x7e);
  EXPECT_EQ(F32ToE4M3(-1e30f), 0xfe);
  EXPECT_EQ(F32ToE4M3(NAN), 0x7f);
  EXPECT_EQ(F32ToE4M3(std::ldexp(1.0f, -12)), 0x00);  // Under half the smallest subnormal.
}

}  // namespace
}  // namespace cascade
