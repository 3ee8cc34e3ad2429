#include "coordinator/block_allocator.h"

#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

BlockAllocator::BlockAllocator(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), allocated_(n_blocks < 0 ? 0 : n_blocks, false) {
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
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = free_.back();
    free_.pop_back();
    allocated_[id] = true;
    table->push_back(id);
  }
  return absl::OkStatus();
}

void BlockAllocator::Free(std::span<const int32_t> blocks) {
  for (int32_t id : blocks) {
    CASCADE_CHECK(id >= 0 && id < n_total()) << "freeing foreign KV block " << id;
    CASCADE_CHECK(allocated_[id]) << "double free of KV block " << id;
    allocated_[id] = false;
    free_.push_back(id);
  }
}

int32_t BlockAllocator::BlocksForTokens(int64_t n_tokens) const {
  if (n_tokens <= 0) return 0;
  return static_cast<int32_t>((n_tokens + block_size_ - 1) / block_size_);
}

}  // namespace cascade::coordinator
