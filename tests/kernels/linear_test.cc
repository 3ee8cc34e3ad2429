// Tests of kernels/cpu/linear.h against a naive double-precision matmul over weights
// dequantized by a naive dequantizer written here from the format description (not the
// kernels' code), for every weight dtype x every ISA path this CPU has x several token
// counts, with sentinels around the output; Q8_0/Q4_0/Q4_1 also through the load-time
// packed layout (packed_weight.h, `LinearPacked`) on every ISA path. To add a case, extend
// `Cases()` (or `PackedCases()`); each case prints itself on failure.
//
// Error bounds, element by element (out[t][r] vs the exact sum over k of w[r][k] x[t][k]):
//  * F32/F16/BF16: |err| <= 1e-5 * sum_k |w x| + 1e-6 — only f32 rounding in the
//    accumulation (the F16/BF16 reference uses the same stored bits, decoded exactly).
//  * Quantized weights: the weights are used exactly (same f16 scales), so the error is the
//    activation quantization: x is rounded to int8 with step h = amax(block)/127, i.e.
//    |x - x_hat| <= h/2 per element (block = 32 for Q8_0/Q4_0/Q4_1, 256 for Q4_K/Q6_K), so
//    |err| <= sum_k |w[r][k]| * h(block of k)/2, plus the f32 term above. This bound is
//    rigorous; the relative L2 error it implies is checked too (< 2e-2, see `RunCase`).
#include "kernels/cpu/linear.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "tests/test_support.h"

namespace cascade::kernels::cpu {
namespace {

// ---- Naive dequantizers, from the format description -------------------------------------

float H(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return F16ToF32(v);
}

// Decodes one row of `n` elements of `dtype` stored at `p`.
std::vector<double> NaiveDequant(DType dtype, const uint8_t* p, int64_t n) {
  std::vector<double> y(n);
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        y[i] = f;
      }
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) y[i] = H(p + 2 * i);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(p[2 * i] | (p[2 * i + 1] << 8)) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        y[i] = f;
      }
      break;
    case DType::kQ8_0:  // 34 bytes: f16 d, int8 q[32]; x = d q.
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        for (int j = 0; j < 32; ++j) y[32 * b + j] = H(p) * static_cast<int8_t>(p[2 + j]);
      }
      break;
    case DType::kQ4_0:  // 18 bytes: f16 d, 16 bytes; byte j: elem j low nibble, j+16 high.
      for (int64_t b = 0; b < n / 32; ++b, p += 18) {
        for (int j = 0; j < 16; ++j) {
          y[32 * b + j] = H(p) * ((p[2 + j] & 15) - 8);
          y[32 * b + j + 16] = H(p) * ((p[2 + j] >> 4) - 8);
        }
      }
      break;
    case DType::kQ4_1:  // 20 bytes: f16 d, f16 m, 16 bytes; x = d q + m.
      for (int64_t b = 0; b < n / 32; ++b, p += 20) {
        for (int j = 0; j < 16; ++j) {
          y[32 * b + j] = H(p) * (p[4 + j] & 15) + H(p + 2);
          y[32 * b + j + 16] = H(p) * (p[4 + j] >> 4) + H(p + 2);
        }
      }
      break;
    case DType::kQ4_K:  // 144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 quant bytes.
      for (int64_t b = 0; b < n / 256; ++b, p += 144) {
        const uint8_t* s = p + 4;
        for (int j = 0; j < 8; ++j) {
          int sc, mn;
          if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
          } else {
            sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
            mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
          }
          // Sub-block j: bytes 32*(j/2).. of qs, low nibble for even j, high for odd.
          for (int l = 0; l < 32; ++l) {
            const uint8_t byte = p[16 + 32 * (j / 2) + l];
            const int q = (j % 2 == 0) ? (byte & 15) : (byte >> 4);
            y[256 * b + 32 * j + l] = H(p) * sc * q - H(p + 2) * mn;
          }
        }
      }
      break;
    case DType::kQ6_K:  // 210 bytes: ql[128], qh[64], int8 scales[16], f16 d.
      for (int64_t b = 0; b < n / 256; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        const double d = H(p + 208);
        for (int e = 0; e < 256; ++e) {
          const int half = e / 128, i = e % 128;  // i = 32 * quarter + l
          const int quarter = i / 32, l = i % 32;
          const uint8_t low_byte = ql[64 * half + l + 32 * (quarter % 2)];
          const int low = quarter < 2 ? (low_byte & 15) : (low_byte >> 4);
          const int high = (qh[32 * half + l] >> (2 * quarter)) & 3;
          y[256 * b + e] = d * sc[e / 16] * ((low | (high << 4)) - 32);
        }
      }
      break;
    case DType::kI4_G128:  // 68 bytes: f16 d, f16 z, 16 LE uint32 of 8 nibbles (low first).
      for (int64_t g = 0; g < n / 128; ++g, p += 68) {
        for (int e = 0; e < 128; ++e) {
          const uint8_t* word = p + 4 + 4 * (e / 8);
          const uint32_t bits = word[0] | (word[1] << 8) | (word[2] << 16) | (static_cast<uint32_t>(word[3]) << 24);
          y[128 * g + e] = H(p) * (static_cast<double>((bits >> (4 * (e % 8))) & 15) - H(p + 2));
        }
      }
      break;
    case DType::kMXFP4:  // 17 bytes: E8M0 e, 16 bytes of E2M1 nibbles (Q4_0's order); x = 2^(e-127) e2m1(q).
      for (int64_t b = 0; b < n / 32; ++b, p += 17) {
        static constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        for (int j = 0; j < 32; ++j) {
          const int q = j < 16 ? (p[1 + j] & 15) : (p[1 + j - 16] >> 4);
          y[32 * b + j] = std::ldexp(1.0, p[0] - 127) * (q & 8 ? -kE2M1[q & 7] : kE2M1[q & 7]);
        }
      }
      break;
    case DType::kF8_E4M3_B128:  // 132 bytes: f32 d, 128 OCP E4M3 codes; x = d e4m3(q).
      for (int64_t g = 0; g < n / 128; ++g, p += 132) {
        float d;
        std::memcpy(&d, p, 4);
        for (int e = 0; e < 128; ++e) y[128 * g + e] = d * testing::OcpE4M3(p[4 + e]);
      }
      break;
    default: ADD_FAILURE() << "no naive dequantizer for " << DTypeName(dtype);
  }
  return y;
}

struct Case {
  DType dtype;
  CpuIsa isa;
  int64_t n_tokens;
  int64_t n_out;
  int64_t n_in;
  int n_threads;
  bool packed = false;  // Through PackedWeight + LinearPacked.
  std::string ToString() const {
    std::ostringstream s;
    s << DTypeName(dtype) << " isa=" << CpuIsaName(isa) << " n_tokens=" << n_tokens << " n_out=" << n_out
      << " n_in=" << n_in << " threads=" << n_threads << (packed ? " packed" : "");
    return s.str();
  }
};

int64_t ActBlock(DType d) {
  switch (ActivationFormatFor(d)) {
    case ActivationFormat::kQ8Block: return 32;
    case ActivationFormat::kQ8K: return 256;
    default: return 0;
  }
}

// Random weights [n_out, n_in] stored as `dtype`, with per-row scale variety.
std::vector<uint8_t> MakeWeights(DType dtype, int64_t n_out, int64_t n_in, std::mt19937* rng) {
  std::vector<uint8_t> w(n_out * RowBytes(dtype, n_in));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    const float scale = 0.05f * (1 + r % 7);
    const float shift = (r % 3 == 0) ? 0.02f : 0.0f;  // Asymmetric rows exercise offsets.
    for (auto& v : row) v = scale * normal(*rng) + shift;
    EXPECT_TRUE(QuantizeRow(dtype, row.data(), w.data() + r * RowBytes(dtype, n_in), n_in).ok());
  }
  return w;
}

void RunCase(const Case& c) {
  SCOPED_TRACE(c.ToString());
  std::mt19937 rng(1234 + c.n_out * 7 + c.n_tokens);
  std::vector<uint8_t> w = MakeWeights(c.dtype, c.n_out, c.n_in, &rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(c.n_tokens * c.n_in);
  for (auto& v : x) v = normal(rng);
  if (!x.empty()) x[0] = 6.0f;  // An outlier (6 sigma): one block with a coarse step.

  constexpr int kGuard = 16;
  constexpr float kSentinel = -12345.0f;
  std::vector<float> out(c.n_tokens * c.n_out + 2 * kGuard, kSentinel);
  TensorView weight(w.data(), c.dtype, {c.n_out, c.n_in});
  ThreadPool pool(c.n_threads);
  absl::StatusOr<PackedWeight> packed = absl::UnimplementedError("not packed");
  if (c.packed) {
    packed = PackedWeight::Pack(weight);
    ASSERT_TRUE(packed.ok()) << packed.status();
  }
  SetMaxCpuIsaForTesting(c.isa);
  ThreadPool* p = c.n_threads > 1 ? &pool : nullptr;
  const absl::Status status = c.packed ? LinearPacked(out.data() + kGuard, x.data(), *packed, c.n_tokens, p)
                                       : Linear(out.data() + kGuard, x.data(), weight, c.n_tokens, p);
  SetMaxCpuIsaForTesting(BestCpuIsa());
  ASSERT_TRUE(status.ok()) << status;
  for (int i = 0; i < kGuard; ++i) {
    ASSERT_EQ(out[i], kSentinel) << "underrun";
    ASSERT_EQ(out[out.size() - 1 - i], kSentinel) << "overrun";
  }

  const int64_t ab = ActBlock(c.dtype);
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < c.n_out; ++r) {
    const std::vector<double> wr = NaiveDequant(c.dtype, w.data() + r * RowBytes(c.dtype, c.n_in), c.n_in);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const float* xt = x.data() + t * c.n_in;
      double ref = 0, abs_sum = 0, quant_bound = 0;
      for (int64_t k = 0; k < c.n_in; ++k) {
        ref += wr[k] * xt[k];
        abs_sum += std::fabs(wr[k] * xt[k]);
      }
      if (ab > 0) {
        for (int64_t b0 = 0; b0 < c.n_in; b0 += ab) {
          double amax = 0;
          for (int64_t k = b0; k < b0 + ab; ++k) amax = std::max(amax, std::fabs(double{xt[k]}));
          const double half_step = amax / 127.0 / 2.0;
          for (int64_t k = b0; k < b0 + ab; ++k) quant_bound += std::fabs(wr[k]) * half_step;
        }
      }
      const double bound = 1.0001 * quant_bound + 1e-5 * abs_sum + 1e-6;
      const double got = out[kGuard + t * c.n_out + r];
      ASSERT_LE(std::fabs(got - ref), bound) << "row " << r << " token " << t << " ref " << ref;
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  // Relative L2 error. Rounding x to a step h = amax/127 leaves an rms error of h/sqrt(12)
  // per element: ~0.3% of rms(x) for Gaussian blocks of 32, and up to 6/(127 sqrt(12)) =
  // 1.4% in a 256-block holding the 6-sigma outlier (one token). F32 paths: ~1e-7.
  // (Only over enough outputs for the ratio to be a statistic: one row x one token can land
  // on a near-zero reference; the element bound above still holds for it.)
  if (c.n_out * c.n_tokens >= 16) {
    EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-30)), ab > 0 ? 2e-2 : 1e-5);
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const DType dtypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,    DType::kQ8_0,         DType::kQ4_0, DType::kQ4_1,
                          DType::kQ4_K, DType::kQ6_K, DType::kI4_G128, DType::kF8_E4M3_B128, DType::kMXFP4};
  for (DType d : dtypes) {
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      // 1..5 tokens take the matrix-vector kernels (token groups of 4 plus a rest), more
      // the tiled ones.
      for (int64_t n_tokens : {1, 2, 3, 5, 8, 17}) {
        // n_in: 512 (16 blocks / 2 super-blocks); for the 32-blocks also 96 (a partial group
        // of 8 blocks), 1600 (50 blocks: two tile chunks, partial groups) and 2080 (65
        // blocks: two scale chunks of the AVX-512 matrix-vector kernel, the second of one
        // block); for floats a length that is not a multiple of 8. n_out 37 and 53 leave
        // rows over after groups of 4 and 16.
        std::vector<int64_t> n_ins = {512};
        if (BlockElems(d) == 32) n_ins = {512, 96, 1600, 2080};
        if (BlockElems(d) == 1) n_ins = {512, 100};
        if (BlockElems(d) == 128) n_ins = {512, 128, 384};  // 4, 1 and 3 groups.
        for (int64_t n_in : n_ins) {
          cases.push_back({d, isa, n_tokens, 37, n_in, 1});
          cases.push_back({d, isa, n_tokens, 53, n_in, 2});
        }
      }
      // Row-major prefill kernels work in row blocks of 256 KiB (FP8: decoded to f32, 64
      // rows of 1024): several blocks and a partial last one, on both threads.
      if (BlockElems(d) == 1 || BlockElems(d) == 128) cases.push_back({d, isa, 17, 300, 1024, 2});
      // FP8 prefills run f32 panels (AVX2: 16 rows, 6 tokens a tile; AVX-512 from 32
      // tokens on: 32 rows, 12 tokens, k in chunks of 512): every token remainder of both,
      // rows past a panel's end, and 1152 inputs (chunks of 512, 512 and 128).
      if (BlockElems(d) == 128) {
        for (int64_t n_tokens : {7, 9, 10, 12, 13, 23, 25, 31, 32, 37, 44}) {
          cases.push_back({d, isa, n_tokens, 37, 384, 1});
        }
        cases.push_back({d, isa, 40, 70, 1152, 2});
      }
    }
  }
  return cases;
}

// Packed weights on every ISA path (AVX-512 VNNI and AVX2: the packed kernels, AVX2 for the
// block-code types only; below them, the portable packed kernel). n_out 37 / 53 / 16 / 1: a
// partial last group of 16 rows, one full group, a single row; n_in 96 / 288 / 1600 / 32: 3,
// 9, 50 (two tile chunks) and 1 blocks, odd block counts (super-block types: 256 and 1792,
// 8 and 56 blocks, two tile chunks); 1..5 tokens take the matrix-vector kernels, 8 and 17
// the tiles, and 40 at 12288 inputs several of the AVX2 tiles' token passes. Q4_K (stored
// min), Q6_K (6-bit codes, a scale per 16) and MXFP4 (a table) stand for the block-code
// types here; tests/quant/quant_types_test.cc has them all.
std::vector<Case> PackedCases() {
  std::vector<Case> cases;
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4}) {
    const bool super = BlockElems(d) == 256;
    const std::vector<int64_t> n_ins =
        super ? std::vector<int64_t>{256, 1792} : std::vector<int64_t>{96, 288, 1600, 32};
    const int64_t n_in_wide = super ? 512 : 576;
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 17}) {
        for (int64_t n_in : n_ins) {
          cases.push_back({d, isa, n_tokens, 37, n_in, 1, true});
          cases.push_back({d, isa, n_tokens, 53, n_in, 2, true});
        }
        cases.push_back({d, isa, n_tokens, 16, n_in_wide, 1, true});
        cases.push_back({d, isa, n_tokens, 1, n_in_wide, 1, true});
      }
      cases.push_back({d, isa, 1, 1000, n_in_wide, 2, true});
      cases.push_back({d, isa, 40, 333, n_in_wide, 2, true});
      // The AVX2 tiles take tokens in passes sized to L2 (16 at this width): 16, 16 and 8.
      cases.push_back({d, isa, 40, 37, 12288, 1, true});
    }
  }
  return cases;
}

TEST(LinearTest, PackedAllIsasAgainstNaiveReference) {
  for (const Case& c : PackedCases()) RunCase(c);
}

// The K types keep their file's bits once packed: the 6-bit sub-scales of Q3_K, Q4_K and Q5_K
// in 6 bits (Q2_K's 4-bit ones were always nibbles, Q6_K's bytes), and chunks rounded to 32
// bytes only (Q3_K's and Q6_K's are not multiples of 64); IQ4_XS within a byte per
// sub-scale; MXFP4 its exponent bytes. (Their values: tests/quant/quant_types_test.cc.)
TEST(LinearTest, PackedTypesKeepTheFileBits) {
  const int64_t n_out = 32, n_in = 1024;
  for (DType d : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
    std::vector<uint8_t> w(n_out * RowBytes(d, n_in), 0);
    absl::StatusOr<PackedWeight> p = PackedWeight::Pack(TensorView(w.data(), d, {n_out, n_in}));
    ASSERT_TRUE(p.ok()) << p.status();
    const int64_t file = n_out * RowBytes(d, n_in);
    if (d != DType::kIQ4_XS) {
      EXPECT_EQ(p->bytes(), file) << DTypeName(d);
    } else {  // A byte per 6-bit sub-scale: 4.3125 bits a weight against 4.25.
      EXPECT_EQ(p->bytes() * 4.25, file * 4.3125) << DTypeName(d);
    }
  }
  // MXFP4: an exponent byte per block and row, as the file's (scales 2^-8).
  std::vector<uint8_t> w(n_out * RowBytes(DType::kMXFP4, n_in), 0x5a);
  for (size_t b = 0; b < w.size(); b += 17) w[b] = 120;
  absl::StatusOr<PackedWeight> p = PackedWeight::Pack(TensorView(w.data(), DType::kMXFP4, {n_out, n_in}));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bytes(), static_cast<int64_t>(w.size()));
}

// The packed layout is a pure rearrangement: its rows dequantize to the GGUF rows' values.
TEST(LinearTest, PackedRowsDequantizeExactly) {
  std::mt19937 rng(3);
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    const int64_t n_out = 21, n_in = 160;  // The block-code types: tests/kernels/quant_types_test.cc.
    std::vector<uint8_t> w = MakeWeights(d, n_out, n_in, &rng);
    absl::StatusOr<PackedWeight> p = PackedWeight::Pack(TensorView(w.data(), d, {n_out, n_in}));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->n_groups(), 2);
    EXPECT_EQ(p->group_bytes() % 64, 0);
    std::vector<float> got(n_in), want(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
      p->DequantizeRow(r, got.data());
      ASSERT_TRUE(DequantizeRow(d, w.data() + r * RowBytes(d, n_in), want.data(), n_in).ok());
      ASSERT_EQ(got, want) << DTypeName(d) << " row " << r;
    }
  }
  std::vector<uint8_t> buf(4096);
  EXPECT_STATUS_CODE(PackedWeight::Pack(TensorView(buf.data(), DType::kI4_G128, {2, 256})).status(), kUnimplemented);
  EXPECT_STATUS_CODE(PackedWeight::Pack(TensorView(buf.data(), DType::kF32, {2, 64})).status(), kUnimplemented);
  EXPECT_STATUS_CODE(PackedWeight::Pack(TensorView(buf.data(), DType::kQ8_0, {2, 2, 64})).status(), kInvalidArgument);
}

// Packing on a pool's threads (the engine's load) writes the same bytes as on one, and a
// group's error reaches the caller from whichever thread packed it.
TEST(LinearTest, PackOnThreadsEqualsOneThread) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (DType d : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n_out = 16 * 37 + 3, n_in = 512;  // 38 groups: chunks of 16 on several threads.
    std::vector<uint8_t> w = MakeWeights(d, n_out, n_in, &rng);
    const TensorView view(w.data(), d, {n_out, n_in});
    absl::StatusOr<PackedWeight> one = PackedWeight::Pack(view), many = PackedWeight::Pack(view, &pool);
    ASSERT_TRUE(one.ok() && many.ok()) << one.status() << many.status();
    ASSERT_EQ(one->bytes(), many->bytes());
    EXPECT_EQ(std::memcmp(one->data(), many->data(), static_cast<size_t>(one->bytes())), 0) << DTypeName(d);
  }
  // MXFP4 with a subnormal scale (2^-127) in the last row: group 19, past the first chunk.
  const int64_t n_out = 16 * 20;
  std::vector<uint8_t> w(RowBytes(DType::kMXFP4, 64) * n_out, 0x33);
  for (int64_t b = 0; b < 2 * n_out; ++b) w[17 * b] = 120;  // 2^-7 everywhere ...
  w[17 * (2 * n_out - 1)] = 1;                              // ... but here.
  EXPECT_STATUS_CODE(PackedWeight::Pack(TensorView(w.data(), DType::kMXFP4, {n_out, 64}), &pool).status(),
                     kUnimplemented);
}

// MXFP4's scales are powers of two from 2^-128 to 2^127, packed as exponent bytes: every
// normal one packs, exactly (2^-126 and 2^72, which f16 cannot hold, included), and a
// subnormal one (e = 0, 1) leaves the weight unpacked (Pack says Unimplemented, and the CPU
// backend then reads the rows as they are), so no scale is rounded.
TEST(LinearTest, Mxfp4ScalesPackExactlyAndSubnormalOnesStayUnpacked) {
  std::vector<uint8_t> w(RowBytes(DType::kMXFP4, 64) * 2);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(0x21 * i);
  w[0] = 2;     // 2^-126.
  w[17] = 200;  // Row 0, block 1: 2^72.
  w[34] = 1;    // Row 1, block 0: 2^-127.
  w[51] = 120;
  const TensorView weight(w.data(), DType::kMXFP4, {2, 64});
  EXPECT_STATUS_CODE(PackedWeight::Pack(weight).status(), kUnimplemented);
  w[34] = 120;
  absl::StatusOr<PackedWeight> packed = PackedWeight::Pack(weight);
  ASSERT_TRUE(packed.ok()) << packed.status();
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<float> got(64);
    packed->DequantizeRow(r, got.data());
    const std::vector<double> want = NaiveDequant(DType::kMXFP4, w.data() + r * RowBytes(DType::kMXFP4, 64), 64);
    for (int e = 0; e < 64; ++e) ASSERT_EQ(static_cast<double>(got[e]), want[e]) << "row " << r << " elem " << e;
  }
  w[34] = 1;
  auto backend = kernels::MakeCpuBackend({.n_threads = 1});
  auto prepared = backend->PrepareWeight(weight);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_TRUE((*prepared)->reads_source()) << "borrowed as is, not packed";
  std::vector<float> x(64, 1.0f), out(2);
  ASSERT_TRUE(backend
                  ->Linear(TensorView(out.data(), DType::kF32, {1, 2}), TensorView(x.data(), DType::kF32, {1, 64}),
                           **prepared, TensorView())
                  .ok());
  const std::vector<double> row1 = NaiveDequant(DType::kMXFP4, w.data() + RowBytes(DType::kMXFP4, 64), 64);
  double want = 0;
  for (double v : row1) want += v;
  EXPECT_NEAR(out[1], want, 1e-6 * std::fabs(want) + 1e-30);
}

TEST(LinearTest, AllDTypesAllIsasAgainstNaiveReference) {
  for (const Case& c : Cases()) RunCase(c);
}

TEST(LinearTest, LargeRowCountsSplitOverThreads) {
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuSupportsIsa(isa)) continue;
    RunCase({DType::kQ4_1, isa, 1, 1000, 576, 2});
    RunCase({DType::kQ4_1, isa, 40, 333, 576, 2});
    RunCase({DType::kQ8_0, isa, 9, 161, 576, 3});
  }
}

TEST(LinearTest, QuantizedActivationsAreReusable) {
  const int64_t n_in = 256, n_tokens = 5;
  std::mt19937 rng(7);
  std::vector<uint8_t> w1 = MakeWeights(DType::kQ4_1, 17, n_in, &rng);
  std::vector<uint8_t> w2 = MakeWeights(DType::kQ4_0, 9, n_in, &rng);
  std::vector<float> x(n_tokens * n_in);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  QuantizedActivations q;
  ASSERT_TRUE(q.Quantize(x.data(), n_tokens, n_in, ActivationFormat::kQ8Block, nullptr).ok());
  for (auto* wp : {&w1, &w2}) {
    const DType d = wp == &w1 ? DType::kQ4_1 : DType::kQ4_0;
    const int64_t n_out = wp == &w1 ? 17 : 9;
    TensorView weight(wp->data(), d, {n_out, n_in});
    std::vector<float> a(n_tokens * n_out), b(n_tokens * n_out);
    ASSERT_TRUE(LinearQuantized(a.data(), q, weight, nullptr).ok());
    ASSERT_TRUE(Linear(b.data(), x.data(), weight, n_tokens, nullptr).ok());
    EXPECT_EQ(a, b);
  }
  // Activations prepared for the wrong family are refused.
  std::vector<uint8_t> wk = MakeWeights(DType::kQ4_K, 3, n_in, &rng);
  std::vector<float> o(n_tokens * 3);
  EXPECT_STATUS_CODE(LinearQuantized(o.data(), q, TensorView(wk.data(), DType::kQ4_K, {3, n_in}), nullptr),
                     kInvalidArgument);
}

// The sums per 16 quants that the packed kernels' offsets read: as floats (scale x sum)
// and as the integers themselves (the AVX2 GEMV's int32 offsets), checked against the
// quants; a block of one sign reaches the extreme |sum| = 16 x 127.
TEST(LinearTest, QuantizedActivationSumsPerSixteen) {
  const int64_t n_in = 96, n_tokens = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n_tokens * n_in);
  for (auto& v : x) v = normal(rng);
  for (int e = 0; e < 32; ++e) x[n_in + 32 + e] = -3.0f;  // Token 1, block 1: all -127.
  QuantizedActivations q;
  ASSERT_TRUE(q.Quantize(x.data(), n_tokens, n_in, ActivationFormat::kQ8Block, nullptr).ok());
  for (int64_t h = 0; h < n_tokens * n_in / 16; ++h) {
    int sum = 0;
    for (int e = 0; e < 16; ++e) sum += q.q8_quants()[16 * h + e];
    EXPECT_EQ(q.q8_isums16()[h], sum) << "half-block " << h;
    EXPECT_EQ(q.q8_sums16()[h], q.q8_scales()[h / 2] * static_cast<float>(sum)) << "half-block " << h;
  }
  EXPECT_EQ(q.q8_isums16()[(n_in + 32) / 16], -16 * 127);
}

// A stacked weight (Q/K/V-like parts of 48, 32 and 37 rows) through LinearParts gives
// every part exactly what Linear gives over that part's rows alone: rows are computed
// independently, whichever chunk or tile they land in. Also through a packed weight, on
// every ISA, one and several threads, one and many tokens.
TEST(LinearTest, StackedPartsMatchSeparateProjections) {
  const int64_t n_in = 256, rows[3] = {48, 32, 37}, n_out = 48 + 32 + 37;
  ThreadPool pool(2);
  for (DType d : {DType::kF32, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kI4_G128}) {
    std::mt19937 rng(77);
    std::vector<uint8_t> w = MakeWeights(d, n_out, n_in, &rng);
    const TensorView stacked(w.data(), d, {n_out, n_in});
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      SetMaxCpuIsaForTesting(isa);
      for (int64_t n_tokens : {1, 3, 9}) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(d) << " " << CpuIsaName(isa) << " tokens " << n_tokens);
          std::vector<float> x(n_tokens * n_in);
          std::normal_distribution<float> normal(0.0f, 1.0f);
          for (auto& v : x) v = normal(rng);
          std::vector<std::vector<float>> got(3), want(3);
          std::vector<LinearPart> parts;
          int64_t r0 = 0;
          for (int i = 0; i < 3; ++i) {
            got[i].assign(n_tokens * rows[i], -1.0f);
            want[i].assign(n_tokens * rows[i], -2.0f);
            parts.push_back({got[i].data(), rows[i]});
            ASSERT_TRUE(Linear(want[i].data(), x.data(), stacked.RowSlice(r0, r0 + rows[i]), n_tokens, p).ok());
            r0 += rows[i];
          }
          ASSERT_TRUE(LinearParts(parts, x.data(), stacked, n_tokens, p).ok());
          for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << "part " << i;
          if (!PackedWeight::Supports(d)) continue;
          absl::StatusOr<PackedWeight> packed = PackedWeight::Pack(stacked);
          ASSERT_TRUE(packed.ok()) << packed.status();
          std::vector<std::vector<float>> got_packed(3);
          std::vector<LinearPart> packed_parts;
          for (int i = 0; i < 3; ++i) {
            got_packed[i].assign(n_tokens * rows[i], -3.0f);
            packed_parts.push_back({got_packed[i].data(), rows[i]});
          }
          ASSERT_TRUE(LinearPartsPacked(packed_parts, x.data(), *packed, n_tokens, p).ok());
          r0 = 0;
          for (int i = 0; i < 3; ++i) {  // Each part packed alone: the same rows, the same sums.
            absl::StatusOr<PackedWeight> alone = PackedWeight::Pack(stacked.RowSlice(r0, r0 + rows[i]));
            ASSERT_TRUE(alone.ok()) << alone.status();
            std::vector<float> one(n_tokens * rows[i], -4.0f);
            ASSERT_TRUE(LinearPacked(one.data(), x.data(), *alone, n_tokens, p).ok());
            EXPECT_EQ(got_packed[i], one) << "part " << i;
            r0 += rows[i];
          }
          // Q4_K's GGUF-layout kernel quantizes activations per 256 elements, the packed one
          // per 32: not the same sums.
          if (ActivationFormatFor(d) != ActivationFormat::kQ8Block) continue;
          for (int i = 0; i < 3; ++i) {  // Packed vs GGUF layout: same sums, maybe another order.
            for (size_t j = 0; j < want[i].size(); ++j) {
              ASSERT_NEAR(got_packed[i][j], want[i][j], 1e-4f * (1 + std::fabs(want[i][j])))
                  << "part " << i << " " << j;
            }
          }
        }
      }
    }
    SetMaxCpuIsaForTesting(BestCpuIsa());
  }
}

// A batch of independent packed matmuls (the experts of a MoE layer: stacked gate/up parts,
// a 37-row matrix whose last group is partial, an empty job) in one dispatch gives each
// job's own LinearPartsPacked results bit for bit, on every ISA, with and without a pool.
TEST(LinearTest, PackedBatchMatchesEachJobAlone) {
  const int64_t n_in = 256, n_out[3] = {64, 37, 48}, n_tokens[3] = {1, 3, 7};
  ThreadPool pool(2);
  for (DType d : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    std::mt19937 rng(91);
    std::vector<std::vector<uint8_t>> w;
    std::vector<PackedWeight> packed;
    std::vector<std::vector<float>> x;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int j = 0; j < 3; ++j) {
      w.push_back(MakeWeights(d, n_out[j], n_in, &rng));
      packed.push_back(*PackedWeight::Pack(TensorView(w[j].data(), d, {n_out[j], n_in})));
      x.emplace_back(n_tokens[j] * n_in);
      for (auto& v : x[j]) v = normal(rng);
    }
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      SetMaxCpuIsaForTesting(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(d) << " " << CpuIsaName(isa) << (p ? " pool" : ""));
        // Job 0 is two parts (32 + 32 rows, as gate/up), jobs 1 and 2 one part each.
        std::vector<std::vector<float>> got(4), want(4);
        const int64_t part_rows[4] = {32, 32, 37, 48};
        for (int i = 0; i < 4; ++i) got[i].assign(n_tokens[i == 0 ? 0 : i - 1] * part_rows[i], -1.0f);
        const LinearPart parts0[2] = {{got[0].data(), 32}, {got[1].data(), 32}};
        const LinearPart part1{got[2].data(), 37}, part2{got[3].data(), 48};
        const LinearPart no_rows{nullptr, 48};
        const PackedJob jobs[4] = {{parts0, x[0].data(), n_tokens[0], &packed[0]},
                                   {{&part1, 1}, x[1].data(), n_tokens[1], &packed[1]},
                                   {{&no_rows, 1}, nullptr, 0, &packed[2]},  // No tokens: nothing to do.
                                   {{&part2, 1}, x[2].data(), n_tokens[2], &packed[2]}};
        ASSERT_TRUE(LinearPackedBatch(jobs, p).ok());
        for (int i = 0; i < 4; ++i) want[i].assign(got[i].size(), -2.0f);
        const LinearPart w0[2] = {{want[0].data(), 32}, {want[1].data(), 32}};
        ASSERT_TRUE(LinearPartsPacked(w0, x[0].data(), packed[0], n_tokens[0], p).ok());
        ASSERT_TRUE(LinearPacked(want[2].data(), x[1].data(), packed[1], n_tokens[1], p).ok());
        ASSERT_TRUE(LinearPacked(want[3].data(), x[2].data(), packed[2], n_tokens[2], p).ok());
        for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], want[i]) << "output " << i;
      }
    }
    SetMaxCpuIsaForTesting(BestCpuIsa());
  }
}

TEST(LinearTest, StackedPartsMustCoverTheWeight) {
  std::mt19937 rng(5);
  std::vector<uint8_t> w = MakeWeights(DType::kQ8_0, 40, 64, &rng);
  const TensorView stacked(w.data(), DType::kQ8_0, {40, 64});
  std::vector<float> x(64, 1.0f), a(40), b(40);
  const LinearPart short_parts[] = {{a.data(), 16}, {b.data(), 16}};
  EXPECT_STATUS_CODE(LinearParts(short_parts, x.data(), stacked, 1, nullptr), kInvalidArgument);
  absl::StatusOr<PackedWeight> packed = PackedWeight::Pack(stacked);
  ASSERT_TRUE(packed.ok());
  const LinearPart odd_parts[] = {{a.data(), 20}, {b.data(), 20}};  // 20: not whole groups of 16.
  EXPECT_STATUS_CODE(LinearPartsPacked(odd_parts, x.data(), *packed, 1, nullptr), kInvalidArgument);
  EXPECT_TRUE(LinearParts(odd_parts, x.data(), stacked, 1, nullptr).ok());  // The GGUF layout has no groups.
}

TEST(LinearTest, RejectsBadInputs) {
  std::vector<uint8_t> buf(1 << 16);
  std::vector<float> x(4096), out(4096);
  // Unsupported dtypes.
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kI32, {4, 64}), 1, nullptr),
                     kUnimplemented);
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kQ8_K, {4, 256}), 1, nullptr),
                     kUnimplemented);
  // n_in not a multiple of the block.
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kQ4_1, {4, 48}), 1, nullptr),
                     kInvalidArgument);
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kQ4_K, {4, 512 + 32}), 1, nullptr),
                     kInvalidArgument);
  // Not 2-D.
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kF32, {2, 4, 64}), 1, nullptr),
                     kInvalidArgument);
  EXPECT_STATUS_CODE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kF32, {4, 64}), -1, nullptr),
                     kInvalidArgument);
  EXPECT_STATUS_CODE(Linear(out.data(), nullptr, TensorView(buf.data(), DType::kF32, {4, 64}), 1, nullptr),
                     kInvalidArgument);
  // Zero tokens is fine and writes nothing.
  EXPECT_TRUE(Linear(out.data(), x.data(), TensorView(buf.data(), DType::kQ4_0, {4, 64}), 0, nullptr).ok());
  EXPECT_TRUE(LinearSupports(DType::kQ6_K));
  EXPECT_FALSE(LinearSupports(DType::kQ8_K));
}

// The AVX2 FP8 GEMV decodes E4M3 into f32 bits, 32 codes in a transposed order, where
// denormal operands are fast (DenormalOperandsFast) and through f16 in the codes' order
// elsewhere; both must be right against double precision, the subnormal codes (a block of
// nothing else here) and activations near both ends of f32's range included, and the f32
// path must fall back to f16 (the same bits) for activations whose x 2^64 could overflow.
TEST(LinearTest, F8GemvDecodesAreRight) {
  const int64_t n_out = 37, n_in = 512;
  std::mt19937 rng(91);
  std::vector<uint8_t> w = MakeWeights(DType::kF8_E4M3_B128, n_out, n_in, &rng);
  const int64_t row_bytes = RowBytes(DType::kF8_E4M3_B128, n_in);
  for (int e = 0; e < 128; ++e) w[5 * row_bytes + 132 + 4 + e] = static_cast<uint8_t>((e / 8 % 2 ? 0x80 : 0) | e % 8);
  for (int e = 0; e < 128; ++e) w[6 * row_bytes + 4 + e] = static_cast<uint8_t>((e % 2 ? 0x80 : 0) | e % 8);
  const TensorView weight(w.data(), DType::kF8_E4M3_B128, {n_out, n_in});
  const std::vector<double> reference = NaiveDequant(DType::kF8_E4M3_B128, w.data(), n_out * n_in);
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuSupportsIsa(isa)) continue;
    SetMaxCpuIsaForTesting(isa);
    for (int64_t n_tokens = 1; n_tokens <= 5; ++n_tokens) {
      for (float outlier : {1.0f, 3e-30f, 0x1p59f, 0x1p65f}) {
        SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " tokens " << n_tokens << " outlier " << outlier);
        std::vector<float> x(n_tokens * n_in);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& v : x) v = normal(rng);
        x[3] = outlier;
        std::vector<float> f16(n_tokens * n_out, -1.0f), bits(n_tokens * n_out, -2.0f);
        SetDenormalOperandsFastForTesting(false);
        ASSERT_TRUE(Linear(f16.data(), x.data(), weight, n_tokens, nullptr).ok());
        SetDenormalOperandsFastForTesting(true);
        ASSERT_TRUE(Linear(bits.data(), x.data(), weight, n_tokens, nullptr).ok());
        ResetDenormalOperandsFastForTesting();
        if (outlier > 0x1p60f) {
          for (size_t i = 0; i < bits.size(); ++i) {
            ASSERT_EQ(std::memcmp(&bits[i], &f16[i], 4), 0) << i << ": " << bits[i] << " vs " << f16[i];
          }
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_out; ++r) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < n_in; ++k) {
              want += reference[r * n_in + k] * x[t * n_in + k];
              mag += std::fabs(reference[r * n_in + k] * x[t * n_in + k]);
            }
            ASSERT_NEAR(bits[t * n_out + r], want, 1e-5 * mag + 1e-30) << "token " << t << " row " << r;
            ASSERT_NEAR(f16[t * n_out + r], want, 1e-5 * mag + 1e-30) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
  SetMaxCpuIsaForTesting(BestCpuIsa());
}

// The FP8 prefill panels of AVX2 and AVX-512 decode the same values and sum each output in
// the same order (panels_avx512.h), so they give the same bits: the AVX-512 kernel's
// transposes, k-chunks and tails against the AVX2 kernel's. 70 rows (two panels of 32 and a
// part), 1152 inputs (three chunks), every token count from 32 (where AVX-512 takes the
// panels) to 56.
TEST(LinearTest, F8PrefillPanelsGiveTheSameBitsOnAvx2AndAvx512) {
  if (!CpuSupportsIsa(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n_out = 70, n_in = 1152;
  std::mt19937 rng(17);
  std::vector<uint8_t> w = MakeWeights(DType::kF8_E4M3_B128, n_out, n_in, &rng);
  const TensorView weight(w.data(), DType::kF8_E4M3_B128, {n_out, n_in});
  for (int64_t n_tokens = 32; n_tokens <= 56; ++n_tokens) {
    SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens);
    std::vector<float> x(n_tokens * n_in);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);
    std::vector<float> avx2(n_tokens * n_out, -1.0f), avx512(n_tokens * n_out, -2.0f);
    SetMaxCpuIsaForTesting(CpuIsa::kAvx2);
    ASSERT_TRUE(Linear(avx2.data(), x.data(), weight, n_tokens, nullptr).ok());
    SetMaxCpuIsaForTesting(CpuIsa::kAvx512);
    ASSERT_TRUE(Linear(avx512.data(), x.data(), weight, n_tokens, nullptr).ok());
    for (size_t i = 0; i < avx2.size(); ++i) {
      ASSERT_EQ(std::memcmp(&avx2[i], &avx512[i], 4), 0) << i << ": " << avx2[i] << " vs " << avx512[i];
    }
  }
  SetMaxCpuIsaForTesting(BestCpuIsa());
}

// x rounded to the nearest bf16, ties to even (finite x), as `vcvtne2ps2bf16` rounds.
double RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// LinearOptions::bf16_prefill (scheduler.cpu_prefill_activations: bf16): from 8 tokens on,
// an FP8 prefill multiplies the weights, exact, by its activations rounded to bf16. Against
// double precision over the same rounded activations it is as close as f32 sums are, and it
// is measurably not the f32 path (whose outputs follow the unrounded activations). Panels
// and their tails (70 rows: two panels of 32 and a part), k-chunks and a 128-block tail
// (640 and 1152 inputs), token tiles and their tails, one thread and two. Below 8 tokens
// the option changes nothing.
TEST(LinearTest, F8Bf16PrefillFollowsItsRoundedActivationsExactly) {
  if (ActiveCpuIsa() != CpuIsa::kAvx512 || !GetCpuFeatures().avx512bf16) {
    GTEST_SKIP() << "AVX-512 kernels on a CPU with AVX512_BF16 are not active (CPU or CASCADE_CPU_ISA): the bf16 "
                    "prefill does not run here";
  }
  const int64_t n_out = 70;
  ThreadPool pool(2);
  for (int64_t n_in : {640, 1152}) {
    std::mt19937 rng(23);
    std::vector<uint8_t> w = MakeWeights(DType::kF8_E4M3_B128, n_out, n_in, &rng);
    const TensorView weight(w.data(), DType::kF8_E4M3_B128, {n_out, n_in});
    const std::vector<double> reference = NaiveDequant(DType::kF8_E4M3_B128, w.data(), n_out * n_in);
    for (int64_t n_tokens : {7, 8, 13, 31, 40}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(::testing::Message()
                     << "n_in " << n_in << " tokens " << n_tokens << " threads " << (p == nullptr ? 1 : 2));
        std::vector<float> x(n_tokens * n_in);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& v : x) v = normal(rng);
        std::vector<float> f32(n_tokens * n_out, -1.0f), bf16(n_tokens * n_out, -2.0f);
        ASSERT_TRUE(Linear(f32.data(), x.data(), weight, n_tokens, p).ok());
        ASSERT_TRUE(Linear(bf16.data(), x.data(), weight, n_tokens, p, {.bf16_prefill = true}).ok());
        if (n_tokens < 8) {
          ASSERT_EQ(std::memcmp(f32.data(), bf16.data(), f32.size() * 4), 0);
          continue;
        }
        double worst_rounded = 0, worst_unrounded = 0;  // Errors over the magnitude.
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_out; ++r) {
            double rounded = 0, unrounded = 0, mag = 0;
            for (int64_t k = 0; k < n_in; ++k) {
              const double wk = reference[r * n_in + k], xk = x[t * n_in + k];
              rounded += wk * RoundToBf16(x[t * n_in + k]);
              unrounded += wk * xk;
              mag += std::fabs(wk * xk);
            }
            const double out = bf16[t * n_out + r];
            worst_rounded = std::max(worst_rounded, std::fabs(out - rounded) / mag);
            worst_unrounded = std::max(worst_unrounded, std::fabs(out - unrounded) / mag);
            ASSERT_NEAR(f32[t * n_out + r], unrounded, 1e-5 * mag) << "token " << t << " row " << r;
          }
        }
        EXPECT_LT(worst_rounded, 1e-6);      // f32 sums of exact products.
        EXPECT_GT(worst_unrounded, 1e-5);    // The activations' rounding shows.
        EXPECT_LT(worst_unrounded, 0x1p-8);  // And stays within bf16's half ulp.
      }
    }
  }
}

// Float weights give every output the same bits whatever the number of tokens beside it: a
// prefill recomputes what decode steps computed (a stream moved to another replica goes on
// from its tokens, `cluster_dp_worker_killed`), so the many-token tiles must sum each
// output in the 1-token GEMV's order.
TEST(LinearTest, FloatWeightsGiveTheSameBitsForAnyTokenCount) {
  const int64_t n_out = 37, n_tokens = 17;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n_in : {512, 100}) {
      std::mt19937 rng(5);
      std::vector<uint8_t> w = MakeWeights(d, n_out, n_in, &rng);
      const TensorView weight(w.data(), d, {n_out, n_in});
      std::vector<float> x(n_tokens * n_in);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : x) v = normal(rng);
      for (CpuIsa isa : kAllCpuIsas) {
        if (!CpuSupportsIsa(isa)) continue;
        SetMaxCpuIsaForTesting(isa);
        SCOPED_TRACE(::testing::Message() << DTypeName(d) << " n_in " << n_in << " " << CpuIsaName(isa));
        std::vector<float> all(n_tokens * n_out);
        ASSERT_TRUE(Linear(all.data(), x.data(), weight, n_tokens, nullptr).ok());
        for (int64_t t = 0; t < n_tokens; ++t) {
          std::vector<float> one(n_out);
          ASSERT_TRUE(Linear(one.data(), x.data() + t * n_in, weight, 1, nullptr).ok());
          for (int64_t r = 0; r < n_out; ++r) {
            ASSERT_EQ(std::memcmp(&one[r], &all[t * n_out + r], 4), 0) << "token " << t << " row " << r;
          }
        }
      }
      SetMaxCpuIsaForTesting(BestCpuIsa());
    }
  }
}

}  // namespace
}  // namespace cascade::kernels::cpu
