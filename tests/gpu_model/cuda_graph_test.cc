// Decode steps as CUDA graphs (model/graph_step.h) against the same steps run op by op, on
// the same GPU: the logits must be the same bits, since a graph launches the same kernels
// on the same buffers. The schedule makes the graphs' hard cases happen: a shape's first
// step (captured), its next ones (replayed with new positions, KV slots and block
// tables), keys crossing an attention split (a new signature), a verify-shaped step, a
// smaller batch, and prefills in between (eager). Skips, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "core/status.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"
#include "model/transformer.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

struct StepLog {
  std::vector<std::vector<float>> logits;  // Each step's logit rows, flattened.
  int64_t captured = 0, launched = 0;
};

// Three sequences of 250 prompt tokens, then: 12 decode steps of all three (keys cross
// 256, the attention kernel's split), one step where sequence 1 feeds 3 tokens, then 4
// steps of sequences 0 and 2. Tokens are fixed, not sampled, so two runs feed the same.
absl::StatusOr<StepLog> RunSchedule(const ModelFiles& files, bool graphs) {
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::CudaBackend> gpu, kernels::CudaBackend::Create({}));
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Transformer> t, Transformer::Load(files, gpu.get(), {}));
  t->set_cuda_graphs(graphs);
  const int64_t V = t->config().n_vocab, kBlocks = 20, kBlockSize = 16;
  CASCADE_ASSIGN_OR_RETURN(KvCache cache,
                           KvCache::Create(t->CacheOptions(3 * kBlocks, kBlockSize, DType::kF16), gpu.get()));
  std::vector<std::vector<int32_t>> tables(3);
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b < kBlocks; ++b) tables[s].push_back(static_cast<int32_t>(b * 3 + (2 - s)));  // Interleaved.
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> logits, gpu->AllocateStaging(3 * V * sizeof(float)));
  std::vector<int64_t> past(3, 0);
  StepLog log;
  int step = 0;
  // One step: `feed[s]` tokens for sequence s (0: not in the step).
  const auto run = [&](const std::vector<int>& feed) -> absl::Status {
    std::vector<int32_t> tokens, pos;
    std::vector<kernels::AttentionSeq> seqs;
    std::vector<int64_t> rows;
    for (int s = 0; s < 3; ++s) {
      if (feed[s] == 0) continue;
      const int64_t first = static_cast<int64_t>(tokens.size());
      for (int i = 0; i < feed[s]; ++i) {
        tokens.push_back(static_cast<int32_t>((step * 7 + s * 13 + i * 5) % V));
        pos.push_back(static_cast<int32_t>(past[s] + i));
      }
      seqs.push_back({first, feed[s], past[s], tables[s]});
      rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
      past[s] += feed[s];
    }
    const int64_t m = static_cast<int64_t>(rows.size());
    CASCADE_RETURN_IF_ERROR(
        t->Forward({tokens, pos, seqs, rows}, cache, TensorView(logits->data(), DType::kF32, {m, V})));
    log.logits.emplace_back(logits->f32(), logits->f32() + m * V);
    ++step;
    return absl::OkStatus();
  };
  for (int s = 0; s < 3; ++s) {
    std::vector<int> feed(3, 0);
    feed[s] = 250;
    CASCADE_RETURN_IF_ERROR(run(feed));
  }
  for (int i = 0; i < 12; ++i) CASCADE_RETURN_IF_ERROR(run({1, 1, 1}));
  CASCADE_RETURN_IF_ERROR(run({1, 3, 1}));
  for (int i = 0; i < 4; ++i) CASCADE_RETURN_IF_ERROR(run({1, 0, 1}));
  log.captured = gpu->graphs_captured();
  log.launched = gpu->graphs_launched();
  return log;
}

TEST(CudaGraphTest, DecodeStepsAsGraphsGiveTheSameLogits) {
  const kernels::CudaAvailability a = kernels::QueryCudaDevices();
  if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
  testing::TempDir dir;
  // F16 takes cuBLAS (activations converted in scratch); Q4_0 the weight-only GEMV.
  for (DType type : {DType::kF16, DType::kQ4_0}) {
    const std::string path = dir.path() + "/" + std::string(DTypeName(type)) + ".gguf";
    testing::WriteRandomModel({.weight_type = type, .n_vocab = 512, .n_ctx = 512}, path);
    auto files = OpenModelFiles(path);
    ASSERT_TRUE(files.ok()) << files.status();
    absl::StatusOr<StepLog> eager = RunSchedule(*files, false);
    absl::StatusOr<StepLog> graphed = RunSchedule(*files, true);
    ASSERT_TRUE(eager.ok()) << eager.status();
    ASSERT_TRUE(graphed.ok()) << graphed.status();
    ASSERT_EQ(eager->logits.size(), graphed->logits.size());
    for (size_t s = 0; s < eager->logits.size(); ++s) {
      EXPECT_EQ(eager->logits[s], graphed->logits[s]) << DTypeName(type) << " step " << s;
    }
    EXPECT_EQ(eager->captured, 0);
    // At least: all three before and after the split, the verify step, the pair of two.
    EXPECT_GE(graphed->captured, 4) << DTypeName(type);
    EXPECT_GT(graphed->launched, graphed->captured + 8) << DTypeName(type) << ": too few replays";
    std::printf("[ info ] %s: %lld graphs captured, %lld launched over %zu steps\n", DTypeName(type).data(),
                static_cast<long long>(graphed->captured), static_cast<long long>(graphed->launched),
                graphed->logits.size());
  }
}

}  // namespace
}  // namespace cascade::model
