#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_device.h"

namespace cascade::kernels {

CudaAvailability QueryCudaDevices() {
  CudaAvailability out;
  int count = 0;  // cudaGetDeviceCount leaves it untouched on error 35.
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.reason = std::string("CUDA runtime reports error ") + std::to_string(static_cast<int>(err)) + " (" +
                 cudaGetErrorString(err) + ")";
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

double MeasureCopyBandwidth(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return 0;
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return 0;
  }
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // Warm up.
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  constexpr int kReps = 10;
  cudaEventRecord(start);
  for (int i = 0; i < kReps; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return ms > 0 ? 2.0 * static_cast<double>(bytes) * kReps / (ms / 1e3) : 0;
}

CudaMemory QueryCudaMemory(int device) {
  CudaMemory m;
  if (cudaSetDevice(device) != cudaSuccess) return m;
  if (cudaMemGetInfo(&m.free_bytes, &m.total_bytes) != cudaSuccess) return {};
  return m;
}

}  // namespace cascade::kernels
