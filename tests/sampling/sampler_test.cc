// sampling::Sampler's per-row passes against a double-precision reference written here:
// the greedy id is the first largest logit, and the reported logprobs (the chosen token's
// and the top-n) are log-softmax of the raw logits computed in double with std::exp. The
// sampler computes the exponentials in float (a vectorized polynomial) and sums them in
// double; the bound below is what that allows (a few float roundings of the normaliser).
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace cascade::sampling {
namespace {

// 1e-6 for the normaliser (seen: 1.1e-7), plus the float the logprob is reported in.
constexpr double kLogprobBound = 1e-6;
double Bound(double want) { return kLogprobBound + 6e-8 * std::abs(want); }

double RefLogSumExp(const std::vector<float>& v) {
  double m = -INFINITY;
  for (float x : v) m = std::max(m, double{x});
  double sum = 0;
  for (float x : v) sum += std::exp(double{x} - m);
  return m + std::log(sum);
}

int32_t RefArgmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// Rows of the shapes real logits take: Llama-3's and SmolLM2's vocabularies plus lengths
// that leave a tail past the vector width; spread 3 (a confident model) and 30; offsets
// that make every exponential tiny or the logits large; a row with masked (-inf) entries.
std::vector<std::vector<float>> Rows() {
  std::mt19937 rng(11);
  std::vector<std::vector<float>> rows;
  for (int64_t n : {128256, 49152, 49155, 7, 1}) {
    for (float spread : {3.0f, 30.0f}) {
      for (float offset : {0.0f, -200.0f, 80.0f}) {
        std::normal_distribution<float> d(offset, spread);
        std::vector<float> v(n);
        for (float& x : v) x = d(rng);
        rows.push_back(std::move(v));
      }
    }
  }
  std::vector<float> masked = rows[0];
  for (size_t i = 0; i < masked.size(); i += 3) masked[i] = -INFINITY;
  rows.push_back(masked);
  return rows;
}

TEST(SamplerTest, GreedyLogprobsMatchTheDoubleReference) {
  double worst = 0;
  for (const std::vector<float>& row : Rows()) {
    SCOPED_TRACE(row.size());
    Sampler sampler({.temperature = 0, .n_logprobs = 5});
    std::vector<float> logits = row;
    const SampledToken t = sampler.Sample(logits, {});
    ASSERT_EQ(t.id, RefArgmax(row));
    const double lse = RefLogSumExp(row);
    EXPECT_NEAR(t.logprob, row[t.id] - lse, Bound(row[t.id] - lse));
    worst = std::max(worst, std::abs(t.logprob - (row[t.id] - lse)));
    std::vector<int32_t> order(row.size());
    for (size_t i = 0; i < row.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ASSERT_EQ(t.top.size(), std::min<size_t>(5, row.size()));
    for (size_t i = 0; i < t.top.size(); ++i) {
      EXPECT_EQ(t.top[i].first, order[i]);
      EXPECT_NEAR(t.top[i].second, row[order[i]] - lse, Bound(row[order[i]] - lse));
    }
  }
  std::printf("[ info ] worst chosen-token logprob error against double %.3g (bound %.3g + float rounding)\n", worst,
              kLogprobBound);
}

// Ties go to the first index, wherever the vector lanes put them.
TEST(SamplerTest, ArgmaxTakesTheFirstOfTies) {
  for (size_t n : {1u, 3u, 4u, 5u, 17u, 128256u}) {
    for (size_t first : {size_t{0}, n / 2, n - 1}) {
      std::vector<float> v(n, -1.0f);
      v[first] = 2.0f;
      for (size_t j = first + 1; j < n; j += 5) v[j] = 2.0f;
      EXPECT_EQ(Argmax(v), static_cast<int32_t>(first)) << n;
    }
  }
  EXPECT_EQ(Argmax(std::vector<float>(9, -INFINITY)), 0);
}

// TopK is a partial sort of every (logit, id) pair by logit, the lower id first on ties,
// the order the inverse CDF walks: rows with many ties, k below, at and above the size.
TEST(SamplerTest, TopKIsThePartialSortOfEveryPair) {
  std::mt19937 rng(5);
  for (size_t n : {1u, 7u, 100u, 49152u}) {
    std::vector<float> v(n);
    std::uniform_int_distribution<int> few(0, 9);  // Ten distinct values: ties everywhere.
    for (float& x : v) x = static_cast<float>(few(rng)) * 0.5f;
    for (size_t k : {size_t{1}, size_t{5}, size_t{40}, n, n + 3}) {
      std::vector<std::pair<float, int32_t>> want;
      for (size_t i = 0; i < n; ++i) want.emplace_back(v[i], static_cast<int32_t>(i));
      const size_t kk = std::min(k, n);
      std::partial_sort(want.begin(), want.begin() + kk, want.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      want.resize(kk);
      std::vector<std::pair<float, int32_t>> got;
      TopK(v, k, got);
      EXPECT_EQ(got, want) << "n " << n << " k " << k;
    }
  }
}

// A sampled token's logprob is of the raw logits, whatever the temperature and penalties
// did to the row; the draw itself does not depend on how the normaliser was summed.
TEST(SamplerTest, SampledLogprobIsOfTheRawLogits) {
  const std::vector<float> row = Rows()[0];
  const double lse = RefLogSumExp(row);
  const std::vector<int32_t> history = {5, 5, 9, 128000};
  for (uint64_t seed : {1u, 2u, 3u}) {
    Sampler sampler(
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.3f, .seed = seed, .n_logprobs = 1});
    std::vector<float> logits = row;
    const SampledToken t = sampler.Sample(logits, history);
    EXPECT_NEAR(t.logprob, row[t.id] - lse, Bound(row[t.id] - lse)) << seed;
    ASSERT_EQ(t.top.size(), 1u);
  }
}

// A request that asks for no logprobs gets none (the API reports them only when asked), so
// its rows pay no pass over the vocabulary for them; it draws the same tokens.
TEST(SamplerTest, LogprobsOnlyWhenAsked) {
  const std::vector<float> row = Rows()[0];
  for (float temperature : {0.0f, 0.8f}) {
    Sampler quiet({.temperature = temperature, .seed = 4});
    Sampler asking({.temperature = temperature, .seed = 4, .n_logprobs = 2});
    std::vector<float> a = row, b = row;
    const SampledToken q = quiet.Sample(a, {}), t = asking.Sample(b, {});
    EXPECT_EQ(q.id, t.id);
    EXPECT_EQ(q.logprob, 0.0f);
    EXPECT_TRUE(q.top.empty());
    EXPECT_LT(t.logprob, 0.0f);
    EXPECT_EQ(t.top.size(), 2u);
  }
}

}  // namespace
}  // namespace cascade::sampling
