// Without CUDA: every entry point of cuda_backend.h says so.
#include "kernels/cuda_backend.h"

namespace cascade::kernels {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError("this build has no CUDA backend (CASCADE_WITH_CUDA=OFF or no nvcc)");
}

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(int, size_t) { return NoCuda(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept = default;
DeviceBuffer::~DeviceBuffer() = default;
absl::Status DeviceBuffer::Upload(const void*, size_t) { return NoCuda(); }
absl::Status DeviceBuffer::Download(void*, size_t) const { return NoCuda(); }
TensorView DeviceBuffer::View(DType dtype, std::initializer_list<int64_t> shape) const {
  return TensorView(nullptr, dtype, shape);
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions&) { return NoCuda(); }

}  // namespace cascade::kernels
