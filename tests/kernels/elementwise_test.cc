// Row kernels of the CPU backend vs naive double-precision formulas written here.
#include <cmath>
#include <random>
#include <tuple>

#include "kernels/ops.h"
#include "tests/test_support.h"

namespace cascade::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(ElementwiseTest, RmsNorm) {
  for (int threads : {1, 2}) {
    auto b = MakeCpuBackend({.n_threads = threads});
    const int64_t rows = 11, n = 577;  // Odd sizes: vector tails.
    auto x = Random(rows * n, 1), w = Random(n, 2);
    std::vector<float> out(rows * n);
    ASSERT_TRUE(b->RmsNorm(TensorView(out.data(), DType::kF32, {rows, n}), TensorView(x.data(), DType::kF32, {rows, n}),
                           TensorView(w.data(), DType::kF32, {n}), 1e-5f)
                    .ok());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[r * n + i], x[r * n + i] * inv * w[i], 1e-5);
    }
  }
}

// SiLU(g) x u against double precision, relative to the result's size, over gates from
// 0.01 to 100 in magnitude (the exp's range ends included: -g past 88 is clamped there)
// and the exp's argument at every point of its range reduction.
TEST(ElementwiseTest, SiluMul) {
  auto b = MakeCpuBackend({});
  const int64_t n = 1000;
  auto g = Random(n, 3), u = Random(n, 4);
  for (int64_t i = 0; i < n; ++i) g[i] *= std::pow(10.0f, static_cast<float>(i % 5) - 2);  // 0.01x .. 100x.
  g[0] = 87.9f, g[1] = -87.9f, g[2] = 88.5f, g[3] = -88.5f, g[4] = -200.0f, g[5] = 0.0f, g[6] = 0.3465736f;
  g[7] = std::nanf("");  // Stays NaN (the exp's clamp turns its argument into a number first).
  std::vector<float> out(n);
  ASSERT_TRUE(b->SiluMul(TensorView(out.data(), DType::kF32, {1, n}), TensorView(g.data(), DType::kF32, {1, n}),
                         TensorView(u.data(), DType::kF32, {1, n}))
                  .ok());
  EXPECT_TRUE(std::isnan(out[7]));
  for (int64_t i = 0; i < n; ++i) {
    if (i == 7) continue;
    const double want = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << "gate " << g[i];
  }
}

// gpt-oss's clamped SwiGLU against transformers' formula in double, over values past the
// clamp (gate and up up to +-20 against limit 7) and both sides of it; a shape mismatch
// is refused.
TEST(ElementwiseTest, ClampedSwiglu) {
  auto b = MakeCpuBackend({});
  const int64_t n = 1000;
  auto g = Random(n, 3), u = Random(n, 4);
  for (int64_t i = 0; i < n; ++i) {
    g[i] *= 20;
    u[i] *= 20;
  }
  std::vector<float> out(n);
  ASSERT_TRUE(b->ClampedSwiglu(TensorView(out.data(), DType::kF32, {2, n / 2}),
                               TensorView(g.data(), DType::kF32, {2, n / 2}),
                               TensorView(u.data(), DType::kF32, {2, n / 2}), 1.702f, 7.0f)
                  .ok());
  int clamped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::min<double>(g[i], 7.0), uc = std::clamp<double>(u[i], -7.0, 7.0);
    const double want = (uc + 1) * gc / (1 + std::exp(-1.702 * gc));
    EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << i;
    clamped += g[i] > 7 || std::fabs(u[i]) > 7;
  }
  EXPECT_GT(clamped, 100);
  EXPECT_FALSE(b->ClampedSwiglu(TensorView(out.data(), DType::kF32, {1, n}), TensorView(g.data(), DType::kF32, {1, n}),
                                TensorView(u.data(), DType::kF32, {1, n - 1}), 1.702f, 7.0f)
                   .ok());
}

// out[t] += bias for every row, against the sum written here; a bias of the wrong length
// is refused.
TEST(ElementwiseTest, AddBias) {
  auto b = MakeCpuBackend({.n_threads = 2});
  const int64_t rows = 300, d = 70;
  auto x = Random(rows * d, 5), bias = Random(d, 6);
  std::vector<float> out = x;
  ASSERT_TRUE(
      b->AddBias(TensorView(out.data(), DType::kF32, {rows, d}), TensorView(bias.data(), DType::kF32, {d})).ok());
  for (int64_t i = 0; i < rows * d; ++i) EXPECT_EQ(out[i], x[i] + bias[i % d]) << i;
  EXPECT_FALSE(
      b->AddBias(TensorView(out.data(), DType::kF32, {rows, d}), TensorView(bias.data(), DType::kF32, {d - 1})).ok());
}

// The residual sum out += in, element by element, small (one pass) and large (split over
// the pool, a ragged last chunk); a shape mismatch is refused.
TEST(ElementwiseTest, AddInPlace) {
  auto b = MakeCpuBackend({.n_threads = 2});
  for (const auto& [rows, d] : {std::tuple{3, 70}, std::tuple{129, 2053}}) {
    auto x = Random(rows * d, 10), in = Random(rows * d, 11);
    std::vector<float> out = x;
    ASSERT_TRUE(
        b->AddInPlace(TensorView(out.data(), DType::kF32, {rows, d}), TensorView(in.data(), DType::kF32, {rows, d}))
            .ok());
    for (int64_t i = 0; i < int64_t{rows} * d; ++i) ASSERT_EQ(out[i], x[i] + in[i]) << i;
  }
  std::vector<float> out(10), in(9);
  EXPECT_FALSE(
      b->AddInPlace(TensorView(out.data(), DType::kF32, {1, 10}), TensorView(in.data(), DType::kF32, {1, 9})).ok());
}

// The MoE scatter: out[rows[i]] += scales[i] * in[i], rows repeating (a token's experts),
// against the sum in double; small (serial) and large (split by columns over the pool);
// a row outside out is refused.
TEST(ElementwiseTest, AddScaledRows) {
  for (const auto& [n_out, n_in, d, threads] :
       {std::tuple{3, 7, 40, 1}, std::tuple{5, 64, 1100, 2}, std::tuple{9, 300, 257, 2}}) {
    auto b = MakeCpuBackend({.n_threads = threads});
    auto base = Random(n_out * d, 7), in = Random(n_in * d, 8), scale = Random(n_in, 9);
    std::vector<int32_t> rows(n_in);
    for (int i = 0; i < n_in; ++i) rows[i] = (i * 7 + 3) % n_out;
    std::vector<float> out = base;
    ASSERT_TRUE(b->AddScaledRows(TensorView(out.data(), DType::kF32, {n_out, d}),
                                 TensorView(in.data(), DType::kF32, {n_in, d}), rows, scale)
                    .ok());
    std::vector<double> want(base.begin(), base.end());
    for (int i = 0; i < n_in; ++i)
      for (int c = 0; c < d; ++c) want[rows[i] * d + c] += double(scale[i]) * in[i * d + c];
    for (size_t j = 0; j < want.size(); ++j) ASSERT_NEAR(out[j], want[j], 1e-4 * (1 + std::fabs(want[j]))) << j;
  }
  auto b = MakeCpuBackend({});
  std::vector<float> out(4), in(4), scale = {1.0f, 1.0f};
  const std::vector<int32_t> bad = {0, 2};  // out has 2 rows of 2.
  EXPECT_STATUS_CODE(b->AddScaledRows(TensorView(out.data(), DType::kF32, {2, 2}),
                                      TensorView(in.data(), DType::kF32, {2, 2}), bad, scale),
                     kInvalidArgument);
}

// A shared expert's gated add (Backend's default, which the CPU backend runs): out[i] +=
// sigmoid(gate[i]) * in[i], against the logistic in double; a gate of the wrong length is
// refused.
TEST(ElementwiseTest, AddSigmoidGatedRows) {
  auto b = MakeCpuBackend({});
  const int64_t n = 5, d = 33;
  const std::vector<float> base = Random(n * d, 10), in = Random(n * d, 11);
  std::vector<float> gate = Random(n, 12), out = base;
  gate[0] = 30.0f;   // sigmoid 1.
  gate[1] = -30.0f;  // sigmoid ~0.
  ASSERT_TRUE(b->AddSigmoidGatedRows(TensorView(out.data(), DType::kF32, {n, d}),
                                     TensorView(const_cast<float*>(in.data()), DType::kF32, {n, d}),
                                     TensorView(gate.data(), DType::kF32, {n, 1}))
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-double(gate[i])));
    for (int64_t c = 0; c < d; ++c) {
      const double want = base[i * d + c] + s * in[i * d + c];
      ASSERT_NEAR(out[i * d + c], want, 1e-6 * (1 + std::fabs(want))) << i << ", " << c;
    }
  }
  EXPECT_STATUS_CODE(b->AddSigmoidGatedRows(TensorView(out.data(), DType::kF32, {n, d}),
                                            TensorView(const_cast<float*>(in.data()), DType::kF32, {n, d}),
                                            TensorView(gate.data(), DType::kF32, {n - 1, 1})),
                     kInvalidArgument);
}

// RoPE in both layouts against the rotation written out per pair.
TEST(ElementwiseTest, RopeBothLayouts) {
  auto b = MakeCpuBackend({});
  const int64_t heads = 3, d = 16, rows = 4;
  std::vector<float> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / d));
  const std::vector<int32_t> pos = {0, 1, 17, 4000};
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    auto x = Random(rows * heads * d, 5);
    auto y = x;
    ASSERT_TRUE(b->Rope(TensorView(y.data(), DType::kF32, {rows, heads * d}), pos, {style, d, inv}).ok());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < d / 2; ++i) {
          const int64_t a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
          const int64_t c = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + d / 2;
          const double th = double(pos[r]) * inv[i];
          const float* v = &x[(r * heads + h) * d];
          const float* o = &y[(r * heads + h) * d];
          EXPECT_NEAR(o[a], v[a] * std::cos(th) - v[c] * std::sin(th), 2e-5);
          EXPECT_NEAR(o[c], v[a] * std::sin(th) + v[c] * std::cos(th), 2e-5);
        }
      }
    }
  }
}

// A gather of many rows (the MoE layer's tokens grouped by expert: ids repeat), split over
// two threads: every row is the table's, in order.
TEST(ElementwiseTest, EmbeddingGathersManyRowsOverThePool) {
  auto b = MakeCpuBackend({.n_threads = 2});
  const int64_t rows = 50, d = 96, n = 301;
  auto table = Random(rows * d, 10);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 13 + 5) % rows);
  std::vector<float> out(n * d, NAN);
  ASSERT_TRUE(
      b->Embedding(TensorView(out.data(), DType::kF32, {n, d}), TensorView(table.data(), DType::kF32, {rows, d}), ids)
          .ok());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) ASSERT_EQ(out[i * d + c], table[ids[i] * d + c]) << i << " " << c;
}

TEST(ElementwiseTest, EmbeddingRejectsOutOfRangeIds) {
  auto b = MakeCpuBackend({});
  std::vector<float> table(4 * 8), out(8);
  const std::vector<int32_t> ids = {4};
  EXPECT_STATUS_CODE(
      b->Embedding(TensorView(out.data(), DType::kF32, {1, 8}), TensorView(table.data(), DType::kF32, {4, 8}), ids),
      kInvalidArgument);
}

}  // namespace
}  // namespace cascade::kernels
