// The weights-only anchor that gpu_model_bench sets beside each dense BF16 model: every
// matrix product of the forward (per layer q, k, v, o, gate, up, down; then the LM head) as
// cuBLAS BF16 GEMMs with F32 accumulation, captured once in one CUDA graph and replayed.
// It is what the card gives for the weights alone: no attention, norms, residuals or
// launches between, so a whole forward can approach it but not pass it. Not a test.
#pragma once

#include <cstdint>

namespace cascade::bench {

struct DenseShape {
  int64_t n_layers = 0;
  int64_t n_embd = 0;
  int64_t q_dim = 0;   // heads x head_dim.
  int64_t kv_dim = 0;  // KV heads x head_dim.
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
};

// Bytes of the matrices the anchor reads per forward (BF16).
int64_t AnchorWeightBytes(const DenseShape& s);

// Tokens per second of `n_tokens` rows through every layer, the LM head on `head_rows` of
// them (decode: all; prefill: the last), the mean of `reps` graph replays after one warm-up.
// 0, with the reason printed, when a CUDA or cuBLAS call fails (e.g. the weights do not fit).
double AnchorTokensPerSecond(const DenseShape& s, int64_t n_tokens, int64_t head_rows, int reps);

}  // namespace cascade::bench
