// Tensor names of the Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2) in both file
// formats: llama.cpp's GGUF names and Hugging Face's. The one place that knows them.
// Thread-safe (constants).
#pragma once

#include <cstdint>
#include <string>

#include "model/format/model_files.h"

namespace cascade::model::arch {

enum class LlamaTensor {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kAttnQNorm,  // Qwen3: RMSNorm weights [head_dim] over each head of Q (and of K below).
  kAttnKNorm,
  // Llama 3.1 GGUF files: per-frequency RoPE divisors [head_dim / 2] (HF files say the same
  // in config.json's rope_scaling instead; the HF name is empty).
  kRopeFreqs,
  // FP8 checkpoints with a calibrated KV cache (compressed-tensors' kv_cache_scheme,
  // vLLM's k_scale / v_scale): F32 [] or [1] per layer, or [n_kv_heads] (per head); HF only.
  kAttnKScale,
  kAttnVScale,
  // gpt-oss: the attention output's bias [n_embd] and the sinks [n_heads].
  kAttnOutputBias,
  kAttnSinks,
  // gpt-oss GGUF's name for the norm before the FFN (kFfnNorm elsewhere).
  kPostAttentionNorm,
};

// The stored name of `tensor` (of `layer`, for per-layer tensors) in `format`; empty when
// the format has no such tensor.
std::string LlamaTensorName(ModelFormat format, LlamaTensor tensor, int64_t layer = -1);

}  // namespace cascade::model::arch
