#include "core/tensor.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade {

std::string Device::ToString() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : cascade::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(std::string_view text) {
  if (text == "cpu") return Device{DeviceKind::kCpu, 0};
  constexpr std::string_view kCuda = "cuda:";
  if (text.substr(0, kCuda.size()) == kCuda) {
    const std::string_view digits = text.substr(kCuda.size());
    int index = 0;
    bool all_digits = !digits.empty() && digits.size() <= 4;
    for (char c : digits) all_digits = all_digits && c >= '0' && c <= '9';
    if (all_digits && absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &index)) {
      return Device{DeviceKind::kCuda, index};
    }
  }
  return absl::InvalidArgumentError(StrCat("unknown device '", text, "' (cpu or cuda:N)"));
}

TensorView::TensorView(void* d, DType t, std::initializer_list<int64_t> dims, Device dev)
    : data(d), dtype(t), device(dev), n_dims(static_cast<int>(dims.size())) {
  CASCADE_CHECK(n_dims <= kMaxDims);
  int i = 0;
  for (int64_t v : dims) shape[i++] = v;
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < n_dims; ++i) n *= shape[i];
  return n;
}

TensorView TensorView::RowSlice(int64_t begin, int64_t end) const {
  CASCADE_CHECK(begin >= 0 && begin <= end && end <= Rows());
  TensorView v = *this;
  v.data = static_cast<uint8_t*>(data) + begin * RowBytes();
  v.n_dims = 2;
  v.shape = {end - begin, Cols(), 0, 0};
  return v;
}

std::string TensorView::ShapeString() const {
  return cascade::StrCat("[", absl::StrJoin(shape.begin(), shape.begin() + n_dims, ", "), "]");
}

}  // namespace cascade
