#include "model/format/weight_source.h"

#include "absl/strings/str_join.h"
#include "core/str_cat.h"

namespace cascade::model {

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < n_dims; ++i) n *= shape[i];
  return n;
}

std::string TensorInfo::ShapeString() const {
  return cascade::StrCat("[", absl::StrJoin(shape.begin(), shape.begin() + n_dims, ", "), "]");
}

std::vector<std::pair<const uint8_t*, size_t>> ByteRanges(std::span<const TensorView> views) {
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  ranges.reserve(views.size());
  for (const TensorView& v : views) {
    ranges.emplace_back(static_cast<const uint8_t*>(v.data), static_cast<size_t>(v.NumBytes()));
  }
  return ranges;
}

absl::StatusOr<TensorView> WeightSource::Read(std::string_view name) const {
  const TensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(cascade::StrCat(path(), ": tensor '", name, "' is missing"));
  }
  absl::StatusOr<TensorView> v = ReadRows(name, 0, info->Rows());
  if (!v.ok()) return v;
  v->n_dims = info->n_dims;
  v->shape = info->shape;
  return v;
}

}  // namespace cascade::model
