// The CPU implementation of kernels::Backend: shape checks, then the row kernels of
// elementwise.h, attention.h and the quantized matmuls of linear.h on the backend's pool.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace cascade::kernels {
namespace {

absl::Status CheckF32(const TensorView& t, std::string_view what) {
  if (t.dtype != DType::kF32 || t.data == nullptr) {
    return absl::InvalidArgumentError(StrCat(what, ": expected an f32 tensor, got ", DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

absl::Status SameShape(const TensorView& a, const TensorView& b, std::string_view what) {
  if (a.Rows() != b.Rows() || a.Cols() != b.Cols()) {
    return absl::InvalidArgumentError(StrCat(what, ": shapes ", a.ShapeString(), " and ", b.ShapeString(), " differ"));
  }
  return absl::OkStatus();
}

// A weight repacked into the CPU's own layout (kernels/cpu/packed_weight.h).
class CpuPackedWeight final : public PreparedWeight {
 public:
  CpuPackedWeight(const TensorView& source, cpu::PackedWeight packed)
      : PreparedWeight(source), packed_(std::move(packed)) {}
  bool reads_source() const override { return false; }
  const cpu::PackedWeight& packed() const { return packed_; }

 private:
  cpu::PackedWeight packed_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : pool_(std::make_unique<ThreadPool>(std::max(1, options.n_threads))),
        linear_options_{.bf16_prefill = options.bf16_prefill} {}

  Device device() const override { return {}; }
  int n_threads() const override { return pool_->n_threads(); }

  bool SupportsWeight(DType dtype) const override { return cpu::LinearSupports(dtype); }

  absl::Status Linear(TensorView out, const TensorView& in, const TensorView& weight, const TensorView& bias) override {
    if (auto s = CheckF32(out, "linear out"); !s.ok()) return s;
    if (auto s = CheckF32(in, "linear in"); !s.ok()) return s;
    if (!SupportsWeight(weight.dtype)) {
      return absl::UnimplementedError(
          StrCat("linear: CPU backend has no kernel for ", DTypeName(weight.dtype), " weights"));
    }
    if (in.Cols() != weight.Cols() || out.Cols() != weight.Rows() || out.Rows() != in.Rows()) {
      return absl::InvalidArgumentError(
          StrCat("linear: in ", in.ShapeString(), " x weight ", weight.ShapeString(), " -> out ", out.ShapeString()));
    }
    if (auto s = cpu::Linear(out.As<float>(), in.As<float>(), weight, in.Rows(), pool_.get(), linear_options_);
        !s.ok()) {
      return s;
    }
    return AddOptionalBias(out, bias);
  }

  // Q8_0/Q4_0/Q4_1 are repacked when the active ISA has packed kernels (decided here, once
  // per weight); everything else is borrowed as is.
  absl::StatusOr<std::unique_ptr<PreparedWeight>> PrepareWeight(const TensorView& weight) override {
    if (!SupportsWeight(weight.dtype)) {
      return absl::UnimplementedError(
          StrCat("prepare weight: CPU backend has no kernel for ", DTypeName(weight.dtype)));
    }
    if (weight.n_dims != 2) {
      return absl::InvalidArgumentError(StrCat("prepare weight: expected [n_out, n_in], got ", weight.ShapeString()));
    }
    if (!cpu::PackedLayoutPreferred(weight.dtype)) return std::make_unique<PreparedWeight>(weight);
    absl::StatusOr<cpu::PackedWeight> packed = cpu::PackedWeight::Pack(weight, pool_.get());
    if (absl::IsUnimplemented(packed.status())) return std::make_unique<PreparedWeight>(weight);  // Read as is.
    if (!packed.ok()) return packed.status();
    return std::make_unique<CpuPackedWeight>(weight, *std::move(packed));
  }

  absl::Status Linear(TensorView out, const TensorView& in, const PreparedWeight& weight,
                      const TensorView& bias) override {
    const auto* packed = dynamic_cast<const CpuPackedWeight*>(&weight);
    if (packed == nullptr) return Linear(out, in, weight.source(), bias);
    if (auto s = CheckF32(out, "linear out"); !s.ok()) return s;
    if (auto s = CheckF32(in, "linear in"); !s.ok()) return s;
    if (in.Cols() != weight.n_in() || out.Cols() != weight.n_out() || out.Rows() != in.Rows()) {
      return absl::InvalidArgumentError(StrCat("linear: in ", in.ShapeString(), " x weight ",
                                               weight.source().ShapeString(), " -> out ", out.ShapeString()));
    }
    if (auto s = cpu::LinearPacked(out.As<float>(), in.As<float>(), packed->packed(), in.Rows(), pool_.get());
        !s.ok()) {
      return s;
    }
    return AddOptionalBias(out, bias);
  }

  absl::Status LinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                           std::span<const TensorView> biases) override {
    CASCADE_RETURN_IF_ERROR(CheckLinearParts(outs, in, weight, biases));
    CASCADE_RETURN_IF_ERROR(CheckF32(in, "linear in"));
    absl::InlinedVector<cpu::LinearPart, 4> parts;
    for (const TensorView& o : outs) {
      CASCADE_RETURN_IF_ERROR(CheckF32(o, "linear out"));
      parts.push_back({o.As<float>(), o.Cols()});
    }
    const auto* packed = dynamic_cast<const CpuPackedWeight*>(&weight);
    CASCADE_RETURN_IF_ERROR(
        packed != nullptr
            ? cpu::LinearPartsPacked(parts, in.As<float>(), packed->packed(), in.Rows(), pool_.get())
            : cpu::LinearParts(parts, in.As<float>(), weight.source(), in.Rows(), pool_.get(), linear_options_));
    for (size_t i = 0; i < biases.size(); ++i) CASCADE_RETURN_IF_ERROR(AddOptionalBias(outs[i], biases[i]));
    return absl::OkStatus();
  }

  absl::Status LinearBatch(std::span<const LinearJob> jobs) override {
    // One dispatch when every weight is packed (the common case); otherwise job by job.
    absl::InlinedVector<cpu::PackedJob, 32> packed_jobs;
    absl::InlinedVector<cpu::LinearPart, 64> parts;
    for (const LinearJob& job : jobs) parts.resize(parts.size() + job.outs.size());
    size_t at = 0;
    for (const LinearJob& job : jobs) {
      const auto* packed = dynamic_cast<const CpuPackedWeight*>(job.weight);
      if (packed == nullptr) return Backend::LinearBatch(jobs);
      CASCADE_RETURN_IF_ERROR(CheckLinearParts(job.outs, job.in, *job.weight, {}));
      CASCADE_RETURN_IF_ERROR(CheckF32(job.in, "linear in"));
      const size_t first = at;
      for (const TensorView& o : job.outs) {
        CASCADE_RETURN_IF_ERROR(CheckF32(o, "linear out"));
        parts[at++] = {o.As<float>(), o.Cols()};
      }
      packed_jobs.push_back(
          {std::span(parts).subspan(first, job.outs.size()), job.in.As<float>(), job.in.Rows(), &packed->packed()});
    }
    return cpu::LinearPackedBatch(packed_jobs, pool_.get());
  }

  absl::Status Embedding(TensorView out, const PreparedWeight& table, std::span<const int32_t> ids) override {
    const auto* packed = dynamic_cast<const CpuPackedWeight*>(&table);
    if (packed == nullptr) return Embedding(out, table.source(), ids);
    if (auto s = CheckF32(out, "embedding out"); !s.ok()) return s;
    if (out.Cols() != table.n_in() || out.Rows() != static_cast<int64_t>(ids.size())) {
      return absl::InvalidArgumentError(StrCat("embedding: out ", out.ShapeString(), " for ", ids.size(),
                                               " ids of table ", table.source().ShapeString()));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= table.n_out()) {
        return absl::InvalidArgumentError(
            StrCat("token id ", ids[i], " is outside the vocabulary [0, ", table.n_out(), ")"));
      }
      packed->packed().DequantizeRow(ids[i], out.As<float>() + i * out.Cols());
    }
    return absl::OkStatus();
  }

  absl::Status RmsNorm(TensorView out, const TensorView& in, const TensorView& weight, float eps) override {
    if (auto s = SameShape(out, in, "rms_norm"); !s.ok()) return s;
    if (weight.dtype != DType::kF32 || weight.NumElements() != in.Cols()) {
      return absl::InvalidArgumentError(
          StrCat("rms_norm: weight ", weight.ShapeString(), " ", DTypeName(weight.dtype), " for rows of ", in.Cols()));
    }
    const int64_t n = in.Cols();
    RowParallel(in.Rows(), [&](int64_t r) {
      cpu::RmsNormRow(out.As<float>() + r * n, in.As<float>() + r * n, weight.As<float>(), n, eps);
    });
    return absl::OkStatus();
  }

  absl::Status Rope(TensorView x, std::span<const int32_t> positions, const RopeParams& p) override {
    if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > 1024 || x.Cols() % p.head_dim != 0 ||
        static_cast<int64_t>(p.inv_freq.size()) < p.head_dim / 2 ||
        static_cast<int64_t>(positions.size()) != x.Rows()) {
      return absl::InvalidArgumentError(
          StrCat("rope: x ", x.ShapeString(), ", head_dim ", p.head_dim, ", ", positions.size(), " positions"));
    }
    const int64_t n_heads = x.Cols() / p.head_dim;
    RowParallel(x.Rows(), [&](int64_t r) { cpu::RopeRow(x.As<float>() + r * x.Cols(), n_heads, positions[r], p); });
    return absl::OkStatus();
  }

  absl::Status GatherColumns(TensorView out, const TensorView& in, std::span<const int32_t> cols) override {
    CASCADE_RETURN_IF_ERROR(CheckGatherColumns(out, in, cols));
    const int64_t n = out.Cols(), d = in.Cols();
    RowParallel(in.Rows(), [&](int64_t r) {
      const float* src = in.As<float>() + r * d;
      float* dst = out.As<float>() + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = src[cols[j]];
    });
    return absl::OkStatus();
  }

  absl::Status SiluMul(TensorView out, const TensorView& gate, const TensorView& up) override {
    if (auto s = SameShape(gate, up, "silu_mul"); !s.ok()) return s;
    if (auto s = SameShape(out, gate, "silu_mul"); !s.ok()) return s;
    const int64_t n = gate.Cols();
    RowParallel(gate.Rows(), [&](int64_t r) {
      cpu::SiluMulRow(out.As<float>() + r * n, gate.As<float>() + r * n, up.As<float>() + r * n, n);
    });
    return absl::OkStatus();
  }

  absl::Status ClampedSwiglu(TensorView out, const TensorView& gate, const TensorView& up, float alpha,
                             float limit) override {
    if (auto s = SameShape(gate, up, "clamped_swiglu"); !s.ok()) return s;
    if (auto s = SameShape(out, gate, "clamped_swiglu"); !s.ok()) return s;
    const int64_t n = gate.Cols();
    RowParallel(gate.Rows(), [&](int64_t r) {
      cpu::ClampedSwigluRow(out.As<float>() + r * n, gate.As<float>() + r * n, up.As<float>() + r * n, n, alpha, limit);
    });
    return absl::OkStatus();
  }

  absl::Status AddBias(TensorView out, const TensorView& bias) override {
    CASCADE_RETURN_IF_ERROR(CheckAddBias(out, bias));
    const int64_t d = out.Cols();
    RowParallel(out.Rows(), [&](int64_t r) { cpu::AddRow(out.As<float>() + r * d, bias.As<float>(), d); });
    return absl::OkStatus();
  }

  absl::Status AddInPlace(TensorView out, const TensorView& in) override {
    if (auto s = SameShape(out, in, "add"); !s.ok()) return s;
    // A prefill's residual sum (4 MiB a side at 512 tokens of 2048) was a serial pass that
    // left the other threads waiting; one decode row is cheaper than a dispatch.
    constexpr int64_t kChunk = 1 << 14;
    const int64_t n = out.NumElements();
    if (n < 4 * kChunk) {
      cpu::AddRow(out.As<float>(), in.As<float>(), n);
      return absl::OkStatus();
    }
    pool_->ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int) {
      cpu::AddRow(out.As<float>() + b * kChunk, in.As<float>() + b * kChunk, std::min(n, e * kChunk) - b * kChunk);
    });
    return absl::OkStatus();
  }

  absl::Status AddScaledRows(TensorView out, const TensorView& in, std::span<const int32_t> rows,
                             std::span<const float> scales) override {
    CASCADE_RETURN_IF_ERROR(CheckScaledRows(out, in, rows, scales));
    const int64_t d = in.Cols();
    // Split by columns, so that rows naming the same output row never race.
    const auto columns = [&](int64_t c0, int64_t c1) {
      for (size_t i = 0; i < rows.size(); ++i) {
        cpu::ScaleAxpy(out.As<float>() + rows[i] * d + c0, 1.0f, scales[i], in.As<float>() + i * d + c0, c1 - c0);
      }
    };
    constexpr int64_t kChunk = 64;
    if (static_cast<int64_t>(rows.size()) * d < (1 << 16)) {
      columns(0, d);
      return absl::OkStatus();
    }
    pool_->ParallelFor((d + kChunk - 1) / kChunk,
                       [&](int64_t b, int64_t e, int) { columns(b * kChunk, std::min(d, e * kChunk)); });
    return absl::OkStatus();
  }

  absl::Status Embedding(TensorView out, const TensorView& table, std::span<const int32_t> ids) override {
    if (out.Cols() != table.Cols() || out.Rows() != static_cast<int64_t>(ids.size())) {
      return absl::InvalidArgumentError(
          StrCat("embedding: out ", out.ShapeString(), " for ", ids.size(), " ids of table ", table.ShapeString()));
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= table.Rows()) {
        return absl::InvalidArgumentError(
            StrCat("token id ", id, " is outside the vocabulary [0, ", table.Rows(), ")"));
      }
    }
    const int64_t row_bytes = table.RowBytes();
    const auto row = [&](int64_t i) {
      const auto* src = static_cast<const uint8_t*>(table.data) + ids[i] * row_bytes;
      return cpu::DequantizeRow(table.dtype, src, out.As<float>() + i * out.Cols(), out.Cols());
    };
    if (ids.empty()) return absl::OkStatus();
    // The first row shows whether the type decodes (every row alike); the rest are split
    // over the pool: a MoE layer gathers n_tokens x top-k rows per prefill.
    CASCADE_RETURN_IF_ERROR(row(0));
    RowParallel(static_cast<int64_t>(ids.size()) - 1, [&](int64_t i) { (void)row(i + 1); });
    return absl::OkStatus();
  }

  absl::Status WriteKv(KvCacheLayer& cache, const TensorView& k, const TensorView& v,
                       std::span<const AttentionSeq> seqs) override {
    return cpu::WriteKvCpu(cache, k, v, seqs);
  }

  absl::Status Attention(TensorView out, const TensorView& q, const KvCacheLayer& cache,
                         std::span<const AttentionSeq> seqs, const AttentionParams& params) override {
    return cpu::AttentionCpu(out, q, cache, seqs, params, *pool_);
  }

 private:
  absl::Status AddOptionalBias(TensorView out, const TensorView& bias) {
    if (bias.data != nullptr) {
      if (bias.NumElements() != out.Cols()) {
        return absl::InvalidArgumentError(StrCat("linear: bias ", bias.ShapeString(), " for ", out.Cols(), " outputs"));
      }
      RowParallel(out.Rows(),
                  [&](int64_t r) { cpu::AddRow(out.As<float>() + r * out.Cols(), bias.As<float>(), out.Cols()); });
    }
    return absl::OkStatus();
  }

  // Runs fn(row) for every row; splits across the pool only when there are many rows
  // (one decode row is cheaper than a dispatch).
  template <typename F>
  void RowParallel(int64_t n_rows, F&& fn) {
    if (n_rows < 8) {
      for (int64_t r = 0; r < n_rows; ++r) fn(r);
      return;
    }
    pool_->ParallelFor(n_rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) fn(r);
    });
  }

  std::unique_ptr<ThreadPool> pool_;
  cpu::LinearOptions linear_options_;
};

}  // namespace

std::string DescribeCpuPrefillActivations(const CpuBackendOptions& options) {
  if (!options.bf16_prefill) return "f32";
  if (ActiveCpuIsa() != CpuIsa::kAvx512) return "f32 (bf16 asked; the active kernels are not AVX-512)";
  if (!GetCpuFeatures().avx512bf16) return "f32 (bf16 asked; this CPU has no AVX512_BF16)";
  return "bf16 (FP8 weights' prefills of 8 or more tokens)";
}

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  // Once per process: the kernel level moves results (f32 summation order), so the log
  // names it and why (a worker or engine makes one backend; tests make many).
  static std::once_flag logged;
  std::call_once(logged, [] { CASCADE_LOG(Info) << "cpu kernels: " << DescribeActiveCpuIsa(); });
  if (options.bf16_prefill) CASCADE_LOG(Info) << "cpu prefill activations: " << DescribeCpuPrefillActivations(options);
  return std::make_unique<CpuBackend>(options);
}

}  // namespace cascade::kernels
