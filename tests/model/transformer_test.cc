// The transformer forward vs a naive double-precision Llama forward written here, on
// random-weight models of every weight type. The reference dequantizes the stored weights
// with kernels::cpu::DequantizeRow (itself checked against a from-the-spec dequantizer in
// tests/kernels/quantize_test.cc), then does all arithmetic in double, token by token,
// with full (non-paged) attention. Errors are relative L2 over each logit row.
// To add a case, append to the INSTANTIATE list (weight type, bound, model variant).
#include "model/transformer.h"
#include "model/local_engine.h"

#include <cmath>
#include <numeric>

#include "kernels/cpu/quantize.h"
#include "model/format/gguf.h"
#include "model/local_engine.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using Mat = std::vector<double>;  // Row-major.

struct RefModel {
  ModelConfig c;
  Mat embd, out_norm, output;
  Mat rope_freqs;  // Per-frequency divisors of the RoPE angle; empty: all 1.
  struct Layer {
    Mat attn_norm, wq, wk, wv, bq, bk, bv, wo, ffn_norm, gate, up, down;
    Mat q_norm, k_norm;  // Qwen3: [head_dim] RMSNorm weights over each head; empty otherwise.
  };
  std::vector<Layer> layers;
};

Mat Load(const GgufFile& f, const std::string& name) {
  const TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return {};
  auto v = f.Read(name);
  std::vector<float> tmp(t->NumElements());
  const int64_t cols = t->Cols(), row_bytes = RowBytes(t->dtype, cols);
  for (int64_t r = 0; r < t->Rows(); ++r) {
    EXPECT_TRUE(kernels::cpu::DequantizeRow(t->dtype, static_cast<const uint8_t*>(v->data) + r * row_bytes,
                                            tmp.data() + r * cols, cols)
                    .ok());
  }
  return Mat(tmp.begin(), tmp.end());
}

RefModel LoadRef(const GgufFile& f) {
  RefModel m;
  m.c = *ModelConfigFromGguf(f);
  m.embd = Load(f, "token_embd.weight");
  m.out_norm = Load(f, "output_norm.weight");
  m.output = m.c.tied_embeddings ? m.embd : Load(f, "output.weight");
  m.rope_freqs = Load(f, "rope_freqs.weight");
  for (int64_t l = 0; l < m.c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.layers.push_back({Load(f, p + "attn_norm.weight"), Load(f, p + "attn_q.weight"), Load(f, p + "attn_k.weight"),
                        Load(f, p + "attn_v.weight"), Load(f, p + "attn_q.bias"), Load(f, p + "attn_k.bias"),
                        Load(f, p + "attn_v.bias"), Load(f, p + "attn_output.weight"), Load(f, p + "ffn_norm.weight"),
                        Load(f, p + "ffn_gate.weight"), Load(f, p + "ffn_up.weight"), Load(f, p + "ffn_down.weight"),
                        Load(f, p + "attn_q_norm.weight"), Load(f, p + "attn_k_norm.weight")});
  }
  return m;
}

std::vector<double> MatVec(const Mat& w, const std::vector<double>& x, int64_t rows, const Mat& bias = {}) {
  const int64_t cols = static_cast<int64_t>(x.size());
  std::vector<double> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = bias.empty() ? 0.0 : bias[r];
    for (int64_t i = 0; i < cols; ++i) s += w[r * cols + i] * x[i];
    y[r] = s;
  }
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const Mat& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// RMSNorm with weights `w` [d] over each d-element head of `x`.
std::vector<double> NormHeads(const std::vector<double>& x, const Mat& w, int64_t d, double eps) {
  std::vector<double> y;
  for (size_t h = 0; h * d < x.size(); ++h) {
    const auto head = RmsNorm(std::vector<double>(x.begin() + h * d, x.begin() + (h + 1) * d), w, eps);
    y.insert(y.end(), head.begin(), head.end());
  }
  return y;
}

// Frequency i turns by pos * theta^(-2i/d) / factors[i] (llama.cpp's freq_factors, Llama
// 3.1's rope_freqs.weight). It rotates elements (2i, 2i + 1) of each head in llama.cpp's
// NORM layout (GGUF `llama`, whose Q/K rows the converter permuted), and (i, i + d/2) in its
// NEOX layout (GGUF `qwen2`: Hugging Face's rows).
void Rope(std::vector<double>& x, int64_t n_heads, int64_t d, int64_t pos, double theta, const Mat& factors,
          bool neox) {
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double ang = pos * std::pow(theta, -2.0 * i / d) / (factors.empty() ? 1.0 : factors[i]);
      double& a = x[h * d + (neox ? i : 2 * i)];
      double& b = x[h * d + (neox ? i + d / 2 : 2 * i + 1)];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(ang) - b0 * std::sin(ang);
      b = a0 * std::sin(ang) + b0 * std::cos(ang);
    }
  }
}

// Logits [n_vocab] after each token of `ids`, one token at a time with a full KV history.
std::vector<std::vector<double>> RefForward(const RefModel& m, const std::vector<int32_t>& ids) {
  const ModelConfig& c = m.c;
  const int64_t d = c.head_dim, group = c.n_heads / c.n_kv_heads;
  std::vector<std::vector<std::vector<double>>> K(c.n_layers), V(c.n_layers);
  std::vector<std::vector<double>> all_logits;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    std::vector<double> h(m.embd.begin() + ids[pos] * c.n_embd, m.embd.begin() + (ids[pos] + 1) * c.n_embd);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const auto& L = m.layers[l];
      auto x = RmsNorm(h, L.attn_norm, c.norm_eps);
      auto q = MatVec(L.wq, x, c.q_dim(), L.bq);
      auto k = MatVec(L.wk, x, c.kv_dim(), L.bk);
      auto v = MatVec(L.wv, x, c.kv_dim(), L.bv);
      if (!L.q_norm.empty()) {  // Qwen3Attention: RMSNorm of each head before RoPE.
        q = NormHeads(q, L.q_norm, d, c.norm_eps);
        k = NormHeads(k, L.k_norm, d, c.norm_eps);
      }
      // From the file's architecture, not the config's layout.
      const bool neox = c.arch == "qwen2" || c.arch == "qwen3";
      Rope(q, c.n_heads, d, pos, c.rope_theta, m.rope_freqs, neox);
      Rope(k, c.n_kv_heads, d, pos, c.rope_theta, m.rope_freqs, neox);
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<double> att(c.q_dim(), 0.0);
      for (int64_t hd = 0; hd < c.n_heads; ++hd) {
        const int64_t kvh = hd / group;
        std::vector<double> w(pos + 1);
        double mx = -1e300;
        for (size_t t = 0; t <= pos; ++t) {
          double s = 0;
          for (int64_t i = 0; i < d; ++i) s += q[hd * d + i] * K[l][t][kvh * d + i];
          w[t] = s / std::sqrt(double(d));
          mx = std::max(mx, w[t]);
        }
        double z = 0;
        for (auto& e : w) z += (e = std::exp(e - mx));
        for (size_t t = 0; t <= pos; ++t)
          for (int64_t i = 0; i < d; ++i) att[hd * d + i] += w[t] / z * V[l][t][kvh * d + i];
      }
      auto o = MatVec(L.wo, att, c.n_embd);
      for (int64_t i = 0; i < c.n_embd; ++i) h[i] += o[i];
      x = RmsNorm(h, L.ffn_norm, c.norm_eps);
      auto g = MatVec(L.gate, x, c.n_ff);
      auto u = MatVec(L.up, x, c.n_ff);
      for (int64_t i = 0; i < c.n_ff; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      auto dn = MatVec(L.down, g, c.n_embd);
      for (int64_t i = 0; i < c.n_embd; ++i) h[i] += dn[i];
    }
    all_logits.push_back(MatVec(m.output, RmsNorm(h, m.out_norm, c.norm_eps), c.n_vocab));
  }
  return all_logits;
}

double RelL2(const std::vector<double>& ref, const float* got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - got[i]) * (ref[i] - got[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

struct Case {
  DType type;
  double bound;  // Max relative L2 error of a logit row.
  bool tied = false;
  bool qkv_bias = false;
  int threads = 1;
  bool rope_freqs = false;  // Writes rope_freqs.weight (Llama 3.1 GGUF) with uneven factors.
  bool qk_norm = false;     // A Qwen3 model (q_norm / k_norm).
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << DTypeName(c.type) << (c.tied ? " tied" : "") << (c.qkv_bias ? " qkv_bias" : "") << " t" << c.threads
      << (c.rope_freqs ? " rope_freqs" : "") << (c.qk_norm ? " qk_norm" : "");
}

class TransformerTest : public ::testing::TestWithParam<Case> {};

// Prefill of 37 tokens (three KV blocks of 16) with logits at every row, then 4 decode
// steps, each row against the reference.
TEST_P(TransformerTest, MatchesNaiveDoubleForward) {
  const Case& tc = GetParam();
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::RandomModelSpec spec{
      .weight_type = tc.type, .tied = tc.tied, .qkv_bias = tc.qkv_bias, .qk_norm = tc.qk_norm};
  if (tc.rope_freqs) {
    for (int i = 0; i < spec.n_embd / spec.n_heads / 2; ++i) spec.rope_freq_factors.push_back(1.0f + 0.75f * i);
  }
  testing::WriteRandomModel(spec, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const RefModel ref = LoadRef(*files->gguf);
  ASSERT_EQ(ref.rope_freqs.size(), spec.rope_freq_factors.size());
  ASSERT_EQ(ref.c.tied_embeddings, tc.tied);
  ASSERT_EQ(ref.c.qkv_bias, tc.qkv_bias);

  std::vector<int32_t> ids(41);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % ref.c.n_vocab);
  const auto ref_logits = RefForward(ref, ids);

  auto backend = kernels::MakeCpuBackend({.n_threads = tc.threads});
  auto t = Transformer::Load(*files, backend.get(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  auto cache = KvCache::Create((*t)->CacheOptions(4, 16));
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> table = {3, 0, 2, 1};  // Non-contiguous blocks.
  const int64_t V = ref.c.n_vocab;
  double worst = 0;
  const auto run = [&](int64_t begin, int64_t n) {
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(begin));
    std::vector<int64_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    const kernels::AttentionSeq seq{0, n, begin, table};
    std::vector<float> logits(n * V, NAN);
    ForwardBatch batch{std::span(ids).subspan(begin, n), pos, {&seq, 1}, rows};
    ASSERT_TRUE((*t)->Forward(batch, *cache, TensorView(logits.data(), DType::kF32, {n, V})).ok());
    for (int64_t r = 0; r < n; ++r) {
      const double e = RelL2(ref_logits[begin + r], logits.data() + r * V);
      worst = std::max(worst, e);
      EXPECT_LT(e, tc.bound) << "position " << begin + r;
    }
  };
  run(0, 37);
  for (int64_t p = 37; p < 41; ++p) run(p, 1);
  std::printf("[ info ] %s: worst relative L2 logit error %.3g (bound %.3g)\n", std::string(DTypeName(tc.type)).c_str(),
              worst, tc.bound);
}

// Bounds: f32/f16/bf16 weights reach the reference's own (dequantized) weights exactly,
// so only f32 rounding remains (< 1e-4, the bound for f32). Quantized weights
// multiply 8-bit-quantized activations (as llama.cpp does): each activation carries up to
// 1/254 relative rounding, which through 2 layers and the head gives ~1e-2.
INSTANTIATE_TEST_SUITE_P(
    Types, TransformerTest,
    ::testing::Values(Case{DType::kF32, 1e-4}, Case{DType::kF32, 1e-4, true, false, 2},
                      Case{DType::kF32, 1e-4, false, false, 1, true},
                      Case{DType::kF32, 1e-4, false, false, 2, false, true},
                      Case{DType::kQ8_0, 3e-2, false, false, 1, false, true}, Case{DType::kF32, 1e-4, false, true},
                      Case{DType::kF16, 1e-4}, Case{DType::kBF16, 1e-4}, Case{DType::kQ8_0, 3e-2},
                      Case{DType::kQ4_0, 3e-2, false, false, 2}, Case{DType::kQ4_1, 3e-2}, Case{DType::kQ4_K, 3e-2},
                      Case{DType::kQ6_K, 3e-2, true},
                      // Tied and packed (on AVX-512): the embedding lookup reads the LM head's packed rows.
                      Case{DType::kQ8_0, 3e-2, true}, Case{DType::kQ4_1, 3e-2, true, false, 2}));

// Two sequences with different histories in one batch give the same logits as each run
// alone: the batch is really partitioned by the sequence table.
TEST(TransformerBatchTest, BatchedEqualsSeparate) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  auto backend = kernels::MakeCpuBackend({.n_threads = 2});
  auto t = Transformer::Load(*files, backend.get(), {});
  ASSERT_TRUE(t.ok());
  const int64_t V = (*t)->config().n_vocab;
  const std::vector<int32_t> a = {5, 9, 12, 7, 3}, b = {8, 1, 30};
  const std::vector<int32_t> ta = {0}, tb = {1};
  // Alone.
  auto alone = [&](const std::vector<int32_t>& ids, const std::vector<int32_t>& table) {
    auto cache = KvCache::Create((*t)->CacheOptions(2, 16));
    std::vector<int32_t> pos(ids.size());
    std::iota(pos.begin(), pos.end(), 0);
    const int64_t last = ids.size() - 1;
    kernels::AttentionSeq s{0, static_cast<int64_t>(ids.size()), 0, table};
    std::vector<float> logits(V);
    EXPECT_TRUE(
        (*t)->Forward({ids, pos, {&s, 1}, {&last, 1}}, *cache, TensorView(logits.data(), DType::kF32, {1, V})).ok());
    return logits;
  };
  const auto la = alone(a, ta), lb = alone(b, tb);
  auto cache = KvCache::Create((*t)->CacheOptions(2, 16));
  std::vector<int32_t> ids = a, pos = {0, 1, 2, 3, 4, 0, 1, 2};
  ids.insert(ids.end(), b.begin(), b.end());
  const kernels::AttentionSeq seqs[2] = {{0, 5, 0, ta}, {5, 3, 0, tb}};
  const int64_t rows[2] = {4, 7};
  std::vector<float> logits(2 * V);
  ASSERT_TRUE((*t)->Forward({ids, pos, seqs, rows}, *cache, TensorView(logits.data(), DType::kF32, {2, V})).ok());
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(logits[i], la[i], 1e-4);
    EXPECT_NEAR(logits[V + i], lb[i], 1e-4);
  }
}

TEST(TransformerLoadTest, MissingTensorIsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({.n_layers = 2}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  files->config.n_layers = 3;  // The file has no blk.2.*.
  auto backend = kernels::MakeCpuBackend({});
  auto t = Transformer::Load(*files, backend.get(), {});
  EXPECT_STATUS_CODE(t, kNotFound);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("blk.2.attn_norm.weight"));
}

TEST(TransformerLoadTest, RopeFreqsOfTheWrongLengthAreRefused) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({.n_layers = 1, .rope_freq_factors = {1.0f, 2.0f, 3.0f}}, path);  // head_dim 64: needs 32.
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  auto backend = kernels::MakeCpuBackend({});
  EXPECT_THAT(Transformer::Load(*files, backend.get(), {}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("rope_freqs.weight")));
}

// Every factor 2 divides every frequency by 2, which is what linear RoPE scaling with
// factor 2 does: the two files give the same logits, bit for bit.
TEST(TransformerLoadTest, UniformRopeFreqsEqualLinearScaling) {
  testing::TempDir dir;
  std::vector<std::vector<float>> logits;
  for (const bool as_factors : {true, false}) {
    testing::RandomModelSpec spec{.n_layers = 2};
    if (as_factors) {
      spec.rope_freq_factors.assign(spec.n_embd / spec.n_heads / 2, 2.0f);
    } else {
      spec.rope_linear_factor = 2.0f;
    }
    const std::string path = dir.path() + (as_factors ? "/factors.gguf" : "/linear.gguf");
    testing::WriteRandomModel(spec, path);
    auto engine = LocalEngine::Create(path, {});
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto l = (*engine)->PromptLogits({5, 17, 3, 40, 8, 11, 60, 2}, 0);
    ASSERT_TRUE(l.ok()) << l.status();
    logits.push_back(*l);
  }
  EXPECT_EQ(logits[0], logits[1]);
}

}  // namespace
}  // namespace cascade::model
