#include "tests/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/logging.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/format/gguf_writer.h"
#include "tests/int4_writer.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::testing {
namespace {

constexpr float kNormEps = 1e-5f;
constexpr int64_t kGptqGroup = 128;

// An act-order GPTQ matrix's input order (column j of the sorted matrix is input perm[j]):
// a stride through the inputs that differs per expert and between the matrices of the
// layer's input (Q/K/V, gate/up) and the `second` ones (O, down), so that every group of
// 128 mixes inputs from all over the row.
std::vector<int64_t> ActOrder(int64_t n_in, int64_t expert, bool second) {
  const int64_t stride = second ? 101 : 97, offset = 5 + 3 * expert;
  CASCADE_CHECK(std::gcd(stride, n_in) == 1) << n_in << " inputs";  // A permutation.
  std::vector<int64_t> perm(n_in);
  for (int64_t j = 0; j < n_in; ++j) perm[j] = (j * stride + offset) % n_in;
  return perm;
}

// `v` [rows, cols] stored as `t`. When v repeats with a period of `period` values (the
// spec's distinct_values) that whole blocks tile, the blocks of one period are encoded and
// repeated: block encodings depend on their own values only, and the 8B shapes of the GPU
// benchmark would otherwise quantize billions of values.
std::string Encode(DType t, const std::vector<float>& v, int64_t cols, int64_t period = 0) {
  const int64_t n = static_cast<int64_t>(v.size()), rows = n / cols;
  const int64_t row_bytes = RowBytes(t, cols), elems = BlockElems(t), bytes = BlockBytes(t);
  std::string out(rows * row_bytes, '\0');
  if (period > 0 && period < n && period % elems == 0 && cols % elems == 0 && n % period == 0) {
    CASCADE_CHECK(kernels::cpu::QuantizeRow(t, v.data(), out.data(), period).ok());
    const size_t period_bytes = static_cast<size_t>(period / elems * bytes);
    for (size_t at = period_bytes; at < out.size(); at += period_bytes) {
      std::memcpy(out.data() + at, out.data(), std::min(period_bytes, out.size() - at));
    }
    return out;
  }
  for (int64_t r = 0; r < rows; ++r) {
    CASCADE_CHECK(kernels::cpu::QuantizeRow(t, v.data() + r * cols, out.data() + r * row_bytes, cols).ok());
  }
  return out;
}

// The GGUF architecture name (llama.cpp's).
std::string Arch(const RandomModelSpec& s) {
  switch (s.moe) {
    case MoeFamily::kMixtral: return "llama";
    case MoeFamily::kQwen2Moe: return "qwen2moe";
    case MoeFamily::kQwen3Moe: return "qwen3moe";
    case MoeFamily::kNone: break;
  }
  return s.qk_norm ? "qwen3" : s.qkv_bias ? "qwen2" : "llama";
}

// config.json's model_type and architectures entry.
std::pair<std::string, std::string> HfArch(const RandomModelSpec& s) {
  switch (s.moe) {
    case MoeFamily::kMixtral: return {"mixtral", "MixtralForCausalLM"};
    case MoeFamily::kQwen2Moe: return {"qwen2_moe", "Qwen2MoeForCausalLM"};
    case MoeFamily::kQwen3Moe: return {"qwen3_moe", "Qwen3MoeForCausalLM"};
    case MoeFamily::kNone: break;
  }
  if (s.qk_norm) return {"qwen3", "Qwen3ForCausalLM"};
  if (s.qkv_bias) return {"qwen2", "Qwen2ForCausalLM"};
  if (s.mistral) return {"mistral", "MistralForCausalLM"};
  return {"llama", "LlamaForCausalLM"};
}

bool QkNorm(const RandomModelSpec& s) { return s.qk_norm || s.moe == MoeFamily::kQwen3Moe; }
bool QkvBias(const RandomModelSpec& s) { return s.qkv_bias || s.moe == MoeFamily::kQwen2Moe; }
bool Mlp(const RandomModelSpec& s, int64_t layer) {
  return s.moe == MoeFamily::kNone ||
         std::find(s.mlp_only_layers.begin(), s.mlp_only_layers.end(), layer) != s.mlp_only_layers.end();
}

// One tensor of the model under both files' names, its values as the GGUF file holds them.
struct Tensor {
  std::string gguf, hf;  // `hf` empty: Hugging Face files do not have it.
  DType dtype;
  std::vector<int64_t> shape;  // Outermost first.
  std::vector<float> values;
  // > 0: Q or K of a GGUF `llama` model, whose rows (of this many heads) llama.cpp's
  // converter permuted from Hugging Face's order.
  int64_t permuted_heads = 0;
  // > 0: a GGUF merged expert tensor [experts, rows, cols]; Hugging Face stores one tensor
  // per expert, named `hf` with "{e}" replaced by the expert's index.
  int64_t experts = 0;
  std::vector<int64_t> hf_shape = {};  // Non-empty: the Hugging Face shape, when it differs.
  // With RandomModelSpec::fp8: E4M3 codes of `values` (expert by expert) and their scales
  // (a 128 x 128 grid, one per row, or one), which `values` now decode to.
  std::vector<uint8_t> fp8_codes = {};
  std::vector<float> fp8_scales = {};
  // With RandomModelSpec::quark_mxfp4: E2M1 codes of `values`, two a byte (the even
  // element low), and one E8M0 exponent per 32 of them, which `values` now decode to.
  std::vector<uint8_t> mx_codes = {};
  std::vector<uint8_t> mx_exponents = {};
};

// Quantizes matrix `v` [rows, cols] to E4M3 with scales in `form` (block: 128 x 128 grid),
// appending codes and scales to `t`, and replaces `v` by the values they decode to.
void QuantizeFp8(Fp8Form form, float* v, int64_t rows, int64_t cols, Tensor& t) {
  const int64_t br = form == Fp8Form::kBlock ? 128 : form == Fp8Form::kChannel ? 1 : rows;
  const int64_t bc = form == Fp8Form::kBlock ? 128 : cols;
  for (int64_t r0 = 0; r0 < rows; r0 += br) {
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
      float amax = 0.0f;
      for (int64_t r = r0; r < std::min(rows, r0 + br); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + bc); ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
      }
      t.fp8_scales.push_back(amax / kE4M3Max);
    }
  }
  const size_t first_scale = t.fp8_scales.size() - ((rows + br - 1) / br) * ((cols + bc - 1) / bc);
  const int64_t grid_cols = (cols + bc - 1) / bc;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float d = t.fp8_scales[first_scale + (r / br) * grid_cols + c / bc];
      const uint8_t q = F32ToE4M3(d != 0.0f ? v[r * cols + c] / d : 0.0f);
      t.fp8_codes.push_back(q);
      // The test's own OCP decoding (tests/test_support.h): exact, then one rounding.
      v[r * cols + c] = static_cast<float>(static_cast<double>(d) * OcpE4M3(q));
    }
  }
}

// Quantizes matrix `v` [rows, cols] to MXFP4 as OCP's MX spec defines it: per 32 inputs
// the exponent floor(log2(amax)) - 2 (E2M1's largest exponent), each value the nearest
// E2M1 code of v / 2^exponent (saturating at 6); appends codes and exponents to `t` and
// replaces `v` by the values they decode to (tests/test_support.h's OcpE2M1).
void QuantizeMxfp4(float* v, int64_t rows, int64_t cols, Tensor& t) {
  CASCADE_CHECK(cols % 32 == 0) << cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols; g += 32) {
      float* x = v + r * cols + g;
      float amax = 0.0f;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
      const int e = amax > 0 ? std::ilogb(amax) - 2 : -127;
      t.mx_exponents.push_back(static_cast<uint8_t>(e + 127));
      for (int k = 0; k < 32; k += 2) {
        uint8_t pair = 0;
        for (int half = 0; half < 2; ++half) {
          const double want = std::ldexp(static_cast<double>(x[k + half]), -e);
          uint8_t best = 0;
          for (uint8_t code = 1; code < 16; ++code) {
            if (std::fabs(testing::OcpE2M1(code) - want) < std::fabs(testing::OcpE2M1(best) - want)) best = code;
          }
          pair |= static_cast<uint8_t>(best << (4 * half));
          x[k + half] = static_cast<float>(std::ldexp(testing::OcpE2M1(best), e));
        }
        t.mx_codes.push_back(pair);
      }
    }
  }
}

// llama.cpp's convert_hf_to_gguf.py (LlamaModel, rope_type "llama3"): rope_freqs.weight[i]
// divides frequency i. (The converter reads original_max_position_embeddings from the top
// level of config.json, where Llama 3.1 has none, and falls back to 8192, the value inside
// its rope_scaling; here the value given is used.)
std::vector<float> Llama3RopeFreqFactors(const Llama3RopeScaling& r, int64_t head_dim, double theta) {
  const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / r.low_freq_factor;
  const double high_freq_wavelen = old_ctx / r.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(theta, 2.0 * i / head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  return factors;
}

// Layer l's router and experts (GGUF merged, Hugging Face per expert), and Qwen2-MoE's
// shared expert; `random(n, scale)` draws values.
template <typename Random>
void AddExperts(const RandomModelSpec& s, int64_t l, DType t, Random& random, std::vector<Tensor>& out) {
  const bool mixtral = s.moe == MoeFamily::kMixtral;
  const std::string g = StrCat("blk.", l, "."),
                    h = StrCat("model.layers.", l, mixtral ? ".block_sparse_moe." : ".mlp.");
  const int64_t E = s.n_experts, ff = s.n_ff_expert, d = s.n_embd;
  std::vector<float> router = random(E * d, 1.0f / std::sqrt(float(d)));
  if (s.hot_expert >= 0) router[s.hot_expert * d] = 5.0f;
  out.push_back({g + "ffn_gate_inp.weight", h + "gate.weight", DType::kF32, {E, d}, std::move(router)});
  const auto experts = [&](const char* gguf, const char* hf, int64_t rows, int64_t cols) {
    out.push_back({g + gguf,
                   h + "experts.{e}." + hf,
                   t,
                   {E, rows, cols},
                   random(E * rows * cols, 1.0f / std::sqrt(float(cols))),
                   0,
                   E});
  };
  experts("ffn_gate_exps.weight", mixtral ? "w1.weight" : "gate_proj.weight", ff, d);
  experts("ffn_up_exps.weight", mixtral ? "w3.weight" : "up_proj.weight", ff, d);
  experts("ffn_down_exps.weight", mixtral ? "w2.weight" : "down_proj.weight", d, ff);
  if (s.moe != MoeFamily::kQwen2Moe) return;
  const int64_t sh = s.n_ff_shared_expert;
  const auto mat = [&](const char* gguf, const char* hf, int64_t rows, int64_t cols) {
    out.push_back({g + gguf, h + hf, t, {rows, cols}, random(rows * cols, 1.0f / std::sqrt(float(cols)))});
  };
  mat("ffn_gate_shexp.weight", "shared_expert.gate_proj.weight", sh, d);
  mat("ffn_up_shexp.weight", "shared_expert.up_proj.weight", sh, d);
  mat("ffn_down_shexp.weight", "shared_expert.down_proj.weight", d, sh);
  out.push_back({g + "ffn_gate_inp_shexp.weight",
                 h + "shared_expert_gate.weight",
                 DType::kF32,
                 {d},
                 random(d, 1.0f / std::sqrt(float(d))),
                 0,
                 0,
                 {1, d}});
}

// Every tensor, drawn in one fixed order from the spec's seed.
std::vector<Tensor> RandomTensors(const RandomModelSpec& s) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](int64_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    const int64_t distinct = s.distinct_values > 0 ? std::min(n, s.distinct_values) : n;
    for (int64_t i = 0; i < distinct; ++i) v[i] = offset + scale * normal(rng);
    for (int64_t i = distinct; i < n; ++i) v[i] = v[i % distinct];
    return v;
  };
  const int64_t head_dim = s.n_embd / s.n_heads;
  const DType t = s.weight_type;
  const bool permuted = Arch(s) == "llama";
  std::vector<Tensor> out;
  // llama.cpp's Q4_K_M (llama-quant.cpp): Q6_K for the output, and for attn_v and ffn_down
  // of the layers where use_more_bits holds (the first and last eighth, every third between).
  const auto more_bits = [&](int64_t l) {
    return l < s.n_layers / 8 || l >= 7 * s.n_layers / 8 || (l - s.n_layers / 8) % 3 == 2;
  };
  const auto type_of = [&](const std::string& gguf) {
    if (!s.q4_k_m) return t;
    if (gguf == "output.weight") return DType::kQ6_K;
    const bool v_or_down = gguf.ends_with("attn_v.weight") || gguf.ends_with("ffn_down.weight");
    if (v_or_down && more_bits(std::stoll(gguf.substr(4)))) return DType::kQ6_K;
    return DType::kQ4_K;
  };
  const auto mat = [&](std::string gguf, std::string hf, int64_t rows, int64_t cols, int64_t heads = 0) {
    const DType type = type_of(gguf);
    out.push_back({std::move(gguf),
                   std::move(hf),
                   type,
                   {rows, cols},
                   random(rows * cols, 1.0f / std::sqrt(float(cols))),
                   permuted ? heads : 0});
  };
  const auto f32 = [&](std::string gguf, std::string hf, std::vector<float> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    out.push_back({std::move(gguf), std::move(hf), DType::kF32, {n}, std::move(v)});
  };
  out.push_back(
      {"token_embd.weight", "model.embed_tokens.weight", t, {s.n_vocab, s.n_embd}, random(s.n_vocab * s.n_embd, 1.0f)});
  if (s.hot_expert >= 0) {
    for (int64_t v = 0; v < s.n_vocab; ++v) out.back().values[v * s.n_embd] = 3.0f;
  }
  f32("output_norm.weight", "model.norm.weight", random(s.n_embd, 0.1f, 1.0f));
  if (!s.tied) mat("output.weight", "lm_head.weight", s.n_vocab, s.n_embd);
  CASCADE_CHECK(s.rope_freq_factors.empty() || !s.llama3_rope.has_value());
  if (!s.rope_freq_factors.empty()) f32("rope_freqs.weight", "", s.rope_freq_factors);
  if (s.llama3_rope.has_value())
    f32("rope_freqs.weight", "", Llama3RopeFreqFactors(*s.llama3_rope, head_dim, s.rope_theta));
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string g = StrCat("blk.", l, "."), h = StrCat("model.layers.", l, ".");
    f32(g + "attn_norm.weight", h + "input_layernorm.weight", random(s.n_embd, 0.1f, 1.0f));
    mat(g + "attn_q.weight", h + "self_attn.q_proj.weight", s.n_heads * head_dim, s.n_embd, s.n_heads);
    mat(g + "attn_k.weight", h + "self_attn.k_proj.weight", s.n_kv_heads * head_dim, s.n_embd, s.n_kv_heads);
    mat(g + "attn_v.weight", h + "self_attn.v_proj.weight", s.n_kv_heads * head_dim, s.n_embd);
    if (QkvBias(s)) {
      f32(g + "attn_q.bias", h + "self_attn.q_proj.bias", random(s.n_heads * head_dim, 0.1f));
      f32(g + "attn_k.bias", h + "self_attn.k_proj.bias", random(s.n_kv_heads * head_dim, 0.1f));
      f32(g + "attn_v.bias", h + "self_attn.v_proj.bias", random(s.n_kv_heads * head_dim, 0.1f));
    }
    if (QkNorm(s)) {
      f32(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", random(head_dim, 0.1f, 1.0f));
      f32(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", random(head_dim, 0.1f, 1.0f));
    }
    mat(g + "attn_output.weight", h + "self_attn.o_proj.weight", s.n_embd, s.n_heads * head_dim);
    f32(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", random(s.n_embd, 0.1f, 1.0f));
    if (Mlp(s, l)) {
      mat(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", s.n_ff, s.n_embd);
      mat(g + "ffn_up.weight", h + "mlp.up_proj.weight", s.n_ff, s.n_embd);
      mat(g + "ffn_down.weight", h + "mlp.down_proj.weight", s.n_embd, s.n_ff);
    } else {
      AddExperts(s, l, t, random, out);
    }
  }
  if (s.fp8 != Fp8Form::kNone) {
    CASCADE_CHECK(t == DType::kF32 && !permuted) << "FP8 checkpoints: F32, not llama (GGUF permutes its Q/K rows)";
    for (Tensor& x : out) {
      if (!x.hf.ends_with("_proj.weight")) continue;
      const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
      for (int64_t e = 0; e < std::max<int64_t>(x.experts, 1); ++e) {
        QuantizeFp8(s.fp8, x.values.data() + e * rows * cols, rows, cols, x);
      }
    }
  }
  if (s.quark_mxfp4) {
    CASCADE_CHECK(t == DType::kF32 && !permuted) << "MXFP4 checkpoints: F32, not llama (GGUF permutes its Q/K rows)";
    for (Tensor& x : out) {
      if (!x.hf.ends_with("_proj.weight")) continue;
      const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
      for (int64_t e = 0; e < std::max<int64_t>(x.experts, 1); ++e) {
        QuantizeMxfp4(x.values.data() + e * rows * cols, rows, cols, x);
      }
    }
  }
  return out;
}

// Undoes llama.cpp's `permute` (convert_hf_to_gguf.py) of Q/K rows: HF row h*d + j*d/2 + i
// is GGUF row h*d + 2*i + j.
std::vector<float> ToHfRowOrder(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t d = rows / heads;
  std::vector<float> out(v.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const float* src = v.data() + (h * d + 2 * i + j) * cols;
        std::copy(src, src + cols, out.data() + (h * d + j * d / 2 + i) * cols);
      }
    }
  }
  return out;
}

// A byte-level vocabulary: the 94 printable ASCII characters, GPT-2's space "Ġ", the merge
// "!!", then filler tokens.
std::vector<std::string> Vocabulary(const RandomModelSpec& s) {
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < s.n_vocab; ++i) {
    if (i < 94)
      tokens.push_back(std::string(1, static_cast<char>('!' + i)));
    else if (i == 94)
      tokens.push_back("\xc4\xa0");
    else if (i == 95)
      tokens.push_back("!!");
    else
      tokens.push_back(StrCat("<filler", i, ">"));
  }
  return tokens;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  CASCADE_CHECK(out.good()) << path;
}

// The RoPE scaling object of config.json (without rope_theta), or null.
nlohmann::json RopeScalingJson(const RandomModelSpec& s) {
  using Json = nlohmann::json;
  if (s.rope_linear_factor > 0) return {{"rope_type", "linear"}, {"factor", s.rope_linear_factor}};
  if (const auto& r = s.llama3_rope; r.has_value()) {
    return {{"rope_type", "llama3"},
            {"factor", r->factor},
            {"low_freq_factor", r->low_freq_factor},
            {"high_freq_factor", r->high_freq_factor},
            {"original_max_position_embeddings", r->original_max_position_embeddings}};
  }
  if (const auto& y = s.yarn_rope; y.has_value()) {
    return {{"rope_type", "yarn"},
            {"factor", y->factor},
            {"original_max_position_embeddings", y->original_max_position_embeddings}};
  }
  return Json(nullptr);
}

// config.json as the spec's transformers generation saves it (checked against
// save_pretrained of transformers 4.57.6 and 5.25.0; keys that do not change the model, such
// as initializer_range, left out).
nlohmann::json HfConfig(const RandomModelSpec& s) {
  using Json = nlohmann::json;
  const DType wt = s.weight_type;
  const bool v5 = s.hf_layout == HfLayout::kTransformers5;
  const auto [arch, architecture] = HfArch(s);
  const char* dtype = wt == DType::kF32 ? "float32" : wt == DType::kF16 ? "float16" : "bfloat16";
  Json c = {
      {"architectures", Json::array({architecture})},
      {"model_type", arch},
      {"hidden_size", s.n_embd},
      {"num_hidden_layers", s.n_layers},
      {"num_attention_heads", s.n_heads},
      {"num_key_value_heads", s.n_kv_heads},
      {"head_dim", s.n_embd / s.n_heads},
      {"intermediate_size", s.moe == MoeFamily::kMixtral ? s.n_ff_expert : s.n_ff},
      {"vocab_size", s.n_vocab},
      {"max_position_embeddings", s.n_ctx},
      {"rms_norm_eps", 1e-5},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", s.tied},
      {v5 ? "dtype" : "torch_dtype", dtype},
      {"eos_token_id", 0},
      {"transformers_version", v5 ? "5.25.0" : "4.46.0"},
  };
  Json rope = RopeScalingJson(s);
  if (v5) {
    if (rope.is_null()) rope = {{"rope_type", "default"}};
    rope["rope_theta"] = s.rope_theta;
    c["rope_parameters"] = rope;
  } else {
    c["rope_theta"] = s.rope_theta;
    c["rope_scaling"] = rope;
  }
  if (arch == "llama" || arch == "qwen3" || arch == "qwen3_moe") c["attention_bias"] = false;
  if (arch == "mistral" || arch == "mixtral") c["sliding_window"] = nullptr;
  if (arch.rfind("qwen", 0) == 0) {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    if (v5 && arch != "qwen3_moe") c["layer_types"] = std::vector<std::string>(s.n_layers, "full_attention");
  }
  if (s.moe == MoeFamily::kMixtral) {
    c["num_local_experts"] = s.n_experts;
    c["num_experts_per_tok"] = s.n_experts_used;
  } else if (s.moe != MoeFamily::kNone) {
    c[v5 && s.moe == MoeFamily::kQwen3Moe ? "num_local_experts" : "num_experts"] = s.n_experts;
    c["num_experts_per_tok"] = s.n_experts_used;
    c["moe_intermediate_size"] = s.n_ff_expert;
    c["norm_topk_prob"] = s.norm_topk_prob;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = s.mlp_only_layers;
    if (s.moe == MoeFamily::kQwen2Moe) {
      c["shared_expert_intermediate_size"] = s.n_ff_shared_expert;
      if (v5) c["qkv_bias"] = true;
    }
  }
  if (s.gptq_experts || s.gptq_projections) {
    c["quantization_config"] = GptqConfig(kGptqGroup);
    c["quantization_config"]["desc_act"] = s.gptq_act_order;
  }
  if (s.fp8 == Fp8Form::kBlock) {
    c["quantization_config"] = {
        {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  } else if (s.quark_mxfp4) {  // As Quark exports it (its config version 0.9).
    const Json fp4 = {{"dtype", "fp4"},      {"qscheme", "per_group"}, {"group_size", 32},
                      {"ch_axis", -1},       {"scale_format", "e8m0"}, {"round_method", "half_even"},
                      {"is_dynamic", false}, {"symmetric", nullptr},   {"scale_type", "float"}};
    Json inputs = fp4;
    inputs["is_dynamic"] = true;
    c["quantization_config"] = {
        {"quant_method", "quark"},
        {"global_quant_config",
         {{"weight", fp4}, {"input_tensors", inputs}, {"output_tensors", nullptr}, {"bias", nullptr}}},
        {"exclude", {"lm_head"}},
        {"layer_quant_config", Json::object()},
        {"layer_type_quant_config", Json::object()},
        {"export",
         {{"pack_method", "reorder"}, {"weight_format", "real_quantized"}, {"kv_cache_group", Json::array()}}},
        {"quant_mode", "eager_mode"},
        {"version", "0.9"}};
  } else if (s.fp8 != Fp8Form::kNone) {
    const Json weights = {{"num_bits", 8},
                          {"type", "float"},
                          {"symmetric", true},
                          {"dynamic", false},
                          {"strategy", s.fp8 == Fp8Form::kChannel ? "channel" : "tensor"}};
    const Json inputs = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};
    c["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups",
         {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
        {"ignore", {"lm_head"}}};
  }
  return c;
}

}  // namespace

void WriteRandomModel(const RandomModelSpec& s, const std::string& path) {
  const std::string arch = Arch(s);
  model::GgufWriter w;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", "random");
  w.SetU32(arch + ".block_count", static_cast<uint32_t>(s.n_layers));
  w.SetU32(arch + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetU32(arch + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.SetU32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  CASCADE_CHECK(s.mlp_only_layers.empty()) << "llama.cpp's MoE models have no dense layers";
  w.SetU32(arch + ".feed_forward_length", static_cast<uint32_t>(s.moe == MoeFamily::kMixtral ? s.n_ff_expert : s.n_ff));
  if (s.moe != MoeFamily::kNone) {
    w.SetU32(arch + ".expert_count", static_cast<uint32_t>(s.n_experts));
    w.SetU32(arch + ".expert_used_count", static_cast<uint32_t>(s.n_experts_used));
    if (s.moe != MoeFamily::kMixtral) {
      w.SetU32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_expert));
    }
    if (s.moe == MoeFamily::kQwen2Moe) {
      w.SetU32(arch + ".expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shared_expert));
    }
    // llama.cpp renormalises for Mixtral and Qwen3-MoE, not Qwen2-MoE; say it otherwise.
    CASCADE_CHECK(s.moe != MoeFamily::kMixtral || s.norm_topk_prob);
    if (s.norm_topk_prob != (s.moe != MoeFamily::kQwen2Moe)) w.SetBool(arch + ".expert_weights_norm", s.norm_topk_prob);
  }
  w.SetU32(arch + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.SetF32(arch + ".rope.freq_base", static_cast<float>(s.rope_theta));
  w.SetF32(arch + ".attention.layer_norm_rms_epsilon", kNormEps);
  if (s.rope_linear_factor > 0) {
    w.SetString(arch + ".rope.scaling.type", "linear");
    w.SetF32(arch + ".rope.scaling.factor", s.rope_linear_factor);
  }
  if (const auto& y = s.yarn_rope; y.has_value()) {  // As convert_hf_to_gguf.py writes YaRN.
    w.SetString(arch + ".rope.scaling.type", "yarn");
    w.SetF32(arch + ".rope.scaling.factor", static_cast<float>(y->factor));
    w.SetU32(arch + ".rope.scaling.original_context_length",
             static_cast<uint32_t>(y->original_max_position_embeddings));
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "gpt-2");
  w.SetStringArray("tokenizer.ggml.tokens", Vocabulary(s));
  w.SetI32Array("tokenizer.ggml.token_type", std::vector<int32_t>(s.n_vocab, 1));
  w.SetStringArray("tokenizer.ggml.merges", {"! !"});
  w.SetU32("tokenizer.ggml.eos_token_id", 0);
  for (const Tensor& t : RandomTensors(s))
    w.AddTensor(t.gguf, t.dtype, t.shape, Encode(t.dtype, t.values, t.shape.back(), s.distinct_values));
  CASCADE_CHECK(w.WriteFile(path).ok());
}

// The safetensors entries of an FP8 tensor (one expert's, when `expert` >= 0): the codes
// as `name` and the scales beside it, named and shaped as `form` stores them.
void AddFp8Entries(Fp8Form form, const Tensor& t, const std::string& name, int64_t expert,
                   std::vector<SafetensorsEntry>& entries) {
  const int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
  const int64_t grid_rows = form == Fp8Form::kBlock ? (rows + 127) / 128 : form == Fp8Form::kChannel ? rows : 1;
  const int64_t grid_cols = form == Fp8Form::kBlock ? (cols + 127) / 128 : 1;
  const int64_t e = std::max<int64_t>(expert, 0);
  const std::vector<uint8_t> codes(t.fp8_codes.begin() + e * rows * cols, t.fp8_codes.begin() + (e + 1) * rows * cols);
  const std::vector<float> scales(t.fp8_scales.begin() + e * grid_rows * grid_cols,
                                  t.fp8_scales.begin() + (e + 1) * grid_rows * grid_cols);
  entries.push_back({name, "F8_E4M3", {rows, cols}, RawBytes(codes)});
  if (form == Fp8Form::kBlock) {
    entries.push_back({name + "_scale_inv", "F32", {grid_rows, grid_cols}, RawBytes(scales)});
  } else {
    entries.push_back({name + "_scale", "F32",
                       form == Fp8Form::kChannel ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1},
                       RawBytes(scales)});
  }
}

// The safetensors entries of a Quark MXFP4 tensor (one expert's, when `expert` >= 0): the
// packed codes as `name` [rows, cols / 2] and the exponents as `name`_scale [rows, cols / 32].
void AddMxfp4Entries(const Tensor& t, const std::string& name, int64_t expert, std::vector<SafetensorsEntry>& entries) {
  const int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
  const int64_t e = std::max<int64_t>(expert, 0);
  const auto slice = [&](const std::vector<uint8_t>& all, int64_t per) {
    return std::vector<uint8_t>(all.begin() + e * per, all.begin() + (e + 1) * per);
  };
  entries.push_back({name, "U8", {rows, cols / 2}, RawBytes(slice(t.mx_codes, rows * cols / 2))});
  entries.push_back({name + "_scale", "U8", {rows, cols / 32}, RawBytes(slice(t.mx_exponents, rows * cols / 32))});
}

void WriteRandomHfModel(const RandomModelSpec& s, const std::string& dir) {
  using Json = nlohmann::json;
  const DType wt = s.weight_type;
  CASCADE_CHECK(wt == DType::kF32 || wt == DType::kF16 || wt == DType::kBF16) << DTypeName(wt);
  CASCADE_CHECK(!s.gptq_experts || (wt == DType::kF32 && s.moe != MoeFamily::kNone)) << "GPTQ experts: F32 MoE only";
  CASCADE_CHECK(!s.gptq_projections || wt == DType::kF32) << "GPTQ projections: F32 only";
  CASCADE_CHECK(!s.gptq_act_order || s.gptq_experts || s.gptq_projections) << "act-order: GPTQ only";
  CASCADE_CHECK(s.rope_freq_factors.empty()) << "config.json has no per-frequency RoPE divisors";
  const auto st_dtype = [](DType t) { return t == DType::kF32 ? "F32" : t == DType::kF16 ? "F16" : "BF16"; };
  std::vector<SafetensorsEntry> entries;
  // `P.weight` [rows, cols] becomes P.qweight, P.qzeros, P.g_idx, P.scales (expert e's
  // order, or the layer's for e = 0).
  const auto add_gptq = [&](const std::string& name, const float* values, int64_t rows, int64_t cols, int64_t e) {
    const std::string p = name.substr(0, name.size() - 7);
    if (s.gptq_act_order) {
      const bool second = name.find("down_proj") != std::string::npos || name.find("o_proj") != std::string::npos;
      for (SafetensorsEntry& q :
           PackActOrderGptq(p, values, rows, cols, kGptqGroup, ActOrder(cols, e, second)).entries) {
        entries.push_back(std::move(q));
      }
      return;
    }
    const QuantMatrix m = Rtn(values, rows, cols, kGptqGroup);
    for (SafetensorsEntry& q : PackGptq(p, m, true)) entries.push_back(std::move(q));
  };
  for (Tensor& t : RandomTensors(s)) {
    if (t.hf.empty()) continue;
    const int64_t cols = t.shape.back();
    if (t.permuted_heads > 0) t.values = ToHfRowOrder(t.values, t.shape[0], cols, t.permuted_heads);
    if (!t.fp8_codes.empty() && t.experts == 0) {
      AddFp8Entries(s.fp8, t, t.hf, -1, entries);
      continue;
    }
    if (!t.mx_codes.empty() && t.experts == 0) {
      AddMxfp4Entries(t, t.hf, -1, entries);
      continue;
    }
    if (t.experts == 0 && s.gptq_projections && t.hf.ends_with("_proj.weight")) {
      add_gptq(t.hf, t.values.data(), t.shape[0], cols, 0);
      continue;
    }
    if (t.experts == 0) {
      entries.push_back(
          {t.hf, st_dtype(t.dtype), t.hf_shape.empty() ? t.shape : t.hf_shape, Encode(t.dtype, t.values, cols)});
      continue;
    }
    const size_t per = t.values.size() / t.experts;
    for (int64_t e = 0; e < t.experts; ++e) {
      std::string name = t.hf;
      name.replace(name.find("{e}"), 3, std::to_string(e));
      const std::vector<float> part(t.values.begin() + e * per, t.values.begin() + (e + 1) * per);
      if (!t.fp8_codes.empty()) {
        AddFp8Entries(s.fp8, t, name, e, entries);
        continue;
      }
      if (!t.mx_codes.empty()) {
        AddMxfp4Entries(t, name, e, entries);
        continue;
      }
      if (s.gptq_experts) {
        add_gptq(name, part.data(), t.shape[1], cols, e);
        continue;
      }
      entries.push_back({name, st_dtype(t.dtype), {t.shape[1], t.shape[2]}, Encode(t.dtype, part, cols)});
    }
  }
  const int64_t per_layer = s.kv_scale_per_head;
  for (int64_t l = 0; !s.k_scales.empty() && l < s.n_layers; ++l) {
    const std::vector<int64_t> shape = per_layer == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{per_layer};
    for (const auto& [which, all] : {std::pair{"k_scale", &s.k_scales}, std::pair{"v_scale", &s.v_scales}}) {
      const std::vector<float> part(all->begin() + l * per_layer, all->begin() + (l + 1) * per_layer);
      entries.push_back({StrCat("model.layers.", l, ".self_attn.", which), "F32", shape, RawBytes(part)});
    }
  }
  // Wider types first, so that every tensor is aligned to its element size.
  std::stable_sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    const auto wide = [](const std::string& d) { return d == "F32" || d == "I32"; };
    return wide(a.dtype) && !wide(b.dtype);
  });

  const Json c = HfConfig(s);
  // The GGUF's vocabulary as a byte-level BPE tokenizer.json.
  Json vocab = Json::object();
  const std::vector<std::string> tokens = Vocabulary(s);
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  const Json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const Json tokenizer = {{"version", "1.0"},
                          {"added_tokens", Json::array()},
                          {"normalizer", nullptr},
                          {"pre_tokenizer", byte_level},
                          {"post_processor", nullptr},
                          {"decoder", byte_level},
                          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array({"! !"})}}}};

  std::filesystem::create_directories(dir);
  WriteFile(dir + "/config.json", c.dump(2));
  if (s.hf_shards <= 1) {
    WriteFile(dir + "/model.safetensors", SafetensorsBytes(entries));
  } else {  // Contiguous runs of tensors per shard, and the index naming each one's file.
    Json weight_map = Json::object();
    const size_t per = (entries.size() + s.hf_shards - 1) / s.hf_shards;
    for (int k = 0; k < s.hf_shards; ++k) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, s.hf_shards);
      const size_t b = std::min(entries.size(), k * per), e = std::min(entries.size(), (k + 1) * per);
      const std::vector<SafetensorsEntry> shard(entries.begin() + b, entries.begin() + e);
      for (const SafetensorsEntry& t : shard) weight_map[t.name] = name;
      WriteFile(dir + "/" + name, SafetensorsBytes(shard));
    }
    WriteFile(dir + "/model.safetensors.index.json",
              Json{{"metadata", Json::object()}, {"weight_map", weight_map}}.dump(2));
  }
  WriteFile(dir + "/tokenizer.json", tokenizer.dump());
  WriteFile(dir + "/tokenizer_config.json", Json{{"eos_token", tokens[0]}}.dump(2));
}

}  // namespace cascade::testing
