#include "tests/gpt_oss_model.h"

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "core/str_cat.h"
#include "tests/safetensors_writer.h"

namespace cascade::model::gpt_oss_test {
namespace {

using Json = nlohmann::json;
using testing::RawBytes;
using testing::SafetensorsEntry;

Vec Random(std::mt19937& rng, int64_t n, double scale, double mean = 0) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = static_cast<float>(mean + scale * d(rng));
  return v;
}

}  // namespace

Model MakeModel() {
  std::mt19937 rng(11);
  const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  const double in = 1 / std::sqrt(double(kEmbd));
  Model m{Random(rng, kVocab * kEmbd, 1.0), Random(rng, kEmbd, 0.1, 1.0), Random(rng, kVocab * kEmbd, in), {}};
  for (int64_t l = 0; l < kLayers; ++l) {
    m.layers.push_back(
        {Random(rng, kEmbd, 0.1, 1.0), Random(rng, q * kEmbd, in), Random(rng, q, 0.2), Random(rng, kv * kEmbd, in),
         Random(rng, kv, 0.2), Random(rng, kv * kEmbd, in), Random(rng, kv, 0.2),
         Random(rng, kEmbd * q, 1 / std::sqrt(double(q))), Random(rng, kEmbd, 0.2), Random(rng, kHeads, 1.0),
         Random(rng, kEmbd, 0.1, 1.0), Random(rng, kExperts * kEmbd, in), Random(rng, kExperts, 0.5),
         Random(rng, kExperts * kEmbd * 2 * kFf, in), Random(rng, kExperts * 2 * kFf, 0.2),
         Random(rng, kExperts * kFf * kEmbd, 1 / std::sqrt(double(kFf))), Random(rng, kExperts * kEmbd, 0.2)});
  }
  return m;
}

std::vector<Mxfp4Layer> MakeMxfp4Experts(Model& m) {
  // OCP MX E2M1 values of codes 0..15.
  static constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> byte(0, 255), exponent(120, 125);  // Scales 2^-7 .. 2^-2.
  std::vector<Mxfp4Layer> out;
  // A matrix [rows, cols] per expert: codes and scales drawn, value(e, r, c) returned.
  const auto draw = [&](int64_t rows, int64_t cols, std::vector<uint8_t>& blocks, std::vector<uint8_t>& scales) {
    blocks.resize(kExperts * rows * cols / 2);
    scales.resize(kExperts * rows * cols / 32);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& s : scales) s = static_cast<uint8_t>(exponent(rng));
    return [&blocks, &scales, rows, cols](int64_t e, int64_t r, int64_t c) {
      const int64_t at = (e * rows + r) * cols + c;  // Element index, output-major.
      const uint8_t b = blocks[at / 2];
      return std::ldexp(kE2M1[at % 2 == 0 ? b & 0x0f : b >> 4], scales[at / 32] - 127);
    };
  };
  for (Layer& L : m.layers) {
    Mxfp4Layer& x = out.emplace_back();
    const auto gate_up = draw(2 * kFf, kEmbd, x.gate_up_blocks, x.gate_up_scales);
    const auto down = draw(kEmbd, kFf, x.down_blocks, x.down_scales);
    for (int64_t e = 0; e < kExperts; ++e) {
      for (int64_t h = 0; h < kEmbd; ++h) {
        for (int64_t j = 0; j < 2 * kFf; ++j) L.gate_up[(e * kEmbd + h) * 2 * kFf + j] = gate_up(e, j, h);
      }
      for (int64_t i = 0; i < kFf; ++i) {
        for (int64_t h = 0; h < kEmbd; ++h) L.down[(e * kFf + i) * kEmbd + h] = down(e, h, i);
      }
    }
  }
  return out;
}

std::string WriteHf(const Model& m, const std::string& dir, const std::vector<Mxfp4Layer>* mxfp4) {
  std::vector<SafetensorsEntry> e = {{"model.embed_tokens.weight", "F32", {kVocab, kEmbd}, RawBytes(m.embd)},
                                     {"model.norm.weight", "F32", {kEmbd}, RawBytes(m.norm)},
                                     {"lm_head.weight", "F32", {kVocab, kEmbd}, RawBytes(m.lm_head)}};
  const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  for (int64_t l = 0; l < kLayers; ++l) {
    const Layer& L = m.layers[l];
    const std::string p = StrCat("model.layers.", l, ".");
    const auto add = [&](const std::string& name, std::vector<int64_t> shape, const Vec& v) {
      e.push_back({p + name, "F32", std::move(shape), RawBytes(v)});
    };
    add("input_layernorm.weight", {kEmbd}, L.attn_norm);
    add("self_attn.q_proj.weight", {q, kEmbd}, L.wq);
    add("self_attn.q_proj.bias", {q}, L.bq);
    add("self_attn.k_proj.weight", {kv, kEmbd}, L.wk);
    add("self_attn.k_proj.bias", {kv}, L.bk);
    add("self_attn.v_proj.weight", {kv, kEmbd}, L.wv);
    add("self_attn.v_proj.bias", {kv}, L.bv);
    add("self_attn.o_proj.weight", {kEmbd, q}, L.wo);
    add("self_attn.o_proj.bias", {kEmbd}, L.bo);
    add("self_attn.sinks", {kHeads}, L.sinks);
    add("post_attention_layernorm.weight", {kEmbd}, L.post_norm);
    add("mlp.router.weight", {kExperts, kEmbd}, L.router);
    add("mlp.router.bias", {kExperts}, L.router_bias);
    if (mxfp4 == nullptr) {
      add("mlp.experts.gate_up_proj", {kExperts, kEmbd, 2 * kFf}, L.gate_up);
      add("mlp.experts.down_proj", {kExperts, kFf, kEmbd}, L.down);
    } else {
      const Mxfp4Layer& x = (*mxfp4)[l];
      const auto u8 = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<uint8_t>& v) {
        e.push_back({p + name, "U8", std::move(shape), RawBytes(v)});
      };
      u8("mlp.experts.gate_up_proj_blocks", {kExperts, 2 * kFf, kEmbd / 32, 16}, x.gate_up_blocks);
      u8("mlp.experts.gate_up_proj_scales", {kExperts, 2 * kFf, kEmbd / 32}, x.gate_up_scales);
      u8("mlp.experts.down_proj_blocks", {kExperts, kEmbd, kFf / 32, 16}, x.down_blocks);
      u8("mlp.experts.down_proj_scales", {kExperts, kEmbd, kFf / 32}, x.down_scales);
    }
    add("mlp.experts.gate_up_proj_bias", {kExperts, 2 * kFf}, L.gate_up_bias);
    add("mlp.experts.down_proj_bias", {kExperts, kEmbd}, L.down_bias);
  }
  Json types = Json::array();
  for (int64_t l = 0; l < kLayers; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  Json config = {{"model_type", "gpt_oss"},
                 {"hidden_size", kEmbd},
                 {"num_hidden_layers", kLayers},
                 {"num_attention_heads", kHeads},
                 {"num_key_value_heads", kKvHeads},
                 {"head_dim", kHeadDim},
                 {"intermediate_size", kFf},
                 {"num_local_experts", kExperts},
                 {"num_experts_per_tok", kTopK},
                 {"vocab_size", kVocab},
                 {"max_position_embeddings", 256},
                 {"rms_norm_eps", 1e-5},
                 {"rope_theta", kTheta},
                 {"rope_scaling",
                  {{"rope_type", "yarn"},
                   {"factor", kYarn.factor},
                   {"beta_fast", 32.0},
                   {"beta_slow", 1.0},
                   {"original_max_position_embeddings", kYarn.original_max_position_embeddings},
                   {"truncate", false}}},
                 {"sliding_window", kWindow},
                 {"layer_types", types},
                 {"swiglu_limit", kLimit},
                 {"hidden_act", "silu"},
                 {"tie_word_embeddings", false}};
  if (mxfp4 != nullptr) {
    config["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  }
  return testing::WriteHfDirectory(dir, config.dump(), e);
}

}  // namespace cascade::model::gpt_oss_test
