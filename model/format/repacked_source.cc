#include "model/format/repacked_source.h"

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {

void RepackedSource::AddVirtual(TensorInfo info, const std::vector<std::string>& behind) {
  for (const std::string& name : behind) hidden_.insert(name);
  const std::string name = info.name;
  virtual_.emplace(name, std::move(info));
}

absl::Status RepackedSource::Finish() {
  for (const TensorInfo& t : packed_->tensors()) {
    if (hidden_.contains(t.name)) continue;
    if (virtual_.contains(t.name)) {
      return absl::DataLossError(StrCat(path(), ": tensor '", t.name, "' is stored both plain and quantized"));
    }
    tensors_.push_back(t);
  }
  for (const auto& [name, info] : virtual_) tensors_.push_back(info);
  return absl::OkStatus();
}

const TensorInfo* RepackedSource::FindTensor(std::string_view name) const {
  const auto it = virtual_.find(std::string(name));
  if (it != virtual_.end()) return &it->second;
  return hidden_.contains(std::string(name)) ? nullptr : packed_->FindTensor(name);
}

void RepackedSource::ReleasePages(const TensorView& view) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (!it->second.bytes.empty() && it->second.bytes.data() == view.data) {
      if (--it->second.readers <= 0) cache_.erase(it);
      return;
    }
  }
  packed_->ReleasePages(view);
}

absl::StatusOr<TensorView> RepackedSource::ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const {
  const auto it = virtual_.find(std::string(name));
  if (it == virtual_.end()) {
    if (hidden_.contains(std::string(name))) {
      return absl::NotFoundError(StrCat(path(), ": tensor '", name, "' is read as part of a quantized weight"));
    }
    return packed_->ReadRows(name, row_begin, row_end);
  }
  const TensorInfo& info = it->second;
  const int64_t n_out = info.shape[0], n_in = info.shape[1];
  if (row_begin < 0 || row_begin > row_end || row_end > n_out) {
    return absl::OutOfRangeError(StrCat(path(), ": tensor '", info.name, "': rows [", row_begin, ", ", row_end,
                                        ") are outside [0, ", n_out, ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Cached& cached = cache_[{info.name, row_begin, row_end}];
  std::vector<uint8_t>& rows = cached.bytes;
  if (rows.empty() && row_end > row_begin) {
    rows.resize(static_cast<size_t>((row_end - row_begin) * RowBytes(info.dtype, n_in)));
    if (absl::Status s = Repack(info, row_begin, row_end, rows.data()); !s.ok()) {
      rows.clear();
      return s;
    }
  }
  ++cached.readers;
  return TensorView(rows.data(), info.dtype, {row_end - row_begin, n_in});
}

absl::Status RepackedSource::Bad(const std::string& tensor, const std::string& what) const {
  return absl::DataLossError(StrCat(path(), ": tensor '", tensor, "': ", what));
}

}  // namespace cascade::model
