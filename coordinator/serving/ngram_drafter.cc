#include "coordinator/serving/ngram_drafter.h"

#include <algorithm>

namespace cascade::coordinator {

std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> h, const NgramOptions& o) {
  const int64_t len = static_cast<int64_t>(h.size());
  for (int n = std::min<int64_t>(o.max_n, len - 1); n >= o.min_n; --n) {
    const auto suffix = h.subspan(len - n, n);
    // The most recent earlier occurrence: its end must leave at least one token after it.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), h.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t to = std::min<int64_t>(len, from + o.n_draft);
      return std::vector<int32_t>(h.begin() + from, h.begin() + to);
    }
  }
  return {};
}

}  // namespace cascade::coordinator
