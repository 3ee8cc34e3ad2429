#include "kernels/cuda_device.h"

namespace cascade::kernels {

CudaAvailability QueryCudaDevices() {
  return {0, "this binary was built without the CUDA backend (CASCADE_WITH_CUDA=OFF or no nvcc)"};
}

bool BuiltWithCuda() { return false; }

double MeasureCopyBandwidth(int) { return 0; }

CudaMemory QueryCudaMemory(int) { return {}; }

}  // namespace cascade::kernels
