// Random-weight Llama models written as GGUF files, for forward tests. Shapes are small
// but real (GQA, several layers, blocks of every quantized type fit: n_embd and n_ff are
// multiples of 256).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace cascade::testing {

struct RandomModelSpec {
  DType weight_type = DType::kF32;  // Matrices (and the embedding); norms stay f32.
  int64_t n_layers = 2;
  int64_t n_embd = 256;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t n_ff = 256;
  int64_t n_vocab = 96;
  bool tied = false;
  bool qkv_bias = false;  // Writes a qwen2 model with Q/K/V biases.
  bool qk_norm = false;   // Writes a qwen3 model with q_norm / k_norm weights (wins over qkv_bias's arch).
  uint32_t seed = 1;
  int64_t n_ctx = 256;  // context_length in the metadata.
  // > 0: draw only this many random values per tensor and repeat them (benchmarks of
  // large shapes, where drawing billions of normals would dominate).
  int64_t distinct_values = 0;
  // Non-empty: written as `rope_freqs.weight` [head_dim / 2], the per-frequency divisors
  // of Llama 3.1 GGUF files.
  std::vector<float> rope_freq_factors = {};
  // > 0: `rope.scaling.type` linear with this factor.
  float rope_linear_factor = 0;
};

// Writes the model to `path` (with a tiny byte-level vocabulary so engines can load it).
void WriteRandomModel(const RandomModelSpec& spec, const std::string& path);

}  // namespace cascade::testing
