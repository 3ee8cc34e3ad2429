// The CUDA implementation of kernels::Backend (ops.h) and the device memory it works on.
// Implemented by kernels/cuda/ when the CUDA backend is built and by kernels/nocuda/
// otherwise (every call then answers Unimplemented), so callers need no #ifdef.
//
// Contract beyond ops.h: every TensorView handed to a CudaBackend op points to device
// memory of that backend's GPU (DeviceBuffer); the std::span arguments (ids, positions,
// block tables, inverse frequencies) are host memory and are copied up per call. Ops run
// asynchronously on the backend's stream, in call order; `Synchronize` waits for them.
// Activations are F32 and accumulate in F32; weights may be F32, F16, BF16 (cuBLAS) or
// Q8_0 / Q4_0 / Q4_1 (weight-only quantized kernels that decode the GGUF blocks in
// registers).
//
// Thread-safety: a backend and its buffers are single-owner, as ops.h says.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "kernels/sample_row.h"

namespace cascade::kernels {

// An owned allocation of device memory (cudaMalloc, never managed memory).
class DeviceBuffer {
 public:
  // Unavailable without a usable GPU (the reason included); Unimplemented in a build
  // without CUDA.
  static absl::StatusOr<DeviceBuffer> Create(int device, size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Synchronous copies of the first `bytes` bytes.
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;
  // A view of the buffer as [shape] of dtype on this device.
  TensorView View(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  int device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct CudaBackendOptions {
  int device = 0;  // CUDA device index.
};

class CudaBackend : public Backend {
 public:
  // Unavailable (with the CUDA runtime's reason) when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  // out[r] = argmax of logits row r (first on ties); logits [n_rows, n_vocab] on the
  // device, out is host memory of n_rows ids.
  virtual absl::Status Argmax(std::span<int32_t> out, const TensorView& logits) = 0;
  // Samples, or verifies a draft, for each row of logits [n_rows, n_vocab] on the device
  // as rows[r] says (kernels/sample_row.h); rows and out are host memory of n_rows
  // entries, `penalties` host memory the rows index. Only ids, flags and asked-for
  // logprobs cross the bus, never the logits, which stay unmodified.
  virtual absl::Status Sample(std::span<SampleResult> out, const TensorView& logits, std::span<const SampleRow> rows,
                              std::span<const SamplePenalty> penalties = {}) = 0;
};

}  // namespace cascade::kernels
