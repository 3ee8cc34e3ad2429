#include "coordinator/serving/block_allocator.h"

#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

BlockAllocator::BlockAllocator(int32_t n_blocks, int32_t block_size, int32_t n_host_slots)
    : block_size_(block_size),
      refs_(n_blocks < 0 ? 0 : n_blocks, 0),
      cache_(n_blocks, block_size, PrefixCache::ChainHash, n_host_slots) {
  CASCADE_CHECK(n_blocks >= 0) << "n_blocks " << n_blocks;
  CASCADE_CHECK(block_size >= 1) << "block_size " << block_size;
  free_.reserve(n_blocks);
  for (int32_t id = n_blocks - 1; id >= 0; --id) free_.push_back(id);
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::Allocate(int32_t n) {
  std::vector<int32_t> blocks;
  absl::Status status = AllocateInto(n, &blocks);
  if (!status.ok()) return status;
  return blocks;
}

absl::Status BlockAllocator::AllocateInto(int32_t n, std::vector<int32_t>* table) {
  CASCADE_CHECK(n >= 0) << "Allocate(" << n << ")";
  if (n > n_free()) {
    return absl::ResourceExhaustedError(
        StrCat("KV cache: ", n, " blocks requested, ", n_free(), " of ", n_total(), " free"));
  }
  table->reserve(table->size() + n);
  for (int32_t i = 0; i < n; ++i) table->push_back(TakeFree());
  return absl::OkStatus();
}

int32_t BlockAllocator::TakeFree() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (cache_.n_parked() > 0) {
    id = cache_.EvictLru();
  } else {
    return -1;
  }
  refs_[id] = 1;
  return id;
}

void BlockAllocator::Free(std::span<const int32_t> blocks) {
  for (int32_t id : blocks) {
    CASCADE_CHECK(id >= 0 && id < n_total()) << "freeing foreign KV block " << id;
    CASCADE_CHECK(refs_[id] > 0) << "double free of KV block " << id;
    if (--refs_[id] > 0) continue;
    if (cache_.registered(id)) {
      cache_.Park(id);
    } else {
      free_.push_back(id);
    }
  }
}

std::optional<PrefixLink> BlockAllocator::Register(PrefixLink parent, std::span<const int32_t> tokens, int32_t block) {
  CASCADE_CHECK(block >= 0 && block < n_total() && refs_[block] > 0) << "registering unheld KV block " << block;
  return cache_.Register(parent, tokens, block);
}

void BlockAllocator::Share(std::span<PrefixLink> chain, std::vector<int32_t>* table) {
  const size_t base = table->size();
  table->resize(base + chain.size(), -1);
  // Device blocks first, and host slots pinned: the allocations that bring the host ones
  // back must evict neither.
  for (size_t i = 0; i < chain.size(); ++i) {
    const PrefixLink& link = chain[i];
    CASCADE_CHECK(cache_.Valid(link) && link.block >= 0) << "sharing unregistered KV block " << link.block;
    if (cache_.on_host(link.block)) {
      cache_.Pin(link);
      continue;
    }
    if (refs_[link.block]++ == 0) cache_.Unpark(link.block);
    (*table)[base + i] = link.block;
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!cache_.on_host(chain[i].block)) continue;
    const int32_t block = TakeFree();
    CASCADE_CHECK(block >= 0) << "no free KV block to bring a host block back into";
    cache_.Onload(chain[i], block);
    (*table)[base + i] = block;
  }
}

int32_t BlockAllocator::BlocksTakenBy(std::span<const PrefixLink> chain) const {
  int32_t n = 0;
  for (const PrefixLink& link : chain) n += cache_.on_host(link.block) || refs_[link.block] == 0 ? 1 : 0;
  return n;
}

void BlockAllocator::ClearPrefixCache() {
  for (int32_t id : cache_.Clear()) free_.push_back(id);
}

int32_t BlockAllocator::BlocksForTokens(int64_t n_tokens) const {
  if (n_tokens <= 0) return 0;
  return static_cast<int32_t>((n_tokens + block_size_ - 1) / block_size_);
}

}  // namespace cascade::coordinator
