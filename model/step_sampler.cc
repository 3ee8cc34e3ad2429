#include "model/step_sampler.h"

#include <algorithm>
#include <random>

#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cuda_backend.h"

namespace cascade::model {
namespace {

// A uniform in [0, 1) from 24 random bits: exactly representable, never 1.
float Uniform(std::mt19937_64& rng) { return static_cast<float>(rng() >> 40) * 0x1p-24f; }

}  // namespace

StepSampler::StepSampler(kernels::Backend* backend, int n_threads) : backend_(backend), pool_(std::max(1, n_threads)) {}

void StepSampler::Start(int64_t id, const sampling::SamplingParams& params, std::vector<int32_t> history) {
  Seq& s = seqs_[id];
  s.sampler = std::make_unique<sampling::Sampler>(params);
  s.history = std::move(history);
}

void StepSampler::Extend(int64_t id, int64_t first, std::span<const int32_t> tokens) {
  std::vector<int32_t>& h = seqs_.at(id).history;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (first + static_cast<int64_t>(i) >= static_cast<int64_t>(h.size())) h.push_back(tokens[i]);
  }
}

absl::StatusOr<std::vector<std::vector<sampling::SampledToken>>> StepSampler::Sample(const TensorView& logits,
                                                                                     std::span<const SampleSeq> seqs) {
  std::vector<Seq*> states;
  int64_t n_rows = 0;
  for (const SampleSeq& q : seqs) {
    const auto it = seqs_.find(q.seq_id);
    if (it == seqs_.end()) return absl::InvalidArgumentError(StrCat("sequence ", q.seq_id, " has no sampler"));
    states.push_back(&it->second);
    n_rows += static_cast<int64_t>(q.drafts.size()) + 1;
    if (q.allowed.size() % (q.drafts.size() + 1) != 0) {
      return absl::InvalidArgumentError(
          StrCat("sequence ", q.seq_id, ": ", q.allowed.size(), " mask bytes for ", q.drafts.size() + 1, " rows"));
    }
  }
  if (logits.Rows() != n_rows) {
    return absl::InvalidArgumentError(StrCat("sampling: ", logits.Rows(), " logit rows for ", n_rows));
  }
  std::vector<std::vector<sampling::SampledToken>> out(seqs.size());
  CASCADE_RETURN_IF_ERROR(logits.device.kind == DeviceKind::kCpu ? SampleOnHost(logits, states, seqs, out)
                                                                 : SampleOnDevice(logits, states, seqs, out));
  for (size_t j = 0; j < seqs.size(); ++j) {
    for (const sampling::SampledToken& t : out[j]) states[j]->history.push_back(t.id);
  }
  return out;
}

absl::Status StepSampler::SampleOnHost(const TensorView& logits, std::span<Seq* const> states,
                                       std::span<const SampleSeq> seqs,
                                       std::vector<std::vector<sampling::SampledToken>>& out) {
  const int64_t V = logits.Cols();
  std::vector<int64_t> first_row(seqs.size());
  for (size_t j = 1; j < seqs.size(); ++j) first_row[j] = first_row[j - 1] + seqs[j - 1].drafts.size() + 1;
  // Chunks of one sequence: a verification's k + 1 rows cost k + 1 times a sample's.
  pool_.ParallelForChunked(static_cast<int64_t>(seqs.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t j = begin; j < end; ++j) {
      Seq& s = *states[j];
      const std::span<const int32_t> drafts = seqs[j].drafts;
      std::span<float> rows(logits.As<float>() + first_row[j] * V, (drafts.size() + 1) * V);
      if (drafts.empty()) {
        out[j].push_back(s.sampler->Sample(rows, s.history, seqs[j].allowed));
      } else {
        out[j] = s.sampler->Verify(rows, drafts, s.history, seqs[j].allowed);
      }
    }
  });
  return absl::OkStatus();
}

void StepSampler::AddDeviceRow(const Seq& s, const SampleSeq& q, size_t i,
                               std::span<const std::pair<int32_t, int32_t>> history_counts, int32_t n_vocab) {
  const sampling::SamplingParams& p = s.sampler->params();
  const std::span<const int32_t> drafts = q.drafts;
  kernels::SampleRow r;
  if (!q.allowed.empty()) {
    const size_t row_bytes = q.allowed.size() / (drafts.size() + 1);
    r.mask_offset = static_cast<int64_t>(masks_.size());
    r.mask_bits = static_cast<int32_t>(row_bytes * 8);
    const auto row = q.allowed.subspan(i * row_bytes, row_bytes);
    masks_.insert(masks_.end(), row.begin(), row.end());
  }
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.draft = i < drafts.size() ? drafts[i] : -1;
  r.n_logprobs = p.n_logprobs;
  if (!p.greedy()) {
    // The draws of the token at this row's position, whatever the step that samples it.
    std::mt19937_64 rng(sampling::PositionSeed(p.seed, s.history.size() + i));
    r.u_accept = Uniform(rng);
    r.u_sample = Uniform(rng);
  }
  if (sampling::Penalised(p)) {
    // Row i is shaped as if drafts [0, i) were already in the history: the history's
    // counts (counted once for all the rows), then each of those drafts counted in.
    r.repetition_penalty = p.repetition_penalty;
    r.presence_penalty = p.presence_penalty;
    r.frequency_penalty = p.frequency_penalty;
    r.penalty_begin = static_cast<int32_t>(penalties_.size());
    for (const auto& [token, count] : history_counts) penalties_.push_back({token, count});
    for (size_t d = 0; d < std::min(i, drafts.size()); ++d) {
      if (drafts[d] < 0 || drafts[d] >= n_vocab) continue;
      const auto row = std::span(penalties_).subspan(r.penalty_begin);
      const auto it =
          std::find_if(row.begin(), row.end(), [&](const kernels::SamplePenalty& q) { return q.token == drafts[d]; });
      if (it != row.end()) {
        ++it->count;
      } else {
        penalties_.push_back({drafts[d], 1});
      }
    }
    r.n_penalties = static_cast<int32_t>(penalties_.size()) - r.penalty_begin;
  }
  rows_.push_back(r);
}

absl::Status StepSampler::SampleOnDevice(const TensorView& logits, std::span<Seq* const> states,
                                         std::span<const SampleSeq> seqs,
                                         std::vector<std::vector<sampling::SampledToken>>& out) {
  auto* gpu = dynamic_cast<kernels::CudaBackend*>(backend_);
  if (gpu == nullptr) {
    return absl::FailedPreconditionError(
        StrCat("sampling: logits on ", logits.device.ToString(), " need a CUDA backend"));
  }
  const int32_t V = static_cast<int32_t>(logits.Cols());
  rows_.clear();
  penalties_.clear();
  masks_.clear();
  for (size_t j = 0; j < seqs.size(); ++j) {
    const Seq& s = *states[j];
    const std::vector<std::pair<int32_t, int32_t>> counts = sampling::Penalised(s.sampler->params())
                                                                ? sampling::TokenCounts(s.history, V)
                                                                : std::vector<std::pair<int32_t, int32_t>>{};
    for (size_t i = 0; i <= seqs[j].drafts.size(); ++i) AddDeviceRow(s, seqs[j], i, counts, V);
  }
  results_.resize(rows_.size());
  CASCADE_RETURN_IF_ERROR(gpu->Sample(results_, logits, rows_, penalties_, masks_));
  // A sequence emits its accepted drafts, then its first unaccepted row's token (the
  // correction, or the next token after all k).
  size_t r = 0;
  for (size_t j = 0; j < seqs.size(); ++j) {
    const size_t k = seqs[j].drafts.size();
    for (size_t i = 0; i <= k; ++i) {
      const kernels::SampleResult& res = results_[r + i];
      sampling::SampledToken t;
      t.id = res.id;
      t.logprob = res.logprob;
      for (int n = 0; n < res.n_top; ++n) t.top.emplace_back(res.top_ids[n], res.top_logprobs[n]);
      out[j].push_back(std::move(t));
      if (i == k || !res.accepted) break;
    }
    r += k + 1;
  }
  return absl::OkStatus();
}

}  // namespace cascade::model
