// Load balance of counts over buckets (tokens per MoE expert): the busiest bucket over the
// mean, 1 when perfectly balanced, n_buckets when one bucket takes everything; and the even
// split of items over parts that tensor and expert parallelism shard by.
// Thread-safe (pure functions).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

namespace cascade {

// Part `i` of `n` items split among `parts` as evenly as possible, the first n % parts
// parts one larger: [begin, end).
inline std::pair<int64_t, int64_t> EvenSplit(int64_t n, int64_t parts, int64_t i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// The part of EvenSplit(n, parts, ·) that holds item `item` (in [0, n)).
inline int64_t EvenSplitPart(int64_t n, int64_t parts, int64_t item) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t big = extra * (base + 1);  // Items in the larger parts, which come first.
  return item < big ? item / (base + 1) : extra + (item - big) / base;
}

// max / mean of `counts`; 0 when they sum to 0.
inline double MaxMeanRatio(std::span<const int64_t> counts) {
  int64_t sum = 0, max = 0;
  for (int64_t c : counts) sum += c, max = std::max(max, c);
  return sum == 0 ? 0.0 : static_cast<double>(max) * static_cast<double>(counts.size()) / static_cast<double>(sum);
}

}  // namespace cascade
