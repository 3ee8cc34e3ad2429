#include "tests/random_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/logging.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/format/gguf_writer.h"

namespace cascade::testing {
namespace {

std::string Encode(DType t, const std::vector<float>& v, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(v.size()) / cols;
  const int64_t row_bytes = RowBytes(t, cols);
  std::string out(rows * row_bytes, '\0');
  for (int64_t r = 0; r < rows; ++r) {
    CASCADE_CHECK(kernels::cpu::QuantizeRow(t, v.data() + r * cols, out.data() + r * row_bytes, cols).ok());
  }
  return out;
}

}  // namespace

void WriteRandomModel(const RandomModelSpec& s, const std::string& path) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](int64_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    const int64_t distinct = s.distinct_values > 0 ? std::min(n, s.distinct_values) : n;
    for (int64_t i = 0; i < distinct; ++i) v[i] = offset + scale * normal(rng);
    for (int64_t i = distinct; i < n; ++i) v[i] = v[i % distinct];
    return v;
  };
  const std::string arch = s.qk_norm ? "qwen3" : s.qkv_bias ? "qwen2" : "llama";
  const int64_t head_dim = s.n_embd / s.n_heads;
  model::GgufWriter w;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", "random");
  w.SetU32(arch + ".block_count", static_cast<uint32_t>(s.n_layers));
  w.SetU32(arch + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetU32(arch + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.SetU32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  w.SetU32(arch + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.SetU32(arch + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.SetF32(arch + ".rope.freq_base", 10000.0f);
  w.SetF32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.rope_linear_factor > 0) {
    w.SetString(arch + ".rope.scaling.type", "linear");
    w.SetF32(arch + ".rope.scaling.factor", s.rope_linear_factor);
  }
  // A byte-level vocabulary: the 94 printable ASCII characters, GPT-2's space "Ġ", the
  // merge "!!", then filler tokens.
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
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "gpt-2");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetI32Array("tokenizer.ggml.token_type", std::vector<int32_t>(s.n_vocab, 1));
  w.SetStringArray("tokenizer.ggml.merges", {"! !"});
  w.SetU32("tokenizer.ggml.eos_token_id", 0);

  const DType t = s.weight_type;
  const auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    w.AddTensor(name, t, {rows, cols}, Encode(t, random(rows * cols, 1.0f / std::sqrt(float(cols))), cols));
  };
  const auto f32 = [&](const std::string& name, std::vector<float> v) {
    w.AddTensor(name, DType::kF32, {static_cast<int64_t>(v.size())}, Encode(DType::kF32, v, v.size()));
  };
  w.AddTensor("token_embd.weight", t, {s.n_vocab, s.n_embd}, Encode(t, random(s.n_vocab * s.n_embd, 1.0f), s.n_embd));
  f32("output_norm.weight", random(s.n_embd, 0.1f, 1.0f));
  if (!s.tied) mat("output.weight", s.n_vocab, s.n_embd);
  if (!s.rope_freq_factors.empty()) f32("rope_freqs.weight", s.rope_freq_factors);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = StrCat("blk.", l, ".");
    f32(p + "attn_norm.weight", random(s.n_embd, 0.1f, 1.0f));
    mat(p + "attn_q.weight", s.n_heads * head_dim, s.n_embd);
    mat(p + "attn_k.weight", s.n_kv_heads * head_dim, s.n_embd);
    mat(p + "attn_v.weight", s.n_kv_heads * head_dim, s.n_embd);
    if (s.qkv_bias) {
      f32(p + "attn_q.bias", random(s.n_heads * head_dim, 0.1f));
      f32(p + "attn_k.bias", random(s.n_kv_heads * head_dim, 0.1f));
      f32(p + "attn_v.bias", random(s.n_kv_heads * head_dim, 0.1f));
    }
    if (s.qk_norm) {
      f32(p + "attn_q_norm.weight", random(head_dim, 0.1f, 1.0f));
      f32(p + "attn_k_norm.weight", random(head_dim, 0.1f, 1.0f));
    }
    mat(p + "attn_output.weight", s.n_embd, s.n_heads * head_dim);
    f32(p + "ffn_norm.weight", random(s.n_embd, 0.1f, 1.0f));
    mat(p + "ffn_gate.weight", s.n_ff, s.n_embd);
    mat(p + "ffn_up.weight", s.n_ff, s.n_embd);
    mat(p + "ffn_down.weight", s.n_embd, s.n_ff);
  }
  CASCADE_CHECK(w.WriteFile(path).ok());
}

}  // namespace cascade::testing
