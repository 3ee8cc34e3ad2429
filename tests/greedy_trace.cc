#include "tests/greedy_trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "core/status.h"
#include "model/local_engine.h"

namespace cascade::testing {

std::vector<int32_t> Prompt(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % n_vocab);
  return ids;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double RelL2(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(ref[i]) - got[i]) * (double(ref[i]) - got[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

absl::StatusOr<Trace> Generate(model::Transformer& t, const std::vector<int32_t>& prompt, int n_decode) {
  const int64_t V = t.config().n_vocab;
  CASCADE_ASSIGN_OR_RETURN(model::KvCache cache,
                           model::KvCache::Create(t.CacheOptions(4, 16, DType::kF32), t.backend()));
  const std::vector<int32_t> table = {2, 0, 3, 1};  // Non-contiguous blocks; 64 positions.
  Trace trace;
  std::vector<int32_t> tokens = prompt;
  int64_t past = 0;
  for (int step = 0; step <= n_decode; ++step) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(past));
    const int64_t last = n - 1;
    const kernels::AttentionSeq seq{0, n, past, table};
    std::vector<float> logits(V, NAN);
    CASCADE_RETURN_IF_ERROR(
        t.Forward({tokens, pos, {&seq, 1}, {&last, 1}}, cache, TensorView(logits.data(), DType::kF32, {1, V})));
    past += n;
    trace.ids.push_back(Argmax(logits));
    trace.logits.push_back(std::move(logits));
    tokens = {trace.ids.back()};
  }
  return trace;
}

std::vector<int32_t> LocalGreedy(const std::string& path, const std::vector<int32_t>& prompt, int n) {
  model::LocalEngineOptions options;
  options.n_threads = 2;
  options.kv_dtype = DType::kF32;
  auto engine = model::LocalEngine::Create(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  model::GenerateRequest request;
  request.prompt_ids = prompt;
  request.max_tokens = n;
  request.sampling.temperature = 0;
  request.stops.ignore_eos = true;
  auto result = (*engine)->Generate(request);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->token_ids : std::vector<int32_t>{};
}

}  // namespace cascade::testing
