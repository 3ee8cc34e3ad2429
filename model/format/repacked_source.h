// A WeightSource over a checkpoint's stored tensors that shows some of them, repacked, as
// ordinary tensors of one of Cascade's block types: GPTQ/AWQ triples as I4_G128
// (int4_checkpoint.h), FP8 weights and their scales as F8_E4M3_B128 (fp8_checkpoint.h),
// Quark MXFP4 as GGUF mxfp4 (mxfp4_checkpoint.h). A subclass registers each virtual tensor
// with the stored tensors behind it (hidden from then on) and repacks rows on demand; this
// class answers the WeightSource calls: rows are repacked on first read under a lock and
// cached until every reader of them released them (ReleasePages) or the source is
// destroyed. Tensor-parallel ranks loading in one process read the same rows at once, so
// one rank's release must not free what another still reads. Other tensors pass through.
// Thread-safe after Finish().
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "model/format/weight_source.h"

namespace cascade::model {

class RepackedSource : public WeightSource {
 public:
  const std::string& path() const override { return packed_->path(); }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const override;
  absl::StatusOr<TensorView> ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const override;
  // Frees the repacked rows behind `view` (the transformer calls this once it copied them,
  // or the backend did); stored tensors pass through.
  void ReleasePages(const TensorView& view) const override;
  // Passes to the stored tensors' source (the repacked rows are this source's own memory).
  void ReleasePagesExcept(std::span<const TensorView> in_use) const override { packed_->ReleasePagesExcept(in_use); }

 protected:
  explicit RepackedSource(std::unique_ptr<WeightSource> packed) : packed_(std::move(packed)) {}

  const WeightSource& packed() const { return *packed_; }
  // Shows `info` (a 2-D tensor of a block type) in place of the stored tensors `behind`.
  void AddVirtual(TensorInfo info, const std::vector<std::string>& behind);
  // After the last AddVirtual: lists the tensors. DataLoss for a name stored both plain and
  // repacked.
  absl::Status Finish();
  // Rows [r0, r1) of virtual tensor `info` into `dst` (RowBytes of its dtype each).
  virtual absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const = 0;
  // DataLoss naming the tensor and what is wrong with it.
  absl::Status Bad(const std::string& tensor, const std::string& what) const;

 private:
  std::unique_ptr<WeightSource> packed_;
  std::map<std::string, TensorInfo> virtual_;
  absl::flat_hash_set<std::string> hidden_;  // The stored tensors behind virtual_.
  std::vector<TensorInfo> tensors_;
  mutable std::mutex mu_;
  struct Cached {
    std::vector<uint8_t> bytes;
    int readers = 0;  // ReadRows calls not yet released.
  };
  mutable std::map<std::tuple<std::string, int64_t, int64_t>, Cached> cache_;
};

}  // namespace cascade::model
