// model::StepSampler with the logits on a GPU (CudaBackend::Sample: penalties, the rejection
// rule, logprobs and the top-n on the device) against the double-precision law of
// tests/sampling_reference.h, and greedy parity with the CPU's sampler on the same rows.
// Skips, with the reason, without a GPU.
#include <gtest/gtest.h>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"
#include "model/step_sampler.h"
#include "tests/sampling_reference.h"

namespace cascade::model {
namespace {

using testing::RefSeq;

// One step of `step` through `sampler`, its logits at `data` (host or device memory).
std::vector<std::vector<sampling::SampledToken>> SampleStep(StepSampler& sampler, const std::vector<RefSeq>& step,
                                                            void* data, Device device, int64_t n_vocab) {
  std::vector<SampleSeq> seqs;
  int64_t n_rows = 0;
  for (size_t j = 0; j < step.size(); ++j) {
    sampler.Start(static_cast<int64_t>(j), step[j].params, step[j].history);
    seqs.push_back({static_cast<int64_t>(j), step[j].drafts, {}});
    n_rows += static_cast<int64_t>(step[j].drafts.size()) + 1;
  }
  auto out = sampler.Sample(TensorView(data, DType::kF32, {n_rows, n_vocab}, device), seqs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<std::vector<sampling::SampledToken>>{};
}

TEST(StepSamplerGpuTest, DeviceRowsFollowTheDoublePrecisionLawAndGreedyMatchesTheCpu) {
  const kernels::CudaAvailability a = kernels::QueryCudaDevices();
  if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
  auto gpu = kernels::CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend({.n_threads = 2});
  for (int64_t n_vocab : {49152, 128256}) {
    const std::vector<RefSeq> step = testing::RefStep(n_vocab, static_cast<uint32_t>(n_vocab));
    std::vector<float> logits;
    for (const RefSeq& q : step) logits.insert(logits.end(), q.logits.begin(), q.logits.end());
    auto dev = kernels::DeviceBuffer::Create(0, logits.size() * sizeof(float));
    ASSERT_TRUE(dev.ok()) << dev.status();
    ASSERT_TRUE(dev->Upload(logits.data(), logits.size() * sizeof(float)).ok());
    StepSampler on_gpu(gpu->get(), 1), on_cpu(cpu.get(), 2);
    const auto got = SampleStep(on_gpu, step, dev->data(), Device{DeviceKind::kCuda, 0}, n_vocab);
    const auto host = SampleStep(on_cpu, step, logits.data(), Device{}, n_vocab);
    ASSERT_EQ(got.size(), step.size());
    // The device's logits are left as they were (penalties work on a copy).
    std::vector<float> after(logits.size());
    ASSERT_TRUE(dev->Download(after.data(), after.size() * sizeof(float)).ok());
    EXPECT_EQ(after, logits);
    int compared = 0, accepted = 0, with_logprobs = 0;
    for (size_t j = 0; j < step.size(); ++j) {
      const RefSeq& q = step[j];
      std::vector<int32_t> ids, cpu_ids;
      for (const auto& t : got[j]) ids.push_back(t.id);
      for (const auto& t : host[j]) cpu_ids.push_back(t.id);
      if (q.params.greedy()) {
        EXPECT_EQ(ids, cpu_ids) << "greedy sequence " << j << " vocab " << n_vocab;
      }
      bool near = false;
      const std::vector<int32_t> want = testing::RefDeviceEmitted(q, &near);
      if (near) continue;
      ++compared;
      EXPECT_EQ(ids, want) << "sequence " << j << " vocab " << n_vocab;
      if (!q.drafts.empty()) accepted += static_cast<int>(want.size()) - 1;
      EXPECT_EQ(testing::LogprobErrors(q, got[j]), "") << "sequence " << j << " vocab " << n_vocab;
      if (q.params.n_logprobs > 0) with_logprobs += static_cast<int>(got[j].size());
    }
    EXPECT_GE(compared, 13) << "too many sequences near a boundary to be a test";
    EXPECT_GT(accepted, 0) << "no draft accepted: the acceptance path went unchecked";
    EXPECT_GT(with_logprobs, 0);
  }
}

// Constrained rows on the device: the mask acts as -inf on the refused logits (the
// double-precision law of the premasked rows), greedy rows pick what the CPU picks under
// the same masks, and the logprobs stay the raw rows'.
TEST(StepSamplerGpuTest, MaskedRowsFollowThePremaskedLawAndMatchTheCpu) {
  const kernels::CudaAvailability a = kernels::QueryCudaDevices();
  if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
  auto gpu = kernels::CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend({.n_threads = 2});
  const int64_t n_vocab = 49152;
  const std::vector<RefSeq> step = testing::RefStep(n_vocab, 9);
  std::vector<std::vector<uint8_t>> masks;
  std::vector<float> logits;
  std::vector<SampleSeq> seqs;
  for (size_t j = 0; j < step.size(); ++j) {
    masks.push_back(testing::RefRandomMasks(step[j], n_vocab, 900 + static_cast<uint32_t>(j)));
    logits.insert(logits.end(), step[j].logits.begin(), step[j].logits.end());
  }
  for (size_t j = 0; j < step.size(); ++j) seqs.push_back({static_cast<int64_t>(j), step[j].drafts, masks[j]});
  auto dev = kernels::DeviceBuffer::Create(0, logits.size() * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_TRUE(dev->Upload(logits.data(), logits.size() * sizeof(float)).ok());
  StepSampler on_gpu(gpu->get(), 1), on_cpu(cpu.get(), 2);
  for (size_t j = 0; j < step.size(); ++j) {
    on_gpu.Start(static_cast<int64_t>(j), step[j].params, step[j].history);
    on_cpu.Start(static_cast<int64_t>(j), step[j].params, step[j].history);
  }
  const int64_t n_rows = static_cast<int64_t>(logits.size()) / n_vocab;
  auto got = on_gpu.Sample(TensorView(dev->data(), DType::kF32, {n_rows, n_vocab}, Device{DeviceKind::kCuda, 0}), seqs);
  ASSERT_TRUE(got.ok()) << got.status();
  auto host = on_cpu.Sample(TensorView(logits.data(), DType::kF32, {n_rows, n_vocab}), seqs);
  ASSERT_TRUE(host.ok()) << host.status();
  int compared = 0;
  for (size_t j = 0; j < step.size(); ++j) {
    std::vector<int32_t> ids, cpu_ids;
    for (const auto& t : (*got)[j]) ids.push_back(t.id);
    for (const auto& t : (*host)[j]) cpu_ids.push_back(t.id);
    if (step[j].params.greedy()) {
      EXPECT_EQ(ids, cpu_ids) << "greedy sequence " << j;
    }
    EXPECT_EQ(testing::LogprobErrors(step[j], (*got)[j]), "") << "sequence " << j;
    bool near = false;
    const std::vector<int32_t> want =
        testing::RefDeviceEmitted(testing::RefPremasked(step[j], masks[j], n_vocab), &near);
    if (near) continue;
    ++compared;
    EXPECT_EQ(ids, want) << "sequence " << j;
  }
  EXPECT_GE(compared, 13);
}

}  // namespace
}  // namespace cascade::model
