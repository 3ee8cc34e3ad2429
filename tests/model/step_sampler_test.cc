// model::StepSampler on host logits (the CPU backend's path: each sequence's Sampler over a
// thread pool) against the double-precision law of tests/sampling_reference.h: greedy ids,
// seeded draws replayed from the seed contract, the rejection rule of verification, and the
// logprobs of the raw rows only for the sequences that ask. The device path's host side (its
// rows, uniforms, penalty lists and the walk over accepted drafts) runs here against a
// CudaBackend whose Sample is the reference law on host memory; tests/gpu_model runs it on
// the GPU's kernel.
#include "model/step_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "tests/sampling_reference.h"
#include "tests/stub_cuda_backend.h"

namespace cascade::model {
namespace {

using testing::RefSeq;

// Runs one step of `step` through `sampler` (each sequence started with its history), its
// logits in host memory that the view says is on `device`.
std::vector<std::vector<sampling::SampledToken>> SampleStep(StepSampler& sampler, const std::vector<RefSeq>& step,
                                                            int64_t n_vocab, Device device = Device{}) {
  std::vector<float> logits;
  std::vector<SampleSeq> seqs;
  for (size_t j = 0; j < step.size(); ++j) {
    sampler.Start(static_cast<int64_t>(j), step[j].params, step[j].history);
    logits.insert(logits.end(), step[j].logits.begin(), step[j].logits.end());
    seqs.push_back({static_cast<int64_t>(j), step[j].drafts, {}});
  }
  const int64_t n_rows = static_cast<int64_t>(logits.size()) / n_vocab;
  auto out = sampler.Sample(TensorView(logits.data(), DType::kF32, {n_rows, n_vocab}, device), seqs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<std::vector<sampling::SampledToken>>{};
}

TEST(StepSamplerTest, HostRowsFollowTheDoublePrecisionLaw) {
  const int64_t n_vocab = 49152;
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<RefSeq> step = testing::RefStep(n_vocab, seed);
    const std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend({.n_threads = 2});
    StepSampler sampler(backend.get(), 2);
    const auto got = SampleStep(sampler, step, n_vocab);
    ASSERT_EQ(got.size(), step.size());
    int compared = 0, accepted = 0, rejected = 0, with_logprobs = 0;
    for (size_t j = 0; j < step.size(); ++j) {
      const RefSeq& q = step[j];
      bool near = false;
      const std::vector<int32_t> want = testing::RefHostEmitted(q, &near);
      std::vector<int32_t> ids;
      for (const auto& t : got[j]) ids.push_back(t.id);
      // The history grew by exactly what was emitted.
      std::vector<int32_t> history = q.history;
      history.insert(history.end(), ids.begin(), ids.end());
      EXPECT_EQ(std::vector<int32_t>(sampler.history(j).begin(), sampler.history(j).end()), history);
      if (near) continue;
      ++compared;
      EXPECT_EQ(ids, want) << "seed " << seed << " sequence " << j;
      if (!q.drafts.empty()) {
        accepted += static_cast<int>(want.size()) - 1;
        rejected += want.size() <= q.drafts.size();
      }
      EXPECT_EQ(testing::LogprobErrors(q, got[j]), "") << "sequence " << j;
      if (q.params.n_logprobs > 0) with_logprobs += static_cast<int>(got[j].size());
    }
    EXPECT_GE(compared, 13) << "too many sequences near a boundary to be a test";
    EXPECT_GT(accepted, 0) << "no draft accepted: the acceptance path went unchecked";
    EXPECT_GT(rejected, 0) << "every draft accepted: the correction path went unchecked";
    EXPECT_GT(with_logprobs, 0);
  }
}

// A CudaBackend whose only op is Sample, computed by the reference law on host memory as
// kernels/sample_row.h specifies it; the logits' view names cuda:0.
class ReferenceGpu final : public testing::StubCudaBackend {
 public:
  absl::Status Sample(std::span<kernels::SampleResult> out, const TensorView& logits,
                      std::span<const kernels::SampleRow> rows, std::span<const kernels::SamplePenalty> penalties,
                      std::span<const uint8_t> masks) override {
    const int64_t V = logits.Cols();
    rows_.assign(rows.begin(), rows.end());
    penalties_.assign(penalties.begin(), penalties.end());
    masks_.assign(masks.begin(), masks.end());
    for (size_t r = 0; r < rows.size(); ++r) {
      const kernels::SampleRow& row = rows[r];
      const std::span<const float> raw(logits.As<float>() + r * V, V);
      std::vector<float> shaped(raw.begin(), raw.end());  // The row's mask, as -1e30 (RefPremasked).
      for (int64_t t = 0; row.mask_offset >= 0 && t < V; ++t) {
        if (t >= row.mask_bits || ((masks[row.mask_offset + t / 8] >> (t % 8)) & 1) == 0) shaped[t] = -1e30f;
      }
      std::vector<int32_t> seen;  // The penalties' counts, as a history.
      for (int i = 0; i < row.n_penalties; ++i) {
        const kernels::SamplePenalty& p = penalties[row.penalty_begin + i];
        seen.insert(seen.end(), p.count, p.token);
      }
      const testing::RefLaw law = testing::RefSampleLaw(shaped,
                                                        {.temperature = row.temperature,
                                                         .top_k = row.top_k,
                                                         .top_p = row.top_p,
                                                         .min_p = row.min_p,
                                                         .repetition_penalty = row.repetition_penalty,
                                                         .presence_penalty = row.presence_penalty,
                                                         .frequency_penalty = row.frequency_penalty},
                                                        seen);
      kernels::SampleResult& res = out[r];
      bool near = false;
      if (row.temperature <= 0) {
        res.id = law.argmax;
        res.accepted = row.draft == law.argmax;
      } else if (row.draft >= 0 && row.u_accept < law.p[row.draft]) {
        res.id = row.draft;
        res.accepted = 1;
      } else {
        res.id = testing::RefWalkVocab(law, row.u_sample, row.draft, &near);
        res.accepted = 0;
      }
      res.n_top = row.n_logprobs;
      if (row.n_logprobs > 0) {
        const std::vector<double> lp = testing::RefLogSoftmax(raw);
        res.logprob = static_cast<float>(lp[res.id]);
        const std::vector<int32_t> top = testing::RefTopIds(raw, row.n_logprobs);
        for (int n = 0; n < row.n_logprobs; ++n) {
          res.top_ids[n] = top[n];
          res.top_logprobs[n] = static_cast<float>(lp[top[n]]);
        }
      }
    }
    return absl::OkStatus();
  }
  // The last call's rows, penalty list and masks.
  std::vector<kernels::SampleRow> rows_;
  std::vector<uint8_t> masks_;
  std::vector<kernels::SamplePenalty> penalties_;
};

TEST(StepSamplerTest, DeviceRowsCarryTheirDraftsUniformsAndPenalties) {
  const int64_t n_vocab = 32000;
  ReferenceGpu gpu;
  int compared = 0, accepted = 0;
  for (uint32_t seed : {4u, 5u}) {
    const std::vector<RefSeq> step = testing::RefStep(n_vocab, seed);
    StepSampler sampler(&gpu, 1);
    const std::vector<std::vector<sampling::SampledToken>> got = SampleStep(sampler, step, n_vocab, gpu.device());
    ASSERT_EQ(got.size(), step.size());
    // Row i of a sequence verifies draft i with the draws of position history + i and the
    // penalties of the history with drafts [0, i).
    size_t r = 0;
    for (const RefSeq& q : step) {
      for (size_t i = 0; i <= q.drafts.size(); ++i, ++r) {
        const kernels::SampleRow& row = gpu.rows_.at(r);
        EXPECT_EQ(row.draft, i < q.drafts.size() ? q.drafts[i] : -1);
        EXPECT_EQ(row.n_logprobs, q.params.n_logprobs);
        if (!q.params.greedy()) {
          std::mt19937_64 rng(sampling::PositionSeed(q.params.seed, q.history.size() + i));
          EXPECT_EQ(row.u_accept, static_cast<float>(rng() >> 40) * 0x1p-24f) << "row " << r;
          EXPECT_EQ(row.u_sample, static_cast<float>(rng() >> 40) * 0x1p-24f) << "row " << r;
        }
        std::map<int32_t, int32_t> want, got_counts;
        if (sampling::Penalised(q.params)) {
          for (int32_t t : q.history) ++want[t];
          for (size_t d = 0; d < i; ++d) ++want[q.drafts[d]];
        }
        for (int n = 0; n < row.n_penalties; ++n) {
          const kernels::SamplePenalty& p = gpu.penalties_.at(row.penalty_begin + n);
          EXPECT_TRUE(got_counts.emplace(p.token, p.count).second) << "token " << p.token << " listed twice";
        }
        EXPECT_EQ(got_counts, want) << "row " << r;
      }
    }
    for (size_t j = 0; j < step.size(); ++j) {
      bool near = false;
      const std::vector<int32_t> want = testing::RefDeviceEmitted(step[j], &near);
      std::vector<int32_t> ids;
      for (const auto& t : got[j]) ids.push_back(t.id);
      if (near) continue;
      ++compared;
      EXPECT_EQ(ids, want) << "seed " << seed << " sequence " << j;
      if (!step[j].drafts.empty()) accepted += static_cast<int>(want.size()) - 1;
      for (const auto& t : got[j]) EXPECT_EQ(t.top.size(), static_cast<size_t>(step[j].params.n_logprobs));
    }
  }
  EXPECT_GE(compared, 26);
  EXPECT_GT(accepted, 0);
}

// Constrained rows: a mask acts as -inf on the refused logits (the reference law of the
// premasked rows), every emitted token is allowed by its row, the logprobs stay those of the
// raw rows; on the host path and on the device path's host side alike.
TEST(StepSamplerTest, MasksActAsRefusedLogitsAndLeaveLogprobsRaw) {
  const int64_t n_vocab = 49152;
  ReferenceGpu gpu;
  const std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend({.n_threads = 2});
  for (bool device : {false, true}) {
    int compared = 0, refused_argmax = 0;
    for (uint32_t seed : {6u, 7u}) {
      const std::vector<RefSeq> step = testing::RefStep(n_vocab, seed);
      std::vector<std::vector<uint8_t>> masks;
      std::vector<float> logits;
      std::vector<SampleSeq> seqs;
      StepSampler sampler(device ? static_cast<kernels::Backend*>(&gpu) : cpu.get(), 2);
      for (size_t j = 0; j < step.size(); ++j) {
        masks.push_back(testing::RefRandomMasks(step[j], n_vocab, seed * 100 + static_cast<uint32_t>(j)));
        sampler.Start(static_cast<int64_t>(j), step[j].params, step[j].history);
        logits.insert(logits.end(), step[j].logits.begin(), step[j].logits.end());
      }
      for (size_t j = 0; j < step.size(); ++j) seqs.push_back({static_cast<int64_t>(j), step[j].drafts, masks[j]});
      const int64_t n_rows = static_cast<int64_t>(logits.size()) / n_vocab;
      auto got = sampler.Sample(
          TensorView(logits.data(), DType::kF32, {n_rows, n_vocab}, device ? gpu.device() : Device{}), seqs);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t j = 0; j < step.size(); ++j) {
        const RefSeq masked = testing::RefPremasked(step[j], masks[j], n_vocab);
        const size_t row_bytes = masks[j].size() / (step[j].drafts.size() + 1);
        for (size_t i = 0; i < (*got)[j].size(); ++i) {
          const int32_t id = (*got)[j][i].id;
          EXPECT_TRUE((masks[j][i * row_bytes + id / 8] >> (id % 8)) & 1) << "sequence " << j << " row " << i;
          const auto row = std::span(step[j].logits).subspan(i * n_vocab, n_vocab);
          const int32_t top = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
          refused_argmax += ((masks[j][i * row_bytes + top / 8] >> (top % 8)) & 1) == 0;
        }
        EXPECT_EQ(testing::LogprobErrors(step[j], (*got)[j]), "") << "sequence " << j;
        bool near = false;
        const std::vector<int32_t> want =
            device ? testing::RefDeviceEmitted(masked, &near) : testing::RefHostEmitted(masked, &near);
        if (near) continue;
        ++compared;
        std::vector<int32_t> ids;
        for (const auto& t : (*got)[j]) ids.push_back(t.id);
        EXPECT_EQ(ids, want) << (device ? "device" : "host") << " seed " << seed << " sequence " << j;
      }
    }
    EXPECT_GE(compared, 26);
    EXPECT_GT(refused_argmax, 0) << "no mask refused a row's argmax: the mask went untested";
  }
}

TEST(StepSamplerTest, RefusesUnknownSequencesAndMiscountedRows) {
  const std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend({.n_threads = 1});
  StepSampler sampler(backend.get(), 1);
  std::vector<float> logits(2 * 8, 0.0f);
  const TensorView two(logits.data(), DType::kF32, {2, 8});
  const std::vector<SampleSeq> unknown = {{7, {}, {}}};
  EXPECT_EQ(sampler.Sample(two, unknown).status().code(), absl::StatusCode::kInvalidArgument);
  sampler.Start(7, {.temperature = 0}, {1, 2});
  EXPECT_EQ(sampler.Sample(two, unknown).status().code(), absl::StatusCode::kInvalidArgument);  // 2 rows for 1.
  auto one = sampler.Sample(TensorView(logits.data(), DType::kF32, {1, 8}), unknown);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)[0][0].id, 0);  // All ties: the first.
  sampler.Release(7);
  EXPECT_FALSE(sampler.Has(7));
}

}  // namespace
}  // namespace cascade::model
