// Tests for the KV slices of disaggregated serving (model/kv_transfer.h): a sequence's KV
// written by senders of one pipeline x tensor-parallel split, moved slice by slice into
// receivers of another split (other layers per stage, other KV heads per rank, other
// block ids), must give every receiver exactly the values a cache of its own shape holds
// at those positions: checked element by element against the values the senders were
// filled from, in f32 (and bytewise per head in q8_0), with other blocks untouched.
#include <algorithm>
#include <cstring>
#include <vector>

#include "model/kv_cache.h"
#include "model/kv_transfer.h"
#include "tests/guarded_backend.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

constexpr int64_t kLayers = 4, kHeads = 4, kHeadDim = 32, kBlockSize = 4, kPoolBlocks = 8;

// A worker's part: layers [l0, l1), KV heads [h0, h1), and the blocks the sequence has there.
struct Shard {
  int64_t l0, l1, h0, h1;
  std::vector<int32_t> blocks;
  KvSlice slice() const { return {l0, l1, h0, h1}; }
};

// The sequence's "true" K (kv 0) or V (kv 1) element at global layer l, position p,
// global head h, dimension d.
float Truth(int kv, int64_t l, int64_t p, int64_t h, int64_t d) {
  return static_cast<float>(kv * 100000 + l * 10000 + p * 100 + h * 10) + 0.001f * static_cast<float>(d);
}

KvCacheOptions Options(const Shard& s, DType dtype = DType::kF32) {
  return {.n_layers = s.l1 - s.l0,
          .n_blocks = kPoolBlocks,
          .block_size = kBlockSize,
          .n_kv_heads = s.h1 - s.h0,
          .head_dim = kHeadDim,
          .dtype = dtype,
          .k_scales = {},
          .v_scales = {}};
}

float* At(KvCache& c, const Shard& s, int kv, int64_t l, int64_t p, int64_t h) {
  const TensorView& t = kv == 0 ? c.layer(l - s.l0).k : c.layer(l - s.l0).v;
  const int64_t block = s.blocks[p / kBlockSize];
  return t.As<float>() + ((block * kBlockSize + p % kBlockSize) * (s.h1 - s.h0) + (h - s.h0)) * kHeadDim;
}

// Moves `n_positions` of the sequence from `senders` (filled from Truth) into `receivers`
// (filled with a marker) by the slices where their layers and heads meet, then checks
// every receiver against Truth and its other blocks against the marker.
void Move(const std::vector<Shard>& senders, const std::vector<Shard>& receivers, int64_t n_positions) {
  std::vector<KvCache> src, dst;
  for (const Shard& s : senders) {
    src.push_back(*KvCache::Create(Options(s)));
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t l = s.l0; l < s.l1; ++l) {
        for (int64_t p = 0; p < n_positions; ++p) {
          for (int64_t h = s.h0; h < s.h1; ++h) {
            float* e = At(src.back(), s, kv, l, p, h);
            for (int64_t d = 0; d < kHeadDim; ++d) e[d] = Truth(kv, l, p, h, d);
          }
        }
      }
    }
  }
  for (const Shard& r : receivers) {
    dst.push_back(*KvCache::Create(Options(r)));
    for (int64_t l = 0; l < r.l1 - r.l0; ++l) {
      for (const TensorView* t : {&dst.back().layer(l).k, &dst.back().layer(l).v}) {
        std::fill(t->As<float>(), t->As<float>() + t->NumElements(), -7.0f);
      }
    }
  }
  int64_t moved = 0;
  for (size_t i = 0; i < senders.size(); ++i) {
    for (size_t j = 0; j < receivers.size(); ++j) {
      const Shard &s = senders[i], &r = receivers[j];
      const KvSlice slice{std::max(s.l0, r.l0), std::min(s.l1, r.l1), std::max(s.h0, r.h0), std::min(s.h1, r.h1)};
      if (slice.first_layer >= slice.last_layer || slice.head_begin >= slice.head_end) continue;
      std::vector<uint8_t> bytes;
      ASSERT_OK(PackKvSlice(src[i], nullptr, {s.l0, s.h0}, slice, s.blocks, &bytes));
      ASSERT_EQ(static_cast<int64_t>(bytes.size()),
                KvSliceBytes(src[i].options(), slice, static_cast<int64_t>(s.blocks.size())));
      ASSERT_OK(UnpackKvSlice(dst[j], nullptr, {r.l0, r.h0}, slice, r.blocks, bytes));
      moved += static_cast<int64_t>(bytes.size());
    }
  }
  EXPECT_GT(moved, 0);
  for (size_t j = 0; j < receivers.size(); ++j) {
    const Shard& r = receivers[j];
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t l = r.l0; l < r.l1; ++l) {
        for (int64_t p = 0; p < static_cast<int64_t>(r.blocks.size()) * kBlockSize; ++p) {
          for (int64_t h = r.h0; h < r.h1; ++h) {
            const float* e = At(dst[j], r, kv, l, p, h);
            for (int64_t d = 0; d < kHeadDim; ++d) {
              // Positions past the sequence's come along as whatever the sender held there.
              if (p >= n_positions) continue;
              ASSERT_EQ(e[d], Truth(kv, l, p, h, d)) << "receiver " << j << " kv " << kv << " layer " << l << " pos "
                                                     << p << " head " << h << " dim " << d;
            }
          }
        }
      }
      // Blocks outside the receiver's table are untouched.
      for (int64_t l = 0; l < r.l1 - r.l0; ++l) {
        const TensorView& t = kv == 0 ? dst[j].layer(l).k : dst[j].layer(l).v;
        for (int64_t b = 0; b < kPoolBlocks; ++b) {
          if (std::find(r.blocks.begin(), r.blocks.end(), b) != r.blocks.end()) continue;
          const float* e = t.As<float>() + b * kBlockSize * (r.h1 - r.h0) * kHeadDim;
          ASSERT_EQ(e[0], -7.0f) << "receiver " << j << " block " << b;
        }
      }
    }
  }
}

TEST(KvTransferTest, OneWorkerToAnotherWithOtherBlockIds) {
  Move({{0, kLayers, 0, kHeads, {3, 1, 4}}}, {{0, kLayers, 0, kHeads, {0, 6, 2}}}, 11);
}

TEST(KvTransferTest, TensorParallelOneToTwoAndTwoToOne) {
  Move({{0, kLayers, 0, kHeads, {3, 1, 4}}}, {{0, kLayers, 0, 2, {0, 6, 2}}, {0, kLayers, 2, 4, {5, 7, 1}}}, 12);
  Move({{0, kLayers, 0, 3, {3, 1, 4}}, {0, kLayers, 3, 4, {2, 0, 5}}}, {{0, kLayers, 0, kHeads, {7, 6, 5}}}, 9);
}

TEST(KvTransferTest, PipelineAndTensorSplitsThatDisagree) {
  // Senders: PP 2 (layers 0-2, 3) x TP 2 (heads 0-1, 2-3). Receivers: PP 2 (layers 0-1,
  // 2-3) x TP 1, and one TP 4 stage would take single heads.
  const std::vector<Shard> senders = {
      {0, 3, 0, 2, {1, 2}}, {0, 3, 2, 4, {1, 2}}, {3, 4, 0, 2, {1, 2}}, {3, 4, 2, 4, {1, 2}}};
  Move(senders, {{0, 2, 0, kHeads, {4, 0}}, {2, 4, 0, kHeads, {7, 3}}}, 7);
  Move(senders, {{0, 4, 0, 1, {0, 1}}, {0, 4, 1, 2, {2, 3}}, {0, 4, 2, 3, {4, 5}}, {0, 4, 3, 4, {6, 7}}}, 8);
}

TEST(KvTransferTest, QuantizedCachesMoveWholeHeadsThroughTheBackendsCopies) {
  // q8_0 on the guarded backend: the bytes of each head (its 32-element blocks) move as is.
  testing::GuardedBackend gpu_like;
  const KvCacheOptions whole{.n_layers = 2,
                             .n_blocks = 4,
                             .block_size = kBlockSize,
                             .n_kv_heads = 2,
                             .head_dim = kHeadDim,
                             .dtype = DType::kQ8_0,
                             .k_scales = {},
                             .v_scales = {}};
  KvCacheOptions half = whole;
  half.n_kv_heads = 1;
  absl::StatusOr<KvCache> src = KvCache::Create(whole, &gpu_like);
  absl::StatusOr<KvCache> dst = KvCache::Create(half, &gpu_like);
  ASSERT_OK(src);
  ASSERT_OK(dst);
  const int64_t head = RowBytes(DType::kQ8_0, kHeadDim);
  std::vector<uint8_t> image(static_cast<size_t>(src->layer(0).k.NumBytes()));
  for (int64_t l = 0; l < 2; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 7 + l * 3 + kv);
      const TensorView& t = kv == 0 ? src->layer(l).k : src->layer(l).v;
      ASSERT_OK(gpu_like.CopyIn(t.data, image.data(), image.size()));
    }
  }
  std::vector<uint8_t> bytes;
  const KvSlice second_head{0, 2, 1, 2};
  const std::vector<int32_t> from = {2, 0}, to = {3, 1};
  ASSERT_OK(PackKvSlice(*src, &gpu_like, {0, 0}, second_head, from, &bytes));
  ASSERT_OK(UnpackKvSlice(*dst, &gpu_like, {0, 1}, second_head, to, bytes));
  for (int64_t l = 0; l < 2; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& t = kv == 0 ? dst->layer(l).k : dst->layer(l).v;
      std::vector<uint8_t> got(static_cast<size_t>(t.NumBytes()));
      ASSERT_OK(gpu_like.CopyOut(got.data(), t.data, got.size()));
      for (size_t b = 0; b < from.size(); ++b) {
        for (int64_t p = 0; p < kBlockSize; ++p) {
          for (int64_t i = 0; i < head; ++i) {
            // Source: row (block, p), head 1 of 2; destination: row (block, p), its only head.
            const int64_t s = ((from[b] * kBlockSize + p) * 2 + 1) * head + i;
            const int64_t d = (to[b] * kBlockSize + p) * head + i;
            ASSERT_EQ(got[static_cast<size_t>(d)], static_cast<uint8_t>(s * 7 + l * 3 + kv))
                << "layer " << l << " kv " << kv << " block " << to[b] << " pos " << p << " byte " << i;
          }
        }
      }
    }
  }
}

TEST(KvTransferTest, SlicesOutsideTheCacheAreRefused) {
  absl::StatusOr<KvCache> c = KvCache::Create(Options({1, 3, 2, 4, {}}));
  ASSERT_OK(c);
  std::vector<uint8_t> bytes;
  const std::vector<int32_t> blocks = {0};
  EXPECT_STATUS_CODE(PackKvSlice(*c, nullptr, {1, 2}, {0, 3, 2, 4}, blocks, &bytes), kInvalidArgument);  // Layer 0.
  EXPECT_STATUS_CODE(PackKvSlice(*c, nullptr, {1, 2}, {1, 3, 1, 4}, blocks, &bytes), kInvalidArgument);  // Head 1.
  const std::vector<int32_t> far = {kPoolBlocks};
  EXPECT_STATUS_CODE(PackKvSlice(*c, nullptr, {1, 2}, {1, 3, 2, 4}, far, &bytes), kInvalidArgument);
  ASSERT_OK(PackKvSlice(*c, nullptr, {1, 2}, {1, 3, 2, 4}, blocks, &bytes));
  EXPECT_STATUS_CODE(UnpackKvSlice(*c, nullptr, {1, 2}, {1, 3, 2, 4}, blocks, std::span(bytes).first(8)),
                     kInvalidArgument);
}

}  // namespace
}  // namespace cascade::model
