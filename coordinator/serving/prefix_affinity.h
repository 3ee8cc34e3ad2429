// Cache-aware routing for data parallelism (SGLang's router does the same with a radix
// tree per worker): the router remembers, per replica, the chain hashes of the full
// prompt blocks it sent there (PrefixCache::ChainHash, so a block stands for its whole
// prefix), and tells how many leading blocks of a new prompt a replica probably holds in
// its prefix cache. Probably: the replica's cache may have evicted them, and its own
// index decides what really hits; a wrong guess costs a miss, never a wrong result.
//
// Bounded: each replica remembers at most `capacity` blocks, least recently sent first
// out. Not thread-safe (Replicas calls it under its routing lock).
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace cascade::coordinator {

class PrefixAffinity {
 public:
  PrefixAffinity(int n_replicas, int32_t block_size, size_t capacity);

  // Leading full blocks of `prompt` last sent to `replica` (and not forgotten).
  int32_t Matched(int replica, std::span<const int32_t> prompt) const;
  // `prompt` goes to `replica`: its full blocks become the most recent there.
  void Record(int replica, std::span<const int32_t> prompt);
  // The replica's cache is gone (its workers restarted): forget what was sent there.
  void Forget(int replica);
  size_t size(int replica) const { return replicas_[replica].index.size(); }
  int32_t block_size() const { return block_size_; }

 private:
  struct Replica {
    std::list<uint64_t> lru;  // Most recent first.
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> index;
  };
  // The chain hashes of the prompt's full blocks, in order.
  std::vector<uint64_t> Chain(std::span<const int32_t> prompt) const;

  const int32_t block_size_;
  const size_t capacity_;
  std::vector<Replica> replicas_;
};

}  // namespace cascade::coordinator
