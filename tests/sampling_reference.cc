#include "tests/sampling_reference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace cascade::testing {
namespace {

constexpr double kClose = 1e-6;

bool Close(double a, double b) { return std::abs(a - b) < kClose * std::max(1.0, std::abs(b)); }

}  // namespace

std::vector<double> RefPenalised(std::span<const float> raw, const RefParams& params, std::span<const int32_t> seen) {
  std::vector<double> z(raw.begin(), raw.end());
  std::map<int32_t, int> counts;
  for (int32_t t : seen) ++counts[t];
  for (const auto& [t, n] : counts) {
    double x = z[t];
    if (params.repetition_penalty != 1.0f) x = x > 0 ? x / params.repetition_penalty : x * params.repetition_penalty;
    z[t] = x - params.presence_penalty - double{params.frequency_penalty} * n;
  }
  return z;
}

RefLaw RefSampleLaw(std::span<const float> raw, const RefParams& params, std::span<const int32_t> seen) {
  const std::vector<double> z = RefPenalised(raw, params, seen);
  const int64_t n = static_cast<int64_t>(z.size());
  RefLaw law;
  law.p.assign(n, 0.0);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  law.argmax = order[0];
  if (params.temperature <= 0) {
    law.p[law.argmax] = 1;
    law.order = {law.argmax};
    return law;
  }
  const int64_t k = params.top_k > 0 ? std::min<int64_t>(params.top_k, n) : n;
  if (k < n) law.near_boundary |= Close(z[order[k - 1]], z[order[k]]);
  std::vector<double> w(k);
  double top_k_mass = 0;
  for (int64_t i = 0; i < k; ++i) top_k_mass += w[i] = std::exp((z[order[i]] - z[order[0]]) / params.temperature);
  int64_t keep = k;
  if (params.min_p > 0) {
    keep = 0;
    while (keep < k && w[keep] >= params.min_p) ++keep;
    for (int64_t i = std::max<int64_t>(0, keep - 1); i < std::min(k, keep + 1); ++i)
      law.near_boundary |= Close(w[i], params.min_p);
  }
  if (params.top_p < 1) {
    double mass = 0;
    int64_t cut = 0;
    while (cut < keep && mass / top_k_mass < params.top_p) mass += w[cut++];
    law.near_boundary |=
        Close(mass / top_k_mass, params.top_p) || (cut > 0 && Close((mass - w[cut - 1]) / top_k_mass, params.top_p));
    keep = cut;
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += w[i];
  for (int64_t i = 0; i < keep; ++i) law.p[order[i]] = w[i] / kept;
  law.order.assign(order.begin(), order.begin() + keep);
  return law;
}

std::vector<double> RefLogSoftmax(std::span<const float> raw) {
  double m = -INFINITY;
  for (float x : raw) m = std::max(m, double{x});
  double sum = 0;
  for (float x : raw) sum += std::exp(double{x} - m);
  const double lse = m + std::log(sum);
  std::vector<double> out;
  for (float x : raw) out.push_back(x - lse);
  return out;
}

std::vector<int32_t> RefTopIds(std::span<const float> raw, int n) {
  std::vector<int32_t> ids(raw.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
  ids.resize(std::min<size_t>(n, ids.size()));
  return ids;
}

namespace {

// Walks `ids` with their masses until the running sum passes c * total.
int32_t Walk(const RefLaw& law, std::span<const int32_t> ids, double c, bool* near_boundary) {
  double total = 0;
  for (int32_t t : ids) total += law.p[t];
  const double target = c * total;
  double acc = 0;
  for (int32_t t : ids) {
    acc += law.p[t];
    *near_boundary |= std::abs(acc - target) < kClose * total;
    if (target < acc) return t;
  }
  return ids.empty() ? -1 : ids.back();
}

}  // namespace

int32_t RefWalkSorted(const RefLaw& law, double c, bool* near_boundary) {
  return Walk(law, law.order, c, near_boundary);
}

int32_t RefWalkVocab(const RefLaw& law, double c, int32_t excluded, bool* near_boundary) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < static_cast<int32_t>(law.p.size()); ++t) {
    if (law.p[t] > 0 && t != excluded) ids.push_back(t);
  }
  return Walk(law, ids, c, near_boundary);
}

std::vector<RefSeq> RefStep(int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit(0.0f, 1.0f);
  std::vector<RefSeq> step;
  for (int s = 0; s < 16; ++s) {
    RefSeq q;
    RefParams& p = q.params;
    p.temperature = std::vector<float>{0.0f, 0.7f, 1.0f, 1.3f}[s % 4];
    p.top_k = s % 8 < 4 ? 0 : 40;
    p.top_p = s % 16 < 8 ? 1.0f : 0.9f;
    p.min_p = s % 3 == 0 ? 0.05f : 0.0f;
    if (s % 2 == 1) {
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = 0.2f;
    }
    p.seed = 1000 + s;
    p.n_logprobs = s % 3 == 1 ? 3 : 0;
    const int k = s % 4 == 3 || s % 5 == 0 ? 3 : 0;
    q.logits.resize((k + 1) * n_vocab);
    for (float& x : q.logits) x = logit(rng);
    // A confident model: each row's likeliest token stands out, so drafts of it often pass.
    for (int i = 0; i <= k; ++i) q.logits[i * n_vocab + rng() % n_vocab] += 12.0f;
    // The history repeats the first row's two likeliest tokens, so penalties move the law.
    const std::vector<int32_t> top = RefTopIds({q.logits.data(), static_cast<size_t>(n_vocab)}, 2);
    for (int i = 0; i < 12; ++i) q.history.push_back(static_cast<int32_t>(rng() % n_vocab));
    q.history.insert(q.history.end(), {top[0], top[1], top[0]});
    for (int i = 0; i < k; ++i) {
      const std::span<const float> row(q.logits.data() + i * n_vocab, n_vocab);
      std::vector<int32_t> seen = q.history;
      seen.insert(seen.end(), q.drafts.begin(), q.drafts.end());
      const int32_t likeliest = RefSampleLaw(row, p, seen).argmax;
      q.drafts.push_back(rng() % 4 == 0 ? static_cast<int32_t>(rng() % n_vocab) : likeliest);
    }
    step.push_back(std::move(q));
  }
  return step;
}

namespace {

int64_t Vocab(const RefSeq& q) { return static_cast<int64_t>(q.logits.size() / (q.drafts.size() + 1)); }

// Row i's law: shaped as if drafts [0, i) were in the history.
RefLaw RowLaw(const RefSeq& q, size_t i) {
  const int64_t n = Vocab(q);
  std::vector<int32_t> seen = q.history;
  seen.insert(seen.end(), q.drafts.begin(), q.drafts.begin() + i);
  return RefSampleLaw({q.logits.data() + i * n, static_cast<size_t>(n)}, q.params, seen);
}

bool Accept(double u, double p, bool* near_boundary) {
  *near_boundary |= Close(u, p);
  return u < p;
}

}  // namespace

std::vector<int32_t> RefHostEmitted(const RefSeq& q, bool* near_boundary) {
  const size_t k = q.drafts.size();
  std::mt19937_64 rng(sampling::PositionSeed(q.params.seed, q.history.size()));
  std::uniform_real_distribution<double> canonical(0.0, 1.0);
  std::vector<int32_t> out;
  for (size_t i = 0; i <= k; ++i) {
    const RefLaw law = RowLaw(q, i);
    *near_boundary |= law.near_boundary;
    if (q.params.greedy()) {
      if (i < k && law.argmax == q.drafts[i]) {
        out.push_back(q.drafts[i]);
        continue;
      }
      out.push_back(law.argmax);
      return out;
    }
    if (k == 0) {  // Sampler::Sample: one draw, the kept tokens most likely first.
      out.push_back(RefWalkSorted(law, canonical(rng), near_boundary));
      return out;
    }
    // Sampler::Verify (VerifyDrafts): an acceptance draw per draft, then one residual draw
    // in vocabulary order.
    if (i < k && Accept(canonical(rng), law.p[q.drafts[i]], near_boundary)) {
      out.push_back(q.drafts[i]);
      continue;
    }
    out.push_back(RefWalkVocab(law, canonical(rng), i < k ? q.drafts[i] : -1, near_boundary));
    return out;
  }
  return out;
}

std::vector<int32_t> RefDeviceEmitted(const RefSeq& q, bool* near_boundary) {
  const size_t k = q.drafts.size();
  std::vector<int32_t> out;
  for (size_t i = 0; i <= k; ++i) {
    const RefLaw law = RowLaw(q, i);
    *near_boundary |= law.near_boundary;
    const int32_t draft = i < k ? q.drafts[i] : -1;
    if (q.params.greedy()) {
      out.push_back(law.argmax);
      if (draft != law.argmax) return out;
      continue;
    }
    std::mt19937_64 rng(sampling::PositionSeed(q.params.seed, q.history.size() + i));
    const double u_accept = static_cast<double>(rng() >> 40) * 0x1p-24;
    const double u_sample = static_cast<double>(rng() >> 40) * 0x1p-24;
    if (draft >= 0 && Accept(u_accept, law.p[draft], near_boundary)) {
      out.push_back(draft);
      continue;
    }
    out.push_back(RefWalkVocab(law, u_sample, draft, near_boundary));
    return out;
  }
  return out;
}

std::string LogprobErrors(const RefSeq& q, std::span<const sampling::SampledToken> emitted) {
  const int64_t n = Vocab(q);
  std::string errors;
  const auto wrong = [&](size_t i, const std::string& what) {
    errors += "token " + std::to_string(i) + ": " + what + "; ";
  };
  for (size_t i = 0; i < emitted.size(); ++i) {
    const sampling::SampledToken& t = emitted[i];
    if (q.params.n_logprobs == 0) {
      if (t.logprob != 0.0f || !t.top.empty()) wrong(i, "logprobs not asked for, yet reported");
      continue;
    }
    const std::span<const float> raw(q.logits.data() + i * n, static_cast<size_t>(n));
    const std::vector<double> lp = RefLogSoftmax(raw);
    if (std::abs(t.logprob - lp[t.id]) > 1e-5) wrong(i, "logprob " + std::to_string(t.logprob));
    const std::vector<int32_t> top = RefTopIds(raw, q.params.n_logprobs);
    if (t.top.size() != top.size()) {
      wrong(i, "top of " + std::to_string(t.top.size()));
      continue;
    }
    for (size_t k = 0; k < top.size(); ++k) {
      if (t.top[k].first != top[k] || std::abs(t.top[k].second - lp[top[k]]) > 1e-5)
        wrong(i, "top " + std::to_string(k));
    }
  }
  return errors;
}

std::vector<uint8_t> RefRandomMasks(const RefSeq& seq, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t rows = seq.drafts.size() + 1, row_bytes = static_cast<size_t>((n_vocab + 7) / 8);
  std::vector<uint8_t> masks(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* m = masks.data() + r * row_bytes;
    for (size_t b = 0; b < row_bytes; ++b) m[b] = static_cast<uint8_t>(rng());
    const std::span<const float> row(seq.logits.data() + r * n_vocab, static_cast<size_t>(n_vocab));
    const int32_t top = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    if (rng() % 2 == 0) m[top / 8] &= static_cast<uint8_t>(~(1u << (top % 8)));  // Often refuse the argmax.
    if (r < seq.drafts.size()) m[seq.drafts[r] / 8] |= static_cast<uint8_t>(1u << (seq.drafts[r] % 8));
  }
  return masks;
}

RefSeq RefPremasked(const RefSeq& seq, std::span<const uint8_t> masks, int64_t n_vocab) {
  RefSeq out = seq;
  const size_t row_bytes = static_cast<size_t>((n_vocab + 7) / 8);
  for (size_t r = 0; r <= seq.drafts.size(); ++r) {
    for (int64_t t = 0; t < n_vocab; ++t) {
      if (((masks[r * row_bytes + t / 8] >> (t % 8)) & 1) == 0) out.logits[r * n_vocab + t] = -1e30f;
    }
  }
  return out;
}

}  // namespace cascade::testing
