// Non-owning views of tensors in host or device memory.
// Shapes are row-major with the outermost dimension first: a weight matrix is
// [n_rows, n_cols] with rows contiguous (GGUF's ne[] is the reverse order).
// A view is a value type; the memory it points to is borrowed and must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace cascade {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string ToString() const;
};

// Parses a device string: `cpu` or `cuda:N` (N a non-negative decimal integer, at most 4
// digits). Errors: InvalidArgument "unknown device '...' (cpu or cuda:N)".
absl::StatusOr<Device> ParseDevice(std::string_view text);

inline constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{};  // shape[0] outermost.

  TensorView() = default;
  TensorView(void* d, DType t, std::initializer_list<int64_t> dims, Device dev = {});

  int64_t dim(int i) const { return shape[i]; }
  int64_t NumElements() const;
  // Elements of the innermost dimension; the row length for matrices.
  int64_t Cols() const { return n_dims == 0 ? 1 : shape[n_dims - 1]; }
  int64_t Rows() const { return Cols() == 0 ? 0 : NumElements() / Cols(); }
  int64_t RowBytes() const { return cascade::RowBytes(dtype, Cols()); }
  int64_t NumBytes() const { return Rows() * RowBytes(); }

  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
  // View of rows [begin, end) of a tensor seen as [Rows(), Cols()].
  TensorView RowSlice(int64_t begin, int64_t end) const;
  std::string ShapeString() const;
};

}  // namespace cascade
