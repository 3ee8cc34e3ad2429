// The host tier's block copies (KvCache::SaveBlock / LoadBlock) on a GPU against the same
// copies on host memory: the same cache contents give the same saved bytes, and loading
// them into another block leaves the two caches equal byte for byte. Skips, with the
// reason, without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_device.h"
#include "model/kv_cache.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

TEST(KvBlockCopyGpuTest, SavedAndLoadedBlocksMatchTheHostCache) {
  const kernels::CudaAvailability a = kernels::QueryCudaDevices();
  if (a.device_count == 0) GTEST_SKIP() << "no GPU: " << a.reason;
  absl::StatusOr<std::unique_ptr<kernels::CudaBackend>> gpu = kernels::CudaBackend::Create({});
  ASSERT_OK(gpu);
  for (DType dtype : {DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(DTypeName(dtype));
    const KvCacheOptions o{.n_layers = 4,
                           .n_blocks = 8,
                           .block_size = 16,
                           .n_kv_heads = 2,
                           .head_dim = 64,
                           .dtype = dtype,
                           .k_scales = {},
                           .v_scales = {}};
    absl::StatusOr<KvCache> host = KvCache::Create(o);
    absl::StatusOr<KvCache> dev = KvCache::Create(o, gpu->get());
    ASSERT_OK(host);
    ASSERT_OK(dev);
    // The same bytes in both: each tensor filled from a pattern.
    for (int64_t l = 0; l < o.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const TensorView& h = kv == 0 ? host->layer(l).k : host->layer(l).v;
        const TensorView& d = kv == 0 ? dev->layer(l).k : dev->layer(l).v;
        std::vector<uint8_t> bytes(static_cast<size_t>(h.NumBytes()));
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(l * 31 + kv * 17 + i * 13);
        std::memcpy(h.data, bytes.data(), bytes.size());
        ASSERT_OK((*gpu)->CopyIn(d.data, bytes.data(), bytes.size()));
      }
    }
    const size_t block_bytes = static_cast<size_t>(KvCache::BlockBytes(o));
    std::vector<uint8_t> from_host(block_bytes), from_dev(block_bytes);
    ASSERT_OK(host->SaveBlock(nullptr, 5, from_host.data()));
    ASSERT_OK(dev->SaveBlock(gpu->get(), 5, from_dev.data()));
    EXPECT_EQ(from_dev, from_host);
    ASSERT_OK(host->LoadBlock(nullptr, 1, from_host.data()));
    ASSERT_OK(dev->LoadBlock(gpu->get(), 1, from_dev.data()));
    for (int64_t l = 0; l < o.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const TensorView& h = kv == 0 ? host->layer(l).k : host->layer(l).v;
        const TensorView& d = kv == 0 ? dev->layer(l).k : dev->layer(l).v;
        std::vector<uint8_t> back(static_cast<size_t>(d.NumBytes()));
        ASSERT_OK((*gpu)->CopyOut(back.data(), d.data, back.size()));
        EXPECT_EQ(std::memcmp(back.data(), h.data, back.size()), 0) << "layer " << l << (kv == 0 ? " K" : " V");
      }
    }
  }
}

}  // namespace
}  // namespace cascade::model
