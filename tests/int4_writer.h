// INT4 checkpoints as AutoGPTQ and AutoAWQ write them (qweight / qzeros / scales, AWQ's
// interleaved nibble order given as the *packing* order, the inverse of what the loader
// applies), written independently of Cascade's loader (model/format/int4_checkpoint.h):
// for the format tests and for random models with GPTQ experts (tests/random_model.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/safetensors_writer.h"

namespace cascade::testing {

// An INT4 matrix [n_out, n_in]: quants 0..15 and, per (output, group of `group` inputs),
// a zero point 0..15 and an f16 scale.
struct QuantMatrix {
  int64_t n_out = 0, n_in = 0, group = 0;
  std::vector<uint8_t> q;   // [n_out, n_in]
  std::vector<uint8_t> z;   // [n_out, n_groups]
  std::vector<uint16_t> s;  // [n_out, n_groups], f16 bits
  int64_t n_groups() const { return n_in / group; }
  double Value(int64_t o, int64_t i) const;
};

// Random quants, zeros in 1..15 and small positive scales.
QuantMatrix RandomQuant(int64_t n_out, int64_t n_in, int64_t group, uint32_t seed);
// Round-to-nearest over each group's range (GPTQ's RTN baseline); zeros kept in 1..15.
QuantMatrix Rtn(const float* w, int64_t n_out, int64_t n_in, int64_t group);
// AutoGPTQ: qweight[r, o] packs inputs 8 r + k of output o in nibble k; qzeros[g, c]
// packs outputs 8 c + k in nibble k, as zero - 1 in the v1 format (so a zero of 0 would
// be stored as 15 and read back as 16, by AutoGPTQ and by Cascade alike: the v1 flaw that
// gptq_v2 fixed; the matrices here keep zeros in 1..15). Tensors `p`.qweight, .qzeros,
// .g_idx, .scales.
std::vector<SafetensorsEntry> PackGptq(const std::string& p, const QuantMatrix& m, bool v1);
// Act-order GPTQ (desc_act) as AutoGPTQ stores it: w [n_out, n_in] with its inputs taken
// in order `perm` (column j of the sorted matrix is input perm[j]) quantized by Rtn in
// groups of `group` sorted columns, the quants written in the file's input order and g_idx
// naming each input's group. `decoded` [n_out, n_in] holds the values the format defines
// (scale[g_idx[i]] * (q - zero[g_idx[i]])), in the file's order.
struct ActOrderGptq {
  std::vector<SafetensorsEntry> entries;
  std::vector<float> decoded;
};
ActOrderGptq PackActOrderGptq(const std::string& p, const float* w, int64_t n_out, int64_t n_in, int64_t group,
                              const std::vector<int64_t>& perm);
// AutoAWQ (gemm): qweight[i, c] packs input i of outputs 8 c + kOrder[k] in nibble k;
// qzeros[g, c] the zeros in the same order.
std::vector<SafetensorsEntry> PackAwq(const std::string& p, const QuantMatrix& m);
// config.json's quantization_config of each.
nlohmann::json GptqConfig(int64_t group, bool v1 = true);
nlohmann::json AwqConfig(int64_t group);

}  // namespace cascade::testing
