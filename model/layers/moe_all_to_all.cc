// MoeBlock's all-to-all form (model/layers/moe.h): routing of the rank's own tokens, the
// counts, the dispatch of rows and pairs, the held experts over what arrived, and the
// combine back to the ranks the tokens came from.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/tp_shard.h"
#include "model/layers/moe.h"

namespace cascade::model {
namespace {

// One (token, expert) pair on its way to the expert's rank: the row of its token in the
// block sent to that rank, the expert, and the routing weight.
struct Pair {
  int32_t row = 0;
  int32_t expert = 0;
  float weight = 0;
};
static_assert(sizeof(Pair) == 12, "pairs travel as bytes");

int64_t Sum(std::span<const int64_t> v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

absl::Status MoeBlock::Exchange(const void* out, std::span<const int64_t> count_out, void* in,
                                std::span<const int64_t> count_in, size_t unit) const {
  std::vector<size_t> out_bytes(count_out.size()), in_bytes(count_in.size());
  for (size_t q = 0; q < count_out.size(); ++q) out_bytes[q] = static_cast<size_t>(count_out[q]) * unit;
  for (size_t q = 0; q < count_in.size(); ++q) in_bytes[q] = static_cast<size_t>(count_in[q]) * unit;
  return group_->AllToAll(out, out_bytes, in, in_bytes);
}

absl::Status MoeBlock::ForwardAllToAll(TensorView hidden, const TensorView& x, MoeScratch& s,
                                       std::span<int64_t> load) const {
  kernels::Backend& b = *backend_;
  const int64_t n = x.Rows(), k = top_k_, d = n_embd_;
  const int R = n_ranks_;
  CASCADE_RETURN_IF_ERROR(Grow(s, n));
  std::vector<int32_t> chosen;
  std::vector<float> weights;
  CASCADE_RETURN_IF_ERROR(RouteTokens(x, n, s, chosen, weights));
  if (!load.empty()) {
    for (int32_t e : chosen) ++load[e];
  }
  // The rank that computes a pair: the expert's own; with replicas (SetReplicas), this rank
  // when it holds one (the pair stays here), else the expert's holders in turn (its j-th
  // pair of this batch to holder j mod holders). Receivers only need to hold the expert.
  std::vector<int32_t> seen(holders_.empty() ? 0 : n_experts_, 0);
  const auto rank_of_pair = [&](int32_t e) -> int {
    if (holders_.empty() || holders_[e].empty()) return TpShard::ExpertRank(n_experts_, R, e);
    const std::vector<int32_t>& h = holders_[e];
    if (slot_of_expert_[e] >= 0) return rank_;
    return h[seen[e]++ % h.size()];
  };
  // Each token goes once to every rank computing one of its pairs, with its pairs there.
  std::vector<std::vector<int32_t>> tokens_to(R);
  std::vector<std::vector<Pair>> pairs_to(R);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = chosen[t * k + j];
      const int q = rank_of_pair(e);
      std::vector<int32_t>& tokens = tokens_to[q];
      if (tokens.empty() || tokens.back() != t) tokens.push_back(static_cast<int32_t>(t));
      pairs_to[q].push_back({static_cast<int32_t>(tokens.size()) - 1, e, weights[t * k + j]});
    }
  }
  // The counts go first: every rank learns how many rows and pairs each other sends it.
  std::vector<int64_t> counts_out(2 * R), counts_in(2 * R);
  std::vector<int64_t> rows_out(R), pairs_out(R), rows_in(R), pairs_in(R);
  s.sent_token.clear();
  std::vector<Pair> pairs;
  for (int q = 0; q < R; ++q) {
    rows_out[q] = counts_out[2 * q] = static_cast<int64_t>(tokens_to[q].size());
    pairs_out[q] = counts_out[2 * q + 1] = static_cast<int64_t>(pairs_to[q].size());
    s.sent_token.insert(s.sent_token.end(), tokens_to[q].begin(), tokens_to[q].end());
    pairs.insert(pairs.end(), pairs_to[q].begin(), pairs_to[q].end());
  }
  const std::vector<int64_t> two(R, 2);
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.meta_out, std::max<size_t>(pairs.size(), 2 * R) * sizeof(Pair)));
  CASCADE_RETURN_IF_ERROR(b.CopyIn(s.meta_out->data(), counts_out.data(), counts_out.size() * sizeof(int64_t)));
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.meta_in, 2 * R * sizeof(int64_t)));
  CASCADE_RETURN_IF_ERROR(Exchange(s.meta_out->data(), two, s.meta_in->data(), two, sizeof(int64_t)));
  CASCADE_RETURN_IF_ERROR(b.CopyOut(counts_in.data(), s.meta_in->data(), counts_in.size() * sizeof(int64_t)));
  for (int q = 0; q < R; ++q) {
    rows_in[q] = counts_in[2 * q];
    pairs_in[q] = counts_in[2 * q + 1];
    if (rows_in[q] < 0 || pairs_in[q] < rows_in[q] || pairs_in[q] > rows_in[q] * k) {
      return absl::InternalError(
          StrCat("moe all-to-all: rank ", q, " announced ", rows_in[q], " rows and ", pairs_in[q], " pairs"));
    }
  }
  const int64_t n_out = static_cast<int64_t>(s.sent_token.size()), n_in = Sum(rows_in), p_in = Sum(pairs_in);
  // Dispatch: the pairs, then the rows.
  std::vector<Pair> received(static_cast<size_t>(p_in));
  if (!pairs.empty()) CASCADE_RETURN_IF_ERROR(b.CopyIn(s.meta_out->data(), pairs.data(), pairs.size() * sizeof(Pair)));
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.meta_in, std::max<int64_t>(p_in, 1) * sizeof(Pair)));
  CASCADE_RETURN_IF_ERROR(Exchange(s.meta_out->data(), pairs_out, s.meta_in->data(), pairs_in, sizeof(Pair)));
  if (p_in > 0) CASCADE_RETURN_IF_ERROR(b.CopyOut(received.data(), s.meta_in->data(), received.size() * sizeof(Pair)));
  const auto rows_bytes = [d](int64_t rows) {
    return static_cast<size_t>(std::max<int64_t>(rows, 1) * d) * sizeof(float);
  };
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.sent, rows_bytes(n_out)));
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.combined, rows_bytes(n_out)));
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.received, rows_bytes(n_in)));
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(b, s.summed, rows_bytes(n_in)));
  if (n_out > 0) CASCADE_RETURN_IF_ERROR(b.Embedding(View(*s.sent, n_out, d), x, s.sent_token));
  CASCADE_RETURN_IF_ERROR(Exchange(s.sent->data(), rows_out, s.received->data(), rows_in, d * sizeof(float)));
  // The held experts over every received pair, grouped expert by expert; each received
  // row sums its experts here.
  const int64_t held = static_cast<int64_t>(experts_.size());
  std::vector<int32_t> slot_of_pair(static_cast<size_t>(p_in)), row_of_pair(static_cast<size_t>(p_in));
  s.expert_rows.assign(held + 1, 0);
  int64_t i = 0, row0 = 0;  // Pairs arrive rank by rank; rank q's rows start at row0.
  for (int q = 0; q < R; row0 += rows_in[q], ++q) {
    for (int64_t j = 0; j < pairs_in[q]; ++j, ++i) {
      const Pair& p = received[i];
      const int32_t slot = p.expert >= 0 && p.expert < n_experts_ ? slot_of_expert_[p.expert] : -1;
      if (slot < 0 || p.row < 0 || p.row >= rows_in[q]) {
        return absl::InternalError(StrCat("moe all-to-all: rank ", q, " sent expert ", p.expert, " for row ", p.row,
                                          ", which this rank cannot run"));
      }
      slot_of_pair[i] = slot;
      row_of_pair[i] = static_cast<int32_t>(row0 + p.row);
      ++s.expert_rows[slot + 1];
    }
  }
  std::partial_sum(s.expert_rows.begin(), s.expert_rows.end(), s.expert_rows.begin());
  s.token_of_row.resize(p_in);
  s.weight_of_row.resize(p_in);
  std::vector<int64_t> next(s.expert_rows.begin(), s.expert_rows.end() - 1);
  for (int64_t i = 0; i < p_in; ++i) {
    s.token_of_row[next[slot_of_pair[i]]] = row_of_pair[i];
    s.weight_of_row[next[slot_of_pair[i]]++] = received[i].weight;
  }
  CASCADE_RETURN_IF_ERROR(Grow(s, n, p_in));
  const TensorView summed = View(*s.summed, n_in, d);
  if (n_in > 0) {
    s.zeros.resize(static_cast<size_t>(n_in * d), 0.0f);
    CASCADE_RETURN_IF_ERROR(b.CopyIn(summed.data, s.zeros.data(), static_cast<size_t>(n_in * d) * sizeof(float)));
  }
  CASCADE_RETURN_IF_ERROR(RunExperts(summed, View(*s.received, n_in, d), s));
  // Combine: each summed row back to the rank it came from, then into the residual.
  CASCADE_RETURN_IF_ERROR(Exchange(s.summed->data(), rows_in, s.combined->data(), rows_out, d * sizeof(float)));
  if (n_out > 0) {
    s.ones.assign(static_cast<size_t>(n_out), 1.0f);
    CASCADE_RETURN_IF_ERROR(b.AddScaledRows(hidden, View(*s.combined, n_out, d), s.sent_token, s.ones));
  }
  if (n_ff_shared_ > 0 && n > 0) CASCADE_RETURN_IF_ERROR(RunShared(hidden, x, s));
  return absl::OkStatus();
}

}  // namespace cascade::model
