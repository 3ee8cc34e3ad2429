// Tests of kernels/cpu/quantize.h: hand-built blocks decode to the values the GGUF format
// description gives (layout checks independent of the code under test), quantize ->
// dequantize round trips stay within per-type error bounds derived below, and bad sizes
// are refused. To add a dtype, add a layout case and a `RoundTripBound` entry.
#include "kernels/cpu/quantize.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "tests/test_support.h"

namespace cascade::kernels::cpu {
namespace {

constexpr uint16_t kOne = 0x3c00;   // 1.0 in f16.
constexpr uint16_t kHalf = 0x3800;  // 0.5 in f16.

TEST(QuantizeLayoutTest, Q4_0NibbleOrder) {
  BlockQ4_0 b{};
  b.d = kOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  ASSERT_TRUE(DequantizeRow(DType::kQ4_0, &b, y, 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 8.0f);              // Low nibble: element j.
    EXPECT_EQ(y[j + 16], (15 - j) - 8.0f);  // High nibble: element j + 16.
  }
}

TEST(QuantizeLayoutTest, Q4_1AndQ8_0) {
  BlockQ4_1 b{};
  b.d = kHalf;
  b.m = F32ToF16(-1.0f);
  b.qs[3] = 0x72;
  float y[32];
  ASSERT_TRUE(DequantizeRow(DType::kQ4_1, &b, y, 32).ok());
  EXPECT_EQ(y[3], 0.5f * 2 - 1.0f);
  EXPECT_EQ(y[19], 0.5f * 7 - 1.0f);
  EXPECT_EQ(y[0], -1.0f);
  BlockQ8_0 c{};
  c.d = kHalf;
  c.qs[5] = -100;
  ASSERT_TRUE(DequantizeRow(DType::kQ8_0, &c, y, 32).ok());
  EXPECT_EQ(y[5], -50.0f);
  EXPECT_EQ(y[6], 0.0f);
}

// I4_G128 as core/quant_blocks.h describes it: element 8 w + j in bits [4 j, 4 j + 4)
// of word w, value d * (q - z).
TEST(QuantizeLayoutTest, I4G128WordsAndZeroPoint) {
  BlockI4G128 b{};
  b.d = kHalf;
  b.z = F32ToF16(3.0f);
  b.qs[0] = 0x76543210u;   // Elements 0..7 hold quants 0..7.
  b.qs[15] = 0xf0000000u;  // Element 127 holds 15, 120..126 hold 0.
  float y[128];
  ASSERT_TRUE(DequantizeRow(DType::kI4_G128, &b, y, 128).ok());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], 0.5f * (j - 3.0f)) << j;
  EXPECT_EQ(y[8], 0.5f * -3.0f);
  EXPECT_EQ(y[126], 0.5f * -3.0f);
  EXPECT_EQ(y[127], 0.5f * 12.0f);
}

TEST(QuantizeLayoutTest, Q4_KScalesAndNibbles) {
  BlockQ4_K b{};
  b.d = kOne;
  b.dmin = kHalf;
  // Sub-block 1: scale 3 (scales[1] low 6 bits), min 5 (scales[5] low 6 bits).
  b.scales[1] = 3;
  b.scales[5] = 5;
  // Sub-block 6: scale 0x25 = low 4 bits in scales[10] low nibble, high 2 bits in the top
  // of scales[2]; min 0x3a = low 4 bits in scales[10] high nibble, high 2 in top of scales[6].
  b.scales[10] = 0x5 | (0xa << 4);
  b.scales[2] = 0x2 << 6;
  b.scales[6] = 0x3 << 6;
  // Element 32 + 7 (sub-block 1) is the high nibble of qs[7]; element 192 + 4 (sub-block 6)
  // the low nibble of qs[96 + 4].
  b.qs[7] = 0x90;
  b.qs[100] = 0x0b;
  float y[256];
  ASSERT_TRUE(DequantizeRow(DType::kQ4_K, &b, y, 256).ok());
  EXPECT_EQ(y[39], 1.0f * 3 * 9 - 0.5f * 5);
  EXPECT_EQ(y[32], 1.0f * 3 * 0 - 0.5f * 5);
  EXPECT_EQ(y[196], 1.0f * 0x25 * 11 - 0.5f * 0x3a);
}

TEST(QuantizeLayoutTest, Q6_KBits) {
  BlockQ6_K b{};
  b.d = kHalf;
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g - 4);
  // Element 128 + 64 + 5 (second half, third quarter): low 4 bits in the high nibble of
  // ql[64 + 5], high 2 bits in bits 4-5 of qh[32 + 5]. q = 0x2c -> value (0x2c - 32).
  b.ql[69] = 0xc0;
  b.qh[37] = 0x2 << 4;
  float y[256];
  ASSERT_TRUE(DequantizeRow(DType::kQ6_K, &b, y, 256).ok());
  const int e = 128 + 64 + 5;
  EXPECT_EQ(y[e], 0.5f * (e / 16 - 4) * (0x2c - 32));
  EXPECT_EQ(y[0], 0.5f * (0 - 4) * (0 - 32));  // All-zero bits decode to q - 32 = -32.
}

// Largest |x - dequant(quant(x))| allowed for one block of `x` (the block's elements), from
// the quantizers' scale choices (see quantize.cc); f16 storage of scales adds a relative
// 2^-11 to each scale, covered by the 2^-10 terms.
double RoundTripBound(DType dtype, const float* x, int64_t n) {
  double amax = 0, lo = x[0], hi = x[0];
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(double{x[i]}));
    lo = std::min(lo, double{x[i]});
    hi = std::max(hi, double{x[i]});
  }
  const double f16 = std::ldexp(1.0, -10);
  switch (dtype) {
    case DType::kF32: return 0;
    case DType::kF16: return amax * std::ldexp(1.0, -11) + 6e-8;
    case DType::kBF16: return amax * std::ldexp(1.0, -8);
    case DType::kQ8_0:  // Step amax/127, rounding to nearest.
      return amax / 254 + amax * f16;
    case DType::kQ4_0:  // Step amax/8; +amax maps to 8, clamped to 7: one full step.
      return amax / 8 + amax * f16;
    case DType::kQ4_1:  // Step (hi - lo)/15.
      return (hi - lo) / 30 + (std::fabs(lo) + (hi - lo)) * f16;
    case DType::kI4_G128: {  // Step (hi - lo)/15 over a range that includes 0.
      const double range = std::max(hi, 0.0) - std::min(lo, 0.0);
      return range / 30 + range * 16 * f16;  // Half a step; the f16 step may clamp at 15.
    }
    case DType::kQ8_K:  // f32 scale amax/127.
      return amax / 254 * 1.0001;
    case DType::kQ4_K: {
      // Sub-block steps are rounded up to multiples of d = max_range/(15*63), so a step is
      // at most range_j/15 + d; mins are rounded to dmin = max_min/63, off by dmin/2.
      // Bound: one (widest) step plus one min quantum.
      double max_range = 0, max_min = 0;
      for (int j = 0; j < 8; ++j) {
        double l = x[32 * j], h = x[32 * j];
        for (int k = 0; k < 32; ++k) {
          l = std::min(l, double{x[32 * j + k]});
          h = std::max(h, double{x[32 * j + k]});
        }
        l = std::min(l, 0.0);
        max_range = std::max(max_range, h - l);
        max_min = std::max(max_min, -l);
      }
      return max_range / 15 * (0.5 + 1.0 / 63) + max_min / 126 + (max_range + max_min) * f16 + max_range / 30;
    }
    case DType::kQ6_K: {
      // Group steps amax_g/32, scales rounded to 1/127 of the largest: half a step plus the
      // scale rounding over 32 quants; clamping at 31 costs at most one more step.
      return amax / 32 + amax / 127 + amax * f16;
    }
    default: return 0;
  }
}

TEST(QuantizeRoundTripTest, WithinBounds) {
  const DType dtypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                          DType::kQ4_1, DType::kQ4_K, DType::kQ6_K, DType::kQ8_K, DType::kI4_G128};
  std::mt19937 rng(99);
  for (DType dtype : dtypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t n = 1024;
    const int64_t block = std::max<int64_t>(BlockElems(dtype), 32);
    for (int trial = 0; trial < 20; ++trial) {
      std::normal_distribution<float> normal(trial % 3 == 0 ? 0.3f : 0.0f, 0.01f + 0.2f * trial);
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng);
      if (trial == 1) std::fill(x.begin(), x.begin() + 300, 0.0f);  // All-zero blocks.
      if (trial == 2) x[7] = 50.0f;                                 // An outlier.
      std::vector<uint8_t> q(RowBytes(dtype, n));
      ASSERT_TRUE(QuantizeRow(dtype, x.data(), q.data(), n).ok());
      std::vector<float> y(n);
      ASSERT_TRUE(DequantizeRow(dtype, q.data(), y.data(), n).ok());
      double err2 = 0, ref2 = 0;
      for (int64_t b = 0; b < n; b += block) {
        const double bound = RoundTripBound(dtype, x.data() + b, block);
        for (int64_t i = b; i < b + block; ++i) {
          ASSERT_LE(std::fabs(double{y[i]} - x[i]), bound * 1.0001 + 1e-12)
              << "trial " << trial << " element " << i << " x " << x[i] << " y " << y[i];
          err2 += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
          ref2 += double{x[i]} * x[i];
        }
      }
      // Typical relative rms errors: 8-bit ~0.5%, 6-bit ~2%, 4-bit ~10%. (Not for the
      // outlier trial, whose block steps are coarse by design; its elementwise bound held.)
      if (trial == 2) continue;
      const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
      const double limit = IsQuantized(dtype) ? (BlockBytes(dtype) * 8.0 / BlockElems(dtype) > 7 ? 0.02 : 0.2) : 0.005;
      EXPECT_LT(rel, limit) << "trial " << trial;
    }
  }
}

TEST(QuantizeRoundTripTest, Q8_KBlockSums) {
  std::vector<float> x(512);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  std::vector<BlockQ8_K> q(2);
  ASSERT_TRUE(QuantizeRow(DType::kQ8_K, x.data(), q.data(), 512).ok());
  for (const BlockQ8_K& b : q) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      EXPECT_EQ(b.bsums[g], sum);
    }
  }
}

TEST(QuantizeRoundTripTest, RejectsBadSizesAndTypes) {
  std::vector<float> x(300);
  std::vector<uint8_t> q(4096);
  EXPECT_STATUS_CODE(QuantizeRow(DType::kQ4_1, x.data(), q.data(), 48), kInvalidArgument);
  EXPECT_STATUS_CODE(DequantizeRow(DType::kQ4_K, q.data(), x.data(), 288), kInvalidArgument);
  EXPECT_STATUS_CODE(QuantizeRow(DType::kI32, x.data(), q.data(), 32), kUnimplemented);
  EXPECT_STATUS_CODE(DequantizeRow(DType::kI32, q.data(), x.data(), 32), kUnimplemented);
}

}  // namespace
}  // namespace cascade::kernels::cpu
