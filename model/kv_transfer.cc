#include "model/kv_transfer.h"

#include <cstring>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {
namespace {

// Bytes of one position's heads [0, n) in a cache row (q8_0's blocks of 32 sit inside a
// head, since head_dim is a multiple of 32 there).
int64_t HeadBytes(const KvCacheOptions& o, int64_t n) { return RowBytes(o.dtype, n * o.head_dim); }

absl::Status Check(const KvCacheOptions& o, KvPlacement at, const KvSlice& s, std::span<const int32_t> blocks) {
  if (s.first_layer < at.first_layer || s.last_layer > at.first_layer + o.n_layers || s.first_layer >= s.last_layer ||
      s.head_begin < at.head_begin || s.head_end > at.head_begin + o.n_kv_heads || s.head_begin >= s.head_end) {
    return absl::InvalidArgumentError(StrCat("KV slice layers [", s.first_layer, ", ", s.last_layer, ") heads [",
                                             s.head_begin, ", ", s.head_end, ") is not inside the cache's layers [",
                                             at.first_layer, ", ", at.first_layer + o.n_layers, ") heads [",
                                             at.head_begin, ", ", at.head_begin + o.n_kv_heads, ")"));
  }
  for (int32_t b : blocks) {
    if (b < 0 || b >= o.n_blocks) {
      return absl::InvalidArgumentError(StrCat("KV block ", b, " is outside [0, ", o.n_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

// Calls fn(offset in a SaveBlock image, offset in the packed bytes of this block, bytes)
// for each contiguous piece of the slice in one block, in packed order.
template <typename Fn>
void ForEachRun(const KvCacheOptions& o, KvPlacement at, const KvSlice& s, Fn&& fn) {
  const int64_t row = HeadBytes(o, o.n_kv_heads);  // One position of one layer's K or V.
  const int64_t run = o.block_size * row;          // One block of one layer's K or V.
  const int64_t skip = HeadBytes(o, s.head_begin - at.head_begin);
  const int64_t take = HeadBytes(o, s.head_end - s.head_begin);
  int64_t packed = 0;
  for (int64_t l = s.first_layer; l < s.last_layer; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t base = (2 * (l - at.first_layer) + kv) * run;
      for (int64_t p = 0; p < o.block_size; ++p) {
        fn(base + p * row + skip, packed, take);
        packed += take;
      }
    }
  }
}

}  // namespace

int64_t KvSliceBytes(const KvCacheOptions& o, const KvSlice& s, int64_t n_blocks) {
  return n_blocks * (s.last_layer - s.first_layer) * 2 * o.block_size * HeadBytes(o, s.head_end - s.head_begin);
}

absl::Status PackKvSlice(const KvCache& cache, kernels::Backend* backend, KvPlacement at, const KvSlice& slice,
                         std::span<const int32_t> blocks, std::vector<uint8_t>* out) {
  const KvCacheOptions& o = cache.options();
  CASCADE_RETURN_IF_ERROR(Check(o, at, slice, blocks));
  const int64_t per_block = KvSliceBytes(o, slice, 1);
  out->resize(static_cast<size_t>(per_block * static_cast<int64_t>(blocks.size())));
  std::vector<uint8_t> image(static_cast<size_t>(KvCache::BlockBytes(o)));
  for (size_t i = 0; i < blocks.size(); ++i) {
    CASCADE_RETURN_IF_ERROR(cache.SaveBlock(backend, blocks[i], image.data()));
    uint8_t* dst = out->data() + static_cast<int64_t>(i) * per_block;
    ForEachRun(o, at, slice, [&](int64_t from, int64_t to, int64_t n) {
      std::memcpy(dst + to, image.data() + from, static_cast<size_t>(n));
    });
  }
  return absl::OkStatus();
}

absl::Status UnpackKvSlice(KvCache& cache, kernels::Backend* backend, KvPlacement at, const KvSlice& slice,
                           std::span<const int32_t> blocks, std::span<const uint8_t> in) {
  const KvCacheOptions& o = cache.options();
  CASCADE_RETURN_IF_ERROR(Check(o, at, slice, blocks));
  const int64_t per_block = KvSliceBytes(o, slice, 1);
  if (static_cast<int64_t>(in.size()) != per_block * static_cast<int64_t>(blocks.size())) {
    return absl::InvalidArgumentError(
        StrCat("KV slice: ", in.size(), " bytes for ", blocks.size(), " blocks of ", per_block, " bytes"));
  }
  std::vector<uint8_t> image(static_cast<size_t>(KvCache::BlockBytes(o)));
  for (size_t i = 0; i < blocks.size(); ++i) {
    // Read, patch, write back: the block's other heads may come from another sender.
    CASCADE_RETURN_IF_ERROR(cache.SaveBlock(backend, blocks[i], image.data()));
    const uint8_t* src = in.data() + static_cast<int64_t>(i) * per_block;
    ForEachRun(o, at, slice, [&](int64_t to, int64_t from, int64_t n) {
      std::memcpy(image.data() + to, src + from, static_cast<size_t>(n));
    });
    CASCADE_RETURN_IF_ERROR(cache.LoadBlock(backend, blocks[i], image.data()));
  }
  return absl::OkStatus();
}

}  // namespace cascade::model
