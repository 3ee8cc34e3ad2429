// Mixture-of-experts models (Mixtral, Qwen2-MoE, Qwen3-MoE) against the naive double
// forward of the tests (tests/model/naive_forward.h), which reads each file by its own
// names and routes as transformers' sparse MoE blocks do: random-weight models written as
// a GGUF file (llama.cpp's merged expert tensors) and as a Hugging Face directory (one
// tensor per expert) from the same values.
//  * Logits at every position of a 37-token prefill and 4 decode steps within 1e-4
//    relative L2 (f32 weights), from both formats.
//  * 32 greedy tokens from LocalEngine (f32 KV cache): each is the reference's argmax after
//    the tokens before it, so the reference's own greedy run gives the same ids.
//  * What each family adds (renormalised top-k, the shared expert, dense layers by
//    mlp_only_layers) moves the reference's logits far past the bound, so a forward that
//    skipped it would fail.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>

#include "core/str_cat.h"
#include "kernels/cpu_features.h"
#include "model/layers/moe.h"
#include "model/local_engine.h"
#include "model/transformer.h"
#include "tests/gpt_oss_model.h"
#include "tests/greedy_trace.h"
#include "tests/guarded_backend.h"
#include "tests/model/naive_forward.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using namespace naive;  // NOLINT: the reference's vocabulary throughout.
using testing::MoeFamily;

struct MoeCase {
  const char* name;
  MoeFamily family;
  bool norm_topk = true;
  std::vector<int64_t> mlp_only_layers = {};  // Hugging Face only.
  DType type = DType::kF32;
  double bound = 1e-4;
  int threads = 1;
  int hf_shards = 1;       // > 1: a sharded Hugging Face checkpoint (index + shards).
  bool gptq = false;       // Hugging Face only: experts as a GPTQ checkpoint (INT4, groups of 128).
  bool act_order = false;  // With gptq: act-order (desc_act) experts.
};
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

testing::RandomModelSpec Spec(const MoeCase& c) {
  return {.weight_type = c.type,
          .n_layers = 3,
          .n_ff = 256,
          .moe = c.family,
          .n_experts = 8,
          .n_experts_used = 2,
          .n_ff_expert = c.act_order ? 256 : 128,  // Act-order: two groups of 128 for down too.
          .n_ff_shared_expert = 256,
          .norm_topk_prob = c.norm_topk,
          .mlp_only_layers = c.mlp_only_layers,
          .hf_shards = c.hf_shards,
          .gptq_experts = c.gptq,
          .gptq_act_order = c.act_order};
}

// Every generated id is the reference's argmax after the ids before it.
void ExpectReferenceGreedy(const RefModel& ref, const std::vector<int32_t>& prompt, const std::vector<int32_t>& got) {
  ASSERT_FALSE(got.empty());
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), got.begin(), got.end() - 1);
  const auto logits = RefForward(ref, ids);
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& row = logits[prompt.size() - 1 + i];
    const int32_t argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    ASSERT_EQ(got[i], argmax) << "greedy token " << i;
  }
}

class MoeModelTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeModelTest, MatchesNaiveDoubleForwardFromBothFormats) {
  const MoeCase& tc = GetParam();
  const testing::RandomModelSpec spec = Spec(tc);
  const RefRouting routing{spec.n_experts_used, tc.family == MoeFamily::kMixtral || tc.norm_topk};
  testing::TempDir dir;
  const std::string hf_dir = dir.path() + "/hf", gguf_path = dir.path() + "/model.gguf";
  testing::WriteRandomHfModel(spec, hf_dir);
  // The GGUF twin holds neither dense layers of a MoE model nor GPTQ's quantized values.
  const bool with_gguf = tc.mlp_only_layers.empty() && !tc.gptq;
  if (with_gguf) testing::WriteRandomModel(spec, gguf_path);

  auto hf = OpenModelFiles(hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(std::filesystem::exists(hf_dir + "/model.safetensors.index.json"), tc.hf_shards > 1);
  if (tc.gptq) {  // Every expert reads as Cascade's INT4 type, from its qweight/qzeros/scales.
    const TensorInfo* expert = hf->weights->FindTensor("model.layers.2.mlp.experts.7.down_proj.weight");
    ASSERT_NE(expert, nullptr);
    EXPECT_EQ(expert->dtype, DType::kI4_G128);
    // Act-order experts read their inputs in their own order (Linear gathers them).
    for (const char* m : {"gate", "up", "down"}) {
      EXPECT_EQ(hf->weights->FindTensor(StrCat("model.layers.2.mlp.experts.7.", m, "_proj.input_order")) != nullptr,
                tc.act_order)
          << m;
    }
  }
  EXPECT_EQ(hf->config.n_experts, spec.n_experts);
  EXPECT_EQ(hf->config.n_experts_used, spec.n_experts_used);
  EXPECT_EQ(hf->config.n_ff_expert, spec.n_ff_expert);
  EXPECT_EQ(hf->config.norm_topk_prob, routing.norm_topk);
  EXPECT_EQ(hf->config.n_ff_shared_expert, tc.family == MoeFamily::kQwen2Moe ? spec.n_ff_shared_expert : 0);
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const bool dense = std::count(tc.mlp_only_layers.begin(), tc.mlp_only_layers.end(), l) > 0;
    EXPECT_EQ(hf->config.IsMoeLayer(l), !dense) << "layer " << l;
  }
  const RefModel ref = LoadRef(*hf, HfRopeOf(spec), routing);
  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  std::vector<std::vector<int64_t>> load;
  const auto ref_logits = RefForward(ref, ids, &load);

  // The family's features matter: dropping one moves the logits far past the bound (100x
  // the f32 bound, 10x a quantized one).
  const auto expect_matters = [&](const char* what, const std::function<void(RefModel&)>& change) {
    RefModel m = ref;
    change(m);
    const double moved = WorstRelL2(ref_logits, RefForward(m, ids));
    std::printf("[ info ] %s: %s moves the reference's logits by %.3g\n", tc.name, what, moved);
    EXPECT_GT(moved, std::max(1e-2, 10 * tc.bound)) << what;
  };
  expect_matters("top-1 instead of top-2", [](RefModel& m) { m.routing.top_k = 1; });
  expect_matters(routing.norm_topk ? "no renormalisation" : "renormalising",
                 [](RefModel& m) { m.routing.norm_topk = !m.routing.norm_topk; });
  if (tc.family == MoeFamily::kQwen2Moe) {
    expect_matters("no shared expert", [](RefModel& m) {
      for (auto& L : m.layers) L.sh_gate.clear();
    });
  }
  // Routing spreads: every expert of every MoE layer got tokens, 2 per token.
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    if (ref.layers[l].router.empty()) continue;
    EXPECT_EQ(std::accumulate(load[l].begin(), load[l].end(), int64_t{0}), 2 * static_cast<int64_t>(ids.size()));
  }

  const double hf_err = WorstRelL2(ref_logits, CascadeLogits(*hf, ids, tc.threads), tc.bound);
  double gguf_err = 0;
  if (with_gguf) {
    auto gguf = OpenModelFiles(gguf_path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_TRUE(gguf->config.SameLogicalModel(hf->config)) << gguf->config.ToString() << hf->config.ToString();
    // The GGUF file's own reference (merged expert tensors split per expert) is the same model.
    WorstRelL2(ref_logits, RefForward(LoadRef(*gguf, {}, routing), ids), 1e-6);
    gguf_err = WorstRelL2(ref_logits, CascadeLogits(*gguf, ids, tc.threads), tc.bound);
  }
  std::printf("[ info ] %s: worst relative L2 logit error HF %.3g, GGUF %.3g (bound %.3g)\n", tc.name, hf_err, gguf_err,
              tc.bound);

  if (tc.bound > 1e-4) return;  // Quantized activations: greedy equality may break at a near-tie.
  // 32 greedy tokens from each format, each the reference's argmax.
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 7);
  const std::vector<int32_t> hf_greedy = testing::LocalGreedy(hf_dir, prompt, 32);
  EXPECT_EQ(hf_greedy.size(), 32u);
  ExpectReferenceGreedy(ref, prompt, hf_greedy);
  if (with_gguf) {
    EXPECT_EQ(testing::LocalGreedy(gguf_path, prompt, 32), hf_greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, MoeModelTest,
    ::testing::Values(
        MoeCase{"Qwen3Moe_f32", MoeFamily::kQwen3Moe},
        MoeCase{"Qwen3Moe_no_norm_topk_t2", MoeFamily::kQwen3Moe, false, {}, DType::kF32, 1e-4, 2},
        MoeCase{"Qwen3Moe_mlp_only_layer_1", MoeFamily::kQwen3Moe, true, {1}},
        MoeCase{"Mixtral_f32_3_shards", MoeFamily::kMixtral, true, {}, DType::kF32, 1e-4, 1, 3},
        MoeCase{"Qwen2Moe_f32_shared_expert", MoeFamily::kQwen2Moe, false},
        MoeCase{"Qwen2Moe_bf16_norm_topk", MoeFamily::kQwen2Moe, true, {}, DType::kBF16},
        // The experts' INT4 weights exactly as the reference dequantizes them; the
        // CPU's 8-bit activations are the only difference (as for dense GPTQ).
        MoeCase{"Qwen3Moe_gptq_experts", MoeFamily::kQwen3Moe, true, {}, DType::kF32, 3e-2, 2, 1, true},
        // Act-order (desc_act) experts, as Qwen3-235B-A22B's GPTQ-INT4 ships:
        // each gathers its inputs in its own order on the host path.
        MoeCase{
            "Qwen3Moe_gptq_act_order_experts", MoeFamily::kQwen3Moe, true, {}, DType::kF32, 3e-2, 2, 1, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

// Quantized experts (the GGUF types people publish) against the same reference, which
// dequantizes the stored blocks: the 8-bit activations of the integer kernels are the
// only difference, as for dense models. On every CPU ISA this machine has (generic, AVX2,
// AVX-512): the experts run each ISA's packed kernels, batched (Backend::LinearBatch).
TEST(MoeQuantizedTest, GgufExpertsOfEveryCommonTypeOnEveryIsa) {
  for (const auto& [type, isa] :
       {std::pair{DType::kQ8_0, kernels::CpuIsa::kGeneric}, std::pair{DType::kQ8_0, kernels::CpuIsa::kAvx2},
        std::pair{DType::kQ8_0, kernels::CpuIsa::kAvx512}, std::pair{DType::kQ4_K, kernels::CpuIsa::kAvx2},
        std::pair{DType::kQ4_K, kernels::CpuIsa::kAvx512}, std::pair{DType::kQ6_K, kernels::CpuIsa::kAvx512}}) {
    if (!kernels::CpuSupportsIsa(isa)) {
      std::printf("[ info ] %s: this CPU lacks it, skipped\n", std::string(kernels::CpuIsaName(isa)).c_str());
      continue;
    }
    SCOPED_TRACE(::testing::Message() << DTypeName(type) << " " << kernels::CpuIsaName(isa));
    kernels::SetMaxCpuIsaForTesting(isa);
    testing::RandomModelSpec spec = Spec({"q", MoeFamily::kQwen3Moe});
    spec.weight_type = type;
    spec.n_ff_expert = 256;  // Whole blocks of the K types.
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.gguf";
    testing::WriteRandomModel(spec, path);
    auto files = OpenModelFiles(path);
    ASSERT_TRUE(files.ok()) << files.status();
    const RefModel ref = LoadRef(*files, {}, {2, true});
    const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
    const double e = WorstRelL2(RefForward(ref, ids), CascadeLogits(*files, ids, 2), 5e-2);
    std::printf("[ info ] Qwen3-MoE %s experts on %s: worst relative L2 logit error %.3g (bound 5e-2)\n",
                std::string(DTypeName(type)).c_str(), std::string(kernels::CpuIsaName(isa)).c_str(), e);
  }
  kernels::SetMaxCpuIsaForTesting(kernels::BestCpuIsa());
}

TEST(MoeRouteTest, TopKRenormalisedAndTiesToTheLowerId) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t experts[3];
  float weights[3];
  RouteToken(logits, 3, false, experts, weights);
  EXPECT_EQ(std::vector<int32_t>(experts, experts + 3), (std::vector<int32_t>{1, 3, 4}));
  double z = 0;
  for (float l : logits) z += std::exp(double{l});
  EXPECT_NEAR(weights[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(weights[2], std::exp(1.0) / z, 1e-7);
  RouteToken(logits, 3, true, experts, weights);
  const double chosen = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(weights[0], std::exp(2.0) / chosen, 1e-7);
  EXPECT_NEAR(weights[0] + weights[1] + weights[2], 1.0, 1e-6);
}

// A router biased to one expert: the stage's load counts show every token choosing it.
TEST(MoeLoadTest, BiasedRouterShowsInTheExpertLoad) {
  testing::RandomModelSpec spec = Spec({"hot", MoeFamily::kQwen3Moe});
  spec.hot_expert = 5;
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel(spec, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<int32_t> ids = TestIds(files->config.n_vocab);
  auto backend = kernels::MakeCpuBackend({.n_threads = 1});
  auto t = Transformer::Load(*files, backend.get(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ((*t)->moe_layers(), (std::vector<int64_t>{0, 1, 2}));
  auto cache = KvCache::Create((*t)->CacheOptions(4, 16, DType::kF32));
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  const std::vector<int32_t> table = {0, 1, 2};
  const kernels::AttentionSeq seq{0, static_cast<int64_t>(ids.size()), 0, table};
  const int64_t last = static_cast<int64_t>(ids.size()) - 1;
  std::vector<float> logits(files->config.n_vocab);
  ASSERT_TRUE((*t)->Forward({ids, pos, {&seq, 1}, {&last, 1}}, *cache,
                            TensorView(logits.data(), DType::kF32, {1, files->config.n_vocab}))
                  .ok());
  const std::vector<int64_t>& load = (*t)->expert_load();
  ASSERT_EQ(load.size(), 3u * 8u);
  for (int64_t l = 0; l < 3; ++l) {
    const auto row = std::span(load).subspan(l * 8, 8);
    EXPECT_EQ(row[5], static_cast<int64_t>(ids.size())) << "layer " << l;
    EXPECT_EQ(std::accumulate(row.begin(), row.end(), int64_t{0}), 2 * static_cast<int64_t>(ids.size()));
  }
  (*t)->ResetExpertLoad();
  EXPECT_EQ(std::accumulate(load.begin(), load.end(), int64_t{0}), 0);
}

// The host side of the device path (MoeBlock handing a batch's experts to the backend in one
// call: Backend::RoutedExperts, the counts in backend memory that Transformer::expert_load
// drains), on the guarded backend's stand-in, against the host path on the same backend:
// greedy ids equal, logits within float reordering, the same expert counts, no host access
// to backend memory. The 10-token prefill stays on the host path (the stand-in takes up to
// 4 tokens); the decode steps take the device path.
void ExpectRoutedExpertsGiveTheHostPaths(const std::string& path, bool fuse, double bound = 1e-5) {
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<int32_t> prompt = testing::Prompt(10, files->config.n_vocab);
  std::vector<testing::Trace> traces;
  std::vector<std::vector<int64_t>> loads;
  for (const bool routed : {false, true}) {
    testing::GuardedBackend backend;
    backend.set_routes_experts(routed);
    ::testing::internal::CaptureStderr();
    auto t = Transformer::Load(*files, &backend, {.fuse_projections = fuse});
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(t.ok()) << t.status();
    const auto n_moe = static_cast<int64_t>((*t)->moe_layers().size());
    EXPECT_EQ((*t)->moe_layers_on_device(), routed ? n_moe : 0);
    // The load log says where the layers route, where the backend routes experts at all.
    EXPECT_EQ(log.find(StrCat("MoE layers routed on the device: ", n_moe, " of ", n_moe)) != std::string::npos, routed)
        << log;
    auto trace = testing::Generate(**t, prompt, 6);
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_EQ(backend.n_routed_calls(), routed ? 6 * n_moe : 0);  // 6 decode steps x the MoE layers.
    traces.push_back(*std::move(trace));
    loads.push_back((*t)->expert_load());
  }
  EXPECT_EQ(traces[1].ids, traces[0].ids);
  for (size_t s = 0; s < traces[0].logits.size(); ++s) {
    EXPECT_LT(testing::RelL2(traces[0].logits[s], traces[1].logits[s]), bound) << "step " << s;
  }
  EXPECT_EQ(loads[1], loads[0]);
}

// Stacked and separate gate/up; Qwen3-MoE and Mixtral (renormalised or not).
TEST(MoeDevicePathTest, RoutedExpertsGiveTheHostPathsTokensAndLoad) {
  for (const MoeFamily family : {MoeFamily::kQwen3Moe, MoeFamily::kMixtral}) {
    for (const bool fuse : {true, false}) {
      SCOPED_TRACE(StrCat(family == MoeFamily::kMixtral ? "mixtral" : "qwen3moe", fuse ? " stacked" : " separate"));
      testing::TempDir dir;
      const std::string path = dir.path() + "/model.gguf";
      testing::WriteRandomModel(Spec({"dev", family}), path);
      ExpectRoutedExpertsGiveTheHostPaths(path, fuse);
    }
  }
}

// What the layer hands the device path besides the weights: act-order GPTQ experts' input
// orders (each matrix's own), gpt-oss's expert biases and clamped SwiGLU (its router's bias
// is in the logits), and Qwen2-MoE's shared expert, which runs after the routed ones on
// either path.
TEST(MoeDevicePathTest, ActOrderGptOssAndSharedExpertsGiveTheHostPaths) {
  testing::TempDir dir;
  {
    SCOPED_TRACE("act-order GPTQ experts");
    MoeCase c{"act_order", MoeFamily::kQwen3Moe};
    c.gptq = c.act_order = true;
    testing::WriteRandomHfModel(Spec(c), dir.path() + "/act-order");
    // The CPU quantizes the GPTQ experts' activations to 8 bits: a float reordering upstream
    // (the paths sum the experts' rows in different orders) may move one by a step.
    ExpectRoutedExpertsGiveTheHostPaths(dir.path() + "/act-order", true, 1e-2);
  }
  {
    SCOPED_TRACE("gpt-oss");
    ExpectRoutedExpertsGiveTheHostPaths(gpt_oss_test::WriteHf(gpt_oss_test::MakeModel(), dir.path() + "/gpt-oss"),
                                        true);
  }
  {
    SCOPED_TRACE("Qwen2-MoE shared expert");
    testing::WriteRandomModel(Spec({"shared", MoeFamily::kQwen2Moe}), dir.path() + "/qwen2moe.gguf");
    ExpectRoutedExpertsGiveTheHostPaths(dir.path() + "/qwen2moe.gguf", true);
  }
}

TEST(MoeLoadTest, MissingExpertTensorIsNamed) {
  testing::RandomModelSpec spec = Spec({"m", MoeFamily::kMixtral});
  testing::TempDir dir;
  testing::WriteRandomHfModel(spec, dir.path() + "/hf");
  auto files = OpenModelFiles(dir.path() + "/hf");
  ASSERT_TRUE(files.ok()) << files.status();
  files->config.n_experts = 9;  // The checkpoint has experts 0-7.
  auto backend = kernels::MakeCpuBackend({});
  auto t = Transformer::Load(*files, backend.get(), {});
  EXPECT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("block_sparse_moe"));
}

}  // namespace
}  // namespace cascade::model
