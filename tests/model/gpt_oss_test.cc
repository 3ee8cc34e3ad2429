// gpt-oss (model_type gpt_oss) against a naive double-precision forward written here from
// transformers' modeling_gpt_oss.py: a random model in the layout of transformers'
// GptOss* modules (merged experts, gate and up interleaved, input-major), written as a
// Hugging Face directory of F32 tensors, with everything that sets the architecture
// apart: Q/K/V and O biases, attention sinks, a sliding window on the even layers (shorter
// than the test's context, so it masks), YaRN without truncation, a router with a bias and
// the softmax over its top-k logits, expert biases, and the clamped SwiGLU (limit 1.5, so
// that many values clamp). Each of the window, the sinks and the clamp moves the
// reference's logits far past the bound, so Cascade ignoring one would fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "model/format/model_files.h"
#include "tests/gpt_oss_model.h"
#include "tests/model/naive_forward.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using namespace gpt_oss_test;  // NOLINT: the model's shape throughout.

// What the reference leaves out, to show that each part matters.
struct Ablation {
  bool window = true, sinks = true, clamp = true;
};

std::vector<double> RmsNorm(const std::vector<double>& x, const Vec& w) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1 / std::sqrt(ss / x.size() + 1e-5);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
  return out;
}

// y = W x + b, W [rows, x.size()] row-major.
std::vector<double> Affine(const Vec& w, const Vec& b, const std::vector<double>& x, int64_t rows) {
  std::vector<double> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = b.empty() ? 0 : b[r];
    for (size_t c = 0; c < x.size(); ++c) s += double(w[r * x.size() + c]) * x[c];
    y[r] = s;
  }
  return y;
}

// transformers' rotate_half RoPE with YaRN's frequencies, cos and sin times its factor.
void Rope(std::vector<double>& x, int64_t n_heads, int64_t pos) {
  double factor = 1;
  const std::vector<double> inv = naive::HfYarnInvFreq(kTheta, kHeadDim, kYarn, factor);
  for (int64_t h = 0; h < n_heads; ++h) {
    double* v = x.data() + h * kHeadDim;
    for (int64_t i = 0; i < kHeadDim / 2; ++i) {
      const double c = std::cos(pos * inv[i]) * factor, s = std::sin(pos * inv[i]) * factor;
      const double a = v[i], b = v[i + kHeadDim / 2];
      v[i] = a * c - b * s;
      v[i + kHeadDim / 2] = b * c + a * s;
    }
  }
}

std::vector<double> Moe(const Layer& L, const std::vector<double>& x, const Ablation& ab) {
  const std::vector<double> logits = Affine(L.router, L.router_bias, x, kExperts);
  std::vector<int> order(kExperts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  double z = 0;
  for (int i = 0; i < kTopK; ++i) z += std::exp(logits[order[i]] - logits[order[0]]);
  std::vector<double> out(kEmbd, 0.0);
  for (int i = 0; i < kTopK; ++i) {
    const int e = order[i];
    const double weight = std::exp(logits[e] - logits[order[0]]) / z;
    std::vector<double> act(kFf);
    for (int64_t j = 0; j < kFf; ++j) {
      double g = L.gate_up_bias[e * 2 * kFf + 2 * j], u = L.gate_up_bias[e * 2 * kFf + 2 * j + 1];
      for (int64_t c = 0; c < kEmbd; ++c) {
        g += x[c] * L.gate_up[(e * kEmbd + c) * 2 * kFf + 2 * j];
        u += x[c] * L.gate_up[(e * kEmbd + c) * 2 * kFf + 2 * j + 1];
      }
      if (ab.clamp) {
        g = std::min(g, kLimit);
        u = std::clamp(u, -kLimit, kLimit);
      }
      act[j] = (u + 1) * g / (1 + std::exp(-kAlpha * g));
    }
    for (int64_t c = 0; c < kEmbd; ++c) {
      double y = L.down_bias[e * kEmbd + c];
      for (int64_t j = 0; j < kFf; ++j) y += act[j] * L.down[(e * kFf + j) * kEmbd + c];
      out[c] += weight * y;
    }
  }
  return out;
}

std::vector<std::vector<double>> Reference(const Model& m, const std::vector<int32_t>& ids, const Ablation& ab) {
  const int64_t q_dim = kHeads * kHeadDim, kv_dim = kKvHeads * kHeadDim, group = kHeads / kKvHeads;
  std::vector<std::vector<std::vector<double>>> keys(kLayers), values(kLayers);
  std::vector<std::vector<double>> logits;
  for (int64_t pos = 0; pos < static_cast<int64_t>(ids.size()); ++pos) {
    std::vector<double> h(m.embd.begin() + ids[pos] * kEmbd, m.embd.begin() + (ids[pos] + 1) * kEmbd);
    for (int64_t l = 0; l < kLayers; ++l) {
      const Layer& L = m.layers[l];
      const std::vector<double> x = RmsNorm(h, L.attn_norm);
      std::vector<double> q = Affine(L.wq, L.bq, x, q_dim), k = Affine(L.wk, L.bk, x, kv_dim);
      Rope(q, kHeads, pos);
      Rope(k, kKvHeads, pos);
      keys[l].push_back(k);
      values[l].push_back(Affine(L.wv, L.bv, x, kv_dim));
      const int64_t first = ab.window && l % 2 == 0 ? std::max<int64_t>(0, pos + 1 - kWindow) : 0;
      std::vector<double> att(q_dim, 0.0);
      for (int64_t hd = 0; hd < kHeads; ++hd) {
        const int64_t kvh = hd / group;
        std::vector<double> s;
        double mx = ab.sinks ? double(L.sinks[hd]) : -1e300;
        for (int64_t t = first; t <= pos; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < kHeadDim; ++i) dot += q[hd * kHeadDim + i] * keys[l][t][kvh * kHeadDim + i];
          s.push_back(dot / std::sqrt(double(kHeadDim)));
          mx = std::max(mx, s.back());
        }
        double z = ab.sinks ? std::exp(L.sinks[hd] - mx) : 0;
        for (double& v : s) z += (v = std::exp(v - mx));
        for (int64_t t = first; t <= pos; ++t) {
          for (int64_t i = 0; i < kHeadDim; ++i) {
            att[hd * kHeadDim + i] += s[t - first] / z * values[l][t][kvh * kHeadDim + i];
          }
        }
      }
      const std::vector<double> o = Affine(L.wo, L.bo, att, kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) h[i] += o[i];
      const std::vector<double> ffn = Moe(L, RmsNorm(h, L.post_norm), ab);
      for (int64_t i = 0; i < kEmbd; ++i) h[i] += ffn[i];
    }
    logits.push_back(Affine(m.lm_head, {}, RmsNorm(h, m.norm), kVocab));
  }
  return logits;
}

TEST(GptOssTest, MatchesTheNaiveForwardOfTransformersModel) {
  constexpr double kBound = 1e-4;
  const Model m = MakeModel();
  testing::TempDir dir;
  auto files = OpenModelFiles(WriteHf(m, dir.path() + "/gpt-oss"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->weights->FindTensor("model.layers.1.mlp.experts.gate_up_proj"), nullptr)
      << "the merged experts are read as one tensor per expert";
  ASSERT_NE(files->weights->FindTensor("model.layers.1.mlp.experts.3.down_proj.weight"), nullptr);
  const std::vector<int32_t> ids = naive::TestIds(kVocab);
  const auto ref = Reference(m, ids, {});
  for (const auto& [what, ab] :
       {std::pair{"window", Ablation{.window = false}}, std::pair{"sinks", Ablation{.sinks = false}},
        std::pair{"clamp", Ablation{.clamp = false}}}) {
    const double moved = naive::WorstRelL2(ref, Reference(m, ids, ab));
    EXPECT_GT(moved, 100 * kBound) << "without the " << what << " the reference should move";
    std::printf("[ info ] without the %s the reference moves by %.3g\n", what, moved);
  }
  const double err = naive::WorstRelL2(ref, naive::CascadeLogits(*files, ids, 2), kBound);
  std::printf("[ info ] gpt-oss: worst relative L2 %.3g over %zu positions (bound %.3g)\n", err, ids.size(), kBound);
}

// OpenAI's MXFP4 release layout (experts as U8 `_blocks` / `_scales`, quant_method mxfp4):
// Cascade reads the codes and exponents as GGUF's MXFP4 blocks, which decode exactly to the
// values they stand for (decoded in gpt_oss_model.cc from the OCP definition), every
// expert's gate, up and down; and its logits follow the naive forward of those values
// within the bound of the CPU's MXFP4 kernel, which quantizes activations to 8 bits
// (kernels: 2e-2 per product, tests/kernels/linear_test.cc; here 2.7e-2 measured after
// two layers of this model).
TEST(GptOssTest, Mxfp4CheckpointMatchesTheValuesItStandsFor) {
  constexpr double kBound = 5e-2;
  Model m = MakeModel();
  const std::vector<Mxfp4Layer> mx = MakeMxfp4Experts(m);
  testing::TempDir dir;
  auto files = OpenModelFiles(WriteHf(m, dir.path() + "/mxfp4", &mx));
  ASSERT_TRUE(files.ok()) << files.status();
  const TensorInfo* t = files->weights->FindTensor("model.layers.1.mlp.experts.2.up_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kMXFP4);
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int64_t e = 0; e < kExperts; ++e) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
      for (const char* which : {"gate_proj", "up_proj", "down_proj"}) {
        auto w = files->weights->Read(p + which + ".weight");
        ASSERT_TRUE(w.ok()) << w.status();
        const bool down = std::string(which) == "down_proj";
        const int64_t rows = down ? kEmbd : kFf, cols = down ? kFf : kEmbd;
        std::vector<float> row(cols);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_TRUE(kernels::cpu::DequantizeRow(
                          DType::kMXFP4, static_cast<const uint8_t*>(w->data) + r * RowBytes(DType::kMXFP4, cols),
                          row.data(), cols)
                          .ok());
          for (int64_t c = 0; c < cols; ++c) {
            const Layer& L = m.layers[l];
            const float want = down ? L.down[(e * kFf + c) * kEmbd + r]
                                    : L.gate_up[(e * kEmbd + c) * 2 * kFf + 2 * r + (which[0] == 'u' ? 1 : 0)];
            ASSERT_EQ(row[c], want) << p << which << " [" << r << ", " << c << "]";
          }
        }
      }
    }
  }
  const std::vector<int32_t> ids = naive::TestIds(kVocab);
  const auto ref = Reference(m, ids, {});
  const double err = naive::WorstRelL2(ref, naive::CascadeLogits(*files, ids, 2), kBound);
  std::printf("[ info ] gpt-oss MXFP4: worst relative L2 %.3g (bound %.3g)\n", err, kBound);
}

}  // namespace
}  // namespace cascade::model
