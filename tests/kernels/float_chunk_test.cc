// The device MoE layers' float expert chunks (kernels/cuda/float_chunk.cuh), compiled for
// the host: every 32-weight chunk of F32, F16, BF16 and F8_E4M3_B128 rows of random bits
// (every finite code: subnormals, both signs; the FP8 codes all in each pair of blocks) decodes to the
// CPU dequantizer's value bit for bit. tests/gpu/cuda_backend_test.cc runs the kernels
// themselves on a GPU.
#include "kernels/cuda/float_chunk.cuh"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quantize.h"

namespace cascade::kernels::cuda {
namespace {

// `n_out` rows of `n_in` random finite values of `dtype` (no NaN or infinity bit pattern).
std::vector<uint8_t> RandomFloatRows(DType dtype, int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(RowBytes(dtype, n_in) * n_out);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const size_t n = static_cast<size_t>(n_out * n_in);
  switch (dtype) {
    case DType::kF32:
      for (size_t i = 0; i < n; ++i) w[4 * i + 3] &= 0xbf;  // Exponent below 128: finite.
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) w[2 * i + 1] &= 0xbf;  // Exponent field below 16.
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) w[2 * i + 1] &= 0xbf;
      break;
    default: {  // F8_E4M3_B128: each block's f32 scale in [2^-10, 2^-6), its codes all 256 less NaN.
      for (size_t b = 0; b < w.size() / 132; ++b) {
        uint8_t* block = w.data() + 132 * b;
        const float d = std::ldexp(1.0f + static_cast<float>(rng() % 1024) / 1024.0f, -10 + static_cast<int>(b % 4));
        std::memcpy(block, &d, 4);
        for (int j = 0; j < 128; ++j) {
          block[4 + j] = static_cast<uint8_t>((j * 2 + b) & 0xff);
          if ((block[4 + j] & 0x7f) == 0x7f) block[4 + j] &= 0xfe;  // Not NaN.
        }
      }
      break;
    }
  }
  return w;
}

TEST(FloatChunkTest, EveryChunkDecodesToTheCpuDequantizersBits) {
  constexpr int64_t n_out = 3, n_in = 512;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8_E4M3_B128}) {
    SCOPED_TRACE(DTypeName(dtype));
    ASSERT_TRUE(FloatChunkCode(static_cast<int>(dtype)));
    const std::vector<uint8_t> w = RandomFloatRows(dtype, n_out, n_in, 11);
    std::vector<float> want(n_in);
    int nonzero = 0;
    for (int64_t r = 0; r < n_out; ++r) {
      const uint8_t* row = w.data() + r * RowBytes(dtype, n_in);
      ASSERT_TRUE(cpu::DequantizeRow(dtype, row, want.data(), n_in).ok());
      for (int64_t c = 0; c < n_in / 32; ++c) {
        float got[32];
        FloatChunk(row, static_cast<int>(dtype), c, got);
        for (int j = 0; j < 32; ++j) {
          const float expected = want[c * 32 + j];
          ASSERT_EQ(std::memcmp(&got[j], &expected, 4), 0)
              << "row " << r << " element " << c * 32 + j << ": " << got[j] << " against " << expected;
          nonzero += expected != 0.0f;
        }
      }
    }
    EXPECT_GT(nonzero, n_out * n_in * 9 / 10);  // The rows were not mostly zero.
  }
}

TEST(FloatChunkTest, CodesOutsideTheFloatExpertsAreRefused) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K, DType::kMXFP4, DType::kI4_G128, DType::kF8_E4M3}) {
    EXPECT_FALSE(FloatChunkCode(static_cast<int>(dtype))) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace cascade::kernels::cuda
