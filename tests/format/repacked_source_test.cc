// RepackedSource's cache of repacked rows: readers of the same rows share one copy, and it
// lives until the last of them releases it. Tensor-parallel ranks loading in one process
// read the same rows at once; when the first release freed the copy, the other rank's
// views pointed into freed memory (TpTransformerTest.QuarkMxfp4CheckpointsMatchSingleRank
// failed about once in 25 runs under load with NaN logits).
#include "model/format/repacked_source.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "model/format/safetensors.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using ::cascade::testing::TempDir;

// One virtual F32 tensor "v" [4, 8] behind the stored "raw"; row r, column c repacks to
// 100 r + c, and every Repack call is counted.
class CountingSource final : public RepackedSource {
 public:
  explicit CountingSource(std::unique_ptr<WeightSource> stored) : RepackedSource(std::move(stored)) {
    TensorInfo v;
    v.name = "v";
    v.dtype = DType::kF32;
    v.n_dims = 2;
    v.shape = {4, 8};
    AddVirtual(v, {"raw"});
    status_ = Finish();
  }
  absl::Status status() const { return status_; }
  int repacks() const { return repacks_.load(); }

 protected:
  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    ++repacks_;
    auto* out = reinterpret_cast<float*>(dst);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < info.shape[1]; ++c) *out++ = static_cast<float>(100 * r + c);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status status_;
  mutable std::atomic<int> repacks_{0};
};

std::unique_ptr<CountingSource> Open(const TempDir& dir) {
  const std::string bytes = ::cascade::testing::SafetensorsBytes(
      {{"raw", "F32", {2}, ::cascade::testing::RawBytes(std::vector<float>{1, 2})}});
  auto stored = SafetensorsSource::OpenFile(dir.WriteFile("m.safetensors", bytes));
  EXPECT_TRUE(stored.ok()) << stored.status();
  return std::make_unique<CountingSource>(*std::move(stored));
}

TEST(RepackedSourceTest, RowsLiveUntilTheirLastReaderReleasesThem) {
  TempDir dir;
  std::unique_ptr<CountingSource> src = Open(dir);
  ASSERT_TRUE(src->status().ok()) << src->status();
  absl::StatusOr<TensorView> a = src->ReadRows("v", 1, 3);
  absl::StatusOr<TensorView> b = src->ReadRows("v", 1, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, b->data);  // One copy, repacked once.
  EXPECT_EQ(src->repacks(), 1);

  src->ReleasePages(*a);  // b still reads it: kept.
  EXPECT_EQ(b->As<float>()[8 + 5], 205.0f);
  absl::StatusOr<TensorView> c = src->ReadRows("v", 1, 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data, b->data);
  EXPECT_EQ(src->repacks(), 1);

  src->ReleasePages(*b);
  src->ReleasePages(*c);  // The last reader: freed; a new read repacks.
  absl::StatusOr<TensorView> d = src->ReadRows("v", 1, 3);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(src->repacks(), 2);
  EXPECT_EQ(d->As<float>()[0], 100.0f);
}

}  // namespace
}  // namespace cascade::model
