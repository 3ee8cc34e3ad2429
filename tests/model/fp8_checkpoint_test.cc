// FP8 checkpoints (model/format/fp8_checkpoint.h) in the forms they ship: DeepSeek-V3 /
// Qwen3-FP8's 128 x 128 blocks (quant_method fp8, weight_scale_inv) and compressed-tensors'
// per-channel and per-tensor scales (weight_scale), for dense Qwen3 and for Qwen3-MoE with
// FP8 experts. The random models' projections are quantized to E4M3 by the writer, which
// stores the codes and scales in the Hugging Face directory and, in a GGUF file, the
// values they decode to by the OCP definition (tests/random_model.cc). So:
//  * Cascade on the FP8 directory against the naive double forward of those values, within
//    1e-4 (the FP8 kernel takes f32 activations: only f32 rounding is left);
//  * 32 greedy ids equal to Cascade's on the GGUF file;
//  * quantizing moves the reference's logits far past the bound, so a loader that read the
//    codes wrongly (or ignored the scales) would fail.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/format/model_files.h"
#include "tests/greedy_trace.h"
#include "tests/model/naive_forward.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using namespace naive;  // NOLINT: the reference's vocabulary throughout.
using testing::Fp8Form;
using testing::MoeFamily;

struct Fp8Case {
  const char* name;
  Fp8Form form;
  MoeFamily moe = MoeFamily::kNone;
};
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name; }

testing::RandomModelSpec Spec(const Fp8Case& c, Fp8Form form) {
  testing::RandomModelSpec s{.weight_type = DType::kF32, .n_layers = 2, .qk_norm = true, .fp8 = form};
  if (c.moe != MoeFamily::kNone) {
    s.moe = c.moe;
    s.n_experts = 8;
    s.n_experts_used = 2;
    s.n_ff_expert = 128;
  }
  return s;
}

class Fp8CheckpointTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8CheckpointTest, MatchesTheNaiveForwardOfItsValues) {
  const Fp8Case& tc = GetParam();
  constexpr double kBound = 1e-4;
  const testing::RandomModelSpec spec = Spec(tc, tc.form);
  testing::TempDir dir;
  const std::string hf_dir = dir.path() + "/fp8", gguf = dir.path() + "/values.gguf";
  const std::string plain = dir.path() + "/unquantized.gguf";
  testing::WriteRandomHfModel(spec, hf_dir);
  testing::WriteRandomModel(spec, gguf);
  testing::WriteRandomModel(Spec(tc, Fp8Form::kNone), plain);

  auto hf = OpenModelFiles(hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  const std::string q = tc.moe == MoeFamily::kNone ? "model.layers.1.mlp.down_proj.weight"
                                                   : "model.layers.1.mlp.experts.7.down_proj.weight";
  const TensorInfo* t = hf->weights->FindTensor(q);
  ASSERT_NE(t, nullptr) << q;
  EXPECT_EQ(t->dtype, DType::kF8_E4M3_B128);
  EXPECT_EQ(hf->weights->FindTensor(q + (tc.form == Fp8Form::kBlock ? "_scale_inv" : "_scale")), nullptr)
      << "the scales are read as part of the weight";
  auto values = OpenModelFiles(gguf);
  auto unquantized = OpenModelFiles(plain);
  ASSERT_TRUE(values.ok() && unquantized.ok());

  const RefRouting routing{spec.n_experts_used, spec.norm_topk_prob};
  const std::vector<int32_t> ids = TestIds(hf->config.n_vocab);
  const auto ref = RefForward(LoadRef(*values, {}, routing), ids);
  const double moved = WorstRelL2(ref, RefForward(LoadRef(*unquantized, {}, routing), ids));
  EXPECT_GT(moved, 100 * kBound) << "quantizing to FP8 should move the logits";
  const double err = WorstRelL2(ref, CascadeLogits(*hf, ids, 2), kBound);
  std::printf("[ info ] %s: worst relative L2 %.3g (bound %.3g); FP8 moved the reference by %.3g\n", tc.name, err,
              kBound, moved);

  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 8);
  EXPECT_EQ(testing::LocalGreedy(hf_dir, prompt, 32), testing::LocalGreedy(gguf, prompt, 32));
}

// An FP8 KV cache over a checkpoint that carries calibrated KV scales (compressed-tensors'
// kv_cache_scheme: self_attn.k_scale / v_scale), per head and per tensor: Cascade's logits
// against the naive forward that keeps each K and V element as the E4M3 value nearest
// x / scale, times the scale, with the scales the test wrote. The scales are small enough
// that some K and V saturate, so the same cache with unit scales (the rule without
// calibration) gives a different reference, far past the bound: scales read wrongly, or
// not at all, would fail.
TEST(Fp8KvCacheTest, TheCheckpointsScalesMatchTheNaiveForward) {
  constexpr double kBound = 1e-4;
  for (const int64_t per_head : {int64_t{2}, int64_t{1}}) {
    SCOPED_TRACE(per_head == 1 ? "per tensor" : "per head");
    testing::RandomModelSpec spec{.weight_type = DType::kF32, .n_layers = 2, .qk_norm = true, .fp8 = Fp8Form::kBlock};
    spec.kv_scale_per_head = per_head;
    spec.k_scales =
        per_head == 2 ? std::vector<float>{0.004f, 0.02f, 0.01f, 0.003f} : std::vector<float>{0.004f, 0.01f};
    spec.v_scales =
        per_head == 2 ? std::vector<float>{0.001f, 0.003f, 0.002f, 0.0005f} : std::vector<float>{0.001f, 0.002f};
    testing::TempDir dir;
    const std::string hf_dir = dir.path() + "/fp8", gguf = dir.path() + "/values.gguf";
    testing::WriteRandomHfModel(spec, hf_dir);
    testing::WriteRandomModel(spec, gguf);
    auto hf = OpenModelFiles(hf_dir);
    auto values = OpenModelFiles(gguf);
    ASSERT_TRUE(hf.ok() && values.ok());
    const std::vector<int32_t> ids = TestIds(hf->config.n_vocab);
    RefModel ref_model = LoadRef(*values);
    for (int64_t i = 0; i < 4; ++i) {  // Layer-major, 2 KV heads.
      ref_model.fp8_k_scale.push_back(spec.k_scales[per_head == 2 ? i : i / 2]);
      ref_model.fp8_v_scale.push_back(spec.v_scales[per_head == 2 ? i : i / 2]);
    }
    const auto ref = RefForward(ref_model, ids);
    ref_model.fp8_k_scale.assign(4, 1.0);
    ref_model.fp8_v_scale.assign(4, 1.0);
    const double moved = WorstRelL2(ref, RefForward(ref_model, ids));
    EXPECT_GT(moved, 100 * kBound) << "the scales should matter";
    const double err = WorstRelL2(ref, CascadeLogits(*hf, ids, 2, DType::kF8_E4M3), kBound);
    std::printf("[ info ] FP8 KV, %s scales: worst relative L2 %.3g (bound %.3g); unit scales move it by %.3g\n",
                per_head == 1 ? "per-tensor" : "per-head", err, kBound, moved);
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, Fp8CheckpointTest,
                         ::testing::Values(Fp8Case{"Qwen3_block128", Fp8Form::kBlock},
                                           Fp8Case{"Qwen3_channel", Fp8Form::kChannel},
                                           Fp8Case{"Qwen3_tensor", Fp8Form::kTensor},
                                           Fp8Case{"Qwen3Moe_block128", Fp8Form::kBlock, MoeFamily::kQwen3Moe}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cascade::model
