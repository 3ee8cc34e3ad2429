// Random-weight Llama models written as GGUF files or Hugging Face directories, for forward
// tests. Shapes are small but real (GQA, several layers, blocks of every quantized type fit:
// n_embd and n_ff are multiples of 256).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cascade::testing {

// Llama 3.1's RoPE scaling: transformers' `rope_scaling` with rope_type "llama3".
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// YaRN: transformers' `rope_scaling` / `rope_parameters` with rope_type "yarn" (beta_fast
// 32, beta_slow 1 and the attention factor 0.1 ln(factor) + 1 left to their defaults).
struct YarnRopeScaling {
  double factor = 4.0;
  int64_t original_max_position_embeddings = 32;
  bool truncate = true;  // transformers' `truncate` (gpt-oss: false).
};

// How config.json is written: as transformers 4.x saves it (top-level rope_theta and
// rope_scaling, torch_dtype, Qwen3-MoE's num_experts) or as 5.x does (rope_parameters
// holding rope_theta and the scaling, dtype, layer_types, Qwen3-MoE's num_local_experts).
enum class HfLayout { kTransformers4, kTransformers5 };

// The mixture-of-experts families (transformers' MixtralForCausalLM, Qwen2MoeForCausalLM,
// Qwen3MoeForCausalLM; llama.cpp's `llama` with experts, `qwen2moe`, `qwen3moe`).
enum class MoeFamily { kNone, kMixtral, kQwen2Moe, kQwen3Moe };

// The FP8 forms of checkpoints (model/format/fp8_checkpoint.h): DeepSeek-V3's / Qwen3-FP8's
// 128 x 128 blocks (quant_method fp8, weight_scale_inv), and compressed-tensors' per-channel
// and per-tensor scales (weight_scale).
enum class Fp8Form { kNone, kBlock, kChannel, kTensor };

struct RandomModelSpec {
  DType weight_type = DType::kF32;  // Matrices (and the embedding); norms stay f32.
  int64_t n_layers = 2;
  int64_t n_embd = 256;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t n_ff = 256;
  int64_t n_vocab = 96;
  bool tied = false;
  // llama.cpp's Q4_K_M mix (Q4_K, with Q6_K for the output and some layers' attn_v and
  // ffn_down) instead of weight_type for the matrices; the embedding stays weight_type.
  bool q4_k_m = false;
  bool qkv_bias = false;  // Writes a qwen2 model with Q/K/V biases.
  bool qk_norm = false;   // Writes a qwen3 model with q_norm / k_norm weights (wins over qkv_bias's arch).
  uint32_t seed = 1;
  int64_t n_ctx = 256;  // context_length in the metadata.
  // > 0: draw only this many random values per tensor and repeat them (benchmarks of
  // large shapes, where drawing billions of normals would dominate).
  int64_t distinct_values = 0;
  // Non-empty: written as `rope_freqs.weight` [head_dim / 2], the per-frequency divisors
  // of Llama 3.1 GGUF files (GGUF only).
  std::vector<float> rope_freq_factors = {};
  // > 0: `rope.scaling.type` linear with this factor.
  float rope_linear_factor = 0;
  // Llama 3.1's scaling (excludes rope_freq_factors): config.json's rope_scaling in a
  // Hugging Face directory; in a GGUF file, `rope_freqs.weight` holding the divisors that
  // llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel) computes from it.
  std::optional<Llama3RopeScaling> llama3_rope = std::nullopt;
  // YaRN (either format: config.json's rope type, GGUF's rope.scaling.* keys).
  std::optional<YarnRopeScaling> yarn_rope = std::nullopt;
  double rope_theta = 10000.0;  // rope_theta / rope.freq_base.
  HfLayout hf_layout = HfLayout::kTransformers4;
  // A Mistral model: config.json's model_type "mistral" (sliding_window null); GGUF arch
  // `llama`, as llama.cpp converts it. Not with qkv_bias, qk_norm or experts.
  bool mistral = false;
  // A MoE model of this family (Qwen3-MoE with q/k norms, Qwen2-MoE with Q/K/V biases and a
  // shared expert of n_ff_shared_expert). Every layer is MoE unless listed in
  // mlp_only_layers (Hugging Face only: llama.cpp has no dense layers in these models).
  // The router and shared-expert gate stay f32, as llama-quantize keeps them.
  MoeFamily moe = MoeFamily::kNone;
  int64_t n_experts = 8;
  int64_t n_experts_used = 2;
  int64_t n_ff_expert = 128;
  int64_t n_ff_shared_expert = 256;
  bool norm_topk_prob = true;  // Mixtral always renormalises.
  std::vector<int64_t> mlp_only_layers = {};
  // >= 0: a router biased to this expert: the embedding's column 0 is 3 for every token and
  // this expert's router row is 5 there, so every token chooses it.
  int64_t hot_expert = -1;
  // Hugging Face only: > 1 writes the tensors as this many shards with
  // model.safetensors.index.json (as large checkpoints come).
  int hf_shards = 1;
  // Hugging Face only, MoE with weight_type F32: every expert matrix written as an AutoGPTQ
  // checkpoint writes it (round-to-nearest 4 bits, groups of 128, tests/int4_writer.h),
  // the rest F32, with config.json's quantization_config (as GPTQ MoE checkpoints come).
  bool gptq_experts = false;
  // Hugging Face only, weight_type F32: every projection outside the experts too
  // (`*_proj.weight`: Q/K/V/O, a dense MLP) written as GPTQ (with gptq_experts for MoE).
  bool gptq_projections = false;
  // With gptq_experts or gptq_projections: act-order (desc_act) checkpoints, each matrix
  // reading its inputs in an order of its expert's (or the layer's) own: one for the
  // matrices of the layer's input (Q/K/V, gate/up), another for O and down
  // (tests/int4_writer.h PackActOrderGptq).
  bool gptq_act_order = false;
  // Weight type F32, not `llama` (its Q/K rows are permuted in GGUF): every projection
  // (`*_proj.weight`, experts included) quantized to FP8 E4M3 in this form; the Hugging
  // Face directory stores the codes and scales with config.json's quantization_config, and
  // every other writer the values they decode to by the OCP definition (f32), so that the
  // GGUF file is the exact model of the FP8 checkpoint.
  Fp8Form fp8 = Fp8Form::kNone;
  // As `fp8`, in AMD Quark's MXFP4 (model/format/mxfp4_checkpoint.h): every projection
  // quantized to E2M1 codes with one E8M0 exponent per 32 inputs (OCP MX), the Hugging Face
  // directory storing the packed codes (`P.weight`, U8) and exponents (`P.weight_scale`)
  // with quant_method quark, every other writer the values they decode to.
  bool quark_mxfp4 = false;
  // Hugging Face only: non-empty writes `model.layers.L.self_attn.k_scale` / `v_scale` (F32,
  // the calibrated FP8 KV-cache scales of compressed-tensors' kv_cache_scheme), layer by
  // layer: kv_scale_per_head values per layer each (1: shape [], n_kv_heads: [n_kv_heads]).
  std::vector<float> k_scales = {}, v_scales = {};
  int64_t kv_scale_per_head = 1;
};

// Writes the model to `path` (with a tiny byte-level vocabulary so engines can load it).
void WriteRandomModel(const RandomModelSpec& spec, const std::string& path);

// Writes the same model (the same values) as a Hugging Face directory `dir` (created if
// missing): config.json, model.safetensors with transformers' tensor names (no lm_head.weight
// when tied), and tokenizer.json + tokenizer_config.json holding the GGUF's vocabulary.
// REQUIRES: weight_type F32, F16 or BF16; rope_freq_factors empty (config.json cannot say
// them; use llama3_rope). The values are those of the GGUF file, so that both files are one
// model: Llama Q/K rows are written in Hugging Face's order, i.e. with the permutation of
// llama.cpp's converter undone (HF row h*d + j*d/2 + i is GGUF row h*d + 2*i + j of head h),
// as GGUF `llama` rotates adjacent pairs and HF the halves of each head; qwen2/qwen3 rows
// are the same in both (llama.cpp keeps HF's order and rotates halves).
void WriteRandomHfModel(const RandomModelSpec& spec, const std::string& dir);

}  // namespace cascade::testing
