// The speculative rejection sampler on synthetic distributions: whatever the draft q, the
// emitted tokens follow the target p (chi-square over 200,000 fixed-seed trials at
// p > 0.001 per position), and greedy verification accepts exactly the matching prefix.
#include "sampling/rejection_sampler.h"

#include "sampling/sampler.h"

#include <cmath>
#include <random>
#include <set>

#include "tests/test_support.h"

namespace cascade::sampling {
namespace {

std::vector<float> RandomDistribution(int n, std::mt19937_64& rng, double peak) {
  std::exponential_distribution<double> e(1.0);
  std::vector<double> w(n);
  double sum = 0;
  for (auto& x : w) sum += (x = std::pow(e(rng), peak));
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(w[i] / sum);
  return out;
}

// Chi-square critical value at p = 0.001 (Wilson-Hilferty approximation).
double ChiSquareCritical(int df) {
  const double z = 3.0902;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Emitted tokens at each position against the target rows p_i. The target here does not
// depend on the prefix, so position i's emitted token must follow p_i.
void CheckLossless(bool one_hot_draft, uint64_t seed) {
  constexpr int V = 8, K = 3, kTrials = 200000;
  std::mt19937_64 rng(seed);
  std::vector<float> p, q;
  for (int i = 0; i <= K; ++i) {
    auto row = RandomDistribution(V, rng, 2.0);
    p.insert(p.end(), row.begin(), row.end());
  }
  for (int i = 0; i < K; ++i) {
    auto row = RandomDistribution(V, rng, 1.0);  // A different, flatter draft.
    q.insert(q.end(), row.begin(), row.end());
  }
  std::vector<std::vector<int64_t>> counts(K + 1, std::vector<int64_t>(V, 0));
  std::vector<int64_t> reached(K + 1, 0);
  std::mt19937_64 sampler(seed + 1);
  for (int t = 0; t < kTrials; ++t) {
    // Drafts come from q (or are fixed tokens for the one-hot case).
    int32_t drafts[K];
    for (int i = 0; i < K; ++i) {
      if (one_hot_draft) {
        drafts[i] = (t + i) % V;
      } else {
        std::discrete_distribution<int> d(q.begin() + i * V, q.begin() + (i + 1) * V);
        drafts[i] = d(sampler);
      }
    }
    const VerifyResult r =
        VerifyDrafts(p, one_hot_draft ? std::span<const float>() : std::span<const float>(q), drafts, V, sampler);
    ASSERT_GE(r.n_accepted, 0);
    ASSERT_LE(r.n_accepted, K);
    for (int i = 0; i < r.n_accepted; ++i) {
      ++counts[i][drafts[i]];
      ++reached[i];
    }
    ++counts[r.n_accepted][r.next_token];
    ++reached[r.n_accepted];
  }
  for (int i = 0; i <= K; ++i) {
    if (reached[i] < 2000) continue;  // Too few samples at this depth to test.
    double chi2 = 0;
    for (int v = 0; v < V; ++v) {
      const double expected = reached[i] * p[i * V + v];
      chi2 += (counts[i][v] - expected) * (counts[i][v] - expected) / expected;
    }
    EXPECT_LT(chi2, ChiSquareCritical(V - 1)) << "position " << i << " over " << reached[i] << " samples";
  }
}

TEST(RejectionSamplerTest, EmittedTokensFollowTheTargetWithSampledDrafts) { CheckLossless(false, 7); }

TEST(RejectionSamplerTest, EmittedTokensFollowTheTargetWithDeterministicDrafts) { CheckLossless(true, 11); }

// The test above would fail for a sampler that ignores q: accepting with probability p(x)
// instead of p(x)/q(x) skews position 0 toward q.
TEST(RejectionSamplerTest, IdenticalDistributionsAcceptEverything) {
  constexpr int V = 5, K = 2;
  std::vector<float> p = {0.1f, 0.2f, 0.3f, 0.2f, 0.2f, 0.1f, 0.2f, 0.3f, 0.2f, 0.2f, 0.1f, 0.2f, 0.3f, 0.2f, 0.2f};
  std::vector<float> q(p.begin(), p.begin() + K * V);
  std::mt19937_64 rng(3);
  const int32_t drafts[K] = {2, 4};
  for (int t = 0; t < 1000; ++t) EXPECT_EQ(VerifyDrafts(p, q, drafts, V, rng).n_accepted, K);
}

TEST(RejectionSamplerTest, GreedyAcceptsTheMatchingPrefix) {
  constexpr int V = 4;
  // Argmax per row: 1, 3, 0, 2.
  const std::vector<float> logits = {0, 5, 1, 2, 1, 0, 0, 9, 7, 1, 1, 1, 0, 0, 3, 1};
  const int32_t all[3] = {1, 3, 0};
  const VerifyResult r = VerifyGreedy(logits, all, V);
  EXPECT_EQ(r.n_accepted, 3);
  EXPECT_EQ(r.next_token, 2);  // Bonus.
  const int32_t miss[3] = {1, 2, 0};
  const VerifyResult m = VerifyGreedy(logits, miss, V);
  EXPECT_EQ(m.n_accepted, 1);
  EXPECT_EQ(m.next_token, 3);  // The target's choice at the first mismatch.
}

// Sampler::Verify shapes each row as Sample would (penalties over history + earlier
// drafts, temperature, top-k): greedy verification of Sample's own greedy choices accepts
// all of them, and the first emitted token at temperature 1 with top-k 4 follows the
// shaped distribution, computed here independently in double precision.
TEST(SamplerVerifyTest, GreedyWithPenaltiesAcceptsSequentialChoices) {
  constexpr int V = 16, K = 3;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> logits((K + 1) * V);
  for (float& x : logits) x = 2 * n(rng);
  SamplingParams params;
  params.temperature = 0;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.5f;
  Sampler seq(params), ver(params);
  std::vector<int32_t> history = {1, 2, 3}, drafts;
  for (int i = 0; i < K; ++i) {
    std::vector<float> row(logits.begin() + i * V, logits.begin() + (i + 1) * V);
    drafts.push_back(seq.Sample(row, history).id);
    history.push_back(drafts.back());
  }
  std::vector<float> last(logits.begin() + K * V, logits.end());
  const int32_t bonus = seq.Sample(last, history).id;
  const auto out = ver.Verify(logits, drafts, std::vector<int32_t>{1, 2, 3});
  ASSERT_EQ(out.size(), K + 1u);
  for (int i = 0; i < K; ++i) EXPECT_EQ(out[i].id, drafts[i]);
  EXPECT_EQ(out[K].id, bonus);
}

TEST(SamplerVerifyTest, FirstEmittedTokenFollowsTheShapedDistribution) {
  constexpr int V = 10, kTrials = 40000;
  std::vector<float> logits(2 * V);
  for (int v = 0; v < V; ++v) logits[v] = logits[V + v] = 0.3f * v;  // Token 9 is the most likely.
  SamplingParams params;
  params.temperature = 1;
  params.top_k = 4;
  params.top_p = 1;  // Only top-k shapes the expected distribution below.
  params.min_p = 0;
  std::vector<double> expected(V, 0.0);
  double z = 0;
  for (int v = V - 4; v < V; ++v) z += std::exp(0.3 * v);
  for (int v = V - 4; v < V; ++v) expected[v] = std::exp(0.3 * v) / z;
  std::vector<int> counts(V, 0);
  const std::vector<int32_t> draft = {8};  // Accepted with p(8), else drawn from p without 8.
  // A sampler's draws for a position depend on its seed and the position only (Sampler::
  // SeedFor): one seed per trial.
  for (int t = 0; t < kTrials; ++t) {
    params.seed = 9 + t;
    ++counts[Sampler(params).Verify(logits, draft, {}).front().id];
  }
  double chi2 = 0;
  for (int v = 0; v < V; ++v) {
    if (expected[v] == 0) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " is outside top-k";
      continue;
    }
    const double e = expected[v] * kTrials;
    chi2 += (counts[v] - e) * (counts[v] - e) / e;
  }
  EXPECT_LT(chi2, ChiSquareCritical(3));
}

// A sampler made anew for a sequence (after a preemption or a worker's death) continues
// its stream: the draw for a position depends on the seed and the position only.
TEST(SamplerTest, AFreshSamplerContinuesWhereTheOldOneWas) {
  constexpr int V = 50;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0, 1);
  std::vector<std::vector<float>> rows(40, std::vector<float>(V));
  for (auto& row : rows) {
    for (float& x : row) x = n(rng);
  }
  SamplingParams params;
  params.temperature = 1;
  params.top_k = 0;
  params.top_p = 1;
  params.min_p = 0;
  params.seed = 42;
  const auto run = [&](std::vector<int32_t> history, size_t from) {
    Sampler s(params);
    std::vector<int32_t> out;
    for (size_t i = from; i < rows.size(); ++i) {
      std::vector<float> row = rows[i];
      out.push_back(s.Sample(row, history).id);
      history.push_back(out.back());
    }
    return out;
  };
  const std::vector<int32_t> whole = run({7, 8}, 0);
  std::vector<int32_t> history = {7, 8};
  history.insert(history.end(), whole.begin(), whole.begin() + 25);
  const std::vector<int32_t> resumed = run(history, 25);
  EXPECT_EQ(resumed, std::vector<int32_t>(whole.begin() + 25, whole.end()));
  // And the draws are not all alike: 40 tokens over 50 candidates take many values.
  EXPECT_GT(std::set<int32_t>(whole.begin(), whole.end()).size(), 15u);
  params.seed = 43;  // Another seed, another stream.
  EXPECT_NE(run({7, 8}, 0), whole);
}

}  // namespace
}  // namespace cascade::sampling
