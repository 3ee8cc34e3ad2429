// A fixed pool of KV cache blocks (pages of `block_size` token positions) handed out by
// id. The coordinator owns KV allocation (STYLE.md, "The coordinator↔worker contract"):
// block ids travel in steps and workers only index their KV tensors with them, so one
// id names the same page on every worker.
//
// Thread safety: single owner. The scheduler's loop thread owns the allocator; API
// threads never touch it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::coordinator {

class BlockAllocator {
 public:
  // A pool of `n_blocks` blocks with ids [0, n_blocks), each `block_size` tokens.
  // REQUIRES n_blocks >= 0, block_size >= 1 (programmer errors abort).
  BlockAllocator(int32_t n_blocks, int32_t block_size);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;
  BlockAllocator(BlockAllocator&&) = default;
  BlockAllocator& operator=(BlockAllocator&&) = default;  // Scheduler::ResetKvBlocks.

  // Takes `n` free blocks (n >= 0) and returns their ids. Lower ids are handed out first
  // from a fresh pool; freed ids are reused most-recently-freed first.
  // Errors: ResourceExhausted when fewer than `n` are free; nothing is allocated then.
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t n);

  // As `Allocate`, appending the ids to `table` (left unchanged on error).
  absl::Status AllocateInto(int32_t n, std::vector<int32_t>* table);

  // Returns `blocks` to the pool. Freeing an id that is not allocated (a double free or a
  // foreign id) is a programmer error and aborts.
  void Free(std::span<const int32_t> blocks);

  // Blocks needed to hold `n_tokens` positions (ceil(n_tokens / block_size)).
  int32_t BlocksForTokens(int64_t n_tokens) const;

  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_total() const { return static_cast<int32_t>(allocated_.size()); }
  int32_t n_used() const { return n_total() - n_free(); }
  int32_t block_size() const { return block_size_; }

 private:
  int32_t block_size_;
  std::vector<int32_t> free_;    // Stack of free ids; the back is handed out next.
  std::vector<bool> allocated_;  // [n_blocks]: whether each id is out.
};

}  // namespace cascade::coordinator
