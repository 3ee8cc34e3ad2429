// Discovery of CUDA devices. Implemented by kernels/cuda/ when the CUDA backend is built
// and by kernels/nocuda/ otherwise, so callers never need an #ifdef. Thread-safe.
#pragma once

#include <cstddef>
#include <string>

namespace cascade::kernels {

struct CudaAvailability {
  int device_count = 0;  // 0 when unavailable.
  std::string reason;    // Why there is no usable GPU; empty when device_count > 0.
};

// Asks the CUDA runtime for devices. "No driver" (error 35) and "no device" (error 100)
// both mean device_count == 0 with the reason filled in.
CudaAvailability QueryCudaDevices();

// True when this binary was built with the CUDA backend.
bool BuiltWithCuda();

// Device-to-device copy bandwidth of `device` (bytes read + written per second, 1 GiB
// copied 10 times): the ceiling benchmarks compare their achieved bandwidth with. 0
// without a usable GPU.
double MeasureCopyBandwidth(int device);

// Free and total memory of `device` in bytes; {0, 0} without a usable GPU.
struct CudaMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
CudaMemory QueryCudaMemory(int device);

}  // namespace cascade::kernels
