// A fixed pool of KV cache blocks (pages of `block_size` token positions) handed out by
// id. The coordinator owns KV allocation (STYLE.md, "The coordinator↔worker contract"):
// block ids travel in steps and workers only index their KV tensors with them, so one
// id names the same page on every worker.
//
// Blocks are reference counted so that sequences can share a cached prefix (automatic
// prefix caching, coordinator/serving/prefix_cache.h). A block whose count drops to 0 goes back
// to the pool: to the plain free list, or, when it is registered as a reusable prefix,
// to the cached-free list, where it stays matchable until an allocation evicts it (least
// recently used first). Both count as free; allocation takes plain free blocks first.
// With a host tier, the evicted block's KV moves to host memory instead of being dropped,
// and a hit there takes a free block to come back into (PrefixCache has the tiers).
//
// Thread safety: single owner. The scheduler's loop thread owns the allocator; API
// threads never touch it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/serving/prefix_cache.h"

namespace cascade::coordinator {

class BlockAllocator {
 public:
  // A pool of `n_blocks` blocks with ids [0, n_blocks), each `block_size` tokens, over
  // a host tier of `n_host_slots` blocks. REQUIRES n_blocks >= 0, block_size >= 1,
  // n_host_slots >= 0 (programmer errors abort).
  BlockAllocator(int32_t n_blocks, int32_t block_size, int32_t n_host_slots = 0);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;
  BlockAllocator(BlockAllocator&&) = default;
  BlockAllocator& operator=(BlockAllocator&&) = default;  // Scheduler::ResetKvBlocks.

  // Takes `n` free blocks (n >= 0), each with one reference, and returns their ids. Plain
  // free blocks come first: lower ids first from a fresh pool, then most-recently-freed
  // first; then cached-free ones, least recently used first (they are unregistered).
  // Errors: ResourceExhausted when fewer than `n` are free; nothing is allocated then.
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t n);

  // As `Allocate`, appending the ids to `table` (left unchanged on error).
  absl::Status AllocateInto(int32_t n, std::vector<int32_t>* table);

  // Drops one reference to each of `blocks`; a block left with none returns to the pool
  // (cached-free when registered; the blocks of one call are parked in order, so free a
  // table back to front to have its tail evicted first). Freeing a block that holds no
  // reference (a double free or a foreign id) is a programmer error and aborts.
  void Free(std::span<const int32_t> blocks);

  // Prefix caching (PrefixCache has the contracts). `Match` takes no reference: pass
  // what it found to `Share` at once, before any allocation can evict it.
  std::vector<PrefixLink> Match(std::span<const int32_t> tokens, int32_t max_blocks) const {
    return cache_.Match(tokens, max_blocks);
  }
  // Registers the held `block` as holding `tokens` after the chain ending at `parent`.
  std::optional<PrefixLink> Register(PrefixLink parent, std::span<const int32_t> tokens, int32_t block);
  // Takes one more reference to each of `chain`'s blocks (registered; cached-free ones
  // are revived and leave the free pool; host ones come back into a free block, and their
  // links are pointed there) and appends them to `table`. REQUIRES
  // BlocksTakenBy(chain) <= n_free().
  void Share(std::span<PrefixLink> chain, std::vector<int32_t>* table);
  // The free blocks `Share(chain)` takes: the cached-free ones it revives and the host ones.
  int32_t BlocksTakenBy(std::span<const PrefixLink> chain) const;
  // Whether `link` names a host slot (a hit in the host tier).
  bool on_host(const PrefixLink& link) const { return cache_.on_host(link.block); }
  // The copies between the tiers recorded since the last call, in the order the workers
  // must run them (before the compute of the next step they receive).
  std::vector<KvBlockMove> TakeMoves() { return cache_.TakeMoves(); }
  // Unregisters every block (their KV is gone, e.g. a worker restarted); cached-free
  // blocks become plain free ones.
  void ClearPrefixCache();

  // Blocks needed to hold `n_tokens` positions (ceil(n_tokens / block_size)).
  int32_t BlocksForTokens(int64_t n_tokens) const;

  int32_t ref_count(int32_t block) const { return refs_[block]; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()) + cache_.n_parked(); }
  int32_t n_cached_free() const { return cache_.n_parked(); }
  // Blocks registered as reusable prefixes, held or cached-free, in both tiers.
  int32_t n_registered() const { return cache_.n_registered(); }
  const PrefixCache& prefix_cache() const { return cache_; }  // The host tier's counters.
  int32_t n_total() const { return static_cast<int32_t>(refs_.size()); }
  int32_t n_used() const { return n_total() - n_free(); }
  int32_t block_size() const { return block_size_; }

 private:
  // One free block with one reference (plain free first, else the LRU's), or -1.
  int32_t TakeFree();

  int32_t block_size_;
  std::vector<int32_t> free_;  // Stack of plain free ids; the back is handed out next.
  std::vector<int32_t> refs_;  // [n_blocks]: references to each id (0: free).
  PrefixCache cache_;          // Registered blocks and the cached-free LRU.
};

}  // namespace cascade::coordinator
