#include "tests/random_blocks.h"

#include <cstring>
#include <random>

#include "core/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quantize.h"

namespace cascade::testing {

std::vector<uint8_t> RandomBlocks(DType dtype, int64_t n_out, int64_t n_in, uint32_t seed,
                                  std::vector<float>* decoded) {
  std::vector<int> f16_fields;  // Byte offsets in a block (core/quant_blocks.h).
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kI4_G128:  // d and the zero point z.
    case DType::kQ4_K:
    case DType::kQ5_K: f16_fields = {0, 2}; break;
    case DType::kQ2_K: f16_fields = {80, 82}; break;
    case DType::kQ3_K: f16_fields = {108}; break;
    case DType::kQ6_K: f16_fields = {208}; break;
    case DType::kMXFP4: break;         // An E8M0 exponent, set below.
    default: f16_fields = {0}; break;  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS.
  }
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(RowBytes(dtype, n_in) * n_out);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.5e-3f, 4e-3f);
  for (size_t b = 0; b < w.size() / BlockBytes(dtype); ++b) {
    if (dtype == DType::kMXFP4) w[b * BlockBytes(dtype)] = static_cast<uint8_t>(110 + rng() % 20);  // 2^-18..2^1.
    for (int off : f16_fields) {
      const uint16_t h = F32ToF16(scale(rng));
      std::memcpy(w.data() + b * BlockBytes(dtype) + off, &h, 2);
    }
  }
  decoded->resize(n_out * n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    EXPECT_TRUE(
        kernels::cpu::DequantizeRow(dtype, w.data() + r * RowBytes(dtype, n_in), decoded->data() + r * n_in, n_in)
            .ok());
  }
  return w;
}

}  // namespace cascade::testing
