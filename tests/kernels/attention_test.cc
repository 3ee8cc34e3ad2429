// Paged flash attention vs a naive double-precision softmax(QK^T)V written here.
// Cases cross block boundaries, use shuffled (non-contiguous) block tables, GQA groups,
// several sequences per batch with different histories, and 1 or 2 threads (decode with 2
// threads splits each row's positions across them, flash-decoding style). Every case runs
// on each ISA path this CPU has (portable, AVX2, AVX-512), with the cache in f32, f16, q8_0
// (head_dim a multiple of 32) and fp8_e4m3 with a different scale per KV head (some above
// 1, some below, K's and V's different). For the stored formats the reference uses the values the cache holds
// (the inputs rounded to the format, checked against the format's rounding bound), so the
// kernels' reading of each format is checked to f32 accuracy. To add a case, append to the
// INSTANTIATE list.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "tests/test_support.h"

namespace cascade::kernels {
namespace {

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (n_past, n_new) per sequence.
  int threads;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.n_heads << "h/" << c.n_kv_heads << "kv d" << c.head_dim << " bs" << c.block_size << " t" << c.threads
      << " seqs:";
  for (auto [p, n] : c.seqs) *os << " (" << p << "+" << n << ")";
}

class AttentionTest : public ::testing::TestWithParam<Case> {};

// The FP8 cache's scales of KV head h, written here independently of the kernels.
float KScale(int64_t h) { return std::array{0.25f, 1.0f, 0.0625f, 2.0f}[h % 4]; }
float VScale(int64_t h) { return std::array{2.0f, 0.125f, 1.0f, 0.5f}[h % 4]; }

// x as an FP8 cache stores it: the E4M3 value of x / scale of its KV head (as core/fp8.h
// rounds: RNE, the reciprocal multiplied), times the scale; within E4M3's half ulp (2^-4
// relative, or 2^-10 x scale among the subnormals).
std::vector<float> AsStoredF8(const std::vector<float>& x, int64_t cols, int64_t head_dim, float (*scale)(int64_t)) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = scale(static_cast<int64_t>(i) % cols / head_dim);
    out[i] = E4M3ToF32(F32ToE4M3(x[i] * (1.0f / s))) * s;
    EXPECT_LE(std::fabs(out[i] - x[i]), std::max(std::ldexp(std::fabs(x[i]), -4), std::ldexp(s, -10)) * 1.0001f);
  }
  return out;
}

// x rounded as a cache of `dtype` stores it (row by row of `cols`), after checking that the
// rounding is within the format's bound: f16 half an ulp (2^-11 relative, or 2^-25 near
// zero), q8_0 half a step of its 32-block (amax / 254, plus the f16 rounding of the scale).
std::vector<float> AsStored(DType dtype, const std::vector<float>& x, int64_t cols) {
  if (dtype == DType::kF32) return x;
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(RowBytes(dtype, cols));
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const float* in = x.data() + r * cols;
    EXPECT_TRUE(cpu::QuantizeRow(dtype, in, row.data(), cols).ok());
    EXPECT_TRUE(cpu::DequantizeRow(dtype, row.data(), out.data() + r * cols, cols).ok());
    for (int64_t b = 0; b < cols; b += 32) {
      float amax = 0;
      for (int64_t i = b; i < std::min(cols, b + 32); ++i) amax = std::max(amax, std::fabs(in[i]));
      for (int64_t i = b; i < std::min(cols, b + 32); ++i) {
        const float bound = dtype == DType::kF16 ? std::ldexp(std::fabs(in[i]), -11) + 3e-8f
                                                 : amax / 254.0f * 1.002f + std::ldexp(amax, -11);
        EXPECT_LE(std::fabs(out[r * cols + i] - in[i]), bound) << DTypeName(dtype) << " element " << i;
      }
    }
  }
  return out;
}

// Sliding window and attention sinks (gpt-oss): window 0 is none; with `sinks`, query head
// h has the sink logit SinkOf(h) (some far above the scores, to check the overflow guard).
// With `kept_prefix` (and a window), positions [0, kept_prefix) stay visible as well
// (scheduler.kv_policy's sink + window), and the blocks no row sees are pointed at a block
// of NaNs in the table, so that a read of one shows.
struct Extras {
  int64_t window = 0;
  bool sinks = false;
  int64_t kept_prefix = 0;
};
float SinkOf(int64_t h) { return std::array{-1.0f, 0.5f, 3.0f, 40.0f, -30.0f}[h % 5]; }

void RunCase(const Case& c, DType kv_dtype, Extras extras = {}) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t kv_dim = c.n_kv_heads * c.head_dim, q_dim = c.n_heads * c.head_dim;
  // Blocks for all sequences, handed out in a shuffled order.
  int64_t n_blocks = 0;
  for (auto [p, n] : c.seqs) n_blocks += (p + n + c.block_size - 1) / c.block_size;
  const int64_t poison = n_blocks++;  // Never written: 0xff.
  std::vector<int32_t> perm(n_blocks - 1);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  // 0xff bytes: NaN in f32 and f16, a NaN scale in q8_0, NaN or -480 in fp8, so a stale
  // slot read shows.
  std::vector<uint8_t> kc(n_blocks * c.block_size * RowBytes(kv_dtype, kv_dim), 0xff), vc(kc.size(), 0xff);
  const bool fp8 = kv_dtype == DType::kF8_E4M3;
  std::vector<float> k_scale(c.n_kv_heads), v_scale(c.n_kv_heads);
  for (int64_t h = 0; h < c.n_kv_heads; ++h) {
    k_scale[h] = KScale(h);
    v_scale[h] = VScale(h);
  }
  KvCacheLayer cache =
      KvCacheLayer::Over(TensorView(kc.data(), kv_dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim}),
                         TensorView(vc.data(), kv_dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim}),
                         fp8 ? TensorView(k_scale.data(), DType::kF32, {c.n_kv_heads}) : TensorView(),
                         fp8 ? TensorView(v_scale.data(), DType::kF32, {c.n_kv_heads}) : TensorView());
  // Full K/V history per sequence (reference), the new rows go in the batch.
  std::vector<std::vector<float>> hist_k, hist_v;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  int64_t next_block = 0, n_rows = 0;
  for (auto [p, n] : c.seqs) {
    const int64_t nb = (p + n + c.block_size - 1) / c.block_size;
    tables.emplace_back(perm.begin() + next_block, perm.begin() + next_block + nb);
    next_block += nb;
    std::vector<float> hk((p + n) * kv_dim), hv((p + n) * kv_dim);
    for (auto& x : hk) x = normal(rng);
    for (auto& x : hv) x = normal(rng);
    hist_k.push_back(hk);
    hist_v.push_back(hv);
    n_rows += n;
  }
  auto backend = MakeCpuBackend({.n_threads = c.threads});
  // History written through WriteKv as earlier steps would have (one "step" with n_past 0).
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int64_t p = c.seqs[s].first;
    if (p == 0) continue;
    AttentionSeq past{0, p, 0, tables[s]};
    ASSERT_TRUE(backend
                    ->WriteKv(cache, TensorView(hist_k[s].data(), DType::kF32, {p, kv_dim}),
                              TensorView(hist_v[s].data(), DType::kF32, {p, kv_dim}), {&past, 1})
                    .ok());
  }
  std::vector<float> k_new(n_rows * kv_dim), v_new(n_rows * kv_dim), q(n_rows * q_dim), out(n_rows * q_dim, NAN);
  for (auto& x : q) x = normal(rng);
  int64_t row = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    auto [p, n] = c.seqs[s];
    std::copy_n(hist_k[s].data() + p * kv_dim, n * kv_dim, k_new.data() + row * kv_dim);
    std::copy_n(hist_v[s].data() + p * kv_dim, n * kv_dim, v_new.data() + row * kv_dim);
    seqs.push_back({row, n, p, tables[s]});
    row += n;
  }
  ASSERT_TRUE(backend
                  ->WriteKv(cache, TensorView(k_new.data(), DType::kF32, {n_rows, kv_dim}),
                            TensorView(v_new.data(), DType::kF32, {n_rows, kv_dim}), seqs)
                  .ok());
  // Reference visibility: row at position `pos` sees [0, kept) and [first, pos].
  auto visible_from = [&](int64_t pos) -> std::pair<int64_t, int64_t> {
    int64_t first = extras.window > 0 ? std::max<int64_t>(0, pos + 1 - extras.window) : 0;
    if (first <= extras.kept_prefix) first = 0;
    return {first > 0 ? extras.kept_prefix : 0, first};
  };
  if (extras.kept_prefix > 0) {  // Blocks no row of a sequence sees: the NaN block.
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const auto [kept, first] = visible_from(c.seqs[s].first);
      for (int64_t b = (kept + c.block_size - 1) / c.block_size; b < first / c.block_size; ++b) {
        tables[s][b] = static_cast<int32_t>(poison);
      }
      seqs[s].block_table = tables[s];
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> sinks(c.n_heads);
  for (int64_t h = 0; h < c.n_heads; ++h) sinks[h] = SinkOf(h);
  const AttentionParams params{
      .n_heads = c.n_heads,
      .scale = scale,
      .window = extras.window,
      .kept_prefix = extras.kept_prefix,
      .sinks = extras.sinks ? TensorView(sinks.data(), DType::kF32, {c.n_heads}) : TensorView()};
  absl::Status st = backend->Attention(TensorView(out.data(), DType::kF32, {n_rows, q_dim}),
                                       TensorView(q.data(), DType::kF32, {n_rows, q_dim}), cache, seqs, params);
  ASSERT_TRUE(st.ok()) << st;

  // Naive reference: per sequence, row, head: softmax over positions [0, own position],
  // over the K/V values as the cache stores them.
  for (auto& h : hist_k) h = fp8 ? AsStoredF8(h, kv_dim, c.head_dim, KScale) : AsStored(kv_dtype, h, kv_dim);
  for (auto& h : hist_v) h = fp8 ? AsStoredF8(h, kv_dim, c.head_dim, VScale) : AsStored(kv_dtype, h, kv_dim);
  const int64_t group = c.n_heads / c.n_kv_heads;
  double max_err = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    auto [p, n] = c.seqs[s];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = seqs[s].row_begin + i;
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const int64_t kvh = h / group;
        const auto [kept, first] = visible_from(p + i);
        std::vector<double> w(p + i + 1, -1e300);  // Positions not seen: weight 0.
        double mx = extras.sinks ? SinkOf(h) : -1e300;
        for (int64_t t = 0; t <= p + i; ++t) {
          if (t >= kept && t < first) continue;
          double d = 0;
          for (int64_t x = 0; x < c.head_dim; ++x)
            d += static_cast<double>(q[r * q_dim + h * c.head_dim + x]) * hist_k[s][t * kv_dim + kvh * c.head_dim + x];
          w[t] = d * scale;
          mx = std::max(mx, w[t]);
        }
        double z = extras.sinks ? std::exp(SinkOf(h) - mx) : 0.0;
        for (auto& x : w) z += (x = std::exp(x - mx));
        for (int64_t x = 0; x < c.head_dim; ++x) {
          double ref = 0;
          for (int64_t t = 0; t <= p + i; ++t) ref += w[t] / z * hist_v[s][t * kv_dim + kvh * c.head_dim + x];
          max_err = std::max(max_err, std::abs(ref - out[r * q_dim + h * c.head_dim + x]));
        }
      }
    }
  }
  // Outputs are convex combinations of N(0,1) values: f32 accumulation error ~1e-6.
  EXPECT_LT(max_err, 2e-5);
}

TEST_P(AttentionTest, MatchesNaiveDouble) {
  for (DType kv : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kF8_E4M3}) {
    if (kv == DType::kQ8_0 && GetParam().head_dim % 32 != 0) continue;
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " kv " << DTypeName(kv));
      SetMaxCpuIsaForTesting(isa);
      RunCase(GetParam(), kv);
      SetMaxCpuIsaForTesting(BestCpuIsa());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTest,
                         ::testing::Values(Case{4, 2, 16, 16, {{0, 1}}, 1},   // First token.
                                           Case{4, 2, 16, 16, {{0, 15}}, 1},  // Inside one block.
                                           Case{4, 2, 16, 16, {{0, 16}}, 1},  // Exactly one block.
                                           Case{4, 2, 16, 16, {{0, 17}}, 2},  // Crosses into a second block.
                                           Case{8, 4, 8, 16, {{0, 100}}, 2},  // Prefill over 7 blocks.
                                           Case{9, 3, 64, 16, {{47, 1}}, 1},  // SmolLM2 shape, decode.
                                           Case{9, 3, 64, 16, {{31, 1}, {0, 5}, {16, 3}}, 2},  // Mixed batch.
                                           Case{4, 1, 32, 8, {{63, 2}}, 1},                    // MQA, small blocks.
                                           Case{4, 4, 16, 32, {{5, 40}}, 2},    // MHA, prefill after history.
                                           Case{9, 3, 64, 16, {{699, 1}}, 1},   // Long context, decode.
                                           Case{9, 3, 64, 16, {{699, 1}}, 2},   // Same, positions split.
                                           Case{8, 2, 128, 16, {{700, 1}}, 2},  // head_dim 128, split, ragged end.
                                           Case{8, 2, 128, 16, {{690, 3}}, 1},  // head_dim 128, short verify.
                                           Case{6, 2, 48, 8, {{300, 1}, {0, 2}}, 2},  // Block 8, one split row.
                                           Case{2, 1, 256, 32, {{200, 1}}, 2},        // head_dim 256, block 32.
                                           Case{4, 2, 24, 16, {{400, 1}}, 2}));       // head_dim not a multiple of 16.

// Sliding windows (inside a block, across blocks, longer than the context: a no-op) and
// attention sinks, alone and together, over decode, prefill, split and mixed batches.
TEST(AttentionWindowAndSinksTest, MatchNaiveDouble) {
  const Case cases[] = {Case{4, 2, 16, 16, {{0, 40}}, 1}, Case{9, 3, 64, 16, {{699, 1}}, 2},
                        Case{9, 3, 64, 16, {{31, 1}, {0, 5}, {16, 3}}, 2}, Case{8, 2, 128, 16, {{300, 3}}, 1},
                        Case{6, 2, 48, 8, {{300, 1}, {0, 2}}, 2}};
  for (const Extras extras :
       {Extras{128, false}, Extras{5, false}, Extras{0, true}, Extras{7, true}, Extras{10000, true}}) {
    for (const Case& c : cases) {
      for (CpuIsa isa : kAllCpuIsas) {
        if (!CpuSupportsIsa(isa)) continue;
        SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " window " << extras.window << " sinks " << extras.sinks
                                          << " " << ::testing::PrintToString(c));
        SetMaxCpuIsaForTesting(isa);
        RunCase(c, DType::kF16, extras);
        SetMaxCpuIsaForTesting(BestCpuIsa());
      }
    }
  }
}

// scheduler.kv_policy's sink + window: a kept prefix inside a block and across blocks, a
// window that still reaches it (a no-op), with learned sinks too, over decode, prefill
// chunks, split positions and mixed batches; the blocks between are never read.
TEST(AttentionKeptPrefixTest, MatchesNaiveDouble) {
  const Case cases[] = {Case{4, 2, 16, 16, {{0, 80}}, 1},   Case{9, 3, 64, 16, {{699, 1}}, 2},
                        Case{9, 3, 64, 16, {{699, 1}}, 1},  Case{9, 3, 64, 16, {{131, 1}, {0, 5}, {200, 40}}, 2},
                        Case{8, 2, 128, 16, {{300, 3}}, 1}, Case{6, 2, 48, 8, {{300, 1}, {0, 2}}, 2}};
  for (const Extras extras : {Extras{64, false, 4}, Extras{33, false, 20}, Extras{48, true, 16}, Extras{16, false, 40},
                              Extras{10000, false, 4}}) {
    for (const Case& c : cases) {
      for (CpuIsa isa : kAllCpuIsas) {
        if (!CpuSupportsIsa(isa)) continue;
        SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " window " << extras.window << " kept "
                                          << extras.kept_prefix << " " << ::testing::PrintToString(c));
        SetMaxCpuIsaForTesting(isa);
        for (DType kv : {DType::kF16, DType::kQ8_0}) {
          if (kv == DType::kQ8_0 && c.head_dim % 32 != 0) continue;
          RunCase(c, kv, extras);
        }
        SetMaxCpuIsaForTesting(BestCpuIsa());
      }
    }
  }
}

// The blocks a kept prefix and a window leave unseen may be -1 in the table (the
// scheduler frees them); a block that is seen may not.
TEST(AttentionKeptPrefixTest, UnseenBlocksMayBeMissing) {
  auto backend = MakeCpuBackend({});
  std::vector<float> kc(8 * 16 * 16, 0.5f), vc(kc.size(), 0.25f), q(4 * 16, 0.1f), out(q.size());
  KvCacheLayer cache = KvCacheLayer::Over(TensorView(kc.data(), DType::kF32, {8, 16, 1, 16}),
                                          TensorView(vc.data(), DType::kF32, {8, 16, 1, 16}));
  const std::vector<int32_t> table = {0, -1, 2, 3, 4};  // Row at 70 sees [0, 4) and [39, 70].
  const AttentionSeq seq{0, 1, 70, table};
  AttentionParams params{.n_heads = 4, .scale = 1.0f, .window = 32, .kept_prefix = 4, .sinks = {}};
  const TensorView o(out.data(), DType::kF32, {1, 64}), qv(q.data(), DType::kF32, {1, 64});
  absl::Status st = backend->Attention(o, qv, cache, {&seq, 1}, params);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FLOAT_EQ(out[0], 0.25f);  // Every value seen is 0.25.
  params.window = 48;              // Now it sees [23, 70]: block 1 is read.
  EXPECT_EQ(backend->Attention(o, qv, cache, {&seq, 1}, params).code(), absl::StatusCode::kInvalidArgument);
}

// A prefill's rows give each row the bits that row gets alone as a decode step (one new row
// after its history): a prefill recomputes a decode's results (a stream moved to another
// replica goes on from its tokens), so grouping rows (AttendArgs::n_rows) must not change a
// row's sums. f16 cache, GQA 4 per KV head, with and without a window, every ISA.
TEST(AttentionRowsTest, PrefillRowsEqualDecodeRowsBitForBit) {
  constexpr int64_t kBlocks = 4, kBs = 16, kKv = 2, kD = 64, kHeads = 8, kRows = 40;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> kc(kBlocks * kBs * kKv * kD), vc(kc.size());
  for (auto& h : kc) h = F32ToF16(normal(rng));
  for (auto& h : vc) h = F32ToF16(normal(rng));
  KvCacheLayer cache = KvCacheLayer::Over(TensorView(kc.data(), DType::kF16, {kBlocks, kBs, kKv, kD}),
                                          TensorView(vc.data(), DType::kF16, {kBlocks, kBs, kKv, kD}));
  const std::vector<int32_t> table = {2, 0, 3, 1};
  std::vector<float> q(kRows * kHeads * kD);
  for (auto& x : q) x = normal(rng);
  auto backend = MakeCpuBackend({.n_threads = 1});
  for (int64_t window : {int64_t{0}, int64_t{12}}) {
    const AttentionParams params{.n_heads = kHeads, .scale = 0.125f, .window = window, .sinks = {}};
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa)) continue;
      SetMaxCpuIsaForTesting(isa);
      SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " window " << window);
      std::vector<float> all(q.size());
      const AttentionSeq prefill{0, kRows, 0, table};
      ASSERT_TRUE(backend
                      ->Attention(TensorView(all.data(), DType::kF32, {kRows, kHeads * kD}),
                                  TensorView(q.data(), DType::kF32, {kRows, kHeads * kD}), cache, {&prefill, 1}, params)
                      .ok());
      for (int64_t i = 0; i < kRows; ++i) {
        std::vector<float> one(kHeads * kD);
        const AttentionSeq decode{0, 1, i, table};
        ASSERT_TRUE(backend
                        ->Attention(TensorView(one.data(), DType::kF32, {1, kHeads * kD}),
                                    TensorView(q.data() + i * kHeads * kD, DType::kF32, {1, kHeads * kD}), cache,
                                    {&decode, 1}, params)
                        .ok());
        ASSERT_EQ(std::memcmp(one.data(), all.data() + i * kHeads * kD, one.size() * 4), 0) << "row " << i;
      }
    }
    SetMaxCpuIsaForTesting(BestCpuIsa());
  }
}

constexpr AttentionParams kParams{.n_heads = 4, .scale = 1.0f, .window = 0, .sinks = {}};

TEST(AttentionErrors, BadBlockTableIsInvalidArgument) {
  auto backend = MakeCpuBackend({});
  std::vector<float> kc(2 * 16 * 16), vc(kc.size()), q(4 * 16), out(q.size());
  KvCacheLayer cache = KvCacheLayer::Over(TensorView(kc.data(), DType::kF32, {2, 16, 1, 16}),
                                          TensorView(vc.data(), DType::kF32, {2, 16, 1, 16}));
  const std::vector<int32_t> table = {5};  // Block 5 of 2.
  AttentionSeq seq{0, 1, 0, table};
  EXPECT_STATUS_CODE(backend->Attention(TensorView(out.data(), DType::kF32, {1, 64}),
                                        TensorView(q.data(), DType::kF32, {1, 64}), cache, {&seq, 1}, kParams),
                     kInvalidArgument);
  const std::vector<int32_t> short_table = {0};
  AttentionSeq long_seq{0, 1, 20, short_table};  // Position 20 needs two blocks.
  EXPECT_STATUS_CODE(backend->Attention(TensorView(out.data(), DType::kF32, {1, 64}),
                                        TensorView(q.data(), DType::kF32, {1, 64}), cache, {&long_seq, 1}, kParams),
                     kInvalidArgument);
}

TEST(AttentionErrors, Fp8CacheWithoutScalesIsInvalidArgument) {
  auto backend = MakeCpuBackend({});
  std::vector<uint8_t> kc(16 * 16), vc(kc.size());
  std::vector<float> q(4 * 16), out(q.size());
  KvCacheLayer cache = KvCacheLayer::Over(TensorView(kc.data(), DType::kF8_E4M3, {1, 16, 1, 16}),
                                          TensorView(vc.data(), DType::kF8_E4M3, {1, 16, 1, 16}));
  const std::vector<int32_t> table = {0};
  AttentionSeq seq{0, 1, 0, table};
  const absl::Status s = backend->Attention(TensorView(out.data(), DType::kF32, {1, 64}),
                                            TensorView(q.data(), DType::kF32, {1, 64}), cache, {&seq, 1}, kParams);
  EXPECT_STATUS_CODE(s, kInvalidArgument);
  EXPECT_NE(s.message().find("k_scale"), std::string::npos) << s;
}

}  // namespace
}  // namespace cascade::kernels
