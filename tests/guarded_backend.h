// A test Backend that behaves like a GPU's as far as memory goes: `host_memory()` is false
// and the host cannot touch its memory between ops. Every buffer it allocates (and every
// weight it prepares, which it copies into such a buffer) is mapped PROT_NONE except while
// one of its own ops or copies runs; the ops are the CPU backend's. Code that reads or
// writes backend memory on the host (instead of CopyIn / CopyOut, or an op) therefore
// crashes the test instead of passing by luck, and the results must equal the CPU
// backend's bit for bit, since the arithmetic is the same.
//
// Thread-safety: single owner, like every backend; separate instances may run on separate
// threads (each guards only its own memory).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace cascade::testing {

class GuardedBackend final : public kernels::Backend {
 public:
  GuardedBackend();
  ~GuardedBackend() override;

  // Bytes moved by CopyIn and CopyOut so far.
  size_t bytes_in() const { return bytes_in_; }
  size_t bytes_out() const { return bytes_out_; }
  // Buffers (weights included) currently allocated.
  size_t n_buffers() const { return regions_.size(); }

  // Off by default. On: the backend also takes a MoE layer's experts in one call
  // (PrepareExperts / RoutedExperts) for up to kRoutedTokens tokens, as the CUDA backend
  // does, as a stand-in computed with the CPU backend's ops (each matrix over its input
  // gathered in its act-order order, plus its bias; the layer's activation), token by
  // token, after routing by the host path's RouteToken (model/layers/moe.h) -- so that the
  // host side of the device path (model/layers/moe.h, the counters Transformer::expert_load
  // reads) runs on the CPU.
  static constexpr int64_t kRoutedTokens = 4;
  void set_routes_experts(bool on) { routes_experts_ = on; }
  // RoutedExperts calls so far.
  int64_t n_routed_calls() const { return n_routed_calls_; }
  absl::StatusOr<std::unique_ptr<kernels::PreparedExperts>> PrepareExperts(std::span<const ExpertWeights> experts,
                                                                           int64_t n_ff,
                                                                           const ExpertActivation& activation) override;
  bool RoutesExperts(int64_t n_tokens) const override {
    return routes_experts_ && n_tokens > 0 && n_tokens <= kRoutedTokens;
  }
  absl::Status RoutedExperts(TensorView acc, const TensorView& x, const TensorView& logits,
                             const kernels::PreparedExperts& experts, const MoeRouting& routing, void* load) override;

  Device device() const override { return inner_->device(); }
  int n_threads() const override { return inner_->n_threads(); }
  bool SupportsWeight(DType dtype) const override { return inner_->SupportsWeight(dtype); }
  bool host_memory() const override { return false; }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> Allocate(size_t bytes) override;
  absl::Status CopyIn(void* dst, const void* host, size_t bytes) override;
  absl::Status CopyOut(void* host, const void* src, size_t bytes) override;

  absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> PrepareWeight(const TensorView& weight) override;
  absl::Status Linear(TensorView out, const TensorView& in, const kernels::PreparedWeight& weight,
                      const TensorView& bias) override;
  absl::Status LinearParts(std::span<const TensorView> outs, const TensorView& in,
                           const kernels::PreparedWeight& weight, std::span<const TensorView> biases) override;
  absl::Status Embedding(TensorView out, const kernels::PreparedWeight& table, std::span<const int32_t> ids) override;
  absl::Status Linear(TensorView out, const TensorView& in, const TensorView& weight, const TensorView& bias) override;
  absl::Status RmsNorm(TensorView out, const TensorView& in, const TensorView& weight, float eps) override;
  absl::Status Rope(TensorView x, std::span<const int32_t> positions, const kernels::RopeParams& params) override;
  absl::Status SiluMul(TensorView out, const TensorView& gate, const TensorView& up) override;
  absl::Status GatherColumns(TensorView out, const TensorView& in, std::span<const int32_t> cols) override;
  absl::Status AddInPlace(TensorView out, const TensorView& in) override;
  absl::Status AddScaledRows(TensorView out, const TensorView& in, std::span<const int32_t> rows,
                             std::span<const float> scales) override;
  absl::Status Embedding(TensorView out, const TensorView& table, std::span<const int32_t> ids) override;
  absl::Status ClampedSwiglu(TensorView out, const TensorView& gate, const TensorView& up, float alpha,
                             float limit) override;
  absl::Status AddBias(TensorView out, const TensorView& bias) override;
  absl::Status WriteKv(kernels::KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                       std::span<const kernels::AttentionSeq> seqs) override;
  absl::Status Attention(TensorView out, const TensorView& q, const kernels::KvCacheLayer& cache,
                         std::span<const kernels::AttentionSeq> seqs, const kernels::AttentionParams& params) override;

 private:
  class Region;
  class Open;  // Unguards every region for its lifetime.
  friend class Region;
  void Guard(bool open);

  std::unique_ptr<kernels::Backend> inner_;
  std::vector<Region*> regions_;
  size_t bytes_in_ = 0, bytes_out_ = 0;
  bool routes_experts_ = false;
  int64_t n_routed_calls_ = 0;
  // One expert's FFN for one token (x and out [1, n_embd], host memory).
  absl::Status RunExpert(const ExpertWeights& e, int64_t n_ff, const ExpertActivation& act, const TensorView& x,
                         TensorView out);
};

}  // namespace cascade::testing
