// A random gpt-oss model (model_type gpt_oss) in the layout of transformers' GptOss*
// modules, written as a Hugging Face directory of F32 tensors, for the tests that hold
// Cascade's gpt-oss to a naive forward (tests/model/gpt_oss_test.cc), to itself under TP
// and EP (tests/model/tp_transformer_test.cc) and to the CPU on a GPU
// (tests/gpu_model/cuda_transformer_test.cc). Small: 2 layers (the first slides, window 6),
// 4 heads over 2 KV heads of 16, 4 experts (top 2) of 32, a 96-token vocabulary,
// swiglu_limit 1.5 (many values clamp), YaRN factor 4 over 32 positions without truncation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/random_model.h"

namespace cascade::model::gpt_oss_test {

using Vec = std::vector<float>;

inline constexpr int64_t kLayers = 2, kEmbd = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kExperts = 4, kTopK = 2;
inline constexpr int64_t kFf = 32, kVocab = 96, kWindow = 6;
inline constexpr double kLimit = 1.5, kAlpha = 1.702, kTheta = 10000.0;
inline constexpr testing::YarnRopeScaling kYarn{
    .factor = 4.0, .original_max_position_embeddings = 32, .truncate = false};

struct Layer {
  Vec attn_norm, wq, bq, wk, bk, wv, bv, wo, bo, sinks, post_norm, router, router_bias;
  Vec gate_up, gate_up_bias, down, down_bias;  // [E, H, 2I], [E, 2I], [E, I, H], [E, H].
};
struct Model {
  Vec embd, norm, lm_head;
  std::vector<Layer> layers;
};

// The experts as OpenAI's release stores them (quant_method mxfp4): per layer,
// gate_up_proj_blocks [E, 2I, H/32, 16] and _scales [E, 2I, H/32], down_proj_blocks
// [E, H, I/32, 16] and _scales, output-major, two E2M1 codes a byte (the even element low),
// E8M0 exponents (bias 127).
struct Mxfp4Layer {
  std::vector<uint8_t> gate_up_blocks, gate_up_scales, down_blocks, down_scales;
};

// The model's values, from a fixed seed.
Model MakeModel();
// Draws MXFP4 experts for every layer of `m` and replaces its expert matrices with the
// values they stand for (by the OCP definition, written here): `m` is then the exact model
// of the MXFP4 checkpoint.
std::vector<Mxfp4Layer> MakeMxfp4Experts(Model& m);
// Writes `m` to `dir` (created): config.json and model.safetensors, the experts F32 or,
// with `mxfp4`, in those blocks (and quantization_config quant_method mxfp4). Returns `dir`.
std::string WriteHf(const Model& m, const std::string& dir, const std::vector<Mxfp4Layer>* mxfp4 = nullptr);

}  // namespace cascade::model::gpt_oss_test
