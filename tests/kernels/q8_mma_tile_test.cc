// The int8 tensor-core tiles of quantized prefill (kernels/cuda/q8_mma_tile.cuh: what Q8Mma
// runs per block) on the host, without a GPU: every thread's share of each stage's loads,
// then every warp's products with the mma instruction's result computed from the staged
// tile (HostMma), then the stores. Against a double-precision product of the CPU's
// dequantized weights and the 8-bit activations, for every block type, on shapes with
// partial row and token tiles, a partial last stage and two stacked parts (the second with
// a bias). What this leaves to the GPU test (tests/gpu/cuda_backend_test.cc
// TunedInt8GemmMatchesDoublePrecision): the instruction itself and its registers' layout
// (q8_mma.cuh).
#include "kernels/cuda/q8_mma_tile.cuh"

#include <cmath>
#include <limits>
#include <memory>
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

// The instruction's result: lane (g, t)'s four sums, rows r0 + g (+ 8) by tokens t0 + 2 t
// (+ 1), over the stage's words [word0, word0 + kWords).
struct HostMma {
  template <int kWords>
  void Run(const Q8MmaStage& s, int r0, int t0, int word0, int lane, int (&c)[4]) const {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = r0 + g + 8 * (e / 2), tok = t0 + 2 * t + e % 2;
      c[e] = 0;
      for (int w = word0; w < word0 + kWords; ++w) c[e] = Dp4a(s.w[row][w], s.x[tok][w], c[e]);
    }
  }
};

// Q8Mma's blocks run one after another, each thread's phase in turn (the barriers between
// phases hold trivially); `halves` picks the instantiation as Q8Mma does, unless told.
void RunBlocks(const Q8MmaArgs& a, bool halves) {
  auto stage = std::make_unique<Q8MmaStage>();
  for (int64_t row0 = 0; row0 < a.n_out; row0 += kMmaRows) {
    for (int64_t tok0 = 0; tok0 < a.n_tokens; tok0 += kMmaTokens) {
      std::vector<Q8MmaAcc> acc(kMmaThreads, Q8MmaAcc{});
      for (int64_t c0 = 0; c0 < a.n_in / 32; c0 += kMmaChunks) {
        for (int tid = 0; tid < kMmaThreads; ++tid) LoadDenseStage(*stage, a, row0, tok0, c0, tid);
        for (int tid = 0; tid < kMmaThreads; ++tid) {
          if (halves) {
            ComputeStage<true>(*stage, acc[tid], tid / 32, tid % 32, ChunkOffsets(a.code), HostMma{});
          } else {
            ComputeStage<false>(*stage, acc[tid], tid / 32, tid % 32, ChunkOffsets(a.code), HostMma{});
          }
        }
      }
      for (int tid = 0; tid < kMmaThreads; ++tid) StoreTile(a, acc[tid], row0, tok0, tid / 32, tid % 32);
    }
  }
}

struct Case {
  // Partial row and token tiles; n_in 0: 9 chunks (a partial last stage) for the 32-element
  // blocks, 2304 (whole stages) for the 128- and 256-element ones.
  int64_t n_out = 100, n_in = 0, n_tokens = 70;
  int64_t first_part = 60;  // Rows of the first stacked part.
};

// Relative L2 error of the kernel's two parts against the double-precision product.
double TileError(DType dtype, Case k, bool halves) {
  if (k.n_in == 0) k.n_in = BlockElems(dtype) == 32 ? 32 * 9 : 2304;
  std::vector<float> decoded;
  const std::vector<uint8_t> w = testing::RandomBlocks(dtype, k.n_out, k.n_in, 17, &decoded);
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n_chunks = k.n_in / 32;
  std::vector<Q8Block> xq(k.n_tokens * n_chunks);
  std::vector<double> xv(k.n_tokens * k.n_in);  // The activations as quantized.
  for (int64_t b = 0; b < k.n_tokens * n_chunks; ++b) {
    float v[32];
    for (float& f : v) f = normal(rng);
    xq[b] = QuantizeBlock([&](int j) { return v[j]; });
    for (int j = 0; j < 32; ++j) {
      xv[b * 32 + j] =
          static_cast<double>(xq[b].d) * static_cast<int8_t>(static_cast<uint32_t>(xq[b].q[j / 4]) >> (8 * (j % 4)));
    }
  }
  const int64_t second = k.n_out - k.first_part;
  std::vector<float> out0(k.n_tokens * k.first_part, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> out1(k.n_tokens * second, std::numeric_limits<float>::quiet_NaN());
  Q8MmaArgs a;
  a.out.out[0] = out0.data();
  a.out.out[1] = out1.data();
  a.out.end[0] = k.first_part;
  a.out.end[1] = k.n_out;
  a.out.n_parts = 2;
  std::vector<float> bias(second);  // The second part's bias, added as the tiles store.
  for (float& b : bias) b = normal(rng);
  a.out.bias[1] = bias.data();
  a.xq = xq.data();
  a.w = w.data();
  a.code = static_cast<int>(dtype);
  a.row_bytes = RowBytes(dtype, k.n_in);
  a.n_tokens = k.n_tokens;
  a.n_out = k.n_out;
  a.n_in = k.n_in;
  RunBlocks(a, halves);
  double num = 0, den = 0;
  for (int64_t t = 0; t < k.n_tokens; ++t) {
    for (int64_t o = 0; o < k.n_out; ++o) {
      double want = o < k.first_part ? 0.0 : bias[o - k.first_part];
      for (int64_t i = 0; i < k.n_in; ++i) want += decoded[o * k.n_in + i] * xv[t * k.n_in + i];
      const float got = o < k.first_part ? out0[t * k.first_part + o] : out1[t * second + o - k.first_part];
      if (!std::isfinite(got)) return INFINITY;  // Never written.
      num += (got - want) * (got - want);
      den += want * want;
    }
  }
  return std::sqrt(num / den);
}

TEST(Q8MmaTileTest, EveryTypeMatchesDoublePrecisionOverPartialTiles) {
  for (DType dtype : kTypes) {
    EXPECT_LT(TileError(dtype, Case{}, ChunkHalves(static_cast<int>(dtype))), 1e-5) << DTypeName(dtype);
  }
}

TEST(Q8MmaTileTest, ExactTilesAndOneTokenMatchToo) {
  EXPECT_LT(TileError(DType::kQ4_K, Case{.n_out = 128, .n_in = 256, .n_tokens = 128, .first_part = 64}, false), 1e-5);
  EXPECT_LT(TileError(DType::kQ6_K, Case{.n_out = 64, .n_in = 256, .n_tokens = 1, .first_part = 32}, true), 1e-5);
}

// The check has teeth: Q6_K's halves scaled by their first multiplier only (the k32
// instantiation) is far off.
TEST(Q8MmaTileTest, HalvesWithTheirOwnScalesNeedTheSplitProducts) {
  EXPECT_GT(TileError(DType::kQ6_K, Case{}, false), 1e-2);
  EXPECT_GT(TileError(DType::kQ3_K, Case{}, false), 1e-2);
}

}  // namespace
}  // namespace cascade::kernels::cuda
