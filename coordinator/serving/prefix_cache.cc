#include "coordinator/serving/prefix_cache.h"

#include <algorithm>

#include "core/logging.h"

namespace cascade::coordinator {

uint64_t PrefixCache::ChainHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull ^ parent_hash;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  // splitmix64's finaliser spreads FNV's weak high bits.
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

PrefixCache::PrefixCache(int32_t n_blocks, int32_t block_size, HashFn hash, int32_t n_host_slots)
    : block_size_(block_size), n_blocks_(std::max(n_blocks, 0)), hash_(hash) {
  CASCADE_CHECK(n_blocks >= 0) << "n_blocks " << n_blocks;
  CASCADE_CHECK(block_size >= 1) << "block_size " << block_size;
  CASCADE_CHECK(n_host_slots >= 0) << "n_host_slots " << n_host_slots;
  entries_.resize(n_blocks_ + std::max(n_host_slots, 0));
  for (int32_t id = static_cast<int32_t>(entries_.size()) - 1; id >= n_blocks_; --id) host_free_.push_back(id);
}

bool PrefixCache::Valid(PrefixLink link) const {
  if (link.block < 0) return true;
  const Entry& e = entries_[link.block];
  return e.registered && e.generation == link.generation;
}

uint64_t PrefixCache::HashOf(PrefixLink link) const { return link.block < 0 ? 0 : entries_[link.block].hash; }

std::vector<PrefixLink> PrefixCache::Match(std::span<const int32_t> tokens, int32_t max_blocks) const {
  std::vector<PrefixLink> chain;
  const int64_t n = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  PrefixLink parent;
  uint64_t h = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::span<const int32_t> block = tokens.subspan(i * block_size_, block_size_);
    h = hash_(h, block);
    auto it = index_.find(h);
    if (it == index_.end()) break;
    const Entry& e = entries_[it->second];
    // The hash only names a candidate: its content and its parent decide.
    if (e.parent != parent.generation || !std::equal(block.begin(), block.end(), e.tokens.begin(), e.tokens.end()))
      break;
    parent = {it->second, e.generation};
    chain.push_back(parent);
  }
  return chain;
}

std::optional<PrefixLink> PrefixCache::Register(PrefixLink parent, std::span<const int32_t> tokens, int32_t block) {
  CASCADE_CHECK(block >= 0 && block < n_blocks_) << "registering foreign block " << block;
  CASCADE_CHECK(!entries_[block].registered) << "block " << block << " is already registered";
  CASCADE_CHECK(static_cast<int32_t>(tokens.size()) == block_size_) << "registering a partial block";
  if (!Valid(parent)) return std::nullopt;
  const uint64_t h = hash_(HashOf(parent), tokens);
  if (auto it = index_.find(h); it != index_.end()) {
    const Entry& e = entries_[it->second];
    if (e.parent == parent.generation && std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end())) {
      return PrefixLink{it->second, e.generation};  // The same content: keep the first.
    }
    return std::nullopt;  // A collision: the slot is another chain's.
  }
  Entry& e = entries_[block];
  e.registered = true;
  e.hash = h;
  e.generation = next_generation_++;
  e.parent = parent.generation;
  e.tokens.assign(tokens.begin(), tokens.end());
  index_.emplace(h, block);
  return PrefixLink{block, e.generation};
}

void PrefixCache::Park(int32_t block) {
  Entry& e = entries_[block];
  CASCADE_CHECK(!on_host(block) && e.registered && !e.parked) << "parking block " << block;
  e.parked = true;
  e.lru = lru_.insert(lru_.end(), block);
}

void PrefixCache::Unpark(int32_t block) {
  Entry& e = entries_[block];
  CASCADE_CHECK(!on_host(block) && e.registered && e.parked) << "unparking block " << block;
  lru_.erase(e.lru);
  e.parked = false;
}

int32_t PrefixCache::EvictLru() {
  CASCADE_CHECK(!lru_.empty()) << "no cached free block to evict";
  const int32_t block = lru_.front();
  if (host_free_.empty() && !host_lru_.empty()) Unregister(host_lru_.front());  // Its oldest leaves the host tier.
  if (host_free_.empty()) {  // No host tier (or every slot pinned): the KV is dropped.
    Unregister(block);
    return block;
  }
  const int32_t slot = host_free_.back();
  host_free_.pop_back();
  moves_.push_back({.to_host = true, .block = block, .slot = slot - n_blocks_});
  ++n_offloaded_;
  Relocate(block, slot);
  Entry& e = entries_[slot];
  e.parked = true;
  e.lru = host_lru_.insert(host_lru_.end(), slot);
  return block;
}

void PrefixCache::Pin(PrefixLink link) {
  CASCADE_CHECK(on_host(link.block) && Valid(link) && entries_[link.block].parked) << "pinning slot " << link.block;
  Entry& e = entries_[link.block];
  host_lru_.erase(e.lru);
  e.parked = false;
}

void PrefixCache::Onload(PrefixLink& link, int32_t block) {
  CASCADE_CHECK(on_host(link.block) && Valid(link) && !entries_[link.block].parked) << "onloading " << link.block;
  CASCADE_CHECK(block >= 0 && block < n_blocks_ && !entries_[block].registered) << "onloading into " << block;
  moves_.push_back({.to_host = false, .block = block, .slot = link.block - n_blocks_});
  ++n_onloaded_;
  Relocate(link.block, block);
  host_free_.push_back(link.block);
  link.block = block;
}

void PrefixCache::Relocate(int32_t from, int32_t to) {
  Entry& e = entries_[from];
  if (e.parked) {
    LruOf(from).erase(e.lru);
    e.parked = false;
  }
  entries_[to] = std::move(e);
  e = Entry{};
  index_[entries_[to].hash] = to;
}

void PrefixCache::Unregister(int32_t id) {
  Entry& e = entries_[id];
  if (e.parked) {
    LruOf(id).erase(e.lru);
    e.parked = false;
  }
  index_.erase(e.hash);
  e.registered = false;
  e.tokens.clear();
  if (on_host(id)) host_free_.push_back(id);
}

std::vector<int32_t> PrefixCache::Clear() {
  std::vector<int32_t> parked(lru_.begin(), lru_.end());
  for (size_t b = 0; b < entries_.size(); ++b) {
    if (entries_[b].registered) Unregister(static_cast<int32_t>(b));
  }
  moves_.clear();
  return parked;
}

}  // namespace cascade::coordinator
