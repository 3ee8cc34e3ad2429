// Load balance of counts over buckets (tokens per MoE expert): the busiest bucket over the
// mean, 1 when perfectly balanced, n_buckets when one bucket takes everything.
// Thread-safe (a pure function).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace cascade {

// max / mean of `counts`; 0 when they sum to 0.
inline double MaxMeanRatio(std::span<const int64_t> counts) {
  int64_t sum = 0, max = 0;
  for (int64_t c : counts) sum += c, max = std::max(max, c);
  return sum == 0 ? 0.0 : static_cast<double>(max) * static_cast<double>(counts.size()) / static_cast<double>(sum);
}

}  // namespace cascade
