// Backend's default memory: 64-byte aligned host allocations and plain copies, what the
// CPU backend (and any host-memory backend) needs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/ops.h"

namespace cascade::kernels {
namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(void* data, size_t bytes) : Buffer(data, bytes) {}
  ~HostBuffer() override { std::free(data()); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) {
  // aligned_alloc needs a multiple of the alignment; never 0 bytes, so data() is unique.
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) return absl::ResourceExhaustedError(StrCat("cannot allocate ", bytes, " bytes of host memory"));
  return std::make_unique<HostBuffer>(p, bytes);
}

absl::StatusOr<std::unique_ptr<Buffer>> Backend::Allocate(size_t bytes) { return AllocateHost(bytes); }

absl::StatusOr<std::unique_ptr<Buffer>> Backend::AllocateStaging(size_t bytes) { return AllocateHost(bytes); }

absl::Status GrowBuffer(Backend& backend, std::unique_ptr<Buffer>& buf, size_t bytes, bool staging) {
  if (buf != nullptr && buf->bytes() >= bytes) return absl::OkStatus();
  buf.reset();  // Free first: the old buffer's room may be needed for the new one.
  absl::StatusOr<std::unique_ptr<Buffer>> fresh = staging ? backend.AllocateStaging(bytes) : backend.Allocate(bytes);
  if (!fresh.ok()) return fresh.status();
  buf = *std::move(fresh);
  return absl::OkStatus();
}

absl::Status Backend::CopyIn(void* dst, const void* host, size_t bytes) {
  if (bytes > 0) std::memmove(dst, host, bytes);
  return absl::OkStatus();
}

absl::Status Backend::CopyOut(void* host, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(host, src, bytes);
  return absl::OkStatus();
}

absl::Status CheckLinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                              std::span<const TensorView> biases) {
  if (!biases.empty() && biases.size() != outs.size()) {
    return absl::InvalidArgumentError(StrCat("LinearParts: ", biases.size(), " biases for ", outs.size(), " parts"));
  }
  int64_t rows = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].Rows() != in.Rows()) {
      return absl::InvalidArgumentError(
          StrCat("LinearParts: out ", i, " ", outs[i].ShapeString(), " for input ", in.ShapeString()));
    }
    if (i + 1 < outs.size() && outs[i].Cols() % Backend::kLinearPartRows != 0) {
      return absl::InvalidArgumentError(StrCat("LinearParts: part ", i, " has ", outs[i].Cols(),
                                               " rows, not a multiple of ", Backend::kLinearPartRows));
    }
    rows += outs[i].Cols();
  }
  if (rows != weight.n_out() || in.Cols() != weight.n_in()) {
    return absl::InvalidArgumentError(StrCat("LinearParts: parts of ", rows, " rows over input ", in.ShapeString(),
                                             " for a weight [", weight.n_out(), ", ", weight.n_in(), "]"));
  }
  return absl::OkStatus();
}

absl::Status Backend::CheckGatherColumns(const TensorView& out, const TensorView& in, std::span<const int32_t> cols) {
  if (out.Rows() != in.Rows() || out.Cols() != static_cast<int64_t>(cols.size()) || out.dtype != DType::kF32 ||
      in.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        StrCat("GatherColumns: out ", out.ShapeString(), " for ", cols.size(), " columns of in ", in.ShapeString()));
  }
  for (int32_t c : cols) {
    if (c < 0 || c >= in.Cols()) {
      return absl::InvalidArgumentError(StrCat("GatherColumns: column ", c, " is outside [0, ", in.Cols(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::CheckAddBias(const TensorView& out, const TensorView& bias) {
  if (out.dtype != DType::kF32 || bias.dtype != DType::kF32 || bias.NumElements() != out.Cols()) {
    return absl::InvalidArgumentError(StrCat("AddBias: bias ", bias.ShapeString(), " for out ", out.ShapeString()));
  }
  return absl::OkStatus();
}

absl::Status Backend::LinearBatch(std::span<const LinearJob> jobs) {
  for (const LinearJob& job : jobs) CASCADE_RETURN_IF_ERROR(LinearParts(job.outs, job.in, *job.weight, {}));
  return absl::OkStatus();
}

absl::Status CheckScaledRows(const TensorView& out, const TensorView& in, std::span<const int32_t> rows,
                             std::span<const float> scales) {
  if (out.dtype != DType::kF32 || in.dtype != DType::kF32 || out.Cols() != in.Cols() ||
      in.Rows() != static_cast<int64_t>(rows.size()) || rows.size() != scales.size()) {
    return absl::InvalidArgumentError(StrCat("AddScaledRows: out ", out.ShapeString(), ", in ", in.ShapeString(), ", ",
                                             rows.size(), " rows, ", scales.size(), " scales"));
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= out.Rows()) {
      return absl::InvalidArgumentError(StrCat("AddScaledRows: row ", r, " outside [0, ", out.Rows(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSigmoidGatedRows(const TensorView& out, const TensorView& in, const TensorView& gate) {
  if (out.dtype != DType::kF32 || in.dtype != DType::kF32 || gate.dtype != DType::kF32 || out.Rows() != in.Rows() ||
      out.Cols() != in.Cols() || gate.NumElements() != in.Rows()) {
    return absl::InvalidArgumentError(StrCat("AddSigmoidGatedRows: out ", out.ShapeString(), ", in ", in.ShapeString(),
                                             ", gate ", gate.ShapeString()));
  }
  return absl::OkStatus();
}

absl::Status Backend::AddSigmoidGatedRows(TensorView out, const TensorView& in, const TensorView& gate) {
  CASCADE_RETURN_IF_ERROR(CheckSigmoidGatedRows(out, in, gate));
  const int64_t n = in.Rows();
  std::vector<float> scales(n);
  CASCADE_RETURN_IF_ERROR(CopyOut(scales.data(), gate.data, static_cast<size_t>(n) * sizeof(float)));
  for (float& v : scales) v = 1.0f / (1.0f + std::exp(-v));
  std::vector<int32_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  return AddScaledRows(out, in, rows, scales);
}

absl::Status Backend::RopeWriteKv(TensorView q, TensorView k, const TensorView& v, std::span<const int32_t> positions,
                                  const RopeParams& params, const HeadNorms& norms, KvCacheLayer& cache,
                                  std::span<const AttentionSeq> seqs) {
  if (norms.q.data != nullptr) {
    // q [n, heads * head_dim] read as [n * heads, head_dim] rows: RMSNorm each head in place
    // (every backend's RmsNorm reads a row before it writes it).
    const int64_t d = params.head_dim;
    const auto heads = [&](const TensorView& x) {
      return TensorView(x.data, DType::kF32, {x.Rows() * (x.Cols() / d), d}, x.device);
    };
    CASCADE_RETURN_IF_ERROR(RmsNorm(heads(q), heads(q), norms.q, norms.eps));
    CASCADE_RETURN_IF_ERROR(RmsNorm(heads(k), heads(k), norms.k, norms.eps));
  }
  CASCADE_RETURN_IF_ERROR(Rope(q, positions, params));
  CASCADE_RETURN_IF_ERROR(Rope(k, positions, params));
  return WriteKv(cache, k, v, seqs);
}

absl::Status Backend::LinearParts(std::span<const TensorView> outs, const TensorView& in, const PreparedWeight& weight,
                                  std::span<const TensorView> biases) {
  CASCADE_RETURN_IF_ERROR(CheckLinearParts(outs, in, weight, biases));
  if (!weight.reads_source()) return absl::UnimplementedError("LinearParts: this backend has no stacked-weight kernel");
  int64_t row = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const TensorView w = weight.source().RowSlice(row, row + outs[i].Cols());
    CASCADE_RETURN_IF_ERROR(Linear(outs[i], in, w, biases.empty() ? TensorView() : biases[i]));
    row += outs[i].Cols();
  }
  return absl::OkStatus();
}

}  // namespace cascade::kernels
