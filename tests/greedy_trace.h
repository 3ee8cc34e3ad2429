// Greedy generation through a Transformer, recording every step's last-position logits:
// what the parity tests compare between backends (CPU vs GPU, host vs guarded memory) and
// between tensor-parallel layouts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/transformer.h"

namespace cascade::testing {

// Logits [n_vocab] of the last position after the prefill and after each decode step, and
// the greedy id picked from each.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> ids;
};

// A deterministic prompt of n ids below n_vocab.
std::vector<int32_t> Prompt(int64_t n, int64_t n_vocab);
int32_t Argmax(const std::vector<float>& v);
// ||got - ref|| / ||ref|| in double precision.
double RelL2(const std::vector<float>& ref, const std::vector<float>& got);

// Prefills `prompt`, then decodes `n_decode` greedy tokens, over a KV cache of 4 blocks of
// 16 (from t's backend) with a non-contiguous block table: 64 positions at most.
absl::StatusOr<Trace> Generate(model::Transformer& t, const std::vector<int32_t>& prompt, int n_decode);

// `cascade run`'s greedy ids for `n` tokens after `prompt` from the model at `path` (a
// LocalEngine on 2 threads, f32 KV cache, EOS ignored); empty, with a test failure, on an
// error.
std::vector<int32_t> LocalGreedy(const std::string& path, const std::vector<int32_t>& prompt, int n);

}  // namespace cascade::testing
