// Discovery of CUDA devices. Implemented by kernels/cuda/ when the CUDA backend is built
// and by kernels/nocuda/ otherwise, so callers never need an #ifdef. Thread-safe.
#pragma once

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

}  // namespace cascade::kernels
