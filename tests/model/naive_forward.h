// A naive double-precision forward of the Llama family and its mixture-of-experts kin
// (Mixtral, Qwen2-MoE, Qwen3-MoE), written for the tests from each file format's own
// semantics (Hugging Face's modeling code, llama.cpp's conventions), not from Cascade's
// tables: the independent reference the transformer tests compare against.
//
// It dequantizes the stored weights with kernels::cpu::DequantizeRow (itself checked
// against the `gguf` package), then does all arithmetic in double, token by token, with
// full (non-paged) attention. Tensors are read by the file's own names: GGUF (`blk.L.*`,
// merged 3-D expert tensors `ffn_*_exps`) or Hugging Face (`model.layers.L.*`, one tensor
// per expert).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/format/model_files.h"
#include "tests/random_model.h"

namespace cascade::model::naive {

using Mat = std::vector<double>;  // Row-major.

// How a MoE layer routes, which the test states from what it wrote (transformers'
// MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock): softmax over
// every expert, the top `top_k`, renormalised to sum 1 when `norm_topk`.
struct RefRouting {
  int64_t top_k = 0;
  bool norm_topk = false;
};

// The RoPE a Hugging Face checkpoint's config.json says, as the test that wrote it states it
// (never read back through Cascade's config parser): the base and the scaling.
struct HfRope {
  double theta = 10000.0;
  std::optional<testing::Llama3RopeScaling> llama3 = std::nullopt;
  std::optional<testing::YarnRopeScaling> yarn = std::nullopt;
};
HfRope HfRopeOf(const testing::RandomModelSpec& spec);

// YaRN's inverse frequencies [dim / 2] for RoPE base `base` by transformers' formula, and its
// attention factor (cos and sin are multiplied by it) in `attention`.
std::vector<double> HfYarnInvFreq(double base, int64_t dim, const testing::YarnRopeScaling& y, double& attention);

struct RefModel {
  ModelConfig c;  // Dimensions only (n_layers, n_embd, heads, eps, vocab); not its RoPE fields.
  Mat embd, out_norm, output;
  Mat rope_freqs;                 // GGUF's rope_freqs.weight (per-frequency divisors); empty: none.
  std::vector<double> inv_freq;   // [head_dim / 2]: frequency i turns by pos * inv_freq[i].
  double attention_factor = 1.0;  // YaRN: cos and sin are multiplied by it.
  bool neox = false;              // RoPE rotates (i, i + d/2) of each head; else (2i, 2i + 1).
  RefRouting routing;
  // Non-empty: an FP8 KV cache with these scales ([n_layers * n_kv_heads], layer-major): each
  // K (after RoPE) and V element is kept as the E4M3 value nearest x / scale (ties to the
  // even code, magnitudes past 448 saturating), times the scale.
  std::vector<double> fp8_k_scale, fp8_v_scale;
  struct Layer {
    Mat attn_norm, wq, wk, wv, bq, bk, bv, wo, ffn_norm, gate, up, down;
    Mat q_norm, k_norm;  // Qwen3: [head_dim] RMSNorm weights over each head; empty otherwise.
    // A MoE layer (router non-empty): the router [n_experts, n_embd], each expert's gate,
    // up [n_ff_expert, n_embd] and down [n_embd, n_ff_expert]; Qwen2-MoE's shared expert
    // and its sigmoid gate [n_embd].
    Mat router;
    std::vector<Mat> exp_gate, exp_up, exp_down;
    Mat sh_gate, sh_up, sh_down, sh_router;
  };
  std::vector<Layer> layers;
};

// The reference model of `files`, read by the file's own tensor names. RoPE as each format
// defines it: GGUF `llama` rotates adjacent pairs (llama.cpp's converter permuted the Q/K
// rows) and divides frequencies by rope_freqs.weight; GGUF qwen2/qwen3(moe) and every
// Hugging Face checkpoint (transformers' rotate_half) rotate the halves of each head. A GGUF
// file's base and YaRN come from its metadata, read here by llama.cpp's rules; a Hugging
// Face checkpoint's from `hf_rope`, which the test that wrote config.json states.
RefModel LoadRef(const ModelFiles& files, const HfRope& hf_rope = {}, RefRouting routing = {});

// Logits [n_vocab] after each token of `ids`, one token at a time with a full KV history.
// `load` (optional) gains the tokens routed to each expert: [n_layers][n_experts].
std::vector<std::vector<double>> RefForward(const RefModel& m, const std::vector<int32_t>& ids,
                                            std::vector<std::vector<int64_t>>* load = nullptr);

// Relative L2 distance of `got` from `ref` (ref.size() values).
double RelL2(const std::vector<double>& ref, const float* got);
double RelL2(const std::vector<double>& ref, const double* got);

// The worst relative L2 distance of the rows of `got` from those of `ref`; with `bound` > 0,
// each row is expected within it.
double WorstRelL2(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<float>>& got,
                  double bound = 0);
double WorstRelL2(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<double>>& got,
                  double bound = 0);

// The 41 token ids every case runs.
std::vector<int32_t> TestIds(int64_t n_vocab);

// Cascade's logits after each of `ids`: a prefill of the first 37 tokens (three KV blocks of
// 16, not contiguous) with logits at every row, then one decode step per remaining token,
// over a KV cache of `kv_dtype`.
std::vector<std::vector<float>> CascadeLogits(const ModelFiles& files, const std::vector<int32_t>& ids, int threads,
                                              DType kv_dtype = DType::kF32);

}  // namespace cascade::model::naive
