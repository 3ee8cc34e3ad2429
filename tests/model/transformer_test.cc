// The transformer forward vs a naive double-precision Llama forward written here, on
// random-weight models of every weight type, as GGUF files and as Hugging Face directories.
// The reference dequantizes the stored weights with kernels::cpu::DequantizeRow (itself
// checked against a from-the-spec dequantizer in tests/kernels/quantize_test.cc), then does
// all arithmetic in double, token by token, with full (non-paged) attention. It follows
// each file's own semantics (tensor names, RoPE layout, RoPE scaling), not Cascade's tables.
// Errors are relative L2 over each logit row.
// To add a case, append to an INSTANTIATE list (weight type, bound, model variant).
#include "model/transformer.h"
#include "model/local_engine.h"

#include <cmath>
#include <functional>
#include <numeric>
#include <optional>

#include "core/str_cat.h"
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
  Mat rope_freqs;                // GGUF's rope_freqs.weight (per-frequency divisors); empty: none.
  std::vector<double> inv_freq;  // [head_dim / 2]: frequency i turns by pos * inv_freq[i].
  bool neox = false;             // RoPE rotates (i, i + d/2) of each head; else (2i, 2i + 1).
  struct Layer {
    Mat attn_norm, wq, wk, wv, bq, bk, bv, wo, ffn_norm, gate, up, down;
    Mat q_norm, k_norm;  // Qwen3: [head_dim] RMSNorm weights over each head; empty otherwise.
  };
  std::vector<Layer> layers;
};

Mat Load(const WeightSource& f, const std::string& name) {
  const TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return {};
  auto v = f.Read(name);
  EXPECT_TRUE(v.ok()) << v.status();
  std::vector<float> tmp(t->NumElements());
  const int64_t cols = t->Cols(), row_bytes = RowBytes(t->dtype, cols);
  for (int64_t r = 0; r < t->Rows(); ++r) {
    EXPECT_TRUE(kernels::cpu::DequantizeRow(t->dtype, static_cast<const uint8_t*>(v->data) + r * row_bytes,
                                            tmp.data() + r * cols, cols)
                    .ok());
  }
  return Mat(tmp.begin(), tmp.end());
}

// Llama 3.1's frequencies from Hugging Face's formula (transformers' modeling_rope_utils.py,
// _compute_llama3_parameters), in double: wavelengths longer than original/low_freq_factor
// are divided by `factor`, shorter than original/high_freq_factor kept, blended between.
std::vector<double> HfLlama3InvFreq(std::vector<double> inv_freq, const testing::Llama3RopeScaling& r) {
  const double old_context_len = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / r.low_freq_factor;
  const double high_freq_wavelen = old_context_len / r.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2 * M_PI / f;
    const double inv_freq_llama = wavelen > low_freq_wavelen ? f / r.factor : f;
    const double smooth_factor =
        (old_context_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = is_medium_freq ? (1 - smooth_factor) * inv_freq_llama / r.factor + smooth_factor * inv_freq_llama
                       : inv_freq_llama;
  }
  return inv_freq;
}

// The reference model of `files`, read by the file's own tensor names. RoPE as each format
// defines it: GGUF `llama` rotates adjacent pairs (llama.cpp's converter permuted the Q/K
// rows) and divides frequencies by rope_freqs.weight; GGUF qwen2/qwen3 and every Hugging
// Face checkpoint (transformers' rotate_half) rotate the halves of each head, and a Hugging
// Face checkpoint's frequencies follow its config.json's rope_scaling, which the test that
// wrote it passes as `hf_llama3` (not read back through Cascade's config parser).
RefModel LoadRef(const ModelFiles& files, const std::optional<testing::Llama3RopeScaling>& hf_llama3 = std::nullopt) {
  const bool hf = files.format == ModelFormat::kHuggingFace;
  EXPECT_TRUE(hf || !hf_llama3.has_value());
  const WeightSource& w = *files.weights;
  RefModel m;
  m.c = files.config;
  const auto get = [&](const std::string& gguf, const std::string& hf_name) { return Load(w, hf ? hf_name : gguf); };
  m.embd = get("token_embd.weight", "model.embed_tokens.weight");
  m.out_norm = get("output_norm.weight", "model.norm.weight");
  m.output = m.c.tied_embeddings ? m.embd : get("output.weight", "lm_head.weight");
  if (!hf) m.rope_freqs = Load(w, "rope_freqs.weight");
  for (int64_t l = 0; l < m.c.n_layers; ++l) {
    const auto t = [&](const char* gguf, const char* hf_name) {
      return get(StrCat("blk.", l, ".", gguf), StrCat("model.layers.", l, ".", hf_name));
    };
    m.layers.push_back(
        {t("attn_norm.weight", "input_layernorm.weight"), t("attn_q.weight", "self_attn.q_proj.weight"),
         t("attn_k.weight", "self_attn.k_proj.weight"), t("attn_v.weight", "self_attn.v_proj.weight"),
         t("attn_q.bias", "self_attn.q_proj.bias"), t("attn_k.bias", "self_attn.k_proj.bias"),
         t("attn_v.bias", "self_attn.v_proj.bias"), t("attn_output.weight", "self_attn.o_proj.weight"),
         t("ffn_norm.weight", "post_attention_layernorm.weight"), t("ffn_gate.weight", "mlp.gate_proj.weight"),
         t("ffn_up.weight", "mlp.up_proj.weight"), t("ffn_down.weight", "mlp.down_proj.weight"),
         t("attn_q_norm.weight", "self_attn.q_norm.weight"), t("attn_k_norm.weight", "self_attn.k_norm.weight")});
  }
  const int64_t d = m.c.head_dim;
  for (int64_t i = 0; i < d / 2; ++i) {
    m.inv_freq.push_back(std::pow(m.c.rope_theta, -2.0 * i / d) / (m.rope_freqs.empty() ? 1.0 : m.rope_freqs[i]));
  }
  if (hf_llama3.has_value()) m.inv_freq = HfLlama3InvFreq(m.inv_freq, *hf_llama3);
  // From the file's format and architecture, not the config's layout.
  m.neox = hf || m.c.arch == "qwen2" || m.c.arch == "qwen3";
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

// Frequency i turns by pos * inv_freq[i]. It rotates elements (2i, 2i + 1) of each head in
// llama.cpp's NORM layout (GGUF `llama`, whose Q/K rows the converter permuted), and
// (i, i + d/2) in its NEOX layout (GGUF `qwen2`/`qwen3` and Hugging Face: rotate_half).
void Rope(std::vector<double>& x, int64_t n_heads, int64_t d, int64_t pos, const std::vector<double>& inv_freq,
          bool neox) {
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double ang = pos * inv_freq[i];
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
      Rope(q, c.n_heads, d, pos, m.inv_freq, m.neox);
      Rope(k, c.n_kv_heads, d, pos, m.inv_freq, m.neox);
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

template <typename T>
double RelL2(const std::vector<double>& ref, const T* got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - got[i]) * (ref[i] - got[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// The worst relative L2 distance of the rows of `got` from those of `ref`; with `bound` > 0,
// each row is expected within it.
template <typename T>
double WorstRelL2(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<T>>& got,
                  double bound = 0) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t r = 0; r < std::min(ref.size(), got.size()); ++r) {
    EXPECT_EQ(got[r].size(), ref[r].size());
    const double e = RelL2(ref[r], got[r].data());
    if (bound > 0) {
      EXPECT_LT(e, bound) << "position " << r;
    }
    worst = std::max(worst, e);
  }
  return worst;
}

// The 41 token ids every case runs.
std::vector<int32_t> TestIds(int64_t n_vocab) {
  std::vector<int32_t> ids(41);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % n_vocab);
  return ids;
}

// Cascade's logits after each of `ids`: a prefill of the first 37 tokens (three KV blocks of
// 16, not contiguous) with logits at every row, then one decode step per remaining token.
std::vector<std::vector<float>> CascadeLogits(const ModelFiles& files, const std::vector<int32_t>& ids, int threads) {
  auto backend = kernels::MakeCpuBackend({.n_threads = threads});
  auto t = Transformer::Load(files, backend.get(), {});
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  auto cache = KvCache::Create((*t)->CacheOptions(4, 16, DType::kF32));
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  const std::vector<int32_t> table = {3, 0, 2, 1};
  const int64_t V = files.config.n_vocab;
  std::vector<std::vector<float>> out;
  const auto run = [&](int64_t begin, int64_t n) {
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(begin));
    std::vector<int64_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    const kernels::AttentionSeq seq{0, n, begin, table};
    std::vector<float> logits(n * V, NAN);
    ForwardBatch batch{std::span(ids).subspan(begin, n), pos, {&seq, 1}, rows};
    EXPECT_TRUE((*t)->Forward(batch, *cache, TensorView(logits.data(), DType::kF32, {n, V})).ok());
    for (int64_t r = 0; r < n; ++r) out.emplace_back(logits.begin() + r * V, logits.begin() + (r + 1) * V);
  };
  const int64_t prefill = std::min<int64_t>(37, ids.size());
  run(0, prefill);
  for (int64_t p = prefill; p < static_cast<int64_t>(ids.size()); ++p) run(p, 1);
  return out;
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
  const RefModel ref = LoadRef(*files);
  ASSERT_EQ(ref.rope_freqs.size(), spec.rope_freq_factors.size());
  ASSERT_EQ(ref.c.tied_embeddings, tc.tied);
  ASSERT_EQ(ref.c.qkv_bias, tc.qkv_bias);

  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const double worst = WorstRelL2(RefForward(ref, ids), CascadeLogits(*files, ids, tc.threads), tc.bound);
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

// Hugging Face checkpoints: the random models written as a directory (config.json +
// model.safetensors with transformers' names and conventions) and opened by OpenModelFiles,
// vs the reference read from that directory with Hugging Face's semantics; and the GGUF file
// of the same model (llama.cpp's conventions: permuted Q/K rows for `llama`, Llama 3.1's
// scaling as rope_freqs.weight), which must give the same logits.
struct HfCase {
  const char* name;
  DType type;
  bool qk_norm = false;   // Qwen3 (q_norm / k_norm).
  bool qkv_bias = false;  // Qwen2.
  bool llama3 = false;    // Llama 3.1's rope_scaling.
  bool tied = false;
  int threads = 1;
};
void PrintTo(const HfCase& c, std::ostream* os) { *os << c.name; }

// Llama 3.1's scaling but for a short original context: with head_dim 64 and theta 1e4,
// 64 positions keep frequencies 0-3 (wavelength < 16), blend 4-8 and divide 9-31 by 8
// (wavelength > 64); over the test's 41 positions, frequency 9 turns by 3 radians unscaled
// and by 0.4 scaled.
constexpr testing::Llama3RopeScaling kLlama31Rope{
    .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position_embeddings = 64};

class HfCheckpointTest : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfCheckpointTest, MatchesNaiveDoubleForwardAndTheGgufFile) {
  const HfCase& tc = GetParam();
  constexpr double kBound = 1e-4;      // f32/f16/bf16 weights: f32 rounding only, as the GGUF cases.
  constexpr double kTwinBound = 1e-5;  // Cascade on the two files of one model: summation order only.
  testing::RandomModelSpec spec{
      .weight_type = tc.type, .tied = tc.tied, .qkv_bias = tc.qkv_bias, .qk_norm = tc.qk_norm};
  if (tc.llama3) spec.llama3_rope = kLlama31Rope;
  testing::TempDir dir;
  const std::string hf_dir = dir.path() + "/random-hf", gguf_path = dir.path() + "/random.gguf";
  testing::WriteRandomHfModel(spec, hf_dir);
  testing::WriteRandomModel(spec, gguf_path);
  auto hf = OpenModelFiles(hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->format, ModelFormat::kHuggingFace);
  EXPECT_EQ(hf->config.arch, tc.qk_norm ? "qwen3" : tc.qkv_bias ? "qwen2" : "llama");
  EXPECT_EQ(hf->config.tied_embeddings, tc.tied);
  EXPECT_EQ(hf->weights->FindTensor("lm_head.weight") == nullptr, tc.tied);
  auto gguf = OpenModelFiles(gguf_path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();

  const RefModel ref = LoadRef(*hf, spec.llama3_rope);
  ASSERT_EQ(ref.layers[0].q_norm.empty(), !tc.qk_norm);
  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const auto ref_logits = RefForward(ref, ids);
  // What each case is about moves the reference's logits far past the bound, so a forward
  // that skipped it would fail.
  const auto expect_matters = [&](const char* what, const std::function<void(RefModel&)>& change) {
    RefModel m = ref;
    change(m);
    const double moved = WorstRelL2(ref_logits, RefForward(m, ids));
    std::printf("[ info ] %s: %s moves the reference's logits by %.3g\n", tc.name, what, moved);
    EXPECT_GT(moved, 100 * kBound) << what;
  };
  const auto unscaled = [&](int64_t i) { return std::pow(ref.c.rope_theta, -2.0 * i / ref.c.head_dim); };
  expect_matters("rotating adjacent pairs", [](RefModel& m) { m.neox = false; });
  if (tc.qk_norm) {
    expect_matters("no q_norm / k_norm", [](RefModel& m) {
      for (auto& L : m.layers) L.q_norm.clear(), L.k_norm.clear();
    });
  }
  if (tc.llama3) {
    for (int64_t i = 0; i < static_cast<int64_t>(ref.inv_freq.size()); ++i) {  // The bands of kLlama31Rope.
      const double f = ref.inv_freq[i], base = unscaled(i);
      if (i <= 3) {
        EXPECT_EQ(f, base) << "frequency " << i;
      } else if (i <= 8) {
        EXPECT_TRUE(f > base / kLlama31Rope.factor && f < base) << "frequency " << i;
      } else {
        EXPECT_DOUBLE_EQ(f, base / kLlama31Rope.factor) << "frequency " << i;
      }
    }
    expect_matters("no RoPE scaling", [&](RefModel& m) {
      for (size_t i = 0; i < m.inv_freq.size(); ++i) m.inv_freq[i] = unscaled(i);
    });
    expect_matters("no blend (frequencies 4-8 divided by 8)", [&](RefModel& m) {
      for (int64_t i = 4; i <= 8; ++i) m.inv_freq[i] = unscaled(i) / kLlama31Rope.factor;
    });
  }

  const auto hf_logits = CascadeLogits(*hf, ids, tc.threads);
  const double hf_err = WorstRelL2(ref_logits, hf_logits, kBound);

  // The GGUF file is the same model: its reference (llama.cpp's semantics) has the same
  // frequencies (for Llama 3.1, the converter's divisors reproduce transformers' formula)
  // and the same logits, and so has Cascade on it.
  const RefModel gguf_ref = LoadRef(*gguf);
  ASSERT_EQ(gguf_ref.inv_freq.size(), ref.inv_freq.size());
  for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
    EXPECT_NEAR(gguf_ref.inv_freq[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << "frequency " << i;
  }
  const double ref_twin = WorstRelL2(ref_logits, RefForward(gguf_ref, ids), 1e-6);
  const auto gguf_logits = CascadeLogits(*gguf, ids, tc.threads);
  const double gguf_err = WorstRelL2(ref_logits, gguf_logits, kBound);
  std::vector<std::vector<double>> hf_rows;
  for (const auto& row : hf_logits) hf_rows.emplace_back(row.begin(), row.end());
  const double twin = WorstRelL2(hf_rows, gguf_logits, kTwinBound);
  std::printf(
      "[ info ] %s: worst relative L2 logit error HF %.3g, GGUF %.3g (bound %.3g); HF vs GGUF %.3g (bound %.3g), "
      "their references %.3g\n",
      tc.name, hf_err, gguf_err, kBound, twin, kTwinBound, ref_twin);
}

INSTANTIATE_TEST_SUITE_P(Models, HfCheckpointTest,
                         ::testing::Values(HfCase{"Qwen3_f32", DType::kF32, true, false, false, false, 2},
                                           HfCase{"Qwen3_bf16_tied", DType::kBF16, true, false, false, true},
                                           HfCase{"Qwen2_f16", DType::kF16, false, true},
                                           HfCase{"Llama31_f32", DType::kF32, false, false, true},
                                           HfCase{"Llama31_f16_tied", DType::kF16, false, false, true, true, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

// The directory is a whole checkpoint: LocalEngine (which also reads tokenizer.json) loads
// it, its tokenizer is the GGUF file's, and so are its prompt logits.
TEST(HfCheckpointEngineTest, LoadsLikeTheGgufFile) {
  testing::TempDir dir;
  const testing::RandomModelSpec spec{.llama3_rope = kLlama31Rope};
  testing::WriteRandomHfModel(spec, dir.path() + "/hf");
  testing::WriteRandomModel(spec, dir.path() + "/model.gguf");
  auto a = LocalEngine::Create(dir.path() + "/hf", {});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = LocalEngine::Create(dir.path() + "/model.gguf", {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->tokenizer().n_vocab(), (*b)->tokenizer().n_vocab());
  EXPECT_EQ((*a)->tokenizer().eos_id(), (*b)->tokenizer().eos_id());
  const std::vector<int32_t> ids = (*a)->tokenizer().Encode("Hi !!! there, 42", false);
  EXPECT_EQ(ids, (*b)->tokenizer().Encode("Hi !!! there, 42", false));
  ASSERT_GT(ids.size(), 4u);
  auto la = (*a)->PromptLogits(ids, 0), lb = (*b)->PromptLogits(ids, 0);
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), lb->size());
  const std::vector<double> ref(la->begin(), la->end());
  const double e = RelL2(ref, lb->data());
  EXPECT_LT(e, 1e-3);  // The engines' KV cache may hold f16.
  std::printf("[ info ] engine prompt logits, HF vs GGUF: relative L2 %.3g (bound 1e-3)\n", e);
}

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
    auto cache = KvCache::Create((*t)->CacheOptions(2, 16, DType::kF32));
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
  auto cache = KvCache::Create((*t)->CacheOptions(2, 16, DType::kF32));
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
