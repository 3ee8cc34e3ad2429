// The sampling of a pipeline's last stage: every sequence's sampling parameters and
// history, and one call that samples (or verifies drafts for) all of a step's logit rows
// where the logits are.
//
//  * Logits in host memory (the CPU backend, or a GPU head whose TP gather ends on the
//    host): each sequence's sampling::Sampler over a thread pool. The rows draw what they
//    would one after the other: each sampler is its own and seeds by position.
//  * Logits in a GPU's memory (CudaBackend): one launch for every row
//    (CudaBackend::Sample, kernels/sample_row.h); penalties go up as the (token, count)
//    pairs of each row's history, and only ids, flags and asked-for logprobs come down.
//    Greedy and verification-by-argmax pick what the CPU picks (the first largest logit).
//    Seeded sampling draws from the same law with the same per-position seeds
//    (sampling::PositionSeed), but its inverse CDF walks the kept tokens in vocabulary
//    order where the CPU walks them most likely first, so a seed names a different token
//    on the two backends (kernels/sample_row.h says why).
//
// Thread-safety: single owner (the worker's step thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/sample_row.h"
#include "sampling/sampler.h"

namespace cascade::model {

// One sequence's rows of a step's logits: one row to sample, or k + 1 to verify k drafts
// (row i scores the position of draft i, row k the one after the last).
// `allowed`: constrained decoding's bitmasks, one per row, all of one length (empty: none).
struct SampleSeq {
  int64_t seq_id = 0;
  std::span<const int32_t> drafts;
  std::span<const uint8_t> allowed;
};

class StepSampler {
 public:
  // `backend` (borrowed) is where the logits live; `n_threads` sample host rows.
  StepSampler(kernels::Backend* backend, int n_threads);

  // (Re)starts sequence `id`: its parameters and its history so far (prompt and generated
  // tokens, positions [0, size)).
  void Start(int64_t id, const sampling::SamplingParams& params, std::vector<int32_t> history);
  // Records `tokens` at positions [first, first + size) past the history (a prefill chunk);
  // positions it already holds are skipped.
  void Extend(int64_t id, int64_t first, std::span<const int32_t> tokens);
  void Release(int64_t id) { seqs_.erase(id); }
  bool Has(int64_t id) const { return seqs_.contains(id); }
  std::span<const int32_t> history(int64_t id) const { return seqs_.at(id).history; }

  // Samples `logits` [n_rows, n_vocab] (host or the backend's memory; host rows may be
  // modified by penalties), whose rows belong to `seqs` in order. Returns each sequence's
  // emitted tokens (the accepted drafts, then the correction or the next token) and appends
  // them to its history. InvalidArgument for an unknown sequence or a row count that does
  // not match.
  absl::StatusOr<std::vector<std::vector<sampling::SampledToken>>> Sample(const TensorView& logits,
                                                                          std::span<const SampleSeq> seqs);

 private:
  struct Seq {
    std::unique_ptr<sampling::Sampler> sampler;
    std::vector<int32_t> history;
  };
  absl::Status SampleOnHost(const TensorView& logits, std::span<Seq* const> states, std::span<const SampleSeq> seqs,
                            std::vector<std::vector<sampling::SampledToken>>& out);
  absl::Status SampleOnDevice(const TensorView& logits, std::span<Seq* const> states, std::span<const SampleSeq> seqs,
                              std::vector<std::vector<sampling::SampledToken>>& out);
  // Row i of a sequence: its parameters, the draft it verifies, its uniforms and penalties
  // (`history_counts`: sampling::TokenCounts of its history, empty without penalties).
  void AddDeviceRow(const Seq& s, const SampleSeq& q, size_t i,
                    std::span<const std::pair<int32_t, int32_t>> history_counts, int32_t n_vocab);

  kernels::Backend* backend_;
  ThreadPool pool_;
  absl::flat_hash_map<int64_t, Seq> seqs_;
  // The device path's per-step lists, reused.
  std::vector<kernels::SampleRow> rows_;
  std::vector<kernels::SamplePenalty> penalties_;
  std::vector<uint8_t> masks_;
  std::vector<kernels::SampleResult> results_;
};

}  // namespace cascade::model
