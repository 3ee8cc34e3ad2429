// A CudaBackend without a GPU, for testing on the CPU the host logic that talks to one:
// every op answers Unimplemented and the device is cuda:0. Tests derive from it and give
// the few calls they exercise (Sample, the graph-step calls) a behaviour of their own.
#pragma once

#include "kernels/cuda_backend.h"

namespace cascade::testing {

class StubCudaBackend : public kernels::CudaBackend {
 public:
  Device device() const override { return {DeviceKind::kCuda, 0}; }
  int n_threads() const override { return 1; }
  bool host_memory() const override { return false; }
  bool SupportsWeight(DType) const override { return false; }
  absl::Status Argmax(std::span<int32_t>, const TensorView&) override { return Stub(); }
  absl::Status Sample(std::span<kernels::SampleResult>, const TensorView&, std::span<const kernels::SampleRow>,
                      std::span<const kernels::SamplePenalty>, std::span<const uint8_t>) override {
    return Stub();
  }
  absl::Status Linear(TensorView, const TensorView&, const TensorView&, const TensorView&) override { return Stub(); }
  absl::Status RmsNorm(TensorView, const TensorView&, const TensorView&, float) override { return Stub(); }
  absl::Status Rope(TensorView, std::span<const int32_t>, const kernels::RopeParams&) override { return Stub(); }
  absl::Status SiluMul(TensorView, const TensorView&, const TensorView&) override { return Stub(); }
  absl::Status AddInPlace(TensorView, const TensorView&) override { return Stub(); }
  absl::Status AddScaledRows(TensorView, const TensorView&, std::span<const int32_t>, std::span<const float>) override {
    return Stub();
  }
  absl::Status Embedding(TensorView, const TensorView&, std::span<const int32_t>) override { return Stub(); }
  absl::Status WriteKv(kernels::KvCacheLayer&, const TensorView&, const TensorView&,
                       std::span<const kernels::AttentionSeq>) override {
    return Stub();
  }
  absl::Status Attention(TensorView, const TensorView&, const kernels::KvCacheLayer&,
                         std::span<const kernels::AttentionSeq>, const kernels::AttentionParams&) override {
    return Stub();
  }

 protected:
  static absl::Status Stub() { return absl::UnimplementedError("StubCudaBackend has no GPU"); }
};

}  // namespace cascade::testing
