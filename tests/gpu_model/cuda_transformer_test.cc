// Whole models on the CUDA backend (ctest label `gpu`): weights, norms, workspaces and the
// KV cache in device memory, the forward of model/transformer.cc unchanged.
//  * stories260K must decode its 20 golden greedy ids (../shared/testdata/README.md: a
//    float64 forward), an independent reference.
//  * Random models of every weight type and the real tiny models must give the CPU
//    backend's greedy ids. The two backends do not round alike: the CPU quantizes the
//    activations to 8 bits per block for quantized weights, the GPU keeps them F32 (and
//    rounds them to the weight's type for F16/BF16 cuBLAS), so logits differ by that noise
//    (bounded per type below) and a greedy id may differ only where the reference's top two
//    logits are within a tie (from there the sequences diverge and are not compared).
//  * Tensor parallelism over NCCL, when the machine has two GPUs: TP=2 against TP=1.
// Without a GPU every test skips with the CUDA runtime's reason.
#include <gtest/gtest.h>
#include <tuple>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "comm/nccl_communicator.h"
#include "comm/rendezvous.h"
#include "comm/ucx_communicator.h"
#include "core/status.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"
#include "model/transformer.h"
#include "tests/gpt_oss_model.h"
#include "tests/greedy_trace.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using testing::Trace;

const std::vector<int32_t> kStoriesGolden = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                             315, 421, 395, 317, 426, 338, 401, 396, 267, 337};

class CudaTransformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::CudaAvailability a = kernels::QueryCudaDevices();
    if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
    n_gpus_ = a.device_count;
  }
  int n_gpus_ = 0;
};

absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeGpu(
    int device = 0, kernels::CudaKernels kernels = kernels::CudaKernels::kReference) {
  auto b = kernels::CudaBackend::Create({.device = device, .kernels = kernels});
  if (!b.ok()) return b.status();
  return std::unique_ptr<kernels::Backend>(std::move(*b));
}

// A greedy run on the CPU or the GPU (with `kernels`).
absl::StatusOr<Trace> RunOn(const ModelFiles& files, bool gpu, const std::vector<int32_t>& prompt, int n_decode,
                            kernels::CudaKernels kernels = kernels::CudaKernels::kReference) {
  std::unique_ptr<kernels::Backend> backend;
  if (gpu) {
    CASCADE_ASSIGN_OR_RETURN(backend, MakeGpu(0, kernels));
  } else {
    backend = kernels::MakeCpuBackend({.n_threads = 4});
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Transformer> t, Transformer::Load(files, backend.get(), {}));
  return testing::Generate(*t, prompt, n_decode);
}

// GPU against CPU: ids equal up to a tie, logits within `bound` relative L2 until then.
void ExpectGpuMatchesCpu(const std::string& path, double bound, int n_decode = 8, double tie_fraction = 0.04,
                         kernels::CudaKernels kernels = kernels::CudaKernels::kReference, int n_prompt = 20) {
  SCOPED_TRACE(path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<int32_t> prompt = testing::Prompt(n_prompt, files->config.n_vocab);
  absl::StatusOr<Trace> cpu = RunOn(*files, false, prompt, n_decode);
  absl::StatusOr<Trace> gpu = RunOn(*files, true, prompt, n_decode, kernels);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  double worst = 0;
  size_t s = 0;
  for (; s < cpu->ids.size(); ++s) {
    const double e = testing::RelL2(cpu->logits[s], gpu->logits[s]);
    worst = std::max(worst, e);
    EXPECT_LT(e, bound) << "step " << s;
    if (gpu->ids[s] != cpu->ids[s]) {
      const std::vector<float>& l = cpu->logits[s];
      double max_abs = 0;
      for (float x : l) max_abs = std::max(max_abs, double(std::fabs(x)));
      EXPECT_LT(l[cpu->ids[s]] - l[gpu->ids[s]], tie_fraction * max_abs) << "step " << s;
      break;
    }
  }
  std::printf("[ info ] %s: GPU vs CPU worst relative L2 %.3g (bound %.3g), %zu of %zu greedy ids equal\n",
              path.c_str(), worst, bound, s, cpu->ids.size());
}

// With the tuned kernels every MoE layer of the model at `path` routes on the device: its
// experts' types are ones the device kernels take (else a layer falls back to the host
// path, and matching the CPU would not show the device path works).
void ExpectEveryMoeLayerOnTheDevice(const std::string& path) {
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  auto gpu = MakeGpu(0, kernels::CudaKernels::kTuned);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto t = Transformer::Load(*files, gpu->get(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT((*t)->moe_layers().size(), 0u);
  EXPECT_EQ((*t)->moe_layers_on_device(), static_cast<int64_t>((*t)->moe_layers().size())) << path;
}

// One greedy trace per rank of a group of `size` threads: rank r loads on GPU gpu(r) as
// rank r of `stage` (tp_rank / tp_size set here) over the communicator connect(r) makes, and
// generates n_decode tokens after prompts[r].
std::vector<absl::StatusOr<Trace>> RunGpuGroup(
    const ModelFiles& files, int size, const std::function<int(int)>& gpu,
    const std::function<absl::StatusOr<std::unique_ptr<comm::Communicator>>(int)>& connect, StageOptions stage,
    const std::vector<std::vector<int32_t>>& prompts, int n_decode) {
  std::vector<absl::StatusOr<Trace>> got(size, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r, stage]() mutable {
      got[r] = [&]() -> absl::StatusOr<Trace> {
        CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, MakeGpu(gpu(r)));
        CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> c, connect(r));
        stage.tp_rank = r;
        stage.tp_size = size;
        CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Transformer> t,
                                 Transformer::Load(files, backend.get(), stage, c.get()));
        return testing::Generate(*t, prompts[r], n_decode);
      }();
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

TEST_F(CudaTransformerTest, Stories260kDecodesTheGolden) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  auto backend = MakeGpu();
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto t = Transformer::Load(*files, backend->get(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<Trace> trace = testing::Generate(**t, {1}, 19);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->ids, kStoriesGolden);
}

// Bounds: F32 only reorders sums (1e-4); F16/BF16 round activations to the weight type on
// the GPU (1e-2, 3e-2); the quantized types see the CPU's 8-bit activation rounding (5e-2).
TEST_F(CudaTransformerTest, RandomModelsOfEveryWeightTypeMatchTheCpu) {
  testing::TempDir dir;
  const std::pair<DType, double> cases[] = {{DType::kF32, 1e-4},  {DType::kF16, 1e-2},  {DType::kBF16, 3e-2},
                                            {DType::kQ8_0, 5e-2}, {DType::kQ4_0, 5e-2}, {DType::kQ4_1, 5e-2}};
  for (const auto& [type, bound] : cases) {
    const std::string path = dir.path() + "/" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel({.weight_type = type, .tied = type == DType::kQ8_0, .qkv_bias = type == DType::kF16},
                              path);
    ExpectGpuMatchesCpu(path, bound);
  }
}

// The tuned kernels (CASCADE_CUDA_KERNELS=tuned: the F16/BF16 GEMV and the integer GEMV of
// the block types for decode steps, the tiled prefill attention, the fused residual norm)
// in whole models against the CPU, within the reference path's bounds (prefill's matrix
// products still go through cuBLAS).
TEST_F(CudaTransformerTest, TunedKernelsMatchTheCpu) {
  testing::TempDir dir;
  const std::pair<DType, double> cases[] = {{DType::kF16, 1e-2},  {DType::kBF16, 3e-2}, {DType::kQ8_0, 5e-2},
                                            {DType::kQ4_0, 5e-2}, {DType::kQ4_K, 5e-2}, {DType::kQ6_K, 5e-2}};
  for (const auto& [type, bound] : cases) {
    const std::string path = dir.path() + "/tuned-" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel({.weight_type = type, .qkv_bias = type == DType::kF16}, path);
    ExpectGpuMatchesCpu(path, bound, 8, 0.04, kernels::CudaKernels::kTuned);
  }
}

// The int8 tensor-core tiles for prefill (CASCADE_CUDA_QUANT_GEMM=int8, read by the backend
// as a user sets it) in whole models: 40-token prompts, past the GEMVs' 16, within the
// quantized types' bound: Q4_1 has offsets, Q6_K chunk halves with their own scales; and
// Qwen3-MoE models, whose device-routed experts take the tiles in prefill.
TEST_F(CudaTransformerTest, TunedInt8PrefillMatchesTheCpu) {
  testing::TempDir dir;
  ::setenv("CASCADE_CUDA_QUANT_GEMM", "int8", 1);
  for (DType type : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
    const std::string path = dir.path() + "/int8-" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel({.weight_type = type}, path);
    ExpectGpuMatchesCpu(path, 5e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
  }
  // Qwen3-MoE routed on the device: its experts' prefill by the int8 tiles too (moe_mma.cu).
  for (DType type : {DType::kQ8_0, DType::kQ4_K}) {
    const std::string path = dir.path() + "/int8-moe-" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel(
        {.weight_type = type, .moe = testing::MoeFamily::kQwen3Moe, .n_experts = 8, .n_ff_expert = 256}, path);
    ExpectEveryMoeLayerOnTheDevice(path);
    ExpectGpuMatchesCpu(path, 5e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
  }
  ::unsetenv("CASCADE_CUDA_QUANT_GEMM");
}

// The tensor-core prefill attention (CASCADE_CUDA_PREFILL_ATTENTION=f16) in whole models:
// 40-token prompts over the f16 KV cache (head_dim 64), a Llama-shaped F16 model within the
// F16 bound, and a Qwen3-shaped Q8_0 one (head norms, GQA groups of 4) within the quantized
// types'.
TEST_F(CudaTransformerTest, TunedF16PrefillAttentionMatchesTheCpu) {
  testing::TempDir dir;
  ::setenv("CASCADE_CUDA_PREFILL_ATTENTION", "f16", 1);
  const std::string llama = dir.path() + "/f16-attention.gguf";
  testing::WriteRandomModel({.weight_type = DType::kF16}, llama);
  ExpectGpuMatchesCpu(llama, 1e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
  const std::string qwen3 = dir.path() + "/f16-attention-qwen3.gguf";
  testing::WriteRandomModel(
      {.weight_type = DType::kQ8_0, .n_embd = 512, .n_heads = 8, .n_kv_heads = 2, .qk_norm = true}, qwen3);
  ExpectGpuMatchesCpu(qwen3, 5e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
  ::unsetenv("CASCADE_CUDA_PREFILL_ATTENTION");
}

// MoE layers on the GPU (router logits read back, experts run by the GPU's linear kernels
// over gathered rows, Backend::AddScaledRows scattering them back) against the CPU, for
// each family: Qwen3-MoE in F32 and Q8_0, Mixtral, and Qwen2-MoE with its shared expert.
TEST_F(CudaTransformerTest, MoeModelsMatchTheCpu) {
  testing::TempDir dir;
  const std::tuple<testing::MoeFamily, DType, double> cases[] = {{testing::MoeFamily::kQwen3Moe, DType::kF32, 1e-4},
                                                                 {testing::MoeFamily::kQwen3Moe, DType::kQ8_0, 5e-2},
                                                                 {testing::MoeFamily::kMixtral, DType::kF16, 1e-2},
                                                                 {testing::MoeFamily::kQwen2Moe, DType::kF32, 1e-4}};
  int i = 0;
  for (const auto& [family, type, bound] : cases) {
    const std::string path = dir.path() + "/moe" + std::to_string(i++) + ".gguf";
    testing::WriteRandomModel({.weight_type = type, .moe = family, .n_experts = 8, .n_ff_expert = 128}, path);
    ExpectGpuMatchesCpu(path, bound);
  }
}

// With the tuned kernels, MoE layers route on the device (Backend::RoutedExperts: no
// logits read back, one call for every expert) and still match the CPU, a 40-token prompt
// included: Qwen3-MoE in Q8_0 and in Q4_K (experts 256 wide, as K blocks want), and in F32
// and BF16 (the float experts, against f32 activations); Qwen2-MoE in Q8_0, whose shared
// expert runs after the routed ones.
TEST_F(CudaTransformerTest, TunedMoeRoutedOnTheDeviceMatchesTheCpu) {
  testing::TempDir dir;
  const std::pair<DType, double> cases[] = {
      {DType::kQ8_0, 5e-2}, {DType::kQ4_K, 5e-2}, {DType::kF32, 1e-4}, {DType::kBF16, 3e-2}};
  for (const auto& [type, bound] : cases) {
    const std::string path = dir.path() + "/tuned-moe-" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel(
        {.weight_type = type, .moe = testing::MoeFamily::kQwen3Moe, .n_experts = 8, .n_ff_expert = 256}, path);
    ExpectEveryMoeLayerOnTheDevice(path);
    ExpectGpuMatchesCpu(path, bound, 8, 0.04, kernels::CudaKernels::kTuned, 40);
  }
  const std::string shared = dir.path() + "/tuned-qwen2moe.gguf";
  testing::WriteRandomModel({.weight_type = DType::kQ8_0,
                             .moe = testing::MoeFamily::kQwen2Moe,
                             .n_experts = 8,
                             .n_ff_expert = 256,
                             .n_ff_shared_expert = 256},
                            shared);
  ExpectEveryMoeLayerOnTheDevice(shared);
  ExpectGpuMatchesCpu(shared, 5e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
}

// Qwen3-MoE with act-order GPTQ experts (desc_act, as Qwen3-235B-A22B's GPTQ-INT4 ships):
// with the tuned kernels the device gathers each row's inputs in each matrix's own order,
// where the CPU (and the reference kernels) gather them on the host through Linear.
TEST_F(CudaTransformerTest, TunedActOrderGptqMoeRoutedOnTheDeviceMatchesTheCpu) {
  testing::TempDir dir;
  const testing::RandomModelSpec spec{.weight_type = DType::kF32,
                                      .qk_norm = true,
                                      .moe = testing::MoeFamily::kQwen3Moe,
                                      .n_experts = 8,
                                      .n_experts_used = 2,
                                      .n_ff_expert = 256,
                                      .gptq_experts = true,
                                      .gptq_act_order = true};
  testing::WriteRandomHfModel(spec, dir.path() + "/gptq-act-order-moe");
  ExpectEveryMoeLayerOnTheDevice(dir.path() + "/gptq-act-order-moe");
  ExpectGpuMatchesCpu(dir.path() + "/gptq-act-order-moe", 5e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
}

// Qwen3-MoE as Qwen3-FP8 ships it (E4M3 with 128 x 128 block scales, experts included):
// with the tuned kernels its MoE layers route on the device through the float experts
// (FP8 decoded in registers against f32 activations); the dense projections go through the
// tuned GEMMs' bf16 activations, hence the BF16 models' bound.
TEST_F(CudaTransformerTest, TunedFp8MoeRoutedOnTheDeviceMatchesTheCpu) {
  testing::TempDir dir;
  testing::RandomModelSpec spec{.weight_type = DType::kF32,
                                .n_layers = 2,
                                .qk_norm = true,
                                .moe = testing::MoeFamily::kQwen3Moe,
                                .n_experts = 8,
                                .n_experts_used = 2,
                                .n_ff_expert = 256,
                                .fp8 = testing::Fp8Form::kBlock};
  testing::WriteRandomHfModel(spec, dir.path() + "/fp8-moe");
  ExpectEveryMoeLayerOnTheDevice(dir.path() + "/fp8-moe");
  ExpectGpuMatchesCpu(dir.path() + "/fp8-moe", 3e-2, 8, 0.04, kernels::CudaKernels::kTuned, 40);
}

// A checkpoint as transformers 5 saves it (rope_parameters with a base of 1e6 and YaRN):
// YaRN's attention factor reaches the GPU's attention through its scale, as on the CPU
// (whose logits tests/model/transformer_test.cc holds against the float64 reference).
TEST_F(CudaTransformerTest, YarnCheckpointOfTransformers5MatchesTheCpu) {
  testing::TempDir dir;
  testing::WriteRandomHfModel({.qk_norm = true,
                               .yarn_rope = testing::YarnRopeScaling{4.0, 32},
                               .rope_theta = 1e6,
                               .hf_layout = testing::HfLayout::kTransformers5},
                              dir.path() + "/yarn");
  ExpectGpuMatchesCpu(dir.path() + "/yarn", 1e-4, 24);
}

// gpt-oss (tests/gpt_oss_model.h): attention sinks and a sliding window shorter than the
// run in the split attention kernel of both sets (head_dim 16: the tiled prefill's window
// masking is cuda_backend_test's), O and expert biases through AddBias, the clamped SwiGLU;
// its MoE layers route on the host.
TEST_F(CudaTransformerTest, GptOssMatchesTheCpu) {
  testing::TempDir dir;
  const std::string path = gpt_oss_test::WriteHf(gpt_oss_test::MakeModel(), dir.path() + "/gpt-oss");
  ExpectGpuMatchesCpu(path, 1e-4, 12);
  // The tuned kernels route its MoE layers on the device: biases and the clamped SwiGLU in
  // the expert kernels, F32 experts here and MXFP4 ones (as OpenAI ships them) below.
  ExpectEveryMoeLayerOnTheDevice(path);
  ExpectGpuMatchesCpu(path, 1e-4, 12, 0.04, kernels::CudaKernels::kTuned);
  gpt_oss_test::Model m = gpt_oss_test::MakeModel();
  const std::vector<gpt_oss_test::Mxfp4Layer> mxfp4 = gpt_oss_test::MakeMxfp4Experts(m);
  const std::string mx_path = gpt_oss_test::WriteHf(m, dir.path() + "/gpt-oss-mxfp4", &mxfp4);
  ExpectEveryMoeLayerOnTheDevice(mx_path);
  ExpectGpuMatchesCpu(mx_path, 5e-2, 12, 0.04, kernels::CudaKernels::kTuned);
}

TEST_F(CudaTransformerTest, RealTinyModelsMatchTheCpu) {
  for (const char* name : {"models/stories260K.gguf", "models/tinystories-656k"}) {
    const std::string path = testing::TestDataPath(name);
    if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << name << " not in the testdata";
    ExpectGpuMatchesCpu(path, 1e-3);
  }
}

// SmolLM2 (Q4_1, 30 layers): the CPU's activation rounding grows through the layers, as
// tests/model/tp_transformer_test.cc measures for TP; hence the tie bound and 1e-1.
TEST_F(CudaTransformerTest, SmolLm2MatchesTheCpu) {
  CASCADE_REQUIRE_FILE(path, testing::DefaultModelPath());
  ExpectGpuMatchesCpu(path, 1e-1, 16);
}

// Tensor parallelism with NCCL inside the group (two GPUs): each rank's logits equal and
// its greedy ids those of a single GPU.
TEST_F(CudaTransformerTest, NcclTp2MatchesOneGpu) {
  if (n_gpus_ < 2) GTEST_SKIP() << "NCCL TP=2 needs two GPUs; this machine has " << n_gpus_;
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<int32_t> prompt = testing::Prompt(20, files->config.n_vocab);
  absl::StatusOr<Trace> ref = RunOn(*files, true, prompt, 8);
  ASSERT_TRUE(ref.ok()) << ref.status();
  comm::InProcessRendezvous rendezvous;
  const std::vector<absl::StatusOr<Trace>> got = RunGpuGroup(
      *files, 2, [](int r) { return r; },
      [&](int r) {
        return comm::NcclCommunicator::Create({"nccl-tp", r, 2, 30000}, &rendezvous, r);
      },
      {}, {prompt, prompt}, 8);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    EXPECT_EQ(got[r]->ids, ref->ids) << "rank " << r;
    EXPECT_EQ(got[r]->logits, got[0]->logits) << "rank " << r;
    for (size_t s = 0; s < ref->logits.size(); ++s) EXPECT_LT(testing::RelL2(ref->logits[s], got[r]->logits[s]), 1e-4);
  }
}

// All-to-all expert parallelism on GPUs (model/layers/moe.h): two ranks, each its own
// sequence (prompts of other lengths), dispatching and combining tokens over UCX through
// host staging (both ranks on GPU 0) and, with two GPUs, over NCCL in device memory; each
// rank's logits match the CPU's single-process run of its prompt (F32 Qwen3-MoE, 1e-4).
TEST_F(CudaTransformerTest, MoeAllToAllMatchesTheCpu) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/moe.gguf";
  testing::WriteRandomModel({.moe = testing::MoeFamily::kQwen3Moe, .n_experts = 8, .n_ff_expert = 128}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<std::vector<int32_t>> prompts = {testing::Prompt(20, files->config.n_vocab),
                                                     testing::Prompt(27, files->config.n_vocab)};
  for (const bool nccl : {false, true}) {
    if (nccl && n_gpus_ < 2) {
      std::printf("[ info ] all-to-all over NCCL needs two GPUs; this machine has %d\n", n_gpus_);
      continue;
    }
    if (!nccl && !CASCADE_WITH_UCX) {
      std::printf("[ info ] all-to-all over UCX: this build has no UCX (CASCADE_SCOPE=model)\n");
      continue;
    }
    SCOPED_TRACE(nccl ? "nccl" : "ucx, one GPU");
    comm::InProcessRendezvous rendezvous;
    const auto connect = [&](int r) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
      const comm::GroupOptions g{nccl ? "a2a-nccl" : "a2a-ucx", r, 2, 60000};
      if (nccl) return comm::NcclCommunicator::Create(g, &rendezvous, r);
#if CASCADE_WITH_UCX
      return comm::UcxCommunicator::Create(g, &rendezvous);
#else
      return absl::UnimplementedError("no UCX in this build");
#endif
    };
    const std::vector<absl::StatusOr<Trace>> got = RunGpuGroup(
        *files, 2, [nccl](int r) { return nccl ? r : 0; }, connect,
        {.expert_parallel = true, .expert_all_to_all = true}, prompts, 6);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
      absl::StatusOr<Trace> cpu = RunOn(*files, false, prompts[r], 6);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      EXPECT_EQ(got[r]->ids, cpu->ids) << "rank " << r;
      for (size_t s = 0; s < cpu->logits.size(); ++s) {
        EXPECT_LT(testing::RelL2(cpu->logits[s], got[r]->logits[s]), 1e-4) << "rank " << r << " step " << s;
      }
    }
  }
}

}  // namespace
}  // namespace cascade::model
