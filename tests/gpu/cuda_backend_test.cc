// CudaBackend against independent references on fresh random inputs (ctest label `gpu`).
//  * Linear: a double-precision product with the weights decoded by the CPU's
//    DequantizeRow, so the GPU kernel's block decoding is checked, not just matched.
//    Bounds: F32 and the weight-only quantized types use the weights exactly with F32
//    activations, 1e-5 relative L2; F16/BF16 round the activations to the weight's type
//    for cuBLAS, so 2e-3 / 1e-2.
//  * The other ops against the CPU backend (itself tested against naive references in
//    tests/kernels), 1e-5; attention 1e-4 (online softmax in another order).
//  * Every output buffer is poisoned with NaN bytes first, so an element the kernel never
//    writes fails the comparison.
//  * Sample: a double-precision reference that sorts (the kernel selects thresholds by
//    radix select instead); ids and accept flags must agree exactly, except on rows whose
//    uniform or a top-p/min-p cut lies within 1e-5 of a boundary (float vs double weights).
// Without a GPU every test skips with the CUDA runtime's reason.
#include "kernels/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <tuple>

#include "core/half.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda_device.h"
#include "tests/random_blocks.h"
#include "tests/sampling_reference.h"
#include "tests/test_support.h"

namespace cascade::kernels {
namespace {

using cascade::testing::RandomBlocks;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaAvailability a = QueryCudaDevices();
    if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
    auto b = CudaBackend::Create({});
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(*b);
    cpu_ = MakeCpuBackend({.n_threads = 1});
  }

  // A device copy of host data.
  DeviceBuffer Up(const void* data, size_t bytes) {
    auto b = DeviceBuffer::Create(0, bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(b->Upload(data, bytes).ok());
    return std::move(*b);
  }
  DeviceBuffer Up(const std::vector<float>& v) { return Up(v.data(), v.size() * sizeof(float)); }
  // An output buffer of n floats, every byte 0xff (NaN).
  DeviceBuffer Poisoned(size_t n) {
    std::vector<uint8_t> nan(n * sizeof(float), 0xff);
    return Up(nan.data(), nan.size());
  }
  // The outputs of stacked parts, [n_tokens, rows[p]] each, poisoned, and their views.
  struct Parts {
    std::vector<DeviceBuffer> buffers;
    std::vector<TensorView> views;
  };
  Parts PoisonedParts(int64_t n_tokens, std::span<const int64_t> rows) {
    Parts p;
    for (int64_t r : rows) {
      p.buffers.push_back(Poisoned(n_tokens * r));
      p.views.push_back(p.buffers.back().View(DType::kF32, {n_tokens, r}));
    }
    return p;
  }
  std::vector<float> Down(const DeviceBuffer& b, size_t n) {
    std::vector<float> out(n);
    EXPECT_TRUE(gpu_->Synchronize().ok());
    EXPECT_TRUE(b.Download(out.data(), n * sizeof(float)).ok());
    return out;
  }

  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
};

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Random weights [n_out, n_in] stored as `dtype` (seeded), and their exact values as the
// CPU's DequantizeRow decodes them.
std::vector<uint8_t> RandomWeights(DType dtype, int64_t n_out, int64_t n_in, uint32_t seed,
                                   std::vector<float>* decoded) {
  const std::vector<float> wf = Random(n_out * n_in, seed);
  std::vector<uint8_t> w(RowBytes(dtype, n_in) * n_out);
  decoded->resize(n_out * n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    uint8_t* row = w.data() + r * RowBytes(dtype, n_in);
    EXPECT_TRUE(cpu::QuantizeRow(dtype, wf.data() + r * n_in, row, n_in).ok());
    EXPECT_TRUE(cpu::DequantizeRow(dtype, row, decoded->data() + r * n_in, n_in).ok());
  }
  return w;
}

// Relative L2 error; NaN (an unwritten element) counts as infinitely wrong.
double RelL2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

double RelL2(const std::vector<float>& got, const std::vector<float>& want) {
  return RelL2(got, std::vector<double>(want.begin(), want.end()));
}

// The double-precision product of x [n_tokens, n_in] and rows [first, first + rows) of the
// decoded weights, plus `bias` [rows] when given: one part of a stacked projection.
template <typename X>
std::vector<double> PartProduct(const std::vector<X>& x, const std::vector<float>& decoded, int64_t n_tokens,
                                int64_t n_in, int64_t first, int64_t rows, const std::vector<float>& bias) {
  std::vector<double> want(n_tokens * rows);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < rows; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(x[t * n_in + i]) * decoded[(first + o) * n_in + i];
      want[t * rows + o] = s;
    }
  }
  return want;
}

TEST_F(CudaBackendTest, LinearMatchesDoublePrecisionReference) {
  const int64_t n_out = 100, n_in = 256;  // 100 rows: the last block of warps is partial.
  const std::pair<DType, double> cases[] = {{DType::kF32, 1e-5},    {DType::kF16, 2e-3},  {DType::kBF16, 1e-2},
                                            {DType::kQ8_0, 1e-5},   {DType::kQ4_0, 1e-5}, {DType::kQ4_1, 1e-5},
                                            {DType::kI4_G128, 1e-5}};
  for (const auto& [dtype, bound] : cases) {
    std::vector<float> decoded;
    const std::vector<uint8_t> w = RandomWeights(dtype, n_out, n_in, 1, &decoded);
    const std::vector<float> bias = Random(n_out, 3);
    DeviceBuffer dw = Up(w.data(), w.size()), db = Up(bias);
    for (int64_t n_tokens : {1, 3, 8, 17, 40}) {  // GEMV passes of 1/4/8 tokens, then the GEMM path.
      const std::vector<float> x = Random(n_tokens * n_in, 2 + n_tokens);
      DeviceBuffer dx = Up(x), out = Poisoned(n_tokens * n_out);
      ASSERT_TRUE(gpu_->Linear(out.View(DType::kF32, {n_tokens, n_out}), dx.View(DType::kF32, {n_tokens, n_in}),
                               dw.View(dtype, {n_out, n_in}), db.View(DType::kF32, {n_out}))
                      .ok());
      std::vector<double> want(n_tokens * n_out);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
          double s = bias[o];
          for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(x[t * n_in + i]) * decoded[o * n_in + i];
          want[t * n_out + o] = s;
        }
      }
      EXPECT_LT(RelL2(Down(out, n_tokens * n_out), want), bound) << DTypeName(dtype) << " tokens " << n_tokens;
    }
  }
}

// The tuned kernels' F16/BF16 GEMV (up to 8 tokens; CUDA_KERNELS=tuned) over stacked parts
// of 48, 32 and 20 rows with a bias, rows of 1032 (129 chunks of 8: the lanes' loop ends
// unevenly): against the double-precision product, reading the activations unrounded, and
// against the reference path (cuBLAS over activations rounded to the weight's type). More
// tokens fall back to cuBLAS even with the tuned kernels.
TEST_F(CudaBackendTest, TunedHalfGemvMatchesDoublePrecisionAndTheReferencePath) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_in = 1032, rows[3] = {48, 32, 20}, n_out = 100;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const double cublas_bound = dtype == DType::kF16 ? 2e-3 : 1e-2;
    std::vector<float> decoded;
    std::vector<uint8_t> w = RandomWeights(dtype, n_out, n_in, 31, &decoded);
    const std::vector<float> bias = Random(rows[1], 32);
    DeviceBuffer db = Up(bias);
    for (int64_t n_tokens : {1, 2, 3, 5, 8, 9, 40}) {
      const std::vector<float> x = Random(n_tokens * n_in, 33 + n_tokens);
      DeviceBuffer dx = Up(x);
      std::vector<std::vector<float>> got[2];  // Per backend (tuned, reference), per part.
      for (int b = 0; b < 2; ++b) {
        CudaBackend& backend = b == 0 ? **tuned : **reference;
        auto prepared = backend.PrepareWeight(TensorView(w.data(), dtype, {n_out, n_in}));
        ASSERT_TRUE(prepared.ok()) << prepared.status();
        const Parts outs = PoisonedParts(n_tokens, rows);
        const TensorView biases[] = {TensorView(), db.View(DType::kF32, {rows[1]}), TensorView()};
        ASSERT_TRUE(backend.LinearParts(outs.views, dx.View(DType::kF32, {n_tokens, n_in}), **prepared, biases).ok());
        ASSERT_TRUE(backend.Synchronize().ok());
        for (int p = 0; p < 3; ++p) got[b].push_back(Down(outs.buffers[p], n_tokens * rows[p]));
      }
      int64_t first = 0;
      for (int p = 0; p < 3; ++p) {
        const std::vector<double> want =
            PartProduct(x, decoded, n_tokens, n_in, first, rows[p], p == 1 ? bias : std::vector<float>{});
        const std::string what = StrCat(DTypeName(dtype), " tokens ", n_tokens, " part ", p);
        EXPECT_LT(RelL2(got[0][p], want), n_tokens <= 8 ? 1e-5 : cublas_bound) << "tuned " << what;
        EXPECT_LT(RelL2(got[1][p], want), cublas_bound) << "reference " << what;
        EXPECT_LT(RelL2(got[0][p], got[1][p]), cublas_bound) << "tuned against reference " << what;
        first += rows[p];
      }
    }
  }
}

// x with each block of 32 rounded as the tuned Q8 GEMV quantizes activations: a scale of
// amax / 127, quants rounded to nearest (even on ties).
std::vector<double> Q8Activations(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (size_t j = 0; j < 32; ++j) out[b + j] = double{d} * std::nearbyint(x[b + j] * id);
  }
  return out;
}

// The tuned kernels' integer GEMV (8-bit activations, __dp4a) for every GGUF block type and
// I4_G128, from QuantizeRow's blocks where it writes the type and from random bit patterns
// (every scale and code bit; the other types only so), 1 to 12 tokens (12: two passes of
// the 8-token kernel): against the double product with the activations rounded as the
// kernel rounds them (the integer arithmetic itself: 1e-5), against the exact product
// (what 8-bit activations cost: 2e-2), and against the reference path.
TEST_F(CudaBackendTest, TunedQ8GemvMatchesDoublePrecision) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_out = 100, n_in = 512;
  for (const bool random_bits : {false, true}) {
    for (DType dtype :
         {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
          DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kI4_G128}) {
      const bool quantizable = dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_1 ||
                               dtype == DType::kQ4_K || dtype == DType::kQ6_K || dtype == DType::kMXFP4 ||
                               dtype == DType::kI4_G128;
      if (random_bits ? dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_1 : !quantizable) {
        continue;
      }
      std::vector<float> decoded;
      const std::vector<uint8_t> w = random_bits ? RandomBlocks(dtype, n_out, n_in, 51, &decoded)
                                                 : RandomWeights(dtype, n_out, n_in, 51, &decoded);
      DeviceBuffer dw = Up(w.data(), w.size());
      for (int64_t n_tokens : {1, 3, 8, 12}) {
        const std::vector<float> x = Random(n_tokens * n_in, 52 + n_tokens);
        const std::vector<double> xq = Q8Activations(x);
        DeviceBuffer dx = Up(x), out = Poisoned(n_tokens * n_out), ref_out = Poisoned(n_tokens * n_out);
        ASSERT_TRUE((*tuned)
                        ->Linear(out.View(DType::kF32, {n_tokens, n_out}), dx.View(DType::kF32, {n_tokens, n_in}),
                                 dw.View(dtype, {n_out, n_in}), TensorView())
                        .ok());
        ASSERT_TRUE((*reference)
                        ->Linear(ref_out.View(DType::kF32, {n_tokens, n_out}), dx.View(DType::kF32, {n_tokens, n_in}),
                                 dw.View(dtype, {n_out, n_in}), TensorView())
                        .ok());
        ASSERT_TRUE((*tuned)->Synchronize().ok() && (*reference)->Synchronize().ok());
        std::vector<double> exact(n_tokens * n_out), rounded(n_tokens * n_out);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t o = 0; o < n_out; ++o) {
            double s = 0, sq = 0;
            for (int64_t i = 0; i < n_in; ++i) {
              s += static_cast<double>(x[t * n_in + i]) * decoded[o * n_in + i];
              sq += xq[t * n_in + i] * decoded[o * n_in + i];
            }
            exact[t * n_out + o] = s;
            rounded[t * n_out + o] = sq;
          }
        }
        const std::vector<float> got = Down(out, n_tokens * n_out);
        const std::string what = StrCat(DTypeName(dtype), random_bits ? " (random bits)" : "", " tokens ", n_tokens);
        EXPECT_LT(RelL2(got, rounded), 1e-5) << what;
        EXPECT_LT(RelL2(got, exact), 2e-2) << what;
        EXPECT_LT(RelL2(got, Down(ref_out, n_tokens * n_out)), 2e-2) << what;
      }
    }
  }
}

// The tuned kernels' GEMM path for quantized weights (more tokens than the GEMVs take): the
// weight decoded to BF16, the activations converted to BF16, a tensor-core GEMM with F32
// accumulation. Against double precision from the CPU's decoding and against the reference
// path's F32 GEMM: BF16 keeps 8 significant bits of each factor, 1e-2 relative L2.
TEST_F(CudaBackendTest, TunedQuantizedGemmMatchesDoublePrecision) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_out = 100, n_in = 512, n_tokens = 40;
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS, DType::kI4_G128}) {
    std::vector<float> decoded;
    const bool quantizable = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
    const std::vector<uint8_t> w =
        quantizable ? RandomWeights(dtype, n_out, n_in, 61, &decoded) : RandomBlocks(dtype, n_out, n_in, 61, &decoded);
    DeviceBuffer dw = Up(w.data(), w.size());
    const std::vector<float> x = Random(n_tokens * n_in, 62);
    DeviceBuffer dx = Up(x), out = Poisoned(n_tokens * n_out), ref_out = Poisoned(n_tokens * n_out);
    for (int b = 0; b < 2; ++b) {
      CudaBackend& gpu = b == 0 ? **tuned : **reference;
      ASSERT_TRUE(gpu.Linear((b == 0 ? out : ref_out).View(DType::kF32, {n_tokens, n_out}),
                             dx.View(DType::kF32, {n_tokens, n_in}), dw.View(dtype, {n_out, n_in}), TensorView())
                      .ok());
      ASSERT_TRUE(gpu.Synchronize().ok());
    }
    const std::vector<double> exact = PartProduct(x, decoded, n_tokens, n_in, 0, n_out, {});
    const std::vector<float> got = Down(out, n_tokens * n_out);
    EXPECT_LT(RelL2(got, exact), 1e-2) << DTypeName(dtype);
    EXPECT_LT(RelL2(got, Down(ref_out, n_tokens * n_out)), 1e-2) << DTypeName(dtype);
  }
}

// The int8 tensor-core tiles (CASCADE_CUDA_QUANT_GEMM=int8: Q8Mma) for every type the
// integer kernels take, from random bit patterns, with partial row and token tiles (100 rows,
// 17 / 70 / 130 tokens) and stacked parts (one launch for three parts of 48, 32 and 20 rows,
// a bias on the middle one): against the double product with the activations rounded as the
// kernel rounds them (the integer arithmetic: 1e-5), against the exact product (2e-2), and
// against the integer GEMV of the same activations run one token at a time (1e-5: the same
// sums in another order) and against the reference path's F32 GEMM (2e-2).
TEST_F(CudaBackendTest, TunedInt8GemmMatchesDoublePrecision) {
  auto int8 = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned, .quant_gemm = QuantGemm::kInt8});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(int8.ok() && reference.ok());
  const int64_t n_in = 512, rows[3] = {48, 32, 20}, n_out = 100;
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
        DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kI4_G128}) {
    std::vector<float> decoded;
    const std::vector<uint8_t> w = RandomBlocks(dtype, n_out, n_in, 71, &decoded);
    DeviceBuffer dw = Up(w.data(), w.size());
    auto prepared = (*int8)->PrepareWeight(TensorView(const_cast<uint8_t*>(w.data()), dtype, {n_out, n_in}));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const std::vector<float> bias = Random(rows[1], 72);
    DeviceBuffer db = Up(bias);
    for (int64_t n_tokens : {17, 70, 130}) {
      const std::string what = StrCat(DTypeName(dtype), " tokens ", n_tokens);
      const std::vector<float> x = Random(n_tokens * n_in, 73 + n_tokens);
      const std::vector<double> xq = Q8Activations(x);
      DeviceBuffer dx = Up(x);
      const Parts outs = PoisonedParts(n_tokens, rows);
      const TensorView biases[] = {TensorView(), db.View(DType::kF32, {rows[1]}), TensorView()};
      ASSERT_TRUE((*int8)->LinearParts(outs.views, dx.View(DType::kF32, {n_tokens, n_in}), **prepared, biases).ok());
      // The same activations one token at a time: the integer GEMV.
      DeviceBuffer gemv_out = Poisoned(n_tokens * n_out);
      const Device gpu{DeviceKind::kCuda, 0};
      for (int64_t t = 0; t < n_tokens; ++t) {
        ASSERT_TRUE(
            (*int8)
                ->Linear(TensorView(static_cast<float*>(gemv_out.data()) + t * n_out, DType::kF32, {1, n_out}, gpu),
                         TensorView(static_cast<float*>(dx.data()) + t * n_in, DType::kF32, {1, n_in}, gpu),
                         dw.View(dtype, {n_out, n_in}), TensorView())
                .ok());
      }
      const std::vector<float> gemv = Down(gemv_out, n_tokens * n_out);
      // The reference path: the weight decoded to F32, an F32 GEMM of the exact activations.
      DeviceBuffer ref_out = Poisoned(n_tokens * n_out);
      ASSERT_TRUE((*reference)
                      ->Linear(ref_out.View(DType::kF32, {n_tokens, n_out}), dx.View(DType::kF32, {n_tokens, n_in}),
                               dw.View(dtype, {n_out, n_in}), TensorView())
                      .ok());
      const std::vector<float> ref = Down(ref_out, n_tokens * n_out);
      int64_t first = 0;
      for (int p = 0; p < 3; ++p) {
        const std::vector<float> b = p == 1 ? bias : std::vector<float>{};
        const std::vector<double> exact = PartProduct(x, decoded, n_tokens, n_in, first, rows[p], b);
        const std::vector<double> rounded = PartProduct(xq, decoded, n_tokens, n_in, first, rows[p], b);
        std::vector<double> by_gemv(n_tokens * rows[p]), by_reference(n_tokens * rows[p]);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t o = 0; o < rows[p]; ++o) {
            by_gemv[t * rows[p] + o] = gemv[t * n_out + first + o] + (b.empty() ? 0.0 : b[o]);
            by_reference[t * rows[p] + o] = ref[t * n_out + first + o] + (b.empty() ? 0.0 : b[o]);
          }
        }
        const std::vector<float> got = Down(outs.buffers[p], exact.size());
        EXPECT_LT(RelL2(got, rounded), 1e-5) << what << " part " << p;
        EXPECT_LT(RelL2(got, exact), 2e-2) << what << " part " << p;
        EXPECT_LT(RelL2(got, by_gemv), 1e-5) << what << " part " << p;
        EXPECT_LT(RelL2(got, by_reference), 2e-2) << what << " part " << p;
        first += rows[p];
      }
    }
  }
}

// The K types, Q5_0/Q5_1, the IQ4 types and MXFP4 (and FP8's blocks), dequantized in
// registers by the GEMV kernel and by the dequantize-then-GEMM path (40 tokens), and by the
// embedding lookup.
TEST_F(CudaBackendTest, EveryGgufBlockTypeMatchesDoublePrecision) {
  const int64_t n_out = 100, n_in = 512;
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ5_K,
                      DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kF8_E4M3_B128}) {
    std::vector<float> decoded;
    const std::vector<uint8_t> w = dtype == DType::kF8_E4M3_B128 ? RandomWeights(dtype, n_out, n_in, 21, &decoded)
                                                                 : RandomBlocks(dtype, n_out, n_in, 21, &decoded);
    DeviceBuffer dw = Up(w.data(), w.size());
    for (int64_t n_tokens : {1, 3, 8, 17, 40}) {
      const std::vector<float> x = Random(n_tokens * n_in, 22 + n_tokens);
      DeviceBuffer dx = Up(x), out = Poisoned(n_tokens * n_out);
      ASSERT_TRUE(gpu_->Linear(out.View(DType::kF32, {n_tokens, n_out}), dx.View(DType::kF32, {n_tokens, n_in}),
                               dw.View(dtype, {n_out, n_in}), TensorView())
                      .ok())
          << DTypeName(dtype);
      const std::vector<double> want = PartProduct(x, decoded, n_tokens, n_in, 0, n_out, {});
      // The GEMM path multiplies in f16 / bf16 after dequantizing: as those types' bound.
      EXPECT_LT(RelL2(Down(out, n_tokens * n_out), want), n_tokens > 16 ? 1e-2 : 1e-5)
          << DTypeName(dtype) << " tokens " << n_tokens;
    }
    const std::vector<int32_t> ids = {0, 99, 7, 7, 23};
    const int64_t n_ids = static_cast<int64_t>(ids.size());
    DeviceBuffer emb = Poisoned(n_ids * n_in);
    ASSERT_TRUE(gpu_->Embedding(emb.View(DType::kF32, {n_ids, n_in}), dw.View(dtype, {n_out, n_in}), ids).ok());
    std::vector<float> want;
    for (int32_t id : ids) want.insert(want.end(), decoded.begin() + id * n_in, decoded.begin() + (id + 1) * n_in);
    EXPECT_LT(RelL2(Down(emb, want.size()), want), 1e-6) << DTypeName(dtype) << " embedding";
  }
}

// Stacked projections (LinearParts over a prepared weight of Q/K/V-like parts of 48, 32
// and 37 rows, with a bias on the middle part, which the tuned kernels add as they store):
// each part against the double-precision product over its own rows, through the one-launch
// GEMV (up to 16 tokens; the tuned quantized ones against the activations rounded to 8
// bits as they round them) and the per-part GEMMs (40 tokens; the tuned kernels' quantized
// GEMM on BF16, 1e-2), with both kernel sets.
TEST_F(CudaBackendTest, LinearPartsMatchDoublePrecisionPerPart) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_in = 256, rows[3] = {48, 32, 37}, n_out = 48 + 32 + 37;
  for (CudaBackend* gpu : {reference->get(), tuned->get()}) {
    const char* kernels = gpu == reference->get() ? "reference" : "tuned";
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_1, DType::kI4_G128}) {
      std::vector<float> decoded;
      std::vector<uint8_t> w = RandomWeights(dtype, n_out, n_in, 11, &decoded);
      auto prepared = gpu->PrepareWeight(TensorView(w.data(), dtype, {n_out, n_in}));
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      const std::vector<float> bias = Random(rows[1], 12);
      DeviceBuffer db = Up(bias);
      for (int64_t n_tokens : {1, 5, 40}) {
        const std::vector<float> x = Random(n_tokens * n_in, 13 + n_tokens);
        DeviceBuffer dx = Up(x);
        const Parts outs = PoisonedParts(n_tokens, rows);
        const TensorView biases[] = {TensorView(), db.View(DType::kF32, {rows[1]}), TensorView()};
        ASSERT_TRUE(gpu->LinearParts(outs.views, dx.View(DType::kF32, {n_tokens, n_in}), **prepared, biases).ok());
        // The tuned kernels' quantized GEMVs round the activations to 8 bits.
        const bool rounded = gpu == tuned->get() && IsQuantized(dtype) && n_tokens <= 16;
        const std::vector<double> xr = rounded ? Q8Activations(x) : std::vector<double>(x.begin(), x.end());
        int64_t first = 0;
        for (int p = 0; p < 3; ++p) {
          const std::vector<double> want =
              PartProduct(xr, decoded, n_tokens, n_in, first, rows[p], p == 1 ? bias : std::vector<float>{});
          const double bound = dtype == DType::kBF16 || (gpu == tuned->get() && IsQuantized(dtype)) ? 1e-2 : 1e-5;
          EXPECT_LT(RelL2(Down(outs.buffers[p], want.size()), want), rounded ? 1e-5 : bound)
              << kernels << " " << DTypeName(dtype) << " tokens " << n_tokens << " part " << p;
          first += rows[p];
        }
      }
    }
  }
}

// Op timing (gpu_model_bench --profile): each op run while it is on is counted under its
// name with its time, most first; nothing is counted while it is off.
TEST_F(CudaBackendTest, OpTimingCountsEachOpByName) {
  const int64_t n = 64, d = 256;
  const std::vector<float> x = Random(n * d, 90), w = Random(d * d, 91), g = Random(d, 92);
  DeviceBuffer dx = Up(x), dw = Up(w), dg = Up(g), out = Poisoned(n * d), normed = Poisoned(n * d);
  const auto run = [&] {
    ASSERT_TRUE(gpu_->Linear(out.View(DType::kF32, {n, d}), dx.View(DType::kF32, {n, d}), dw.View(DType::kF32, {d, d}),
                             TensorView())
                    .ok());
    ASSERT_TRUE(
        gpu_->RmsNorm(normed.View(DType::kF32, {n, d}), out.View(DType::kF32, {n, d}), dg.View(DType::kF32, {d}), 1e-5f)
            .ok());
  };
  run();
  EXPECT_TRUE(gpu_->TakeOpTimes().empty());
  gpu_->set_op_timing(true);
  run();
  run();
  const std::vector<OpTime> times = gpu_->TakeOpTimes();
  ASSERT_EQ(times.size(), 2u);
  for (const OpTime& t : times) {
    EXPECT_TRUE(t.op == "cublasGemmEx (F32)" || t.op == "RmsNorm") << t.op;
    EXPECT_EQ(t.count, 2) << t.op;
    EXPECT_GE(t.ms, 0.0) << t.op;
  }
  EXPECT_GE(times[0].ms, times[1].ms);
  EXPECT_TRUE(gpu_->TakeOpTimes().empty());  // Started over.
  gpu_->set_op_timing(false);
  run();
  EXPECT_TRUE(gpu_->TakeOpTimes().empty());
}

// The tuned kernels' fused residual sum and norm give the bits of AddInPlace then RmsNorm
// (the reference path), and both match the CPU backend's.
TEST_F(CudaBackendTest, FusedAddRmsNormGivesTheBitsOfTheTwoOps) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  const int64_t rows = 5, n = 1000;
  const std::vector<float> hidden = Random(rows * n, 41), add = Random(rows * n, 42), w = Random(n, 43);
  std::vector<float> results[2][2];  // [tuned, reference][hidden, norm]
  for (int b = 0; b < 2; ++b) {
    CudaBackend& backend = b == 0 ? **tuned : *gpu_;
    DeviceBuffer dh = Up(hidden), da = Up(add), dw = Up(w), out = Poisoned(rows * n);
    ASSERT_TRUE(backend
                    .AddRmsNorm(out.View(DType::kF32, {rows, n}), dh.View(DType::kF32, {rows, n}),
                                da.View(DType::kF32, {rows, n}), dw.View(DType::kF32, {n}), 1e-5f)
                    .ok());
    ASSERT_TRUE(backend.Synchronize().ok());
    results[b][0] = Down(dh, rows * n);
    results[b][1] = Down(out, rows * n);
  }
  EXPECT_EQ(results[0][0], results[1][0]);
  EXPECT_EQ(results[0][1], results[1][1]);
  std::vector<float> h = hidden, norm(rows * n);
  ASSERT_TRUE(cpu_->AddRmsNorm(TensorView(norm.data(), DType::kF32, {rows, n}),
                               TensorView(h.data(), DType::kF32, {rows, n}),
                               TensorView(const_cast<float*>(add.data()), DType::kF32, {rows, n}),
                               TensorView(const_cast<float*>(w.data()), DType::kF32, {n}), 1e-5f)
                  .ok());
  EXPECT_EQ(results[0][0], h);
  EXPECT_LT(RelL2(results[0][1], norm), 1e-6);
}

TEST_F(CudaBackendTest, ElementwiseOpsMatchTheCpuBackend) {
  const int64_t n = 7, d = 384, head_dim = 64;
  const std::vector<float> x = Random(n * d, 4), g = Random(n * d, 5), w = Random(d, 6);
  DeviceBuffer dx = Up(x), dg = Up(g), dw = Up(w);
  const auto view = [&](const DeviceBuffer& b, int64_t rows, int64_t cols) {
    return b.View(DType::kF32, {rows, cols});
  };
  const auto host = [](std::vector<float>& v, int64_t rows, int64_t cols) {
    return TensorView(v.data(), DType::kF32, {rows, cols});
  };
  {  // RmsNorm.
    DeviceBuffer out = Poisoned(n * d);
    ASSERT_TRUE(gpu_->RmsNorm(view(out, n, d), view(dx, n, d), dw.View(DType::kF32, {d}), 1e-5f).ok());
    std::vector<float> want(n * d), xc = x, wc = w;
    ASSERT_TRUE(cpu_->RmsNorm(host(want, n, d), host(xc, n, d), TensorView(wc.data(), DType::kF32, {d}), 1e-5f).ok());
    EXPECT_LT(RelL2(Down(out, n * d), want), 1e-5);
  }
  {  // SiluMul, then AddInPlace on its output.
    DeviceBuffer out = Poisoned(n * d);
    ASSERT_TRUE(gpu_->SiluMul(view(out, n, d), view(dx, n, d), view(dg, n, d)).ok());
    ASSERT_TRUE(gpu_->AddInPlace(view(out, n, d), view(dg, n, d)).ok());
    std::vector<float> want(n * d), xc = x, gc = g;
    ASSERT_TRUE(cpu_->SiluMul(host(want, n, d), host(xc, n, d), host(gc, n, d)).ok());
    ASSERT_TRUE(cpu_->AddInPlace(host(want, n, d), host(gc, n, d)).ok());
    EXPECT_LT(RelL2(Down(out, n * d), want), 1e-5);
  }
  {  // ClampedSwiglu (gpt-oss) over values past its limit, then AddBias.
    std::vector<float> gx = x, gg = g;
    for (float& v : gx) v *= 20;
    for (float& v : gg) v *= 20;
    DeviceBuffer out = Poisoned(n * d), dgx = Up(gx), dgg = Up(gg);
    ASSERT_TRUE(gpu_->ClampedSwiglu(view(out, n, d), view(dgx, n, d), view(dgg, n, d), 1.702f, 7.0f).ok());
    ASSERT_TRUE(gpu_->AddBias(view(out, n, d), dw.View(DType::kF32, {d})).ok());
    std::vector<float> want(n * d), wc = w;
    ASSERT_TRUE(cpu_->ClampedSwiglu(host(want, n, d), host(gx, n, d), host(gg, n, d), 1.702f, 7.0f).ok());
    ASSERT_TRUE(cpu_->AddBias(host(want, n, d), TensorView(wc.data(), DType::kF32, {d})).ok());
    EXPECT_LT(RelL2(Down(out, n * d), want), 1e-5);
  }
  {  // AddScaledRows (the MoE scatter): rows repeat, sums in order.
    DeviceBuffer out = Up(g);
    const std::vector<int32_t> rows = {3, 0, 3, 6, 1, 3, 0};
    const std::vector<float> scales = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, -0.75f, 3.0f};
    ASSERT_TRUE(gpu_->AddScaledRows(view(out, n, d), view(dx, n, d), rows, scales).ok());
    std::vector<float> want = g, xc = x;
    ASSERT_TRUE(cpu_->AddScaledRows(host(want, n, d), host(xc, n, d), rows, scales).ok());
    EXPECT_LT(RelL2(Down(out, n * d), want), 1e-6);
  }
  for (const CudaKernels k : {CudaKernels::kReference, CudaKernels::kTuned}) {
    // A shared expert's gated add: the gate read back (reference) or applied on the device.
    auto b = CudaBackend::Create({.device = 0, .kernels = k});
    ASSERT_TRUE(b.ok()) << b.status();
    std::vector<float> gate = Random(n, 13, 3.0f);
    DeviceBuffer out = Up(g), dgate = Up(gate);
    ASSERT_TRUE((*b)->AddSigmoidGatedRows(view(out, n, d), view(dx, n, d), dgate.View(DType::kF32, {n, 1})).ok());
    ASSERT_TRUE((*b)->Synchronize().ok());
    std::vector<float> want = g, xc = x;
    ASSERT_TRUE(cpu_->AddSigmoidGatedRows(host(want, n, d), host(xc, n, d), host(gate, n, 1)).ok());
    EXPECT_LT(RelL2(Down(out, n * d), want), 1e-6) << (k == CudaKernels::kTuned ? "tuned" : "reference");
  }
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    std::vector<float> inv_freq(head_dim / 2);
    for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
    const std::vector<int32_t> pos = {0, 1, 5, 17, 100, 511, 2047};
    const RopeParams p{style, head_dim, inv_freq};
    DeviceBuffer dr = Up(x);
    ASSERT_TRUE(gpu_->Rope(view(dr, n, d), pos, p).ok());
    std::vector<float> want = x;
    ASSERT_TRUE(cpu_->Rope(host(want, n, d), pos, p).ok());
    EXPECT_LT(RelL2(Down(dr, n * d), want), 1e-5) << "style " << static_cast<int>(style);
  }
}

TEST_F(CudaBackendTest, EmbeddingDecodesEveryWeightType) {
  const int64_t n_vocab = 50, n_embd = 128;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  for (DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kI4_G128}) {
    const std::vector<float> tf = Random(n_vocab * n_embd, 8);
    std::vector<uint8_t> table(RowBytes(dtype, n_embd) * n_vocab);
    for (int64_t r = 0; r < n_vocab; ++r) {
      ASSERT_TRUE(
          cpu::QuantizeRow(dtype, tf.data() + r * n_embd, table.data() + r * RowBytes(dtype, n_embd), n_embd).ok());
    }
    DeviceBuffer dt = Up(table.data(), table.size()), out = Poisoned(ids.size() * n_embd);
    const int64_t n_ids = static_cast<int64_t>(ids.size());
    ASSERT_TRUE(gpu_->Embedding(out.View(DType::kF32, {n_ids, n_embd}), dt.View(dtype, {n_vocab, n_embd}), ids).ok());
    std::vector<float> want(ids.size() * n_embd);
    ASSERT_TRUE(cpu_->Embedding(TensorView(want.data(), DType::kF32, {n_ids, n_embd}),
                                TensorView(table.data(), dtype, {n_vocab, n_embd}), ids)
                    .ok());
    EXPECT_LT(RelL2(Down(out, want.size()), want), 1e-6) << DTypeName(dtype);
  }
  DeviceBuffer dt = Poisoned(n_vocab * n_embd), out = Poisoned(n_embd);
  const std::vector<int32_t> bad = {50};
  EXPECT_EQ(gpu_->Embedding(out.View(DType::kF32, {1, n_embd}), dt.View(DType::kF32, {n_vocab, n_embd}), bad).code(),
            absl::StatusCode::kInvalidArgument);
}

// Sequences (n_past, n_new) with disjoint blocks from a shuffled pool of n_blocks: a
// prefill chunk crossing the 256-key split boundary next to decode rows with long
// histories.
struct PagedBatch {
  PagedBatch(int64_t bs, int64_t n_blocks) {
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(9));
    const std::vector<std::pair<int64_t, int64_t>> shape = {{230, 37}, {600, 1}, {0, 5}, {31, 1}, {0, 70}, {100, 9}};
    int64_t next_block = 0;
    for (const auto& [past, n_new] : shape) {
      const int64_t need = (past + n_new + bs - 1) / bs;
      tables.emplace_back(perm.begin() + next_block, perm.begin() + next_block + need);
      next_block += need;
    }
    for (size_t i = 0; i < shape.size(); ++i) {
      seqs.push_back({rows, shape[i].second, shape[i].first, tables[i]});
      rows += shape[i].second;
    }
  }
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  int64_t rows = 0;
};

// Paged attention over shuffled block tables: a prefill chunk crossing the 256-key split
// boundary next to decode rows with long histories, GQA, two head sizes.
// Both kernel sets: the reference (every row through the split flash-decoding kernel) and
// the tuned one (prefill chunks of more than 8 rows through the tiled kernel, 16 rows a
// tile, for head_dim 64 and 128: here 37 rows = 16 + 16 + 5, 70 rows, 9 rows after 100).
TEST_F(CudaBackendTest, PagedAttentionMatchesTheCpuBackend) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  for (int b = 0; b < 2; ++b)
    for (int64_t head_dim : {8, 16, 64, 128}) {  // 8, 16: the tiny models (partial lanes).
      CudaBackend* gpu = b == 0 ? reference->get() : tuned->get();
      const char* kernels = b == 0 ? "reference" : "tuned";
      const int64_t n_heads = 8, n_kv = 2, bs = 16, n_blocks = 160, kv_dim = n_kv * head_dim;
      const PagedBatch batch(bs, n_blocks);
      const std::vector<AttentionSeq>& seqs = batch.seqs;
      const int64_t rows = batch.rows;
      // Caches with random history; the new rows' K/V are written by WriteKv on both.
      std::vector<float> kc = Random(n_blocks * bs * kv_dim, 10), vc = Random(n_blocks * bs * kv_dim, 11);
      const std::vector<float> k = Random(rows * kv_dim, 12), v = Random(rows * kv_dim, 13);
      const std::vector<float> q = Random(rows * n_heads * head_dim, 14);
      DeviceBuffer dkc = Up(kc), dvc = Up(vc), dk = Up(k), dv = Up(v), dq = Up(q);
      DeviceBuffer out = Poisoned(rows * n_heads * head_dim);
      KvCacheLayer gc = KvCacheLayer::Over(dkc.View(DType::kF32, {n_blocks, bs, n_kv, head_dim}),
                                           dvc.View(DType::kF32, {n_blocks, bs, n_kv, head_dim}));
      const AttentionParams params{
          .n_heads = n_heads, .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .window = 0, .sinks = {}};
      ASSERT_TRUE(
          gpu->WriteKv(gc, dk.View(DType::kF32, {rows, kv_dim}), dv.View(DType::kF32, {rows, kv_dim}), seqs).ok());
      ASSERT_TRUE(gpu->Attention(out.View(DType::kF32, {rows, n_heads * head_dim}),
                                 dq.View(DType::kF32, {rows, n_heads * head_dim}), gc, seqs, params)
                      .ok());
      ASSERT_TRUE(gpu->Synchronize().ok());
      KvCacheLayer cc = KvCacheLayer::Over(TensorView(kc.data(), DType::kF32, {n_blocks, bs, n_kv, head_dim}),
                                           TensorView(vc.data(), DType::kF32, {n_blocks, bs, n_kv, head_dim}));
      std::vector<float> kh = k, vh = v, qh = q, want(rows * n_heads * head_dim);
      ASSERT_TRUE(cpu_->WriteKv(cc, TensorView(kh.data(), DType::kF32, {rows, kv_dim}),
                                TensorView(vh.data(), DType::kF32, {rows, kv_dim}), seqs)
                      .ok());
      ASSERT_TRUE(cpu_->Attention(TensorView(want.data(), DType::kF32, {rows, n_heads * head_dim}),
                                  TensorView(qh.data(), DType::kF32, {rows, n_heads * head_dim}), cc, seqs, params)
                      .ok());
      EXPECT_LT(RelL2(Down(out, want.size()), want), 1e-4) << kernels << " head_dim " << head_dim;
      EXPECT_LT(RelL2(Down(dkc, kc.size()), kc), 1e-7) << kernels << " WriteKv, head_dim " << head_dim;
    }
}

// Sliding windows (shorter than a key tile, across the 256-key split boundary) and
// attention sinks (one far above the scores), alone and together: both kernel sets (the
// tiled prefill's key-tile skipping and masking included) against the CPU backend (itself
// checked against a double-precision reference). With a kept prefix (scheduler.kv_policy's
// sink + window: inside a block, across blocks, beside sinks), the blocks no row of a
// sequence sees are -1 in its table, as the scheduler frees them (a read would fault), and
// the tiled prefill jumps from the prefix's key tiles to the window's.
TEST_F(CudaBackendTest, WindowAndSinksMatchTheCpuBackend) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_heads = 8, n_kv = 2, bs = 16, n_blocks = 160;
  const std::vector<float> sink_values = {-1.0f, 0.5f, 3.0f, 40.0f, -30.0f, 0.0f, 1.0f, 2.0f};
  for (int b = 0; b < 2; ++b)
    for (int64_t head_dim : {64, 128})
      for (const auto& [window, with_sinks, kept] :
           {std::tuple{int64_t{20}, false, int64_t{0}}, std::tuple{int64_t{300}, true, int64_t{0}},
            std::tuple{int64_t{0}, true, int64_t{0}}, std::tuple{int64_t{7}, true, int64_t{0}},
            std::tuple{int64_t{64}, false, int64_t{4}}, std::tuple{int64_t{33}, false, int64_t{20}},
            std::tuple{int64_t{200}, true, int64_t{40}}, std::tuple{int64_t{20}, false, int64_t{300}}}) {
        CudaBackend* gpu = b == 0 ? reference->get() : tuned->get();
        SCOPED_TRACE(StrCat(b == 0 ? "reference" : "tuned", " head_dim ", head_dim, " window ", window, " sinks ",
                            with_sinks, " kept ", kept));
        const int64_t kv_dim = n_kv * head_dim;
        PagedBatch batch(bs, n_blocks);
        for (size_t i = 0; kept > 0 && i < batch.seqs.size(); ++i) {  // Free what no row sees.
          const int64_t first = batch.seqs[i].n_past + 1 - window;
          if (first <= kept) continue;
          for (int64_t blk = (kept + bs - 1) / bs; blk < first / bs; ++blk) batch.tables[i][blk] = -1;
          batch.seqs[i].block_table = batch.tables[i];
        }
        const int64_t rows = batch.rows;
        std::vector<float> kc = Random(n_blocks * bs * kv_dim, 10), vc = Random(n_blocks * bs * kv_dim, 11);
        const std::vector<float> q = Random(rows * n_heads * head_dim, 14);
        DeviceBuffer dkc = Up(kc), dvc = Up(vc), dq = Up(q), dsinks = Up(sink_values);
        DeviceBuffer out = Poisoned(rows * n_heads * head_dim);
        KvCacheLayer gc = KvCacheLayer::Over(dkc.View(DType::kF32, {n_blocks, bs, n_kv, head_dim}),
                                             dvc.View(DType::kF32, {n_blocks, bs, n_kv, head_dim}));
        std::vector<float> host_sinks = sink_values;
        AttentionParams params{.n_heads = n_heads,
                               .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)),
                               .window = window,
                               .kept_prefix = kept,
                               .sinks = with_sinks ? dsinks.View(DType::kF32, {n_heads}) : TensorView()};
        ASSERT_TRUE(gpu->Attention(out.View(DType::kF32, {rows, n_heads * head_dim}),
                                   dq.View(DType::kF32, {rows, n_heads * head_dim}), gc, batch.seqs, params)
                        .ok());
        ASSERT_TRUE(gpu->Synchronize().ok());
        KvCacheLayer cc = KvCacheLayer::Over(TensorView(kc.data(), DType::kF32, {n_blocks, bs, n_kv, head_dim}),
                                             TensorView(vc.data(), DType::kF32, {n_blocks, bs, n_kv, head_dim}));
        params.sinks = with_sinks ? TensorView(host_sinks.data(), DType::kF32, {n_heads}) : TensorView();
        std::vector<float> qh = q, want(rows * n_heads * head_dim);
        ASSERT_TRUE(cpu_->Attention(TensorView(want.data(), DType::kF32, {rows, n_heads * head_dim}),
                                    TensorView(qh.data(), DType::kF32, {rows, n_heads * head_dim}), cc, batch.seqs,
                                    params)
                        .ok());
        EXPECT_LT(RelL2(Down(out, want.size()), want), 1e-4);
      }
}

// The tensor-core prefill tiles (CASCADE_CUDA_PREFILL_ATTENTION=f16) over an f16 cache (its
// pairs staged as they are) and an f32 one (rounded to f16 as staged), against the CPU
// backend over the same cache (f32 math; 3e-3 covers q and the
// probabilities rounded to f16) and against the f32 tiles on the same device (3e-3): GQA
// groups of 1, 4, 6 (a block with two idle warps) and 8 (two blocks per KV head), head sizes
// 64 and 128, plain causal rows and windows with sinks and kept prefixes, over PagedBatch's
// mix of prefill chunks (through the tiles) and decode rows (the split kernel).
TEST_F(CudaBackendTest, TunedF16PrefillAttentionMatchesTheCpuBackend) {
  auto f16 =
      CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned, .prefill_attention = PrefillAttention::kF16});
  auto f32 =
      CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned, .prefill_attention = PrefillAttention::kF32});
  ASSERT_TRUE(f16.ok() && f32.ok());
  const int64_t bs = 16, n_blocks = 160;
  for (const DType cache_type : {DType::kF16, DType::kF32})
    for (const auto& [n_heads, n_kv] : {std::pair{int64_t{4}, int64_t{4}}, std::pair{int64_t{8}, int64_t{2}},
                                        std::pair{int64_t{12}, int64_t{2}}, std::pair{int64_t{16}, int64_t{2}}}) {
      for (int64_t head_dim : {64, 128}) {
        for (const auto& [window, with_sinks, kept] :
             {std::tuple{int64_t{0}, false, int64_t{0}}, std::tuple{int64_t{33}, true, int64_t{20}},
              std::tuple{int64_t{200}, true, int64_t{40}}}) {
          SCOPED_TRACE(StrCat(DTypeName(cache_type), " cache, ", n_heads, " heads over ", n_kv, ", head_dim ", head_dim,
                              " window ", window, " sinks ", with_sinks, " kept ", kept));
          const int64_t kv_dim = n_kv * head_dim;
          const PagedBatch batch(bs, n_blocks);
          const int64_t rows = batch.rows, n_cache = n_blocks * bs * kv_dim;
          // The caches' bytes: f16 values, or f32 ones (staged as f16 by the tiles).
          const int64_t elem = cache_type == DType::kF16 ? 2 : 4;
          std::vector<uint8_t> kc(n_cache * elem), vc(n_cache * elem);
          const std::vector<float> kf = Random(n_cache, 20), vf = Random(n_cache, 21);
          for (int64_t i = 0; i < n_cache; ++i) {
            if (cache_type == DType::kF16) {
              const uint16_t kh = F32ToF16(kf[i]), vh = F32ToF16(vf[i]);
              std::memcpy(kc.data() + 2 * i, &kh, 2);
              std::memcpy(vc.data() + 2 * i, &vh, 2);
            } else {
              std::memcpy(kc.data() + 4 * i, &kf[i], 4);
              std::memcpy(vc.data() + 4 * i, &vf[i], 4);
            }
          }
          const std::vector<float> q = Random(rows * n_heads * head_dim, 22);
          std::vector<float> sinks = Random(n_heads, 23, 2.0f);
          DeviceBuffer dkc = Up(kc.data(), kc.size()), dvc = Up(vc.data(), vc.size()), dq = Up(q), dsinks = Up(sinks);
          KvCacheLayer gc = KvCacheLayer::Over(dkc.View(cache_type, {n_blocks, bs, n_kv, head_dim}),
                                               dvc.View(cache_type, {n_blocks, bs, n_kv, head_dim}));
          AttentionParams params{.n_heads = n_heads,
                                 .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)),
                                 .window = window,
                                 .kept_prefix = kept,
                                 .sinks = with_sinks ? dsinks.View(DType::kF32, {n_heads}) : TensorView()};
          std::vector<float> got[2];
          for (int b = 0; b < 2; ++b) {
            DeviceBuffer out = Poisoned(rows * n_heads * head_dim);
            ASSERT_TRUE((b == 0 ? *f16 : *f32)
                            ->Attention(out.View(DType::kF32, {rows, n_heads * head_dim}),
                                        dq.View(DType::kF32, {rows, n_heads * head_dim}), gc, batch.seqs, params)
                            .ok());
            got[b] = Down(out, rows * n_heads * head_dim);
          }
          KvCacheLayer cc = KvCacheLayer::Over(TensorView(kc.data(), cache_type, {n_blocks, bs, n_kv, head_dim}),
                                               TensorView(vc.data(), cache_type, {n_blocks, bs, n_kv, head_dim}));
          params.sinks = with_sinks ? TensorView(sinks.data(), DType::kF32, {n_heads}) : TensorView();
          std::vector<float> qh = q, want(rows * n_heads * head_dim);
          ASSERT_TRUE(cpu_->Attention(TensorView(want.data(), DType::kF32, {rows, n_heads * head_dim}),
                                      TensorView(qh.data(), DType::kF32, {rows, n_heads * head_dim}), cc, batch.seqs,
                                      params)
                          .ok());
          EXPECT_LT(RelL2(got[0], want), 3e-3);
          EXPECT_LT(RelL2(got[1], want), 1e-4);  // The f32 tiles: only the sums' order differs.
          EXPECT_LT(RelL2(got[0], got[1]), 3e-3);
        }
      }
    }
}

// The FP8 KV cache (E4M3 codes times a scale per KV head, different for K and V, above
// and below 1): WriteKv stores the CPU's codes bit for bit, including saturated and
// subnormal ones, and attention over them matches the CPU backend's, for both kernel sets
// and the tiled prefill's head sizes.
TEST_F(CudaBackendTest, Fp8KvCacheMatchesTheCpuBackend) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  for (int b = 0; b < 2; ++b)
    for (int64_t head_dim : {64, 128}) {
      CudaBackend* gpu = b == 0 ? reference->get() : tuned->get();
      SCOPED_TRACE(StrCat(b == 0 ? "reference" : "tuned", " head_dim ", head_dim));
      const int64_t n_heads = 8, n_kv = 2, bs = 16, n_blocks = 160, kv_dim = n_kv * head_dim;
      const PagedBatch batch(bs, n_blocks);
      const int64_t rows = batch.rows, cache_bytes = n_blocks * bs * kv_dim;
      std::vector<float> scales = {0.5f, 3.0f, 0.02f, 1.0f};  // K's of the two heads, then V's.
      // Values spanning E4M3's range after scaling: some saturate (> 448 x scale), some are subnormal.
      std::vector<float> k = Random(rows * kv_dim, 12, 4.0f), v = Random(rows * kv_dim, 13, 4.0f);
      k[0] = 1e4f;
      v[1] = -1e4f;
      k[2] = 1e-4f;
      const std::vector<float> q = Random(rows * n_heads * head_dim, 14);
      std::vector<uint8_t> kc_host(cache_bytes, 0), vc_host(cache_bytes, 0);
      KvCacheLayer cc = KvCacheLayer::Over(TensorView(kc_host.data(), DType::kF8_E4M3, {n_blocks, bs, n_kv, head_dim}),
                                           TensorView(vc_host.data(), DType::kF8_E4M3, {n_blocks, bs, n_kv, head_dim}),
                                           TensorView(scales.data(), DType::kF32, {n_kv}),
                                           TensorView(scales.data() + n_kv, DType::kF32, {n_kv}));
      // History: every sequence's past positions written as one earlier step, on the CPU.
      for (const AttentionSeq& s : batch.seqs) {
        if (s.n_past == 0) continue;
        const std::vector<float> hk = Random(s.n_past * kv_dim, 20 + s.n_past), hv = Random(s.n_past * kv_dim, 21);
        const AttentionSeq past{0, s.n_past, 0, s.block_table};
        ASSERT_TRUE(cpu_->WriteKv(cc, TensorView(const_cast<float*>(hk.data()), DType::kF32, {s.n_past, kv_dim}),
                                  TensorView(const_cast<float*>(hv.data()), DType::kF32, {s.n_past, kv_dim}),
                                  {&past, 1})
                        .ok());
      }
      DeviceBuffer dkc = Up(kc_host.data(), cache_bytes), dvc = Up(vc_host.data(), cache_bytes), dscales = Up(scales),
                   dk = Up(k), dv = Up(v), dq = Up(q);
      DeviceBuffer out = Poisoned(rows * n_heads * head_dim);
      auto* dev_scales = static_cast<float*>(dscales.View(DType::kF32, {2 * n_kv}).data);
      KvCacheLayer gc = KvCacheLayer::Over(dkc.View(DType::kF8_E4M3, {n_blocks, bs, n_kv, head_dim}),
                                           dvc.View(DType::kF8_E4M3, {n_blocks, bs, n_kv, head_dim}),
                                           TensorView(dev_scales, DType::kF32, {n_kv}, gpu->device()),
                                           TensorView(dev_scales + n_kv, DType::kF32, {n_kv}, gpu->device()));
      const AttentionParams params{
          .n_heads = n_heads, .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .window = 0, .sinks = {}};
      ASSERT_TRUE(
          gpu->WriteKv(gc, dk.View(DType::kF32, {rows, kv_dim}), dv.View(DType::kF32, {rows, kv_dim}), batch.seqs)
              .ok());
      ASSERT_TRUE(gpu->Attention(out.View(DType::kF32, {rows, n_heads * head_dim}),
                                 dq.View(DType::kF32, {rows, n_heads * head_dim}), gc, batch.seqs, params)
                      .ok());
      ASSERT_TRUE(gpu->Synchronize().ok());
      std::vector<float> kh = k, vh = v, qh = q, want(rows * n_heads * head_dim);
      ASSERT_TRUE(cpu_->WriteKv(cc, TensorView(kh.data(), DType::kF32, {rows, kv_dim}),
                                TensorView(vh.data(), DType::kF32, {rows, kv_dim}), batch.seqs)
                      .ok());
      ASSERT_TRUE(cpu_->Attention(TensorView(want.data(), DType::kF32, {rows, n_heads * head_dim}),
                                  TensorView(qh.data(), DType::kF32, {rows, n_heads * head_dim}), cc, batch.seqs,
                                  params)
                      .ok());
      std::vector<uint8_t> got_k(cache_bytes), got_v(cache_bytes);
      ASSERT_TRUE(dkc.Download(got_k.data(), cache_bytes).ok());
      ASSERT_TRUE(dvc.Download(got_v.data(), cache_bytes).ok());
      EXPECT_TRUE(got_k == kc_host) << "K codes differ from the CPU's";
      EXPECT_TRUE(got_v == vc_host) << "V codes differ from the CPU's";
      EXPECT_LT(RelL2(Down(out, want.size()), want), 1e-4);
    }
}

TEST_F(CudaBackendTest, ArgmaxPicksTheFirstLargest) {
  const int64_t n_rows = 3, n_vocab = 49152;
  std::vector<float> logits = Random(n_rows * n_vocab, 15);
  logits[0 * n_vocab + 12345] = 50.0f;
  logits[1 * n_vocab + 49151] = 50.0f;
  logits[2 * n_vocab + 7] = logits[2 * n_vocab + 9] = 50.0f;  // A tie: the first wins.
  DeviceBuffer d = Up(logits);
  std::vector<int32_t> got(n_rows);
  ASSERT_TRUE(gpu_->Argmax(got, d.View(DType::kF32, {n_rows, n_vocab})).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{12345, 49151, 7}));
}

// What kernels/sample_row.h says a row draws, from the double-precision law of
// tests/sampling_reference.h. Sets `near_boundary` when float rounding could flip it.
SampleResult ReferenceSample(std::span<const float> z, const SampleRow& r, bool* near_boundary) {
  const testing::RefLaw law = testing::RefSampleLaw(
      z, {.temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p, .min_p = r.min_p}, {});
  *near_boundary |= law.near_boundary;
  if (r.temperature <= 0) return {law.argmax, r.draft == law.argmax};
  if (r.draft >= 0) {
    const double p = law.p[r.draft];
    *near_boundary |= std::abs(r.u_accept - p) < 1e-5;
    if (r.u_accept < p) return {r.draft, 1};
  }
  return {testing::RefWalkVocab(law, r.u_sample, r.draft, near_boundary), 0};
}

TEST_F(CudaBackendTest, SampleFollowsTheDoublePrecisionReference) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float temperatures[] = {0.0f, 0.7f, 1.0f, 1.5f};
  const int32_t top_ks[] = {0, 1, 40, 500};
  const float top_ps[] = {1.0f, 0.9f, 0.5f};
  const float min_ps[] = {0.0f, 0.05f};
  for (int64_t n_vocab : {1000, 49152}) {
    const int64_t n_rows = 96;
    std::vector<float> logits = Random(n_rows * n_vocab, static_cast<uint32_t>(n_vocab));
    for (float& x : logits) x *= 6.0f;  // Peaked enough that drafts are sometimes accepted.
    std::vector<SampleRow> rows(n_rows);
    for (int64_t r = 0; r < n_rows; ++r) {
      SampleRow& row = rows[r];
      row.temperature = temperatures[r % 4];
      row.top_k = top_ks[(r / 4) % 4];
      row.top_p = top_ps[(r / 16) % 3];
      row.min_p = min_ps[(r / 48) % 2];
      const std::span<const float> z(logits.data() + r * n_vocab, n_vocab);
      const int32_t argmax = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
      row.draft = r % 3 == 0 ? -1 : r % 3 == 1 ? argmax : static_cast<int32_t>(rng() % n_vocab);
      row.u_accept = u(rng);
      row.u_sample = u(rng);
    }
    DeviceBuffer d = Up(logits);
    std::vector<SampleResult> got(n_rows);
    ASSERT_TRUE(gpu_->Sample(got, d.View(DType::kF32, {n_rows, n_vocab}), rows).ok());
    int compared = 0, accepted = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      bool near = false;
      const SampleResult want =
          ReferenceSample({logits.data() + r * n_vocab, static_cast<size_t>(n_vocab)}, rows[r], &near);
      if (near) continue;
      ++compared;
      accepted += want.accepted;
      EXPECT_EQ(got[r].id, want.id) << "row " << r << " vocab " << n_vocab;
      EXPECT_EQ(got[r].accepted, want.accepted) << "row " << r << " vocab " << n_vocab;
    }
    EXPECT_GE(compared, n_rows * 9 / 10) << "too many rows near a boundary to be a test";
    EXPECT_GT(accepted, 0) << "no draft accepted: the verify path went unchecked";
    EXPECT_LT(accepted, compared) << "every row accepted: the sampling path went unchecked";
  }
  std::vector<SampleResult> one(1);
  std::vector<SampleRow> bad(1);
  bad[0].draft = 5000;
  DeviceBuffer small = Up(std::vector<float>(100, 0.0f));
  EXPECT_STATUS_CODE(gpu_->Sample(one, small.View(DType::kF32, {1, 100}), bad), kInvalidArgument);
}

// A graph step's mechanics (CudaBackend::BeginGraphStep): the first step of a shape is
// captured; the next replays it with its own metadata (other ids, staged afresh); a step
// whose copy out goes to pageable memory cannot be captured and runs eagerly. Each gives the
// rows a plain lookup gives.
TEST_F(CudaBackendTest, GraphStepsReplayWithTheirOwnMetadata) {
  const int64_t n_vocab = 64, n_embd = 32;
  const std::vector<float> table = Random(n_vocab * n_embd, 21);
  DeviceBuffer dev_table = Up(table);
  DeviceBuffer rows = Poisoned(3 * n_embd);
  auto pinned = gpu_->AllocateStaging(3 * n_embd * sizeof(float));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::vector<float> pageable(3 * n_embd);
  // One step: rows = table[ids], copied to `host`, through the three passes as needed.
  const auto step = [&](const std::vector<int32_t>& ids, float* host) {
    for (GraphPass pass : {GraphPass::kDry, GraphPass::kCapture, GraphPass::kEager}) {
      ASSERT_TRUE(gpu_->BeginGraphStep(pass).ok());
      ASSERT_TRUE(
          gpu_->Embedding(rows.View(DType::kF32, {3, n_embd}), dev_table.View(DType::kF32, {n_vocab, n_embd}), ids)
              .ok());
      ASSERT_TRUE(gpu_->CopyOut(host, rows.data(), 3 * n_embd * sizeof(float)).ok());
      absl::StatusOr<bool> ran = gpu_->EndGraphStep();
      ASSERT_TRUE(ran.ok()) << ran.status();
      if (*ran) break;
    }
    ASSERT_TRUE(gpu_->Synchronize().ok());
    for (int r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < n_embd; ++c) ASSERT_EQ(host[r * n_embd + c], table[ids[r] * n_embd + c]) << r;
    }
  };
  step({1, 2, 3}, (*pinned)->f32());
  EXPECT_EQ(gpu_->graphs_captured(), 1);
  EXPECT_EQ(gpu_->graphs_launched(), 1);
  step({60, 0, 7}, (*pinned)->f32());  // A replay: the new ids reach the graph's copy.
  EXPECT_EQ(gpu_->graphs_captured(), 1);
  EXPECT_EQ(gpu_->graphs_launched(), 2);
  step({5, 5, 9}, pageable.data());  // Not capturable: run eagerly.
  EXPECT_EQ(gpu_->graphs_captured(), 1);
  EXPECT_EQ(gpu_->graphs_launched(), 2);
  std::vector<SampleResult> one(1);
  ASSERT_TRUE(gpu_->BeginGraphStep(GraphPass::kDry).ok());
  EXPECT_STATUS_CODE(gpu_->Sample(one, dev_table.View(DType::kF32, {1, n_vocab}), std::vector<SampleRow>(1)),
                     kFailedPrecondition);
  gpu_->AbortGraphStep();
}

// The routing of a MoE layer in double precision, written here from the models' rule: the
// softmax over every expert, the top k by logit (the lower id first on ties), their
// probabilities, renormalised over the k when `norm`.
std::vector<std::pair<int64_t, double>> RouteReference(const float* logits, int64_t n_experts, int64_t k, bool norm) {
  double mx = -INFINITY, z = 0;
  for (int64_t e = 0; e < n_experts; ++e) mx = std::max(mx, double(logits[e]));
  for (int64_t e = 0; e < n_experts; ++e) z += std::exp(double(logits[e]) - mx);
  std::vector<int64_t> order(n_experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  std::vector<std::pair<int64_t, double>> chosen;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    chosen.emplace_back(order[i], std::exp(double(logits[order[i]]) - mx) / z);
    sum += chosen.back().second;
  }
  if (norm) {
    for (auto& c : chosen) c.second /= sum;
  }
  return chosen;
}

// A MoE layer's routed experts in one device call (Backend::RoutedExperts, tuned kernels)
// against a double-precision reference from the decoded weights: acc += each token's held
// experts' silu(gate x) * (up x) through down, weighted by the routing above. The device
// quantizes x and the products to 8 bits, as the quantized GEMV does: 3e-2 relative L2 on
// what the experts add; float experts (BF16, FP8 with 128 x 128 blocks, F16) take the f32
// activations as they are: 1e-4, or 3e-2 where a quantized down follows. The counts of
// chosen experts are exact. Cases: Q8_0 experts; the
// Q4_K_M mix (Q4_K gate/up, Q6_K down) without renormalisation; GPTQ's I4_G128; gpt-oss's
// MXFP4; Q5_K_M's and Q3_K_M's mixes (Q5_K / Q6_K, Q3_K / Q5_K); BF16; FP8 (Qwen3-FP8's
// form); F16 gate/up with a Q8_0 down; expert parallelism (the
// rank holds experts 8..15 of 16: the others' tokens are counted but not computed);
// act-order GPTQ (I4_G128 reading its inputs in a random order per expert and matrix,
// gate and up sharing one, as GPTQ's orders do; and each its own, under expert
// parallelism); gpt-oss's expert biases and clamped SwiGLU (MXFP4 and BF16 experts; a low
// limit so that many values clamp); 1, 3, 32 and 600 tokens (two passes of kMoePassTokens, every expert with
// many rows), with a tie between two logits of the first token; and each again with the
// prefill passes (32, 600 tokens) of the block-type experts by the int8 tiles (moe_mma.cu),
// within the same bound.
TEST_F(CudaBackendTest, TunedRoutedExpertsMatchDoublePrecision) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  constexpr int64_t n_embd = 256, n_ff = 256, n_experts = 16, k = 4;
  enum Orders { kNone, kShared, kOwn };  // Act-order GPTQ: gate/up share an order, or each its own.
  struct Case {
    DType gate_up, down;
    int64_t expert_begin, n_held;
    bool norm;
    Orders orders = kNone;
    bool gpt_oss = false;  // Biases on gate, up and down, and the clamped SwiGLU.
  };
  const Case cases[] = {{DType::kQ8_0, DType::kQ8_0, 0, 16, true},
                        {DType::kQ4_K, DType::kQ6_K, 0, 16, false},
                        {DType::kI4_G128, DType::kI4_G128, 0, 16, true},
                        {DType::kMXFP4, DType::kMXFP4, 0, 16, true},
                        {DType::kQ5_K, DType::kQ6_K, 0, 16, true},
                        {DType::kQ3_K, DType::kQ5_K, 0, 16, false},
                        {DType::kBF16, DType::kBF16, 0, 16, true},
                        {DType::kF8_E4M3_B128, DType::kF8_E4M3_B128, 0, 16, true},
                        {DType::kF16, DType::kQ8_0, 0, 16, false},
                        {DType::kQ8_0, DType::kQ8_0, 8, 8, true},
                        {DType::kI4_G128, DType::kI4_G128, 0, 16, true, kShared},
                        {DType::kI4_G128, DType::kI4_G128, 8, 8, false, kOwn},
                        {DType::kMXFP4, DType::kMXFP4, 0, 16, true, kNone, true},
                        {DType::kBF16, DType::kBF16, 8, 8, true, kNone, true}};
  constexpr float kAlpha = 1.702f, kLimit = 1.5f;  // gpt-oss's alpha; a limit many values pass.
  for (const Case& c : cases) {
    SCOPED_TRACE(StrCat(DTypeName(c.gate_up), "/", DTypeName(c.down), " experts from ", c.expert_begin,
                        c.orders == kNone     ? ""
                        : c.orders == kShared ? ", act-order"
                                              : ", act-order, own orders",
                        c.gpt_oss ? ", gpt-oss's biases and activation" : ""));
    const auto is_float = [](DType t) { return t == DType::kF16 || t == DType::kBF16 || t == DType::kF8_E4M3_B128; };
    const auto weights = [&](DType type, int64_t rows, int64_t cols, uint32_t seed, std::vector<float>* decoded) {
      return type == DType::kQ8_0 || is_float(type) ? RandomWeights(type, rows, cols, seed, decoded)
                                                    : RandomBlocks(type, rows, cols, seed, decoded);
    };
    const bool float_experts = is_float(c.gate_up) && is_float(c.down);
    std::vector<std::vector<float>> gu_values(c.n_held), down_values(c.n_held);
    // Act-order: column j of a matrix multiplies input order[j] (a random permutation per
    // expert and matrix; up's is gate's with kShared); the natural order otherwise.
    std::vector<std::array<std::vector<int32_t>, 3>> orders(c.n_held);
    std::vector<std::unique_ptr<PreparedWeight>> prepared;
    std::vector<Backend::ExpertWeights> held;
    // gpt-oss: per expert the gate, up and down biases, in device memory.
    std::vector<std::array<std::vector<float>, 3>> biases(c.n_held);
    std::vector<DeviceBuffer> bias_buffers;
    for (int64_t e = 0; e < c.n_held; ++e) {
      std::vector<uint8_t> gu = weights(c.gate_up, 2 * n_ff, n_embd, 100 + e, &gu_values[e]);
      std::vector<uint8_t> dn = weights(c.down, n_embd, n_ff, 200 + e, &down_values[e]);
      auto g = (*tuned)->PrepareWeight(TensorView(gu.data(), c.gate_up, {2 * n_ff, n_embd}));
      auto d = (*tuned)->PrepareWeight(TensorView(dn.data(), c.down, {n_embd, n_ff}));
      ASSERT_TRUE(g.ok() && d.ok());
      std::mt19937 rng(300 + e);
      for (int i = 0; i < 3; ++i) {
        orders[e][i].resize(i < 2 ? n_embd : n_ff);
        std::iota(orders[e][i].begin(), orders[e][i].end(), 0);
        if (c.orders != kNone) std::shuffle(orders[e][i].begin(), orders[e][i].end(), rng);
      }
      if (c.orders == kShared) orders[e][1] = orders[e][0];
      Backend::ExpertWeights w{.gate = g->get(), .gate_row0 = 0, .up = g->get(), .up_row0 = n_ff, .down = d->get()};
      if (c.orders != kNone) {
        w.gate_order = orders[e][0];
        w.up_order = orders[e][1];
        w.down_order = orders[e][2];
      }
      for (int i = 0; i < 3; ++i) {
        const int64_t len = i < 2 ? n_ff : n_embd;
        biases[e][i] = c.gpt_oss ? Random(len, 400 + 3 * e + i) : std::vector<float>(len, 0.0f);
      }
      if (c.gpt_oss) {
        TensorView* views[] = {&w.gate_bias, &w.up_bias, &w.down_bias};
        for (int i = 0; i < 3; ++i) {
          bias_buffers.push_back(Up(biases[e][i]));
          *views[i] = bias_buffers.back().View(DType::kF32, {static_cast<int64_t>(biases[e][i].size())});
        }
      }
      held.push_back(w);
      prepared.push_back(*std::move(g));
      prepared.push_back(*std::move(d));
    }
    const Backend::ExpertActivation activation =
        c.gpt_oss ? Backend::ExpertActivation{.swiglu_alpha = kAlpha, .swiglu_limit = kLimit}
                  : Backend::ExpertActivation{};
    auto experts = (*tuned)->PrepareExperts(held, n_ff, activation);
    ASSERT_TRUE(experts.ok()) << experts.status();
    // Prefill passes also by the int8 tiles (moe_mma.cu): 32 and 600 tokens.
    for (const QuantGemm gemm : {QuantGemm::kBf16, QuantGemm::kInt8}) {
      ASSERT_TRUE((*tuned)->set_quant_gemm(gemm).ok());
      for (int64_t n : gemm == QuantGemm::kBf16 ? std::vector<int64_t>{1, 3, 32, 600} : std::vector<int64_t>{32, 600}) {
        SCOPED_TRACE(StrCat(n, " tokens, ", QuantGemmName(gemm), " GEMM"));
        ASSERT_TRUE((*tuned)->RoutesExperts(n));
        const std::vector<float> x = Random(n * n_embd, 7 + n), acc0 = Random(n * n_embd, 9 + n);
        std::vector<float> logits = Random(n * n_experts, 8 + n, 2.0f);
        logits[5] = logits[3] = std::max(logits[3], logits[5]) + 1.0f;  // A tie among the chosen.
        DeviceBuffer dx = Up(x), dl = Up(logits), dacc = Up(acc0);
        const std::vector<int32_t> zeros(n_experts, 0);
        DeviceBuffer dload = Up(zeros.data(), zeros.size() * sizeof(int32_t));
        ASSERT_TRUE((*tuned)
                        ->RoutedExperts(
                            dacc.View(DType::kF32, {n, n_embd}), dx.View(DType::kF32, {n, n_embd}),
                            dl.View(DType::kF32, {n, n_experts}), **experts,
                            {.n_experts = n_experts, .top_k = k, .expert_begin = c.expert_begin, .norm_topk = c.norm},
                            dload.data())
                        .ok());
        ASSERT_TRUE((*tuned)->Synchronize().ok());
        std::vector<float> got(n * n_embd);
        ASSERT_TRUE(dacc.Download(got.data(), got.size() * sizeof(float)).ok());
        std::vector<int32_t> load(n_experts);
        ASSERT_TRUE(dload.Download(load.data(), load.size() * sizeof(int32_t)).ok());
        std::vector<double> want(n * n_embd, 0.0);
        std::vector<int32_t> want_load(n_experts, 0);
        for (int64_t t = 0; t < n; ++t) {
          for (const auto& [e, w] : RouteReference(logits.data() + t * n_experts, n_experts, k, c.norm)) {
            ++want_load[e];
            const int64_t h = e - c.expert_begin;
            if (h < 0 || h >= c.n_held) continue;
            std::vector<double> act(n_ff);
            for (int64_t f = 0; f < n_ff; ++f) {
              double g = biases[h][0][f], u = biases[h][1][f];
              for (int64_t i = 0; i < n_embd; ++i) {
                g += double(gu_values[h][f * n_embd + i]) * x[t * n_embd + orders[h][0][i]];
                u += double(gu_values[h][(n_ff + f) * n_embd + i]) * x[t * n_embd + orders[h][1][i]];
              }
              if (c.gpt_oss) {  // transformers' GptOssExperts.
                g = std::min(g, double(kLimit));
                u = std::clamp(u, -double(kLimit), double(kLimit));
                act[f] = (u + 1) * g / (1 + std::exp(-double(kAlpha) * g));
              } else {
                act[f] = g / (1 + std::exp(-g)) * u;
              }
            }
            for (int64_t o = 0; o < n_embd; ++o) {
              double y = biases[h][2][o];
              for (int64_t f = 0; f < n_ff; ++f) y += double(down_values[h][o * n_ff + f]) * act[orders[h][2][f]];
              want[t * n_embd + o] += w * y;
            }
          }
        }
        for (size_t i = 0; i < got.size(); ++i) got[i] -= acc0[i];  // What the experts added.
        EXPECT_LT(RelL2(got, want), float_experts ? 1e-4 : 3e-2);
        EXPECT_EQ(load, want_load);
      }
    }
  }
}

// Input orders PrepareExperts cannot take: one that is not a permutation of the matrix's
// columns (InvalidArgument, before any kernel could read past a row), and one on a float
// matrix (Unimplemented: only the integer GPTQ types gather; the layer then routes on the host).
TEST_F(CudaBackendTest, PrepareExpertsRefusesBadInputOrders) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  constexpr int64_t n = 128;
  std::vector<float> decoded;
  std::vector<uint8_t> q = RandomBlocks(DType::kI4_G128, n, n, 1, &decoded);
  std::vector<uint8_t> f = RandomWeights(DType::kBF16, n, n, 2, &decoded);
  auto wq = (*tuned)->PrepareWeight(TensorView(q.data(), DType::kI4_G128, {n, n}));
  auto wf = (*tuned)->PrepareWeight(TensorView(f.data(), DType::kBF16, {n, n}));
  ASSERT_TRUE(wq.ok() && wf.ok());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int32_t> repeated = order, short_order(order.begin(), order.end() - 1);
  repeated[7] = 3;
  for (const std::vector<int32_t>* bad : {&repeated, &short_order}) {
    const Backend::ExpertWeights e{.gate = wq->get(), .up = wq->get(), .down = wq->get(), .down_order = *bad};
    const auto got = (*tuned)->PrepareExperts(std::span(&e, 1), n, {});
    EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  }
  const Backend::ExpertWeights e{.gate = wf->get(), .up = wf->get(), .down = wf->get(), .gate_order = order};
  const auto got = (*tuned)->PrepareExperts(std::span(&e, 1), n, {});
  EXPECT_TRUE(absl::IsUnimplemented(got.status())) << got.status();
}

// The tuned kernels' fused RoPE + KV write (one launch) gives the bits of the reference
// path's Rope, Rope and WriteKv: q, k and both caches, for f32, f16, q8_0 and fp8 caches and both
// rotation styles, over sequences with history and block tables out of order; and with
// Qwen3's head norms first (the reference path's RmsNorm over each head of q and of k).
TEST_F(CudaBackendTest, FusedRopeWriteKvGivesTheBitsOfTheThreeOps) {
  auto tuned = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kTuned});
  auto reference = CudaBackend::Create({.device = 0, .kernels = CudaKernels::kReference});
  ASSERT_TRUE(tuned.ok() && reference.ok());
  const int64_t n_heads = 8, n_kv = 2, head_dim = 64, bs = 16, n_blocks = 12, kv_dim = n_kv * head_dim;
  const std::vector<std::vector<int32_t>> tables = {{3, 0}, {7}, {11, 2, 5}};
  const std::vector<AttentionSeq> seqs = {{0, 5, 0, tables[0]}, {5, 1, 9, tables[1]}, {6, 3, 40, tables[2]}};
  const int64_t rows = 9;
  std::vector<int32_t> positions;
  for (const AttentionSeq& s : seqs) {
    for (int64_t i = 0; i < s.n_new; ++i) positions.push_back(static_cast<int32_t>(s.n_past + i));
  }
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  const std::vector<float> q = Random(rows * n_heads * head_dim, 31), k = Random(rows * kv_dim, 32),
                           v = Random(rows * kv_dim, 33);
  const std::vector<float> q_norm = Random(head_dim, 34), k_norm = Random(head_dim, 35);
  DeviceBuffer dq_norm = Up(q_norm), dk_norm = Up(k_norm);
  std::vector<uint8_t> plain_q;  // q as the un-normed run leaves it, for the first cache type.
  for (const bool normed : {false, true}) {
    for (const DType kv_dtype : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kF8_E4M3}) {
      for (const RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
        SCOPED_TRACE(StrCat(DTypeName(kv_dtype), style == RopeStyle::kAdjacentPairs ? " adjacent" : " halves",
                            normed ? ", head norms" : ""));
        const Backend::HeadNorms norms = normed ? Backend::HeadNorms{.q = dq_norm.View(DType::kF32, {head_dim}),
                                                                     .k = dk_norm.View(DType::kF32, {head_dim}),
                                                                     .eps = 1e-6f}
                                                : Backend::HeadNorms{};
        const size_t cache_bytes = RowBytes(kv_dtype, n_blocks * bs * kv_dim);
        std::vector<uint8_t> got[2][4];  // Per backend: q, k, K cache, V cache bytes.
        for (int b = 0; b < 2; ++b) {
          CudaBackend& gpu = b == 0 ? **reference : **tuned;
          const std::vector<uint8_t> zeros(cache_bytes, 0);
          DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), kc = Up(zeros.data(), cache_bytes),
                       vc = Up(zeros.data(), cache_bytes);
          DeviceBuffer scales = Up(std::vector<float>{0.5f, 2.0f, 0.25f, 1.0f});  // FP8: K's, then V's.
          auto* s = static_cast<float*>(scales.View(DType::kF32, {2 * n_kv}).data);
          const bool fp8 = kv_dtype == DType::kF8_E4M3;
          KvCacheLayer cache = KvCacheLayer::Over(
              kc.View(kv_dtype, {n_blocks, bs, n_kv, head_dim}), vc.View(kv_dtype, {n_blocks, bs, n_kv, head_dim}),
              fp8 ? TensorView(s, DType::kF32, {n_kv}, gpu.device()) : TensorView(),
              fp8 ? TensorView(s + n_kv, DType::kF32, {n_kv}, gpu.device()) : TensorView());
          const RopeParams rope{style, head_dim, inv_freq};
          ASSERT_TRUE(gpu.RopeWriteKv(dq.View(DType::kF32, {rows, n_heads * head_dim}),
                                      dk.View(DType::kF32, {rows, kv_dim}), dv.View(DType::kF32, {rows, kv_dim}),
                                      positions, rope, norms, cache, seqs)
                          .ok());
          ASSERT_TRUE(gpu.Synchronize().ok());
          const DeviceBuffer* bufs[] = {&dq, &dk, &kc, &vc};
          const size_t sizes[] = {q.size() * 4, k.size() * 4, cache_bytes, cache_bytes};
          for (int i = 0; i < 4; ++i) {
            got[b][i].resize(sizes[i]);
            ASSERT_TRUE(bufs[i]->Download(got[b][i].data(), sizes[i]).ok());
          }
        }
        const char* names[] = {"q", "k", "K cache", "V cache"};
        for (int i = 0; i < 4; ++i) EXPECT_TRUE(got[0][i] == got[1][i]) << names[i] << " differs";
        if (kv_dtype == DType::kF32 && style == RopeStyle::kAdjacentPairs) {
          if (normed) {
            EXPECT_FALSE(got[1][0] == plain_q) << "the head norms left q as it was";
          } else {
            plain_q = got[1][0];
          }
        }
        EXPECT_FALSE(got[0][1] == std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(k.data()),
                                                       reinterpret_cast<const uint8_t*>(k.data()) + k.size() * 4))
            << "k was not rotated";
      }
    }
  }
}

// GatherColumns (act-order GPTQ's input reordering): the columns in the given order,
// exactly, as the CPU backend gathers them; a column outside the input is refused.
TEST_F(CudaBackendTest, GatherColumnsMatchesTheCpu) {
  const int64_t rows = 5, d = 300, n = 256;
  const std::vector<float> x = Random(rows * d, 71);
  std::vector<int32_t> cols(n);
  for (int64_t j = 0; j < n; ++j) cols[j] = static_cast<int32_t>((j * 37 + 11) % d);
  DeviceBuffer dx = Up(x), out = Poisoned(rows * n);
  ASSERT_TRUE(gpu_->GatherColumns(out.View(DType::kF32, {rows, n}), dx.View(DType::kF32, {rows, d}), cols).ok());
  std::vector<float> want(rows * n);
  std::vector<float> xh = x;
  ASSERT_TRUE(cpu_->GatherColumns(TensorView(want.data(), DType::kF32, {rows, n}),
                                  TensorView(xh.data(), DType::kF32, {rows, d}), cols)
                  .ok());
  EXPECT_EQ(Down(out, rows * n), want);
  cols[3] = static_cast<int32_t>(d);
  EXPECT_FALSE(gpu_->GatherColumns(out.View(DType::kF32, {rows, n}), dx.View(DType::kF32, {rows, d}), cols).ok());
}

}  // namespace
}  // namespace cascade::kernels
