#include "tests/guarded_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/layers/moe.h"

namespace cascade::testing {

// An anonymous mapping, registered with its backend while it lives.
class GuardedBackend::Region final : public kernels::Buffer {
 public:
  Region(GuardedBackend* owner, void* data, size_t bytes, size_t mapped)
      : Buffer(data, bytes), owner_(owner), mapped_(mapped) {
    owner_->regions_.push_back(this);
  }
  ~Region() override {
    auto& r = owner_->regions_;
    r.erase(std::find(r.begin(), r.end(), this));
    ::munmap(data(), mapped_);
  }
  void Protect(bool open) const {
    CASCADE_CHECK(::mprotect(data(), mapped_, open ? PROT_READ | PROT_WRITE : PROT_NONE) == 0);
  }

 private:
  GuardedBackend* owner_;
  size_t mapped_;
};

class GuardedBackend::Open {
 public:
  explicit Open(GuardedBackend* b) : b_(b) { b_->Guard(true); }
  ~Open() { b_->Guard(false); }

 private:
  GuardedBackend* b_;
};

namespace {

// What PrepareWeight returns: the guarded copy and the CPU backend's preparation of it.
class GuardedWeight final : public kernels::PreparedWeight {
 public:
  GuardedWeight(const TensorView& source, std::unique_ptr<kernels::Buffer> copy,
                std::unique_ptr<kernels::PreparedWeight> inner)
      : PreparedWeight(source), copy_(std::move(copy)), inner_(std::move(inner)) {}
  bool reads_source() const override { return false; }
  const kernels::PreparedWeight& inner() const { return *inner_; }

 private:
  std::unique_ptr<kernels::Buffer> copy_;
  std::unique_ptr<kernels::PreparedWeight> inner_;
};

}  // namespace

GuardedBackend::GuardedBackend() : inner_(kernels::MakeCpuBackend({.n_threads = 1})) {}

GuardedBackend::~GuardedBackend() {
  // Buffers the caller still holds would unregister from a dead backend: they must go first.
  CASCADE_CHECK(regions_.empty());
}

void GuardedBackend::Guard(bool open) {
  for (const Region* r : regions_) r->Protect(open);
}

absl::StatusOr<std::unique_ptr<kernels::Buffer>> GuardedBackend::Allocate(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = std::max(page, (bytes + page - 1) / page * page);
  void* p = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return absl::ResourceExhaustedError(StrCat("guarded backend: cannot map ", bytes, " bytes"));
  return std::unique_ptr<kernels::Buffer>(std::make_unique<Region>(this, p, bytes, mapped));
}

absl::Status GuardedBackend::CopyIn(void* dst, const void* host, size_t bytes) {
  Open open(this);
  std::memmove(dst, host, bytes);
  bytes_in_ += bytes;
  return absl::OkStatus();
}

absl::Status GuardedBackend::CopyOut(void* host, const void* src, size_t bytes) {
  Open open(this);
  std::memmove(host, src, bytes);
  bytes_out_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> GuardedBackend::PrepareWeight(const TensorView& weight) {
  const size_t bytes = static_cast<size_t>(weight.NumBytes());
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> copy, Allocate(bytes));
  CASCADE_RETURN_IF_ERROR(CopyIn(copy->data(), weight.data, bytes));
  const TensorView view(copy->data(), weight.dtype, {weight.Rows(), weight.Cols()});
  absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> inner;
  {
    Open open(this);
    inner = inner_->PrepareWeight(view);
  }
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<kernels::PreparedWeight>(
      std::make_unique<GuardedWeight>(weight, std::move(copy), *std::move(inner)));
}

namespace {

class GuardedExperts final : public kernels::PreparedExperts {
 public:
  GuardedExperts(std::span<const kernels::Backend::ExpertWeights> experts, int64_t n_ff,
                 const kernels::Backend::ExpertActivation& activation)
      : experts(experts.begin(), experts.end()), n_ff(n_ff), activation(activation) {}
  // The input orders' spans point into the layer's Linears, which outlive these.
  std::vector<kernels::Backend::ExpertWeights> experts;
  int64_t n_ff;
  kernels::Backend::ExpertActivation activation;
};

const kernels::PreparedWeight& Inner(const kernels::PreparedWeight* w) {
  return dynamic_cast<const GuardedWeight&>(*w).inner();
}

}  // namespace

absl::StatusOr<std::unique_ptr<kernels::PreparedExperts>> GuardedBackend::PrepareExperts(
    std::span<const ExpertWeights> experts, int64_t n_ff, const ExpertActivation& activation) {
  if (!routes_experts_) return absl::UnimplementedError("guarded backend: experts are routed on the host");
  return std::unique_ptr<kernels::PreparedExperts>(std::make_unique<GuardedExperts>(experts, n_ff, activation));
}

// One token's expert as the device path defines it: each matrix over its input gathered in
// its order (act-order GPTQ), the biases added (gpt-oss), the layer's activation.
absl::Status GuardedBackend::RunExpert(const ExpertWeights& e, int64_t n_ff, const ExpertActivation& act,
                                       const TensorView& x, TensorView out) {
  std::vector<float> gate(n_ff), up(n_ff), gathered;
  TensorView g(gate.data(), DType::kF32, {1, n_ff}), u(up.data(), DType::kF32, {1, n_ff});
  const auto in = [&](const TensorView& v, std::span<const int32_t> order) {
    if (order.empty()) return v;
    gathered.resize(order.size());
    for (size_t j = 0; j < order.size(); ++j) gathered[j] = v.As<float>()[order[j]];
    return TensorView(gathered.data(), DType::kF32, {1, static_cast<int64_t>(order.size())});
  };
  if (e.gate == e.up) {  // Stacked: gate rows then up rows.
    if (e.gate_row0 != 0 || e.up_row0 != n_ff || e.gate->n_out() != 2 * n_ff) {
      return absl::UnimplementedError("guarded backend: a stacked expert other than [gate; up]");
    }
    const TensorView parts[] = {g, u}, biases[] = {e.gate_bias, e.up_bias};
    const bool biased = e.gate_bias.data != nullptr;
    CASCADE_RETURN_IF_ERROR(inner_->LinearParts(
        parts, x, Inner(e.gate), biased ? std::span<const TensorView>(biases) : std::span<const TensorView>()));
  } else {
    CASCADE_RETURN_IF_ERROR(inner_->Linear(g, in(x, e.gate_order), Inner(e.gate), e.gate_bias));
    CASCADE_RETURN_IF_ERROR(inner_->Linear(u, in(x, e.up_order), Inner(e.up), e.up_bias));
  }
  if (act.swiglu_limit > 0) {
    CASCADE_RETURN_IF_ERROR(inner_->ClampedSwiglu(g, g, u, act.swiglu_alpha, act.swiglu_limit));
  } else {
    CASCADE_RETURN_IF_ERROR(inner_->SiluMul(g, g, u));
  }
  return inner_->Linear(out, in(g, e.down_order), Inner(e.down), e.down_bias);
}

absl::Status GuardedBackend::RoutedExperts(TensorView acc, const TensorView& x, const TensorView& logits,
                                           const kernels::PreparedExperts& experts, const MoeRouting& routing,
                                           void* load) {
  const auto* ex = dynamic_cast<const GuardedExperts*>(&experts);
  if (ex == nullptr) return absl::InternalError("guarded backend: experts prepared by another backend");
  if (!RoutesExperts(x.Rows())) return absl::FailedPreconditionError("guarded backend: not routing experts now");
  ++n_routed_calls_;
  Open open(this);
  const int64_t d = x.Cols(), held = static_cast<int64_t>(ex->experts.size());
  std::vector<float> y(d);
  for (int64_t t = 0; t < x.Rows(); ++t) {
    std::vector<int32_t> chosen(routing.top_k);
    std::vector<float> weights(routing.top_k);
    model::RouteToken(std::span<const float>(logits.As<float>() + t * routing.n_experts, routing.n_experts),
                      routing.top_k, routing.norm_topk, chosen, weights);
    for (int64_t c = 0; c < routing.top_k; ++c) {
      const int32_t e = chosen[c];
      const float w = weights[c];
      if (load != nullptr) ++static_cast<int32_t*>(load)[e];
      const int64_t h = e - routing.expert_begin;
      if (h < 0 || h >= held) continue;
      const TensorView xr(x.As<float>() + t * d, DType::kF32, {1, d});
      CASCADE_RETURN_IF_ERROR(
          RunExpert(ex->experts[h], ex->n_ff, ex->activation, xr, TensorView(y.data(), DType::kF32, {1, d})));
      float* a = acc.As<float>() + t * d;
      for (int64_t i = 0; i < d; ++i) a[i] += w * y[i];
    }
  }
  return absl::OkStatus();
}

absl::Status GuardedBackend::Linear(TensorView out, const TensorView& in, const kernels::PreparedWeight& weight,
                                    const TensorView& bias) {
  const auto* w = dynamic_cast<const GuardedWeight*>(&weight);
  if (w == nullptr) return absl::InternalError("guarded backend: weight prepared by another backend");
  Open open(this);
  return inner_->Linear(out, in, w->inner(), bias);
}

absl::Status GuardedBackend::LinearParts(std::span<const TensorView> outs, const TensorView& in,
                                         const kernels::PreparedWeight& weight, std::span<const TensorView> biases) {
  const auto* w = dynamic_cast<const GuardedWeight*>(&weight);
  if (w == nullptr) return absl::InternalError("guarded backend: weight prepared by another backend");
  Open open(this);
  return inner_->LinearParts(outs, in, w->inner(), biases);
}

absl::Status GuardedBackend::Embedding(TensorView out, const kernels::PreparedWeight& table,
                                       std::span<const int32_t> ids) {
  const auto* w = dynamic_cast<const GuardedWeight*>(&table);
  if (w == nullptr) return absl::InternalError("guarded backend: table prepared by another backend");
  Open open(this);
  return inner_->Embedding(out, w->inner(), ids);
}

absl::Status GuardedBackend::Linear(TensorView out, const TensorView& in, const TensorView& weight,
                                    const TensorView& bias) {
  Open open(this);
  return inner_->Linear(out, in, weight, bias);
}

absl::Status GuardedBackend::RmsNorm(TensorView out, const TensorView& in, const TensorView& weight, float eps) {
  Open open(this);
  return inner_->RmsNorm(out, in, weight, eps);
}

absl::Status GuardedBackend::Rope(TensorView x, std::span<const int32_t> positions, const kernels::RopeParams& params) {
  Open open(this);
  return inner_->Rope(x, positions, params);
}

absl::Status GuardedBackend::GatherColumns(TensorView out, const TensorView& in, std::span<const int32_t> cols) {
  Open open(this);
  return inner_->GatherColumns(out, in, cols);
}

absl::Status GuardedBackend::SiluMul(TensorView out, const TensorView& gate, const TensorView& up) {
  Open open(this);
  return inner_->SiluMul(out, gate, up);
}

absl::Status GuardedBackend::ClampedSwiglu(TensorView out, const TensorView& gate, const TensorView& up, float alpha,
                                           float limit) {
  Open open(this);
  return inner_->ClampedSwiglu(out, gate, up, alpha, limit);
}

absl::Status GuardedBackend::AddBias(TensorView out, const TensorView& bias) {
  Open open(this);
  return inner_->AddBias(out, bias);
}

absl::Status GuardedBackend::AddInPlace(TensorView out, const TensorView& in) {
  Open open(this);
  return inner_->AddInPlace(out, in);
}

absl::Status GuardedBackend::AddScaledRows(TensorView out, const TensorView& in, std::span<const int32_t> rows,
                                           std::span<const float> scales) {
  Open open(this);
  return inner_->AddScaledRows(out, in, rows, scales);
}

absl::Status GuardedBackend::Embedding(TensorView out, const TensorView& table, std::span<const int32_t> ids) {
  Open open(this);
  return inner_->Embedding(out, table, ids);
}

absl::Status GuardedBackend::WriteKv(kernels::KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                                     std::span<const kernels::AttentionSeq> seqs) {
  Open open(this);
  return inner_->WriteKv(cache, k, v, seqs);
}

absl::Status GuardedBackend::Attention(TensorView out, const TensorView& q, const kernels::KvCacheLayer& cache,
                                       std::span<const kernels::AttentionSeq> seqs,
                                       const kernels::AttentionParams& params) {
  Open open(this);
  return inner_->Attention(out, q, cache, seqs, params);
}

}  // namespace cascade::testing
