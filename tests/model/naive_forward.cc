#include "tests/model/naive_forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/format/gguf.h"
#include "model/transformer.h"
#include "tests/test_support.h"

namespace cascade::model::naive {
namespace {

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
  // Act-order GPTQ: the loader stores the columns in the order `P.input_order` names (the
  // inputs sorted by group, model/format/int4_checkpoint.h, whose tests hold that order and
  // those values to the format's definition); the reference puts them back in input order.
  const std::string base = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : std::string();
  if (!base.empty() && f.FindTensor(base + ".input_order") != nullptr) {
    auto order = f.Read(base + ".input_order");
    EXPECT_TRUE(order.ok()) << order.status();
    const int32_t* o = order->As<int32_t>();
    Mat m(tmp.size());
    for (int64_t r = 0; r < t->Rows(); ++r)
      for (int64_t j = 0; j < cols; ++j) m[r * cols + o[j]] = tmp[r * cols + j];
    return m;
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

}  // namespace

// YaRN's frequencies and attention factor from Hugging Face's formula (transformers'
// modeling_rope_utils.py, _compute_yarn_parameters, with beta_fast 32, beta_slow 1,
// the ends truncated to whole dimensions or not), in double: dimension i keeps its frequency below the ramp, is divided
// by `factor` above it, and blends linearly between its ends (floor and ceil of the dimensions that turn beta_fast and
// beta_slow times over the original context).
std::vector<double> HfYarnInvFreq(double base, int64_t dim, const testing::YarnRopeScaling& y, double& attention) {
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(y.original_max_position_embeddings / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  const double lo = correction_dim(32), hi = correction_dim(1);
  const double low = std::max(y.truncate ? std::floor(lo) : lo, 0.0);
  double high = std::min(y.truncate ? std::ceil(hi) : hi, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  std::vector<double> inv;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, 2.0 * i / dim);
    const double ramp = std::min(1.0, std::max(0.0, (i - low) / (high - low)));
    const double extrapolation_factor = 1 - ramp;
    inv.push_back(1 / (y.factor * pos_freq) * (1 - extrapolation_factor) + 1 / pos_freq * extrapolation_factor);
  }
  attention = y.factor <= 1 ? 1.0 : 0.1 * std::log(y.factor) + 1.0;
  return inv;
}

namespace {

// A GGUF file's RoPE by llama.cpp's rules, from its metadata: base `rope.freq_base` (10000
// when absent), YaRN from `rope.scaling.{type,factor,original_context_length}`.
void GgufRope(const GgufFile& f, const std::string& arch, int64_t d, RefModel& m) {
  const double theta = f.GetFloat(arch + ".rope.freq_base").value_or(10000.0);
  for (int64_t i = 0; i < d / 2; ++i) m.inv_freq.push_back(std::pow(theta, -2.0 * i / d));
  if (f.GetString(arch + ".rope.scaling.type").value_or("") != "yarn") return;
  const testing::YarnRopeScaling y{
      .factor = *f.GetFloat(arch + ".rope.scaling.factor"),
      .original_max_position_embeddings = *f.GetInt(arch + ".rope.scaling.original_context_length")};
  m.inv_freq = HfYarnInvFreq(theta, d, y, m.attention_factor);
}

// A MoE layer's experts, by the file's own names: GGUF's router `ffn_gate_inp` and merged
// [n_experts, rows, cols] tensors `ffn_{gate,up,down}_exps`, split here per expert; Hugging
// Face's router (`mlp.gate`, Mixtral's `block_sparse_moe.gate`) and per-expert tensors
// (`mlp.experts.E.{gate,up,down}_proj`, Mixtral's `block_sparse_moe.experts.E.{w1,w3,w2}`).
void LoadExperts(const WeightSource& w, bool hf, int64_t l, RefModel::Layer& L) {
  const std::string g = StrCat("blk.", l, "."), h = StrCat("model.layers.", l, ".");
  const bool mixtral = hf && w.FindTensor(h + "block_sparse_moe.gate.weight") != nullptr;
  const std::string moe = h + (mixtral ? "block_sparse_moe." : "mlp.");
  L.router = Load(w, hf ? moe + "gate.weight" : g + "ffn_gate_inp.weight");
  if (L.router.empty()) return;
  if (hf) {
    for (int64_t e = 0;; ++e) {
      const std::string p = StrCat(moe, "experts.", e, ".");
      Mat gate = Load(w, p + (mixtral ? "w1.weight" : "gate_proj.weight"));
      if (gate.empty()) break;
      L.exp_gate.push_back(std::move(gate));
      L.exp_up.push_back(Load(w, p + (mixtral ? "w3.weight" : "up_proj.weight")));
      L.exp_down.push_back(Load(w, p + (mixtral ? "w2.weight" : "down_proj.weight")));
    }
    L.sh_gate = Load(w, moe + "shared_expert.gate_proj.weight");
    L.sh_up = Load(w, moe + "shared_expert.up_proj.weight");
    L.sh_down = Load(w, moe + "shared_expert.down_proj.weight");
    L.sh_router = Load(w, moe + "shared_expert_gate.weight");
  } else {
    const int64_t n_experts = w.FindTensor(g + "ffn_gate_exps.weight")->shape[0];
    const auto split = [&](const std::string& name, std::vector<Mat>& out) {
      const Mat all = Load(w, name);
      const size_t per = all.size() / n_experts;
      for (int64_t e = 0; e < n_experts; ++e) out.emplace_back(all.begin() + e * per, all.begin() + (e + 1) * per);
    };
    split(g + "ffn_gate_exps.weight", L.exp_gate);
    split(g + "ffn_up_exps.weight", L.exp_up);
    split(g + "ffn_down_exps.weight", L.exp_down);
    L.sh_gate = Load(w, g + "ffn_gate_shexp.weight");
    L.sh_up = Load(w, g + "ffn_up_shexp.weight");
    L.sh_down = Load(w, g + "ffn_down_shexp.weight");
    L.sh_router = Load(w, g + "ffn_gate_inp_shexp.weight");
  }
}

}  // namespace

HfRope HfRopeOf(const testing::RandomModelSpec& spec) {
  return {.theta = spec.rope_theta, .llama3 = spec.llama3_rope, .yarn = spec.yarn_rope};
}

RefModel LoadRef(const ModelFiles& files, const HfRope& hf_rope, RefRouting routing) {
  const bool hf = files.format == ModelFormat::kHuggingFace;
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
    RefModel::Layer& L = m.layers.emplace_back();
    L.attn_norm = t("attn_norm.weight", "input_layernorm.weight");
    L.wq = t("attn_q.weight", "self_attn.q_proj.weight");
    L.wk = t("attn_k.weight", "self_attn.k_proj.weight");
    L.wv = t("attn_v.weight", "self_attn.v_proj.weight");
    L.bq = t("attn_q.bias", "self_attn.q_proj.bias");
    L.bk = t("attn_k.bias", "self_attn.k_proj.bias");
    L.bv = t("attn_v.bias", "self_attn.v_proj.bias");
    L.wo = t("attn_output.weight", "self_attn.o_proj.weight");
    L.ffn_norm = t("ffn_norm.weight", "post_attention_layernorm.weight");
    L.gate = t("ffn_gate.weight", "mlp.gate_proj.weight");
    L.up = t("ffn_up.weight", "mlp.up_proj.weight");
    L.down = t("ffn_down.weight", "mlp.down_proj.weight");
    L.q_norm = t("attn_q_norm.weight", "self_attn.q_norm.weight");
    L.k_norm = t("attn_k_norm.weight", "self_attn.k_norm.weight");
    LoadExperts(w, hf, l, L);
  }
  m.routing = routing;
  const int64_t d = m.c.head_dim;
  if (hf) {
    for (int64_t i = 0; i < d / 2; ++i) m.inv_freq.push_back(std::pow(hf_rope.theta, -2.0 * i / d));
    if (hf_rope.llama3.has_value()) m.inv_freq = HfLlama3InvFreq(m.inv_freq, *hf_rope.llama3);
    if (hf_rope.yarn.has_value()) m.inv_freq = HfYarnInvFreq(hf_rope.theta, d, *hf_rope.yarn, m.attention_factor);
  } else {
    GgufRope(*files.gguf, m.c.arch, d, m);
    for (int64_t i = 0; i < d / 2 && !m.rope_freqs.empty(); ++i) m.inv_freq[i] /= m.rope_freqs[i];
  }
  // From the file's format and architecture, not the config's layout.
  m.neox = hf || m.c.arch != "llama";
  return m;
}

namespace {

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

// Frequency i turns by pos * inv_freq[i], cos and sin scaled by `scale`. It rotates elements (2i, 2i + 1) of each head
// in llama.cpp's NORM layout (GGUF `llama`, whose Q/K rows the converter permuted), and (i, i + d/2) in its NEOX layout
// (GGUF `qwen2`/`qwen3` and Hugging Face: rotate_half).
void Rope(std::vector<double>& x, int64_t n_heads, int64_t d, int64_t pos, const std::vector<double>& inv_freq,
          bool neox, double scale) {
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double ang = pos * inv_freq[i];
      double& a = x[h * d + (neox ? i : 2 * i)];
      double& b = x[h * d + (neox ? i + d / 2 : 2 * i + 1)];
      const double a0 = a, b0 = b;
      const double cos = scale * std::cos(ang), sin = scale * std::sin(ang);
      a = a0 * cos - b0 * sin;
      b = a0 * sin + b0 * cos;
    }
  }
}

double Silu(double x) { return x / (1 + std::exp(-x)); }

// The E4M3 value nearest x by the OCP definition (testing::OcpE4M3 over every finite code),
// ties to the even code; magnitudes past 448 saturate.
double NearestE4M3(double x) {
  double best = 0;
  int best_code = 0;
  for (int code = 0; code < 0x7f; ++code) {  // 0x7f is NaN.
    const double value = testing::OcpE4M3(static_cast<uint8_t>(code));
    const double gap = std::fabs(std::fabs(x) - value), best_gap = std::fabs(std::fabs(x) - best);
    if (gap < best_gap || (gap == best_gap && code % 2 == 0 && best_code % 2 == 1)) {
      best = value;
      best_code = code;
    }
  }
  return x < 0 ? -best : best;
}

// down(silu(gate x) * up x) of one (dense or expert) FFN.
std::vector<double> Ffn(const Mat& gate, const Mat& up, const Mat& down, const std::vector<double>& x, int64_t n_embd) {
  const int64_t n_ff = static_cast<int64_t>(gate.size()) / n_embd;
  auto g = MatVec(gate, x, n_ff);
  const auto u = MatVec(up, x, n_ff);
  for (int64_t i = 0; i < n_ff; ++i) g[i] = Silu(g[i]) * u[i];
  return MatVec(down, g, n_embd);
}

// transformers' sparse MoE block: softmax over the router's logits, the top k (by
// probability; the lower id first on ties), renormalised when the family does, each chosen
// expert's FFN weighted by its probability; plus Qwen2-MoE's shared expert scaled by
// sigmoid(shared_expert_gate(x)).
std::vector<double> MoeFfn(const RefModel::Layer& L, const RefRouting& r, const std::vector<double>& x, int64_t n_embd,
                           std::vector<int64_t>* load) {
  const int64_t n_experts = static_cast<int64_t>(L.exp_gate.size());
  const auto logits = MatVec(L.router, x, n_experts);
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(n_experts);
  double z = 0;
  for (int64_t e = 0; e < n_experts; ++e) z += (p[e] = std::exp(logits[e] - mx));
  for (double& v : p) v /= z;
  std::vector<int64_t> order(n_experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  double chosen = 0;
  for (int64_t i = 0; i < r.top_k; ++i) chosen += p[order[i]];
  std::vector<double> out(n_embd, 0.0);
  for (int64_t i = 0; i < r.top_k; ++i) {
    const int64_t e = order[i];
    if (load != nullptr) ++(*load)[e];
    const double w = r.norm_topk ? p[e] / chosen : p[e];
    const auto y = Ffn(L.exp_gate[e], L.exp_up[e], L.exp_down[e], x, n_embd);
    for (int64_t j = 0; j < n_embd; ++j) out[j] += w * y[j];
  }
  if (!L.sh_gate.empty()) {
    double g = 0;
    for (int64_t j = 0; j < n_embd; ++j) g += L.sh_router[j] * x[j];
    const double s = 1 / (1 + std::exp(-g));
    const auto y = Ffn(L.sh_gate, L.sh_up, L.sh_down, x, n_embd);
    for (int64_t j = 0; j < n_embd; ++j) out[j] += s * y[j];
  }
  return out;
}

}  // namespace

std::vector<std::vector<double>> RefForward(const RefModel& m, const std::vector<int32_t>& ids,
                                            std::vector<std::vector<int64_t>>* load) {
  if (load != nullptr) {
    load->assign(m.c.n_layers, {});
    for (int64_t l = 0; l < m.c.n_layers; ++l) load->at(l).assign(m.layers[l].exp_gate.size(), 0);
  }
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
      Rope(q, c.n_heads, d, pos, m.inv_freq, m.neox, m.attention_factor);
      Rope(k, c.n_kv_heads, d, pos, m.inv_freq, m.neox, m.attention_factor);
      if (!m.fp8_k_scale.empty()) {
        for (int64_t i = 0; i < c.kv_dim(); ++i) {
          const size_t head = static_cast<size_t>(l * c.n_kv_heads + i / d);
          k[i] = NearestE4M3(k[i] / m.fp8_k_scale[head]) * m.fp8_k_scale[head];
          v[i] = NearestE4M3(v[i] / m.fp8_v_scale[head]) * m.fp8_v_scale[head];
        }
      }
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
      const auto dn = L.router.empty() ? Ffn(L.gate, L.up, L.down, x, c.n_embd)
                                       : MoeFfn(L, m.routing, x, c.n_embd, load != nullptr ? &(*load)[l] : nullptr);
      for (int64_t i = 0; i < c.n_embd; ++i) h[i] += dn[i];
    }
    all_logits.push_back(MatVec(m.output, RmsNorm(h, m.out_norm, c.norm_eps), c.n_vocab));
  }
  return all_logits;
}

namespace {

template <typename T>
double RelL2T(const std::vector<double>& ref, const T* got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - got[i]) * (ref[i] - got[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

template <typename T>
double WorstRelL2T(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<T>>& got, double bound) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t r = 0; r < std::min(ref.size(), got.size()); ++r) {
    EXPECT_EQ(got[r].size(), ref[r].size());
    const double e = RelL2T(ref[r], got[r].data());
    if (bound > 0) {
      EXPECT_LT(e, bound) << "position " << r;
    }
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace

double RelL2(const std::vector<double>& ref, const float* got) { return RelL2T(ref, got); }
double RelL2(const std::vector<double>& ref, const double* got) { return RelL2T(ref, got); }
double WorstRelL2(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<float>>& got,
                  double bound) {
  return WorstRelL2T(ref, got, bound);
}
double WorstRelL2(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<double>>& got,
                  double bound) {
  return WorstRelL2T(ref, got, bound);
}

// The 41 token ids every case runs.
std::vector<int32_t> TestIds(int64_t n_vocab) {
  std::vector<int32_t> ids(41);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % n_vocab);
  return ids;
}

// Cascade's logits after each of `ids`: a prefill of the first 37 tokens (three KV blocks of
// 16, not contiguous) with logits at every row, then one decode step per remaining token.
std::vector<std::vector<float>> CascadeLogits(const ModelFiles& files, const std::vector<int32_t>& ids, int threads,
                                              DType kv_dtype) {
  auto backend = kernels::MakeCpuBackend({.n_threads = threads});
  auto t = Transformer::Load(files, backend.get(), {});
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  auto cache = KvCache::Create((*t)->CacheOptions(4, 16, kv_dtype));
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

}  // namespace cascade::model::naive
