// The CUDA integer kernels' unpacking of every block type (kernels/cuda/q8_unpack.cuh: what
// the tuned GEMV and the device MoE layers multiply), compiled for the host with its
// intrinsics in plain C++, so that it is checked without a GPU: from random blocks (every
// code and scale bit), each element's value as the kernels apply it, a * q + b (+ b1 in the
// second half), against the CPU's dequantizer (itself checked against the gguf package),
// and DotChunk against a double-precision dot product of the same 8-bit activations.
// tests/gpu/cuda_backend_test.cc runs the kernels themselves on a GPU.
#include "kernels/cuda/q8_unpack.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant_blocks.h"
#include "gtest/gtest.h"
#include "tests/random_blocks.h"

namespace cascade::kernels::cuda {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0,   DType::kQ4_0,   DType::kQ4_1,  DType::kQ5_0,   DType::kQ5_1,
                            DType::kQ2_K,   DType::kQ3_K,   DType::kQ4_K,  DType::kQ5_K,   DType::kQ6_K,
                            DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kI4_G128};

// A block of 32 activations as QuantizeActivations writes it, from int8 quants and a scale.
Q8Block MakeQ8Block(const int8_t* q, float d) {
  Q8Block b;
  int sum = 0, sum1 = 0;
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
    for (int j = 0; j < 4; ++j) word |= static_cast<uint32_t>(static_cast<uint8_t>(q[4 * k + j])) << (8 * j);
    b.q[k] = static_cast<int32_t>(word);
  }
  for (int j = 0; j < 32; ++j) (j < 16 ? sum : sum1) += q[j];
  b.d = d;
  b.s = d * static_cast<float>(sum + sum1);
  b.s1 = d * static_cast<float>(sum1);
  return b;
}

TEST(Q8UnpackTest, EveryTypeUnpacksToTheCpuDequantizersValues) {
  constexpr int64_t n_out = 3, n_in = 512;
  for (DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    ASSERT_TRUE(Q8GemvCode(static_cast<int>(dtype)));
    std::vector<float> want;
    const std::vector<uint8_t> w = testing::RandomBlocks(dtype, n_out, n_in, 7, &want);
    for (int64_t r = 0; r < n_out; ++r) {
      const uint8_t* row = w.data() + r * RowBytes(dtype, n_in);
      for (int64_t c = 0; c < n_in / 32; ++c) {
        WeightChunk chunk;
        Unpack(row, static_cast<int>(dtype), c, chunk);
        for (int j = 0; j < 32; ++j) {
          const int q = static_cast<int8_t>(static_cast<uint32_t>(chunk.q[j / 4]) >> (8 * (j % 4)));
          const double got = static_cast<double>(j < 16 ? chunk.a0 : chunk.a1) * q + chunk.b + (j < 16 ? 0 : chunk.b1);
          const double expected = want[r * n_in + c * 32 + j];
          ASSERT_NEAR(got, expected, 1e-6 * std::fabs(expected) + 1e-9) << "row " << r << " element " << c * 32 + j;
        }
      }
    }
  }
}

// The device's word loads (Load32, Load32By16) need their fields aligned to 4 or 2 bytes:
// so they are in rows of every type from an aligned buffer, as every weight on the device is
// (its own cudaMalloc; rows and parts at whole rows); one byte off, they are not.
TEST(Q8UnpackTest, WordLoadsAreAlignedInAlignedRows) {
  constexpr int64_t n_out = 3, n_in = 512;
  for (DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<float> values;
    const std::vector<uint8_t> w = testing::RandomBlocks(dtype, n_out, n_in, 5, &values);
    std::vector<uint8_t> shifted(w.size() + 64);
    auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shifted.data()) + 63) & ~uintptr_t{63});
    std::memcpy(aligned, w.data(), w.size());
    MisalignedLoads() = 0;
    for (int64_t r = 0; r < n_out; ++r) {
      for (int64_t c = 0; c < n_in / 32; ++c) {
        WeightChunk chunk;
        Unpack(aligned + r * RowBytes(dtype, n_in), static_cast<int>(dtype), c, chunk);
      }
    }
    EXPECT_EQ(MisalignedLoads(), 0);
    if (dtype == DType::kMXFP4) continue;  // Byte loads: any address.
    std::memmove(aligned + 1, aligned, w.size());
    WeightChunk chunk;
    Unpack(aligned + 1, static_cast<int>(dtype), 0, chunk);
    EXPECT_GT(MisalignedLoads(), 0);
  }
}

TEST(Q8UnpackTest, DotChunkIsTheDotProductOfTheQuantizedActivations) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> quant(-127, 127);
  for (DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    constexpr int64_t n_in = 256;
    std::vector<float> values;
    const std::vector<uint8_t> w = testing::RandomBlocks(dtype, 1, n_in, 9, &values);
    for (int64_t c = 0; c < n_in / 32; ++c) {
      int8_t xq[32];
      for (int8_t& v : xq) v = static_cast<int8_t>(quant(rng));
      const float dx = 0.01f + 0.001f * static_cast<float>(c);
      double want = 0, magnitude = 0;
      for (int j = 0; j < 32; ++j) {
        want += static_cast<double>(values[c * 32 + j]) * dx * xq[j];
        magnitude += std::fabs(static_cast<double>(values[c * 32 + j]) * dx * xq[j]);
      }
      WeightChunk chunk;
      Unpack(w.data(), static_cast<int>(dtype), c, chunk);
      EXPECT_NEAR(DotChunk(chunk, MakeQ8Block(xq, dx)), want, 1e-6 * magnitude) << "chunk " << c;
    }
  }
}

// The byte permutes that look up the IQ4 and MXFP4 tables agree with the tables.
TEST(Q8UnpackTest, TableBytesLooksUpFourCodesAtATime) {
  for (uint32_t codes = 0; codes < 0x10000; ++codes) {
    const uint32_t spread = (codes & 0xf) | (codes >> 4 & 0xf) << 8 | (codes >> 8 & 0xf) << 16 | (codes >> 12) << 24;
    const uint32_t iq4 = Iq4nlBytes(spread), mx = Mxfp4Bytes(spread);
    for (int i = 0; i < 4; ++i) {
      const int code = (codes >> (4 * i)) & 0xf;
      ASSERT_EQ(static_cast<int8_t>(iq4 >> (8 * i)), kIq4nlValues[code]) << codes;
      ASSERT_EQ(static_cast<int8_t>(mx >> (8 * i)), kMxfp4Values[code]) << codes;
    }
  }
}

}  // namespace
}  // namespace cascade::kernels::cuda
