// The transformer forward vs the naive double-precision Llama forward of the tests
// (tests/model/naive_forward.h), on random-weight models of every weight type, as GGUF
// files and as Hugging Face directories. The reference follows each file's own semantics
// (tensor names, RoPE layout, RoPE scaling), not Cascade's tables.
// Errors are relative L2 over each logit row.
// To add a case, append to an INSTANTIATE list (weight type, bound, model variant).
#include "model/transformer.h"
#include "model/local_engine.h"

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/format/gguf.h"
#include "model/format/model_config.h"
#include "model/local_engine.h"
#include "tests/model/naive_forward.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using namespace naive;  // NOLINT: the reference's vocabulary throughout.

struct Case {
  DType type;
  double bound;  // Max relative L2 error of a logit row.
  bool tied = false;
  bool qkv_bias = false;
  int threads = 1;
  bool rope_freqs = false;  // Writes rope_freqs.weight (Llama 3.1 GGUF) with uneven factors.
  bool qk_norm = false;     // A Qwen3 model (q_norm / k_norm).
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << DTypeName(c.type) << (c.tied ? " tied" : "") << (c.qkv_bias ? " qkv_bias" : "") << " t" << c.threads
      << (c.rope_freqs ? " rope_freqs" : "") << (c.qk_norm ? " qk_norm" : "");
}

class TransformerTest : public ::testing::TestWithParam<Case> {};

// Prefill of 37 tokens (three KV blocks of 16) with logits at every row, then 4 decode
// steps, each row against the reference.
TEST_P(TransformerTest, MatchesNaiveDoubleForward) {
  const Case& tc = GetParam();
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::RandomModelSpec spec{
      .weight_type = tc.type, .tied = tc.tied, .qkv_bias = tc.qkv_bias, .qk_norm = tc.qk_norm};
  if (tc.rope_freqs) {
    for (int i = 0; i < spec.n_embd / spec.n_heads / 2; ++i) spec.rope_freq_factors.push_back(1.0f + 0.75f * i);
  }
  testing::WriteRandomModel(spec, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const RefModel ref = LoadRef(*files);
  ASSERT_EQ(ref.rope_freqs.size(), spec.rope_freq_factors.size());
  ASSERT_EQ(ref.c.tied_embeddings, tc.tied);
  ASSERT_EQ(ref.c.qkv_bias, tc.qkv_bias);

  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const double worst = WorstRelL2(RefForward(ref, ids), CascadeLogits(*files, ids, tc.threads), tc.bound);
  std::printf("[ info ] %s: worst relative L2 logit error %.3g (bound %.3g)\n", std::string(DTypeName(tc.type)).c_str(),
              worst, tc.bound);
}

// Bounds: f32/f16/bf16 weights reach the reference's own (dequantized) weights exactly,
// so only f32 rounding remains (< 1e-4, the bound for f32). Quantized weights
// multiply 8-bit-quantized activations (as llama.cpp does): each activation carries up to
// 1/254 relative rounding, which through 2 layers and the head gives ~1e-2.
INSTANTIATE_TEST_SUITE_P(
    Types, TransformerTest,
    ::testing::Values(Case{DType::kF32, 1e-4}, Case{DType::kF32, 1e-4, true, false, 2},
                      Case{DType::kF32, 1e-4, false, false, 1, true},
                      Case{DType::kF32, 1e-4, false, false, 2, false, true},
                      Case{DType::kQ8_0, 3e-2, false, false, 1, false, true}, Case{DType::kF32, 1e-4, false, true},
                      Case{DType::kF16, 1e-4}, Case{DType::kBF16, 1e-4}, Case{DType::kQ8_0, 3e-2},
                      Case{DType::kQ4_0, 3e-2, false, false, 2}, Case{DType::kQ4_1, 3e-2}, Case{DType::kQ4_K, 3e-2},
                      Case{DType::kQ6_K, 3e-2, true}, Case{DType::kMXFP4, 3e-2},
                      // Tied and packed (on AVX-512): the embedding lookup reads the LM head's packed rows.
                      Case{DType::kQ8_0, 3e-2, true}, Case{DType::kQ4_1, 3e-2, true, false, 2}));

// Hugging Face checkpoints: the random models written as a directory (config.json +
// model.safetensors with transformers' names and conventions) and opened by OpenModelFiles,
// vs the reference read from that directory with Hugging Face's semantics; and the GGUF file
// of the same model (llama.cpp's conventions: permuted Q/K rows for `llama`, Llama 3.1's
// scaling as rope_freqs.weight), which must give the same logits.
struct HfCase {
  const char* name;
  DType type;
  bool qk_norm = false;   // Qwen3 (q_norm / k_norm).
  bool qkv_bias = false;  // Qwen2.
  bool llama3 = false;    // Llama 3.1's rope_scaling.
  bool tied = false;
  int threads = 1;
};
void PrintTo(const HfCase& c, std::ostream* os) { *os << c.name; }

// Llama 3.1's scaling but for a short original context: with head_dim 64 and theta 1e4,
// 64 positions keep frequencies 0-3 (wavelength < 16), blend 4-8 and divide 9-31 by 8
// (wavelength > 64); over the test's 41 positions, frequency 9 turns by 3 radians unscaled
// and by 0.4 scaled.
constexpr testing::Llama3RopeScaling kLlama31Rope{
    .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position_embeddings = 64};

class HfCheckpointTest : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfCheckpointTest, MatchesNaiveDoubleForwardAndTheGgufFile) {
  const HfCase& tc = GetParam();
  constexpr double kBound = 1e-4;      // f32/f16/bf16 weights: f32 rounding only, as the GGUF cases.
  constexpr double kTwinBound = 1e-5;  // Cascade on the two files of one model: summation order only.
  testing::RandomModelSpec spec{
      .weight_type = tc.type, .tied = tc.tied, .qkv_bias = tc.qkv_bias, .qk_norm = tc.qk_norm};
  if (tc.llama3) spec.llama3_rope = kLlama31Rope;
  testing::TempDir dir;
  const std::string hf_dir = dir.path() + "/random-hf", gguf_path = dir.path() + "/random.gguf";
  testing::WriteRandomHfModel(spec, hf_dir);
  testing::WriteRandomModel(spec, gguf_path);
  auto hf = OpenModelFiles(hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->format, ModelFormat::kHuggingFace);
  EXPECT_EQ(hf->config.arch, tc.qk_norm ? "qwen3" : tc.qkv_bias ? "qwen2" : "llama");
  EXPECT_EQ(hf->config.tied_embeddings, tc.tied);
  EXPECT_EQ(hf->weights->FindTensor("lm_head.weight") == nullptr, tc.tied);
  auto gguf = OpenModelFiles(gguf_path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();

  const RefModel ref = LoadRef(*hf, HfRopeOf(spec));
  ASSERT_EQ(ref.layers[0].q_norm.empty(), !tc.qk_norm);
  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const auto ref_logits = RefForward(ref, ids);
  // What each case is about moves the reference's logits far past the bound, so a forward
  // that skipped it would fail.
  const auto expect_matters = [&](const char* what, const std::function<void(RefModel&)>& change) {
    RefModel m = ref;
    change(m);
    const double moved = WorstRelL2(ref_logits, RefForward(m, ids));
    std::printf("[ info ] %s: %s moves the reference's logits by %.3g\n", tc.name, what, moved);
    EXPECT_GT(moved, 100 * kBound) << what;
  };
  const auto unscaled = [&](int64_t i) { return std::pow(spec.rope_theta, -2.0 * i / ref.c.head_dim); };
  expect_matters("rotating adjacent pairs", [](RefModel& m) { m.neox = false; });
  if (tc.qk_norm) {
    expect_matters("no q_norm / k_norm", [](RefModel& m) {
      for (auto& L : m.layers) L.q_norm.clear(), L.k_norm.clear();
    });
  }
  if (tc.llama3) {
    for (int64_t i = 0; i < static_cast<int64_t>(ref.inv_freq.size()); ++i) {  // The bands of kLlama31Rope.
      const double f = ref.inv_freq[i], base = unscaled(i);
      if (i <= 3) {
        EXPECT_EQ(f, base) << "frequency " << i;
      } else if (i <= 8) {
        EXPECT_TRUE(f > base / kLlama31Rope.factor && f < base) << "frequency " << i;
      } else {
        EXPECT_DOUBLE_EQ(f, base / kLlama31Rope.factor) << "frequency " << i;
      }
    }
    expect_matters("no RoPE scaling", [&](RefModel& m) {
      for (size_t i = 0; i < m.inv_freq.size(); ++i) m.inv_freq[i] = unscaled(i);
    });
    expect_matters("no blend (frequencies 4-8 divided by 8)", [&](RefModel& m) {
      for (int64_t i = 4; i <= 8; ++i) m.inv_freq[i] = unscaled(i) / kLlama31Rope.factor;
    });
  }

  const auto hf_logits = CascadeLogits(*hf, ids, tc.threads);
  const double hf_err = WorstRelL2(ref_logits, hf_logits, kBound);

  // The GGUF file is the same model: its reference (llama.cpp's semantics) has the same
  // frequencies (for Llama 3.1, the converter's divisors reproduce transformers' formula)
  // and the same logits, and so has Cascade on it.
  const RefModel gguf_ref = LoadRef(*gguf);
  ASSERT_EQ(gguf_ref.inv_freq.size(), ref.inv_freq.size());
  for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
    EXPECT_NEAR(gguf_ref.inv_freq[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << "frequency " << i;
  }
  const double ref_twin = WorstRelL2(ref_logits, RefForward(gguf_ref, ids), 1e-6);
  const auto gguf_logits = CascadeLogits(*gguf, ids, tc.threads);
  const double gguf_err = WorstRelL2(ref_logits, gguf_logits, kBound);
  std::vector<std::vector<double>> hf_rows;
  for (const auto& row : hf_logits) hf_rows.emplace_back(row.begin(), row.end());
  const double twin = WorstRelL2(hf_rows, gguf_logits, kTwinBound);
  std::printf(
      "[ info ] %s: worst relative L2 logit error HF %.3g, GGUF %.3g (bound %.3g); HF vs GGUF %.3g (bound %.3g), "
      "their references %.3g\n",
      tc.name, hf_err, gguf_err, kBound, twin, kTwinBound, ref_twin);
}

INSTANTIATE_TEST_SUITE_P(Models, HfCheckpointTest,
                         ::testing::Values(HfCase{"Qwen3_f32", DType::kF32, true, false, false, false, 2},
                                           HfCase{"Qwen3_bf16_tied", DType::kBF16, true, false, false, true},
                                           HfCase{"Qwen2_f16", DType::kF16, false, true},
                                           HfCase{"Llama31_f32", DType::kF32, false, false, true},
                                           HfCase{"Llama31_f16_tied", DType::kF16, false, false, true, true, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

// Both generations of config.json for every family Cascade serves, each with its real RoPE
// base (never 10000, so a base defaulted wrongly shows): transformers 4.x writes top-level
// rope_theta and rope_scaling and torch_dtype; 5.x writes rope_parameters (base and scaling
// together), dtype, layer_types, and Qwen3-MoE's expert count as num_local_experts. The two
// layouts must give one ModelConfig and the same logits, bit for bit, within the bound of
// the float64 reference, which takes the base and scaling from what the test wrote.
struct LayoutCase {
  const char* name;
  testing::RandomModelSpec spec;
  const char* model_type;
  RopeScaling scaling = RopeScaling::kNone;
};
void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

testing::RandomModelSpec MoeSpec(testing::MoeFamily family, bool norm_topk) {
  return {.n_layers = 2, .rope_theta = 1e6, .moe = family, .norm_topk_prob = norm_topk};
}

class HfConfigLayoutTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(HfConfigLayoutTest, BothTransformersGenerationsGiveTheSameModel) {
  const LayoutCase& tc = GetParam();
  constexpr double kBound = 1e-4;  // F32 weights: f32 rounding only.
  testing::TempDir dir;
  std::vector<ModelFiles> files;
  for (const auto layout : {testing::HfLayout::kTransformers4, testing::HfLayout::kTransformers5}) {
    testing::RandomModelSpec spec = tc.spec;
    spec.hf_layout = layout;
    const std::string path = StrCat(dir.path(), "/v", layout == testing::HfLayout::kTransformers4 ? 4 : 5);
    testing::WriteRandomHfModel(spec, path);
    auto f = OpenModelFiles(path);
    ASSERT_TRUE(f.ok()) << f.status();
    files.push_back(std::move(*f));
  }
  const ModelConfig& v4 = files[0].config;
  const ModelConfig& v5 = files[1].config;
  EXPECT_EQ(v4.arch, tc.model_type);
  EXPECT_TRUE(v4.SameLogicalModel(v5)) << "4.x:\n" << v4.ToString() << "5.x:\n" << v5.ToString();
  EXPECT_EQ(v4.rope_theta, tc.spec.rope_theta);
  EXPECT_EQ(v5.rope_theta, tc.spec.rope_theta);
  EXPECT_EQ(v4.rope_scaling, tc.scaling);
  EXPECT_EQ(v5.rope_scaling, tc.scaling);
  EXPECT_EQ(v4.n_experts, v5.n_experts);
  EXPECT_EQ(v4.n_experts, tc.spec.moe == testing::MoeFamily::kNone ? 0 : tc.spec.n_experts);
  EXPECT_EQ(v4.n_ctx_train, tc.spec.n_ctx);  // No window or scaling caps it.
  for (const ModelConfig* c : {&v4, &v5}) {
    for (const DefaultedKey& d : c->defaulted) {
      EXPECT_EQ(d.key.find("rope_theta"), std::string::npos)
          << "the file gives the base: " << d.key << " = " << d.value;
    }
  }

  const RefRouting routing{tc.spec.n_experts_used,
                           tc.spec.moe == testing::MoeFamily::kMixtral || tc.spec.norm_topk_prob};
  const RefModel ref = LoadRef(files[0], HfRopeOf(tc.spec), routing);
  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const auto ref_logits = RefForward(ref, ids);
  {  // The base matters: the old silent default of 10000 moves the reference far past the bound.
    RefModel m = ref;
    const HfRope wrong{.theta = 10000.0, .llama3 = tc.spec.llama3_rope, .yarn = tc.spec.yarn_rope};
    m.inv_freq = LoadRef(files[0], wrong, routing).inv_freq;
    const double moved = WorstRelL2(ref_logits, RefForward(m, ids));
    std::printf("[ info ] %s: RoPE base 10000 instead of %g moves the reference's logits by %.3g\n", tc.name,
                tc.spec.rope_theta, moved);
    EXPECT_GT(moved, 100 * kBound);
  }
  const auto logits4 = CascadeLogits(files[0], ids, 1);
  const auto logits5 = CascadeLogits(files[1], ids, 1);
  EXPECT_EQ(logits4, logits5) << "the two layouts must be one model";
  const double err = WorstRelL2(ref_logits, logits4, kBound);
  std::printf("[ info ] %s: worst relative L2 logit error %.3g (bound %.3g), 4.x and 5.x layouts identical\n", tc.name,
              err, kBound);
}

// Llama 3.1's base is 500000, the others' 1e6 (Qwen2.5, Qwen3, Mistral v0.2+, Mixtral).
INSTANTIATE_TEST_SUITE_P(
    Families, HfConfigLayoutTest,
    ::testing::Values(
        LayoutCase{"Llama31", {.llama3_rope = kLlama31Rope, .rope_theta = 500000.0}, "llama", RopeScaling::kLlama3},
        LayoutCase{"Mistral", {.rope_theta = 1e6, .mistral = true}, "mistral"},
        LayoutCase{"Qwen2", {.qkv_bias = true, .rope_theta = 1e6}, "qwen2"},
        LayoutCase{"Qwen3", {.qk_norm = true, .rope_theta = 1e6}, "qwen3"},
        LayoutCase{"Qwen3_yarn",
                   {.qk_norm = true, .yarn_rope = testing::YarnRopeScaling{4.0, 32}, .rope_theta = 1e6},
                   "qwen3",
                   RopeScaling::kYarn},
        LayoutCase{"Mixtral", MoeSpec(testing::MoeFamily::kMixtral, true), "mixtral"},
        LayoutCase{"Qwen2Moe", MoeSpec(testing::MoeFamily::kQwen2Moe, false), "qwen2_moe"},
        LayoutCase{"Qwen3Moe", MoeSpec(testing::MoeFamily::kQwen3Moe, true), "qwen3_moe"}),
    [](const auto& info) { return std::string(info.param.name); });

// YaRN as llama.cpp's converter writes it into a GGUF file (rope.scaling.type yarn, factor,
// original_context_length; beta 32/1 and the attention factor by llama.cpp's defaults) is
// the model config.json describes: the same frequencies, attention factor and logits.
TEST(YarnTest, GgufAndHuggingFaceFilesAgreeWithTheReference) {
  testing::RandomModelSpec spec{.qk_norm = true, .yarn_rope = testing::YarnRopeScaling{4.0, 32}, .rope_theta = 1e6};
  testing::TempDir dir;
  testing::WriteRandomHfModel(spec, dir.path() + "/hf");
  testing::WriteRandomModel(spec, dir.path() + "/model.gguf");
  auto hf = OpenModelFiles(dir.path() + "/hf");
  auto gguf = OpenModelFiles(dir.path() + "/model.gguf");
  ASSERT_TRUE(hf.ok() && gguf.ok()) << hf.status() << gguf.status();
  EXPECT_TRUE(hf->config.SameLogicalModel(gguf->config)) << hf->config.ToString() << gguf->config.ToString();
  EXPECT_NEAR(hf->config.rope_attention_factor, 1 + 0.1 * std::log(4.0), 1e-12);
  const RefModel ref = LoadRef(*hf, HfRopeOf(spec));
  const RefModel gguf_ref = LoadRef(*gguf);
  ASSERT_EQ(ref.inv_freq.size(), gguf_ref.inv_freq.size());
  const std::vector<float> cascade = RopeInvFreq(hf->config);
  int ramp = 0;  // Frequencies strictly between kept and divided by the factor.
  for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
    EXPECT_NEAR(cascade[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << "frequency " << i;
    EXPECT_NEAR(gguf_ref.inv_freq[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << "frequency " << i;
    const double base = std::pow(1e6, -2.0 * i / 64);
    ramp += ref.inv_freq[i] < base * (1 - 1e-9) && ref.inv_freq[i] > base / 4 * (1 + 1e-9);
  }
  EXPECT_GT(ramp, 0) << "the test's original context must put dimensions on the ramp";
  const std::vector<int32_t> ids = TestIds(ref.c.n_vocab);
  const auto ref_logits = RefForward(ref, ids);
  RefModel no_attention_factor = ref;
  no_attention_factor.attention_factor = 1.0;
  const double moved = WorstRelL2(ref_logits, RefForward(no_attention_factor, ids));
  EXPECT_GT(moved, 1e-2) << "the attention factor must matter";
  const double hf_err = WorstRelL2(ref_logits, CascadeLogits(*hf, ids, 1), 1e-4);
  const double gguf_err = WorstRelL2(ref_logits, CascadeLogits(*gguf, ids, 1), 1e-4);
  std::printf("[ info ] YaRN: HF %.3g, GGUF %.3g (bound 1e-4); no attention factor moves the reference by %.3g\n",
              hf_err, gguf_err, moved);
}

// A config.json without a RoPE base, for a family whose transformers default is not 10000:
// Mixtral's class says 1e6, so the file loads as the model it is, and the load log says so.
TEST(HfDefaultsTest, MissingRopeBaseTakesTheFamilyDefaultAndIsLogged) {
  testing::TempDir dir;
  const testing::RandomModelSpec spec = MoeSpec(testing::MoeFamily::kMixtral, true);
  testing::WriteRandomHfModel(spec, dir.path() + "/full");
  testing::WriteRandomHfModel(spec, dir.path() + "/no_theta");
  const std::string config_path = dir.path() + "/no_theta/config.json";
  nlohmann::json config = nlohmann::json::parse(testing::ReadFileOrDie(config_path));
  ASSERT_EQ(config.erase("rope_theta"), 1u);
  dir.WriteFile("no_theta/config.json", config.dump(2));

  ::testing::internal::CaptureStderr();  // The load log: what LocalEngine (as a worker) writes loading it.
  auto engine = LocalEngine::Create(dir.path() + "/no_theta", {});
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto no_theta = OpenModelFiles(dir.path() + "/no_theta");
  ASSERT_TRUE(no_theta.ok()) << no_theta.status();
  EXPECT_EQ(no_theta->config.rope_theta, 1e6);
  EXPECT_THAT(log, ::testing::HasSubstr("rope_theta = 1000000.0 (not in the file: MixtralConfig default"));
  const auto& d = no_theta->config.defaulted;
  EXPECT_NE(std::find_if(d.begin(), d.end(), [](const DefaultedKey& k) { return k.key == "rope_theta"; }), d.end());
  auto full = OpenModelFiles(dir.path() + "/full");
  ASSERT_TRUE(full.ok()) << full.status();
  const std::vector<int32_t> ids = TestIds(spec.n_vocab);
  EXPECT_EQ(CascadeLogits(*no_theta, ids, 1), CascadeLogits(*full, ids, 1));
}

// The directory is a whole checkpoint: LocalEngine (which also reads tokenizer.json) loads
// it, its tokenizer is the GGUF file's, and so are its prompt logits.
TEST(HfCheckpointEngineTest, LoadsLikeTheGgufFile) {
  testing::TempDir dir;
  const testing::RandomModelSpec spec{.llama3_rope = kLlama31Rope};
  testing::WriteRandomHfModel(spec, dir.path() + "/hf");
  testing::WriteRandomModel(spec, dir.path() + "/model.gguf");
  auto a = LocalEngine::Create(dir.path() + "/hf", {});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = LocalEngine::Create(dir.path() + "/model.gguf", {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->tokenizer().n_vocab(), (*b)->tokenizer().n_vocab());
  EXPECT_EQ((*a)->tokenizer().eos_id(), (*b)->tokenizer().eos_id());
  const std::vector<int32_t> ids = (*a)->tokenizer().Encode("Hi !!! there, 42", false);
  EXPECT_EQ(ids, (*b)->tokenizer().Encode("Hi !!! there, 42", false));
  ASSERT_GT(ids.size(), 4u);
  auto la = (*a)->PromptLogits(ids, 0), lb = (*b)->PromptLogits(ids, 0);
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), lb->size());
  const std::vector<double> ref(la->begin(), la->end());
  const double e = RelL2(ref, lb->data());
  EXPECT_LT(e, 1e-3);  // The engines' KV cache may hold f16.
  std::printf("[ info ] engine prompt logits, HF vs GGUF: relative L2 %.3g (bound 1e-3)\n", e);
}

// Two sequences with different histories in one batch give the same logits as each run
// alone: the batch is really partitioned by the sequence table.
TEST(TransformerBatchTest, BatchedEqualsSeparate) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  auto backend = kernels::MakeCpuBackend({.n_threads = 2});
  auto t = Transformer::Load(*files, backend.get(), {});
  ASSERT_TRUE(t.ok());
  const int64_t V = (*t)->config().n_vocab;
  const std::vector<int32_t> a = {5, 9, 12, 7, 3}, b = {8, 1, 30};
  const std::vector<int32_t> ta = {0}, tb = {1};
  // Alone.
  auto alone = [&](const std::vector<int32_t>& ids, const std::vector<int32_t>& table) {
    auto cache = KvCache::Create((*t)->CacheOptions(2, 16, DType::kF32));
    std::vector<int32_t> pos(ids.size());
    std::iota(pos.begin(), pos.end(), 0);
    const int64_t last = ids.size() - 1;
    kernels::AttentionSeq s{0, static_cast<int64_t>(ids.size()), 0, table};
    std::vector<float> logits(V);
    EXPECT_TRUE(
        (*t)->Forward({ids, pos, {&s, 1}, {&last, 1}}, *cache, TensorView(logits.data(), DType::kF32, {1, V})).ok());
    return logits;
  };
  const auto la = alone(a, ta), lb = alone(b, tb);
  auto cache = KvCache::Create((*t)->CacheOptions(2, 16, DType::kF32));
  std::vector<int32_t> ids = a, pos = {0, 1, 2, 3, 4, 0, 1, 2};
  ids.insert(ids.end(), b.begin(), b.end());
  const kernels::AttentionSeq seqs[2] = {{0, 5, 0, ta}, {5, 3, 0, tb}};
  const int64_t rows[2] = {4, 7};
  std::vector<float> logits(2 * V);
  ASSERT_TRUE((*t)->Forward({ids, pos, seqs, rows}, *cache, TensorView(logits.data(), DType::kF32, {2, V})).ok());
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(logits[i], la[i], 1e-4);
    EXPECT_NEAR(logits[V + i], lb[i], 1e-4);
  }
}

TEST(TransformerLoadTest, MissingTensorIsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({.n_layers = 2}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  files->config.n_layers = 3;  // The file has no blk.2.*.
  auto backend = kernels::MakeCpuBackend({});
  auto t = Transformer::Load(*files, backend.get(), {});
  EXPECT_STATUS_CODE(t, kNotFound);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("blk.2.attn_norm.weight"));
}

TEST(TransformerLoadTest, RopeFreqsOfTheWrongLengthAreRefused) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({.n_layers = 1, .rope_freq_factors = {1.0f, 2.0f, 3.0f}}, path);  // head_dim 64: needs 32.
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  auto backend = kernels::MakeCpuBackend({});
  EXPECT_THAT(Transformer::Load(*files, backend.get(), {}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("rope_freqs.weight")));
}

// Every factor 2 divides every frequency by 2, which is what linear RoPE scaling with
// factor 2 does: the two files give the same logits, bit for bit.
TEST(TransformerLoadTest, UniformRopeFreqsEqualLinearScaling) {
  testing::TempDir dir;
  std::vector<std::vector<float>> logits;
  for (const bool as_factors : {true, false}) {
    testing::RandomModelSpec spec{.n_layers = 2};
    if (as_factors) {
      spec.rope_freq_factors.assign(spec.n_embd / spec.n_heads / 2, 2.0f);
    } else {
      spec.rope_linear_factor = 2.0f;
    }
    const std::string path = dir.path() + (as_factors ? "/factors.gguf" : "/linear.gguf");
    testing::WriteRandomModel(spec, path);
    auto engine = LocalEngine::Create(path, {});
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto l = (*engine)->PromptLogits({5, 17, 3, 40, 8, 11, 60, 2}, 0);
    ASSERT_TRUE(l.ok()) << l.status();
    logits.push_back(*l);
  }
  EXPECT_EQ(logits[0], logits[1]);
}

}  // namespace
}  // namespace cascade::model
