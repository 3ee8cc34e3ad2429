#include "sampling/rejection_sampler.h"

#include <algorithm>
#include <vector>

#include "core/logging.h"

namespace cascade::sampling {
namespace {

// Draws an index from unnormalised non-negative weights (the last positive one if
// rounding leaves the draw past the end); -1 when every weight is zero.
int32_t DrawFrom(std::span<const double> w, std::mt19937_64& rng) {
  double total = 0;
  for (double x : w) total += x;
  if (!(total > 0)) return -1;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    last_positive = static_cast<int32_t>(i);
    acc += w[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return last_positive;
}

}  // namespace

VerifyResult VerifyDrafts(std::span<const float> p, std::span<const float> q, std::span<const int32_t> drafts,
                          int32_t n_vocab, std::mt19937_64& rng) {
  const int32_t k = static_cast<int32_t>(drafts.size());
  CASCADE_CHECK(static_cast<int64_t>(p.size()) == int64_t{k + 1} * n_vocab);
  CASCADE_CHECK(q.empty() || static_cast<int64_t>(q.size()) == int64_t{k} * n_vocab);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> residual(n_vocab);
  for (int32_t i = 0; i < k; ++i) {
    const float* pi = p.data() + int64_t{i} * n_vocab;
    const int32_t x = drafts[i];
    const double px = pi[x];
    const double qx = q.empty() ? 1.0 : q[int64_t{i} * n_vocab + x];
    if (qx > 0 && uniform(rng) < std::min(1.0, px / qx)) continue;  // Accepted.
    // Rejected: sample from norm(max(0, p - q)).
    for (int32_t v = 0; v < n_vocab; ++v) {
      const double qv = q.empty() ? (v == x ? 1.0 : 0.0) : q[int64_t{i} * n_vocab + v];
      residual[v] = std::max(0.0, static_cast<double>(pi[v]) - qv);
    }
    int32_t t = DrawFrom(residual, rng);
    if (t < 0) {
      // p == q up to rounding: the residual vanished; p itself is the right law then.
      for (int32_t v = 0; v < n_vocab; ++v) residual[v] = pi[v];
      t = DrawFrom(residual, rng);
    }
    return {i, t};
  }
  const float* pk = p.data() + int64_t{k} * n_vocab;
  for (int32_t v = 0; v < n_vocab; ++v) residual[v] = pk[v];
  return {k, DrawFrom(residual, rng)};
}

VerifyResult VerifyGreedy(std::span<const float> logits, std::span<const int32_t> drafts, int32_t n_vocab) {
  const int32_t k = static_cast<int32_t>(drafts.size());
  CASCADE_CHECK(static_cast<int64_t>(logits.size()) == int64_t{k + 1} * n_vocab);
  for (int32_t i = 0; i <= k; ++i) {
    const float* row = logits.data() + int64_t{i} * n_vocab;
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
    if (i == k || best != drafts[i]) return {i, best};
  }
  return {k, -1};  // Unreachable.
}

}  // namespace cascade::sampling
