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
};

// The stored name of `tensor` (of `layer`, for per-layer tensors) in `format`.
std::string LlamaTensorName(ModelFormat format, LlamaTensor tensor, int64_t layer = -1);

}  // namespace cascade::model::arch
