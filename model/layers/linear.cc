#include "model/layers/linear.h"

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {

absl::StatusOr<Linear> Linear::LoadReplicated(WeightLoader& loader, const std::string& name, int64_t rows,
                                              int64_t cols) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols));
  return Linear(loader.backend(), w, ParallelKind::kReplicated, nullptr);
}

absl::StatusOr<Linear> Linear::LoadColumn(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                          IndexRange out_rows) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols, out_rows));
  return Linear(loader.backend(), w, ParallelKind::kColumn, nullptr);
}

absl::StatusOr<Linear> Linear::LoadRow(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                       IndexRange in_cols, BackendComm* group, IndexRange out_rows) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols, out_rows, in_cols));
  return Linear(loader.backend(), w, ParallelKind::kRow, group);
}

absl::Status Linear::Forward(TensorView out, const TensorView& in, const TensorView& bias) const {
  const bool reduce = kind_ == ParallelKind::kRow && group_ != nullptr;
  if (reduce && bias.data != nullptr) {
    return absl::InvalidArgumentError("a row-parallel linear layer over a TP group takes no bias");
  }
  CASCADE_RETURN_IF_ERROR(backend_->Linear(out, in, *weight_, bias));
  if (!reduce) return absl::OkStatus();
  // Each rank summed over its own input columns only; the sum of the partial sums is the
  // full product.
  return group_->AllReduceSum(out.As<float>(), static_cast<size_t>(out.NumElements()));
}

absl::StatusOr<StackedLinear> StackedLinear::LoadColumn(WeightLoader& loader, std::span<const std::string> names,
                                                        std::span<const int64_t> rows, int64_t cols,
                                                        std::span<const IndexRange> out_rows, bool fuse) {
  StackedLinear s;
  s.backend_ = loader.backend();
  if (fuse) {
    CASCADE_ASSIGN_OR_RETURN(s.stacked_, loader.Stacked(names, rows, cols, out_rows));
  }
  if (s.stacked_ != nullptr) return s;
  for (size_t i = 0; i < names.size(); ++i) {
    CASCADE_ASSIGN_OR_RETURN(Linear part, Linear::LoadColumn(loader, names[i], rows[i], cols, out_rows[i]));
    s.parts_.push_back(part);
  }
  return s;
}

absl::Status StackedLinear::Forward(std::span<const TensorView> outs, const TensorView& in,
                                    std::span<const TensorView> biases) const {
  // One pass over the input for every part (LinearParts checks the shapes).
  if (stacked_ != nullptr) return backend_->LinearParts(outs, in, *stacked_, biases);
  if (outs.size() != parts_.size() || (!biases.empty() && biases.size() != parts_.size())) {
    return absl::InvalidArgumentError(StrCat("stacked linear: ", outs.size(), " outputs and ", biases.size(),
                                             " biases for ", parts_.size(), " parts"));
  }
  for (size_t i = 0; i < parts_.size(); ++i) {
    CASCADE_RETURN_IF_ERROR(parts_[i].Forward(outs[i], in, biases.empty() ? TensorView() : biases[i]));
  }
  return absl::OkStatus();
}

}  // namespace cascade::model
