// The logical shape of a Llama-family model, read from GGUF metadata or a Hugging Face
// config.json, so that both copies of one model compare equal.
// Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::model {

class GgufFile;

// How Q/K rows are laid out for rotary embeddings. GGUF files from llama.cpp permute the
// Q/K weight rows so that RoPE rotates adjacent pairs (x[2i], x[2i+1]); Hugging Face
// checkpoints rotate halves (x[i], x[i + head_dim/2]).
enum class RopeLayout { kAdjacentPairs, kRotateHalf };

// transformers' rope_type (and llama.cpp's rope.scaling.type): how the frequencies of
// RoPE are scaled. kDynamic and kLongRope are served where they are exact: up to the
// original context (n_ctx_train is capped there), dynamic NTK is the unscaled RoPE and
// LongRoPE uses its short factors.
enum class RopeScaling { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };

// A value the file did not give, taken by a named rule: the default of transformers'
// config class for the model_type (model/format/hf_defaults.h), llama.cpp's default for a
// GGUF key, or a rule over other keys. `cascade info` lists them; the load log says them.
struct DefaultedKey {
  std::string key;    // As the file would spell it: "rope_theta", "qwen3.rope.freq_base".
  std::string value;  // The value used.
  std::string rule;   // Where it comes from.
  bool operator==(const DefaultedKey&) const = default;
};

struct ModelConfig {
  // The file's own name: GGUF "llama" (also Mixtral), "mistral", "qwen2", "qwen3",
  // "qwen2moe", "qwen3moe"; config.json's "llama", "mistral", "mixtral", "qwen2", "qwen3",
  // "qwen2_moe", "qwen3_moe", "gpt_oss".
  std::string arch = "llama";
  std::string name;  // general.name, or the directory name.
  int64_t n_layers = 0;
  int64_t n_embd = 0;  // Hidden size.
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // < n_heads for GQA, 1 for MQA.
  int64_t head_dim = 0;    // Usually n_embd / n_heads.
  int64_t n_ff = 0;        // Intermediate (FFN) size.
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // Trained context length (positions).
  double rope_theta = 10000.0;
  RopeLayout rope_layout = RopeLayout::kAdjacentPairs;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_scaling_factor = 1.0;    // Linear/llama3/yarn factor.
  double rope_low_freq_factor = 1.0;   // llama3 only.
  double rope_high_freq_factor = 4.0;  // llama3 only.
  int64_t rope_original_ctx = 0;       // llama3/yarn/dynamic/longrope: original max positions.
  // yarn and longrope: cos and sin are multiplied by this, so q.k by its square (Cascade
  // folds the square into the attention scale).
  double rope_attention_factor = 1.0;
  double rope_beta_fast = 32.0;          // yarn: the ramp between extrapolated and interpolated
  double rope_beta_slow = 1.0;           // frequencies, in rotations over rope_original_ctx;
  bool rope_yarn_truncate = true;        // its ends rounded to whole dimensions.
  std::vector<double> rope_ext_factors;  // longrope: short_factor, [head_dim / 2] divisors.
  double norm_eps = 1e-5;                // RMSNorm epsilon.
  bool tied_embeddings = false;          // LM head shares the token embedding.
  bool qkv_bias = false;                 // Qwen2: Q/K/V projections have biases.
  bool qk_norm = false;                  // Qwen3: RMSNorm over each head of Q and K before RoPE.
  // Mistral-style sliding-window attention: each position attends to the last
  // `sliding_window` positions; 0 = full attention. Cascade computes full attention, which
  // is the same while a sequence is no longer than the window, so the readers cap
  // n_ctx_train at the window (CapContextToSlidingWindow): longer prompts are refused
  // with the context length, never run with the wrong attention.
  int64_t sliding_window = 0;
  // Which layers slide (config.json's layer_types, gpt-oss's alternate layers): empty means
  // every layer when sliding_window > 0. A model whose layers differ (gpt-oss) is served
  // exactly, the window masked in attention (AttentionParams::window), its context not capped.
  std::vector<bool> sliding_layers;
  // gpt-oss: the attention's output projection has a bias (besides Q/K/V's, qkv_bias), each
  // query head an attention-sink logit (AttentionParams::sinks), the router a bias, each
  // expert biases on gate, up and down, and the experts' activation is the clamped SwiGLU
  // (Backend::ClampedSwiglu) with these constants when swiglu_limit > 0.
  bool attn_out_bias = false;
  bool attn_sinks = false;
  bool router_bias = false;
  bool expert_bias = false;
  double swiglu_limit = 0;  // 0: SiLU(gate) * up.
  double swiglu_alpha = 1.702;
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE). A MoE layer's FFN is a router
  // (softmax over the experts' logits, top n_experts_used) over expert FFNs of n_ff_expert,
  // the chosen experts' outputs weighted by their probabilities, renormalised to sum 1 when
  // norm_topk_prob; plus, with n_ff_shared_expert > 0, a shared expert FFN scaled by
  // sigmoid(shared gate) (Qwen2-MoE). n_experts 0: every layer is dense.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared_expert = 0;
  bool norm_topk_prob = false;
  // Which layers are MoE (Qwen2/3-MoE's config.json): layer l when (l + 1) is a multiple
  // of decoder_sparse_step and l is not in mlp_only_layers; the others are dense (n_ff).
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // config.json's `dtype` (5.x) or `torch_dtype` (4.x), as written; informational (each
  // tensor carries its own type).
  std::string hf_dtype;
  // Values the file did not give (see DefaultedKey), in the order they were read.
  std::vector<DefaultedKey> defaulted;

  bool is_moe() const { return n_experts > 0; }
  bool IsMoeLayer(int64_t layer) const;
  int64_t n_moe_layers() const;
  int64_t q_dim() const { return n_heads * head_dim; }
  // The attention window of `layer`: sliding_window where it slides, 0 (full) elsewhere.
  int64_t WindowOf(int64_t layer) const;
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Checks that the numbers are consistent and usable. InvalidArgument naming the field.
  absl::Status Validate() const;
  // Multi-line human-readable summary (for `cascade info`).
  std::string ToString() const;
  // Validate's checks of the RoPE scaling fields.
  absl::Status ValidateRope() const;
  // Whether the RoPE scaling (type, factor and the fields its type uses) is the same.
  bool SameRope(const ModelConfig& other) const;
  // Fields that define the computation (not `name`, not the RoPE row layout, not where a
  // value came from).
  bool SameLogicalModel(const ModelConfig& other) const;
};

// Caps n_ctx_train at a sliding window narrower than it (see `sliding_window`), unless
// the window is masked per layer (`sliding_layers`).
void CapContextToSlidingWindow(ModelConfig& config);

std::string_view RopeLayoutName(RopeLayout layout);
std::string_view RopeScalingName(RopeScaling scaling);

// Caps n_ctx_train where the RoPE scaling is exact only up to its original context
// (dynamic, longrope; see RopeScaling).
void CapContextToRopeScaling(ModelConfig& config);

// The RoPE inverse frequencies [head_dim / 2] of the config's base and scaling, in the
// formulas of transformers' modeling_rope_utils.py (which llama.cpp's match); frequency i
// turns by pos * inv_freq[i]. GGUF's rope_freqs.weight divisors are applied by the loader.
std::vector<float> RopeInvFreq(const ModelConfig& config);

// From GGUF metadata (`general.architecture` and `<arch>.*` keys) and tensor table (tied
// output when `output.weight` is absent; QKV bias when `blk.0.attn_q.bias` exists).
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

// From a Hugging Face config.json text; `source` names the file in messages.
absl::StatusOr<ModelConfig> ModelConfigFromHfJson(std::string_view json_text, const std::string& source);

}  // namespace cascade::model
