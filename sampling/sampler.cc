#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "core/str_cat.h"
#include "sampling/rejection_sampler.h"

namespace cascade::sampling {

absl::Status SamplingParams::Validate() const {
  const auto bad = [](std::string_view field, double v, std::string_view rule) {
    return absl::InvalidArgumentError(StrCat(field, " = ", v, ": ", rule));
  };
  if (!(temperature >= 0) || !std::isfinite(temperature)) return bad("temperature", temperature, "must be >= 0");
  if (top_k < 0) return bad("top_k", top_k, "must be >= 0 (0 disables it)");
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", min_p, "must be in [0, 1]");
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty", repetition_penalty, "must be > 0");
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
    return bad("presence/frequency_penalty", presence_penalty, "must be finite");
  if (n_logprobs < 0 || n_logprobs > 20) return bad("logprobs", n_logprobs, "must be in [0, 20]");
  return absl::OkStatus();
}

namespace {

// The two passes over a whole row that every emitted token pays (its max, and the sum of
// exponentials behind its logprob) in GCC's vector extensions, four floats at a time,
// where the plain loops stay scalar because their reductions may not be reordered.
// (16-byte vectors: SSE2 is every x86-64's; 32-byte ones would change the calling
// convention without AVX.) 1.2 ms -> 0.32 ms per 128256-token row here.
using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));
using D2 = double __attribute__((vector_size(16)));
constexpr size_t kWidth = 4;

F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// exp(x) for x <= 0, in float to about 2 ulp (Cephes' expf: x = k ln 2 + r with
// |r| <= ln 2 / 2, a degree-6 polynomial in r, then 2^k through the exponent bits). Below
// -87 it gives about 1e-38, which adds nothing to a sum that holds exp(0) = 1.
F4 ExpNonPositive(F4 x) {
  x = x < -87.0f ? -87.0f : x;
  // Round to nearest by adding and taking away 1.5 * 2^23 (|x log2 e| < 2^22).
  const F4 k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const F4 r = x - k * 0.693359375f + k * 2.12194440e-4f;
  F4 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I4 bits = (__builtin_convertvector(k, I4) + 127) << 23;
  return p * std::bit_cast<F4>(bits);
}

// The largest value of a NaN-free row.
float MaxOf(std::span<const float> v) {
  float m = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  if (v.size() >= kWidth) {
    F4 lanes = Load4(v.data());
    for (i = kWidth; i + kWidth <= v.size(); i += kWidth) {
      const F4 x = Load4(v.data() + i);
      lanes = x > lanes ? x : lanes;
    }
    for (size_t l = 0; l < kWidth; ++l) m = std::max(m, lanes[l]);
  }
  for (; i < v.size(); ++i) m = std::max(m, v[i]);
  return m;
}

// log-softmax normaliser of `logits`: max + log(sum exp(x - max)), the exponentials in
// float (a relative error of about 2e-7 each) summed in double.
double LogSumExp(std::span<const float> logits) {
  const float m = MaxOf(logits);
  D2 lo = {}, hi = {};
  size_t i = 0;
  for (; i + kWidth <= logits.size(); i += kWidth) {
    const F4 e = ExpNonPositive(Load4(logits.data() + i) - m);
    lo += __builtin_convertvector(__builtin_shufflevector(e, e, 0, 1), D2);
    hi += __builtin_convertvector(__builtin_shufflevector(e, e, 2, 3), D2);
  }
  const D2 both = lo + hi;
  double sum = both[0] + both[1];
  for (; i < logits.size(); ++i) sum += std::exp(static_cast<double>(logits[i] - m));
  return m + std::log(sum);
}

}  // namespace

int32_t Argmax(std::span<const float> v) {
  // The largest value by a vectorized reduction, then its first index.
  const float m = MaxOf(v);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == m) return static_cast<int32_t>(i);
  }
  return 0;  // Empty, or every value NaN.
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

uint64_t PositionSeed(uint64_t seed, size_t position) {
  const auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return mix(seed ^ mix(static_cast<uint64_t>(position)));
}

bool Penalised(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

std::vector<std::pair<int32_t, int32_t>> TokenCounts(std::span<const int32_t> history, int32_t n_vocab) {
  std::vector<std::pair<int32_t, int32_t>> out;
  absl::flat_hash_map<int32_t, size_t> index;
  for (int32_t t : history) {
    if (t < 0 || t >= n_vocab) continue;
    const auto [it, fresh] = index.try_emplace(t, out.size());
    if (fresh) out.emplace_back(t, 0);
    ++out[it->second].second;
  }
  return out;
}

void Sampler::SeedFor(size_t position) { rng_.seed(PositionSeed(params_.seed, position)); }

void Sampler::Penalize(std::span<float> logits, std::span<const int32_t> history) const {
  if (!penalised()) return;
  for (const auto& [t, n] : TokenCounts(history, static_cast<int32_t>(logits.size()))) {
    logits[t] = PenalisedLogit(logits[t], n, params_);
  }
}

void TopK(std::span<const float> logits, size_t k, std::vector<std::pair<float, int32_t>>& out) {
  // Largest logit first; the lower id first on ties.
  const auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  const int32_t n = static_cast<int32_t>(logits.size());
  out.clear();
  if (k >= logits.size()) {
    for (int32_t i = 0; i < n; ++i) out.emplace_back(logits[i], i);
    std::sort(out.begin(), out.end(), before);
    return;
  }
  // A heap of the k best so far whose front is the worst of them: one comparison per logit,
  // and a heap update only for the few that beat it.
  for (int32_t i = 0; i < n; ++i) {
    const std::pair<float, int32_t> c(logits[i], i);
    if (out.size() < k) {
      out.push_back(c);
      std::push_heap(out.begin(), out.end(), before);
    } else if (before(c, out.front())) {
      std::pop_heap(out.begin(), out.end(), before);
      out.back() = c;
      std::push_heap(out.begin(), out.end(), before);
    }
  }
  std::sort_heap(out.begin(), out.end(), before);
}

size_t Sampler::Shape(std::span<const float> logits) {
  // Candidates sorted by logit, truncated by top-k, then softmax with temperature, then
  // min-p and top-p on the probabilities.
  TopK(logits, params_.top_k > 0 ? std::min<size_t>(params_.top_k, logits.size()) : logits.size(), candidates_);
  const float inv_t = 1.0f / params_.temperature;
  const float m = candidates_[0].first;
  double sum = 0;
  for (auto& c : candidates_) {
    c.first = static_cast<float>(std::exp(static_cast<double>((c.first - m) * inv_t)));
    sum += c.first;
  }
  size_t keep = candidates_.size();
  if (params_.min_p > 0) {
    const double floor = params_.min_p * candidates_[0].first;
    keep = 1;
    while (keep < candidates_.size() && candidates_[keep].first >= floor) ++keep;
  }
  if (params_.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += candidates_[n].first / sum;
      ++n;
      if (mass >= params_.top_p) break;
    }
    keep = n;
  }
  return keep;
}

SampledToken Sampler::Describe(std::span<const float> raw, int32_t id) const {
  SampledToken out;
  out.id = id;
  if (params_.n_logprobs > 0) {
    const double lse = LogSumExp(raw);
    out.logprob = static_cast<float>(raw[id] - lse);
    std::vector<std::pair<float, int32_t>> top;
    TopK(raw, std::min<size_t>(params_.n_logprobs, raw.size()), top);
    for (const auto& [x, t] : top) out.top.emplace_back(t, static_cast<float>(x - lse));
  }
  return out;
}

void MaskLogits(std::span<float> logits, std::span<const uint8_t> allowed) {
  const size_t n = std::min(logits.size(), allowed.size() * 8);
  for (size_t t = 0; t < n; ++t) {
    if (((allowed[t / 8] >> (t % 8)) & 1) == 0) logits[t] = -std::numeric_limits<float>::infinity();
  }
  for (size_t t = n; t < logits.size(); ++t) logits[t] = -std::numeric_limits<float>::infinity();
}

SampledToken Sampler::Sample(std::span<float> logits, std::span<const int32_t> history,
                             std::span<const uint8_t> allowed) {
  // Logprobs are of the model's own distribution: keep the raw logits when penalties or
  // a mask apply.
  std::vector<float> raw;
  if ((penalised() || !allowed.empty()) && params_.n_logprobs > 0) raw.assign(logits.begin(), logits.end());
  Penalize(logits, history);
  if (!allowed.empty()) MaskLogits(logits, allowed);
  int32_t id = 0;
  if (params_.greedy()) {
    id = Argmax(logits);
  } else {
    const size_t keep = Shape(logits);
    double kept_sum = 0;
    for (size_t i = 0; i < keep; ++i) kept_sum += candidates_[i].first;
    SeedFor(history.size());
    const double u = std::uniform_real_distribution<double>(0.0, kept_sum)(rng_);
    double acc = 0;
    id = candidates_[keep - 1].second;
    for (size_t i = 0; i < keep; ++i) {
      acc += candidates_[i].first;
      if (u < acc) {
        id = candidates_[i].second;
        break;
      }
    }
  }
  return Describe(raw.empty() ? std::span<const float>(logits) : std::span<const float>(raw), id);
}

std::vector<SampledToken> Sampler::Verify(std::span<const float> logits, std::span<const int32_t> drafts,
                                          std::span<const int32_t> history, std::span<const uint8_t> allowed) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  const int64_t n_vocab = static_cast<int64_t>(logits.size()) / (k + 1);
  // Row i is shaped as Sample would shape it after drafts [0, i) were appended.
  std::vector<int32_t> seen(history.begin(), history.end());
  std::vector<float> target(logits.size());  // Greedy: penalised logits; else probabilities.
  std::vector<float> row(n_vocab);
  for (int64_t i = 0; i <= k; ++i) {
    const std::span<const float> raw = logits.subspan(i * n_vocab, n_vocab);
    std::copy(raw.begin(), raw.end(), row.begin());
    Penalize(row, seen);
    if (!allowed.empty()) {
      const size_t row_bytes = allowed.size() / (k + 1);
      MaskLogits(row, allowed.subspan(i * row_bytes, row_bytes));
    }
    float* out = target.data() + i * n_vocab;
    if (params_.greedy()) {
      std::copy(row.begin(), row.end(), out);
    } else {
      const size_t keep = Shape(row);
      double kept_sum = 0;
      for (size_t j = 0; j < keep; ++j) kept_sum += candidates_[j].first;
      for (size_t j = 0; j < keep; ++j)
        out[candidates_[j].second] = static_cast<float>(candidates_[j].first / kept_sum);
    }
    if (i < k) seen.push_back(drafts[i]);
  }
  if (!params_.greedy()) SeedFor(history.size());
  const VerifyResult v = params_.greedy() ? VerifyGreedy(target, drafts, static_cast<int32_t>(n_vocab))
                                          : VerifyDrafts(target, {}, drafts, static_cast<int32_t>(n_vocab), rng_);
  std::vector<SampledToken> emitted;
  for (int32_t i = 0; i <= v.n_accepted; ++i) {
    const int32_t id = i < v.n_accepted ? drafts[i] : v.next_token;
    emitted.push_back(Describe(logits.subspan(i * n_vocab, n_vocab), id));
  }
  return emitted;
}

}  // namespace cascade::sampling
