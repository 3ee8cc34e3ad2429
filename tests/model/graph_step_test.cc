// model::RunGraphStep's passes over a scripted CudaBackend (the graph itself is the GPU's:
// tests/gpu_model/cuda_graph_test.cc): a dry pass that finds its graph is the whole step;
// otherwise a capture; a step that cannot be captured runs eagerly; a failing step is
// closed without a launch and its error returned; other backends run the ops once.
#include "model/graph_step.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/stub_cuda_backend.h"

namespace cascade::model {
namespace {

using kernels::GraphPass;

// Answers EndGraphStep from a script, one answer per pass, and records the calls.
class ScriptedGpu final : public testing::StubCudaBackend {
 public:
  explicit ScriptedGpu(std::vector<bool> ran) : ran_(std::move(ran)) {}
  absl::Status BeginGraphStep(GraphPass pass) override {
    calls.push_back(pass == GraphPass::kDry ? "dry" : pass == GraphPass::kCapture ? "capture" : "eager");
    return absl::OkStatus();
  }
  absl::StatusOr<bool> EndGraphStep() override {
    calls.push_back("end");
    return ran_.at(next_++);
  }
  void AbortGraphStep() override { calls.push_back("abort"); }
  absl::Status Synchronize() override {
    calls.push_back("sync");
    return absl::OkStatus();
  }
  std::vector<std::string> calls;

 private:
  std::vector<bool> ran_;
  size_t next_ = 0;
};

TEST(GraphStepTest, PassesStopAtTheFirstThatRan) {
  const std::vector<std::pair<std::vector<bool>, std::vector<std::string>>> cases = {
      {{true}, {"dry", "ops", "end", "sync"}},
      {{false, true}, {"dry", "ops", "end", "capture", "ops", "end", "sync"}},
      {{false, false, true}, {"dry", "ops", "end", "capture", "ops", "end", "eager", "ops", "end", "sync"}},
  };
  for (const auto& [script, want] : cases) {
    ScriptedGpu gpu(script);
    ASSERT_TRUE(RunGraphStep(gpu, [&] {
                  gpu.calls.push_back("ops");
                  return absl::OkStatus();
                }).ok());
    EXPECT_EQ(gpu.calls, want);
  }
}

TEST(GraphStepTest, AFailingStepIsClosedWithoutALaunch) {
  ScriptedGpu gpu({});
  const absl::Status st = RunGraphStep(gpu, [] { return absl::InvalidArgumentError("bad id"); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu.calls, (std::vector<std::string>{"dry", "abort"}));
}

TEST(GraphStepTest, OtherBackendsRunTheOpsOnce) {
  const std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend({.n_threads = 1});
  int runs = 0;
  ASSERT_TRUE(RunGraphStep(*cpu, [&] {
                ++runs;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(runs, 1);
}

TEST(GraphStepTest, OnlyDecodeShapedBatchesQualify) {
  const std::vector<int32_t> table = {0};
  const std::vector<kernels::AttentionSeq> decode = {{0, 1, 5, table}, {1, kMaxGraphRowsPerSeq, 9, table}};
  const std::vector<kernels::AttentionSeq> prefill = {{0, kMaxGraphRowsPerSeq + 1, 0, table}};
  const std::vector<int32_t> ids(kMaxGraphRows + 1, 0);
  EXPECT_TRUE(GraphableBatch({std::span(ids).first(1 + kMaxGraphRowsPerSeq), {}, decode, {}}));
  EXPECT_FALSE(GraphableBatch({std::span(ids).first(kMaxGraphRowsPerSeq + 1), {}, prefill, {}}));
  EXPECT_FALSE(GraphableBatch({ids, {}, decode, {}}));  // Too many rows in all.
}

}  // namespace
}  // namespace cascade::model
