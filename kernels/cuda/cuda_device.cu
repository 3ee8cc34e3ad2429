#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_device.h"

namespace cascade::kernels {

CudaAvailability QueryCudaDevices() {
  CudaAvailability out;
  int count = 0;  // cudaGetDeviceCount leaves it untouched on error 35.
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.reason = std::string("CUDA runtime reports error ") + std::to_string(static_cast<int>(err)) +
                 " (" + cudaGetErrorString(err) + ")";
    return out;
  }
  if (count == 0) {
    out.reason = "CUDA runtime found no devices";
    return out;
  }
  out.device_count = count;
  return out;
}

bool BuiltWithCuda() { return true; }

}  // namespace cascade::kernels
