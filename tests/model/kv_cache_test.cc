// Tests for KvCache's block copies (model/kv_cache.h), the host tier's worker side: a
// block saved holds every layer's K then V of that block, in layer order, and loading it
// into another block makes that block equal, touching no other. Run on host memory and
// on the guarded backend (whose memory the host cannot touch: the copies must go through
// CopyIn / CopyOut), for each cache dtype.
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "model/kv_cache.h"
#include "tests/guarded_backend.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

constexpr int64_t kLayers = 3, kBlocks = 4, kBlockSize = 2, kHeads = 2, kHeadDim = 32;

KvCacheOptions Options(DType dtype) {
  return {.n_layers = kLayers,
          .n_blocks = kBlocks,
          .block_size = kBlockSize,
          .n_kv_heads = kHeads,
          .head_dim = kHeadDim,
          .dtype = dtype,
          .k_scales = {},
          .v_scales = {}};
}

// The byte at `offset` of layer l's K (kv 0) or V (kv 1) tensor: distinct per layer,
// tensor and position, so a run copied from the wrong place shows.
uint8_t Pattern(int64_t l, int kv, int64_t offset) { return static_cast<uint8_t>(l * 61 + kv * 29 + offset * 7 + 1); }

// Each layer's K and V tensors as the host sees them (through CopyOut on a backend).
std::vector<std::vector<uint8_t>> Contents(KvCache& c, kernels::Backend* backend) {
  std::vector<std::vector<uint8_t>> out;
  for (int64_t l = 0; l < kLayers; ++l) {
    for (const TensorView* t : {&c.layer(l).k, &c.layer(l).v}) {
      std::vector<uint8_t> bytes(static_cast<size_t>(t->NumBytes()));
      if (backend == nullptr) {
        std::memcpy(bytes.data(), t->data, bytes.size());
      } else {
        EXPECT_TRUE(backend->CopyOut(bytes.data(), t->data, bytes.size()).ok());
      }
      out.push_back(std::move(bytes));
    }
  }
  return out;
}

void Fill(KvCache& c, kernels::Backend* backend) {
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& t = kv == 0 ? c.layer(l).k : c.layer(l).v;
      std::vector<uint8_t> bytes(static_cast<size_t>(t.NumBytes()));
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = Pattern(l, kv, static_cast<int64_t>(i));
      if (backend == nullptr) {
        std::memcpy(t.data, bytes.data(), bytes.size());
      } else {
        EXPECT_TRUE(backend->CopyIn(t.data, bytes.data(), bytes.size()).ok());
      }
    }
  }
}

void CheckSaveAndLoad(DType dtype, kernels::Backend* backend) {
  SCOPED_TRACE(DTypeName(dtype));
  absl::StatusOr<KvCache> cache = KvCache::Create(Options(dtype), backend);
  ASSERT_OK(cache);
  KvCache& c = *cache;
  Fill(c, backend);
  // A block's run in one tensor: its block_size rows of n_kv_heads * head_dim elements.
  const int64_t run = kBlockSize * RowBytes(dtype, kHeads * kHeadDim);
  const int64_t block_bytes = KvCache::BlockBytes(c.options());
  ASSERT_EQ(block_bytes, 2 * kLayers * run);
  std::vector<uint8_t> saved(static_cast<size_t>(block_bytes));
  ASSERT_OK(c.SaveBlock(backend, 2, saved.data()));
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t i = 0; i < run; ++i) {
        ASSERT_EQ(saved[static_cast<size_t>((2 * l + kv) * run + i)], Pattern(l, kv, 2 * run + i))
            << "layer " << l << (kv == 0 ? " K" : " V") << " byte " << i;
      }
    }
  }
  const std::vector<std::vector<uint8_t>> before = Contents(c, backend);
  ASSERT_OK(c.LoadBlock(backend, 0, saved.data()));
  const std::vector<std::vector<uint8_t>> after = Contents(c, backend);
  for (size_t t = 0; t < after.size(); ++t) {
    for (int64_t b = 0; b < kBlocks; ++b) {
      const auto* now = after[t].data() + b * run;
      const auto* expected = b == 0 ? before[t].data() + 2 * run : before[t].data() + b * run;
      EXPECT_EQ(std::memcmp(now, expected, static_cast<size_t>(run)), 0) << "tensor " << t << " block " << b;
    }
  }
}

TEST(KvCacheTest, BlocksSaveAndLoadOnHostMemory) {
  for (DType d : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kF8_E4M3}) CheckSaveAndLoad(d, nullptr);
}

TEST(KvCacheTest, BlocksSaveAndLoadThroughTheBackendsCopies) {
  testing::GuardedBackend guarded;
  for (DType d : {DType::kF16, DType::kQ8_0}) CheckSaveAndLoad(d, &guarded);
  EXPECT_GT(guarded.bytes_out(), 0u);
}

}  // namespace
}  // namespace cascade::model
