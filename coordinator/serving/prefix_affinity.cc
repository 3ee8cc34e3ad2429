#include "coordinator/serving/prefix_affinity.h"

#include <algorithm>

#include "coordinator/serving/prefix_cache.h"

namespace cascade::coordinator {

PrefixAffinity::PrefixAffinity(int n_replicas, int32_t block_size, size_t capacity)
    : block_size_(std::max<int32_t>(1, block_size)), capacity_(capacity), replicas_(n_replicas) {}

std::vector<uint64_t> PrefixAffinity::Chain(std::span<const int32_t> prompt) const {
  std::vector<uint64_t> chain;
  uint64_t parent = 0;
  for (size_t b = 0; (b + 1) * block_size_ <= prompt.size(); ++b) {
    parent = PrefixCache::ChainHash(parent, prompt.subspan(b * block_size_, block_size_));
    chain.push_back(parent);
  }
  return chain;
}

int32_t PrefixAffinity::Matched(int replica, std::span<const int32_t> prompt) const {
  const Replica& r = replicas_[replica];
  int32_t n = 0;
  for (uint64_t h : Chain(prompt)) {
    if (!r.index.contains(h)) break;
    ++n;
  }
  return n;
}

void PrefixAffinity::Record(int replica, std::span<const int32_t> prompt) {
  Replica& r = replicas_[replica];
  for (uint64_t h : Chain(prompt)) {
    if (auto it = r.index.find(h); it != r.index.end()) {
      r.lru.splice(r.lru.begin(), r.lru, it->second);  // Most recent again.
      continue;
    }
    r.lru.push_front(h);
    r.index[h] = r.lru.begin();
  }
  while (r.index.size() > capacity_) {
    r.index.erase(r.lru.back());
    r.lru.pop_back();
  }
}

void PrefixAffinity::Forget(int replica) {
  replicas_[replica].lru.clear();
  replicas_[replica].index.clear();
}

}  // namespace cascade::coordinator
