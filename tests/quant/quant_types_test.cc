// Every GGUF block type the CPU runs (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_NL, IQ4_XS, MXFP4), against an independent dequantizer: the `gguf` package on PyPI
// (llama.cpp's gguf-py), run by tests/quant/make_goldens.py over random blocks (the ctest
// fixture `quant_goldens` writes them to $CASCADE_QUANT_GOLDENS). For each type and shape:
//  * the scalar DequantizeRow equals gguf's values (to f32 rounding);
//  * the packed layout's rows equal the scalar DequantizeRow's bit for bit (the packed
//    scales are the file's: its f16 values and its integer sub-scales);
//  * LinearPacked on every ISA path this CPU has (generic, AVX2, AVX-512 VNNI), 1 to 19
//    tokens (the GEMV and the tiled GEMM kernels), 1 and 2 threads, against a double
//    matmul over gguf's values, within the bound of linear_test.cc: the int8 activation
//    rounding, sum_k |w_k| h_k / 2 with h = amax(32-element block) / 127, plus the f32
//    accumulation (1e-4 * sum_k |w_k x_k|);
//  * Linear over the unpacked GGUF rows (the fallback kernels), likewise.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu_features.h"
#include "tests/test_support.h"

namespace cascade::kernels::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0,   DType::kQ4_0,   DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                            DType::kQ2_K,   DType::kQ3_K,   DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                            DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};
constexpr int64_t kShapes[][2] = {{37, 512}, {300, 1024}};

struct Golden {
  std::vector<uint8_t> rows;  // GGUF blocks.
  std::vector<float> values;  // gguf's dequantization.
};

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// Reads a case, or fails the test naming what is missing.
bool LoadGolden(DType d, int64_t n_out, int64_t n_in, Golden* g) {
  const char* dir = std::getenv("CASCADE_QUANT_GOLDENS");
  const std::string stem =
      std::string(dir) + "/" + std::string(DTypeName(d)) + "_" + std::to_string(n_out) + "x" + std::to_string(n_in);
  const std::vector<char> q = ReadAll(stem + ".q"), f = ReadAll(stem + ".f32");
  if (static_cast<int64_t>(q.size()) != n_out * RowBytes(d, n_in) ||
      static_cast<int64_t>(f.size()) != n_out * n_in * 4) {
    ADD_FAILURE() << stem << ".{q,f32}: missing or of the wrong size (" << q.size() << ", " << f.size() << " bytes)";
    return false;
  }
  g->rows.assign(q.begin(), q.end());
  g->values.resize(static_cast<size_t>(n_out * n_in));
  std::memcpy(g->values.data(), f.data(), f.size());
  return true;
}

class QuantTypesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("CASCADE_QUANT_GOLDENS") == nullptr) {
      GTEST_SKIP() << "CASCADE_QUANT_GOLDENS is not set: run through ctest, whose fixture quant_goldens "
                      "writes the gguf-package references (tests/quant/make_goldens.py)";
    }
  }
  void TearDown() override { SetMaxCpuIsaForTesting(BestCpuIsa()); }
};

TEST_F(QuantTypesTest, DequantizeRowMatchesGguf) {
  for (DType d : kTypes) {
    for (const auto& [n_out, n_in] : kShapes) {
      Golden g;
      if (!LoadGolden(d, n_out, n_in, &g)) continue;
      std::vector<float> row(n_in);
      for (int64_t r = 0; r < n_out; ++r) {
        ASSERT_OK(DequantizeRow(d, g.rows.data() + r * RowBytes(d, n_in), row.data(), n_in));
        for (int64_t k = 0; k < n_in; ++k) {
          const float want = g.values[r * n_in + k];
          ASSERT_NEAR(row[k], want, 1e-6f * (1.0f + std::fabs(want))) << DTypeName(d) << " row " << r << " elem " << k;
        }
      }
    }
  }
}

TEST_F(QuantTypesTest, PackedRowsMatchGguf) {
  for (DType d : kTypes) {
    ASSERT_TRUE(PackedWeight::Supports(d)) << DTypeName(d);
    for (const auto& [n_out, n_in] : kShapes) {
      Golden g;
      if (!LoadGolden(d, n_out, n_in, &g)) continue;
      absl::StatusOr<PackedWeight> p = PackedWeight::Pack(TensorView(g.rows.data(), d, {n_out, n_in}));
      ASSERT_OK(p.status());
      std::vector<float> row(n_in), scalar(n_in);
      for (int64_t r = 0; r < n_out; ++r) {
        p->DequantizeRow(r, row.data());
        ASSERT_OK(DequantizeRow(d, g.rows.data() + r * RowBytes(d, n_in), scalar.data(), n_in));
        ASSERT_EQ(row, scalar) << DTypeName(d) << " row " << r;
        for (int64_t k = 0; k < n_in; ++k) {
          const float want = g.values[r * n_in + k];
          ASSERT_NEAR(row[k], want, 1e-6f * (1.0f + std::fabs(want))) << DTypeName(d) << " row " << r << " elem " << k;
        }
      }
    }
  }
}

// out [n_tokens, n_out] against the double reference, element by element (bound in the
// file comment), plus a relative L2 error below 2e-2. `act_block`: the activation
// quantization block of the kernel (32; 256 for the GGUF-layout Q4_K / Q6_K kernels).
void ExpectNearReference(const std::vector<float>& out, const Golden& g, const std::vector<float>& x, int64_t n_tokens,
                         int64_t n_out, int64_t n_in, int64_t act_block) {
  double err2 = 0, ref2 = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * n_in;
    std::vector<double> h(n_in / act_block);
    for (int64_t b = 0; b < n_in / act_block; ++b) {
      double amax = 0;
      for (int64_t k = 0; k < act_block; ++k) amax = std::max(amax, std::fabs(double{xt[b * act_block + k]}));
      h[b] = amax / 127.0;
    }
    for (int64_t r = 0; r < n_out; ++r) {
      double ref = 0, wx = 0, bound = 1e-5;
      for (int64_t k = 0; k < n_in; ++k) {
        const double w = g.values[r * n_in + k];
        ref += w * xt[k];
        wx += std::fabs(w * xt[k]);
        bound += std::fabs(w) * h[k / act_block] / 2;
      }
      bound += 1e-4 * wx;
      const double got = out[t * n_out + r];
      ASSERT_LE(std::fabs(got - ref), bound) << "token " << t << " row " << r << ": got " << got << ", want " << ref;
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-30)), 2e-2);
}

std::vector<float> RandomActivations(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(*rng);
  return x;
}

TEST_F(QuantTypesTest, PackedLinearEveryIsaMatchesDoubleReference) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  for (DType d : kTypes) {
    for (const auto& [n_out, n_in] : kShapes) {
      Golden g;
      if (!LoadGolden(d, n_out, n_in, &g)) continue;
      absl::StatusOr<PackedWeight> p = PackedWeight::Pack(TensorView(g.rows.data(), d, {n_out, n_in}));
      ASSERT_OK(p.status());
      for (CpuIsa isa : kAllCpuIsas) {
        if (!CpuSupportsIsa(isa)) continue;
        SetMaxCpuIsaForTesting(isa);
        for (int64_t n_tokens : {1, 2, 3, 5, 8, 19}) {
          for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
            SCOPED_TRACE(::testing::Message() << DTypeName(d) << " " << n_out << "x" << n_in << " " << CpuIsaName(isa)
                                              << " tokens " << n_tokens << (tp ? " 2 threads" : " 1 thread"));
            const std::vector<float> x = RandomActivations(n_tokens * n_in, &rng);
            std::vector<float> out(n_tokens * n_out, -7.0f);
            ASSERT_OK(LinearPacked(out.data(), x.data(), *p, n_tokens, tp));
            ExpectNearReference(out, g, x, n_tokens, n_out, n_in, 32);
          }
        }
      }
    }
  }
}

TEST_F(QuantTypesTest, UnpackedLinearMatchesDoubleReference) {
  std::mt19937 rng(12);
  for (DType d : kTypes) {
    const int64_t n_out = kShapes[0][0], n_in = kShapes[0][1];
    Golden g;
    if (!LoadGolden(d, n_out, n_in, &g)) continue;
    const int64_t act_block = ActivationFormatFor(d) == ActivationFormat::kQ8K ? 256 : 32;
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      SetMaxCpuIsaForTesting(isa);
      for (int64_t n_tokens : {1, 7}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(d) << " " << CpuIsaName(isa) << " tokens " << n_tokens);
        const std::vector<float> x = RandomActivations(n_tokens * n_in, &rng);
        std::vector<float> out(n_tokens * n_out, -7.0f);
        ASSERT_OK(Linear(out.data(), x.data(), TensorView(g.rows.data(), d, {n_out, n_in}), n_tokens, nullptr));
        ExpectNearReference(out, g, x, n_tokens, n_out, n_in, act_block);
      }
    }
  }
}

}  // namespace
}  // namespace cascade::kernels::cpu
