#include "model/layers/linear.h"

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {

std::string Linear::InputOrderName(const std::string& name) {
  const std::string suffix = ".weight";
  return name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) + ".input_order" : std::string();
}

absl::StatusOr<std::shared_ptr<const Linear::InputOrder>> Linear::ReadInputOrder(WeightLoader& loader,
                                                                                 const std::string& name,
                                                                                 int64_t cols) {
  const std::string order_name = InputOrderName(name);
  if (order_name.empty() || loader.source().FindTensor(order_name) == nullptr) {
    return std::shared_ptr<const InputOrder>();
  }
  CASCADE_ASSIGN_OR_RETURN(TensorView v, loader.source().Read(order_name));
  if (v.dtype != DType::kI32 || v.NumElements() != cols) {
    return absl::DataLossError(StrCat(loader.source().path(), ": tensor '", order_name, "' must be I32 [1, ", cols,
                                      "], is ", DTypeName(v.dtype), " ", v.ShapeString()));
  }
  auto order = std::make_shared<InputOrder>();
  order->cols.assign(v.As<int32_t>(), v.As<int32_t>() + cols);
  loader.source().ReleasePages(v);
  return std::shared_ptr<const InputOrder>(std::move(order));
}

absl::StatusOr<Linear> Linear::LoadReplicated(WeightLoader& loader, const std::string& name, int64_t rows,
                                              int64_t cols) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols));
  Linear l(loader.backend(), w, ParallelKind::kReplicated, nullptr);
  CASCADE_ASSIGN_OR_RETURN(l.order_, ReadInputOrder(loader, name, cols));
  return l;
}

absl::StatusOr<Linear> Linear::LoadColumn(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                          IndexRange out_rows) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols, out_rows));
  Linear l(loader.backend(), w, ParallelKind::kColumn, nullptr);
  CASCADE_ASSIGN_OR_RETURN(l.order_, ReadInputOrder(loader, name, cols));
  return l;
}

absl::StatusOr<Linear> Linear::LoadRow(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                       IndexRange in_cols, BackendComm* group, IndexRange out_rows) {
  CASCADE_ASSIGN_OR_RETURN(std::shared_ptr<const InputOrder> order, ReadInputOrder(loader, name, cols));
  const int64_t end = in_cols.end < 0 ? cols : in_cols.end;
  if (order != nullptr && (in_cols.begin != 0 || end != cols)) {
    return absl::UnimplementedError(StrCat("'", name,
                                           "' is an act-order (desc_act) GPTQ weight: its inputs cannot be split "
                                           "over tensor-parallel ranks; serve it at TP=1 or use a desc_act=false "
                                           "checkpoint"));
  }
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols, out_rows, in_cols));
  Linear l(loader.backend(), w, ParallelKind::kRow, group);
  l.order_ = std::move(order);
  return l;
}

absl::Status Linear::Forward(TensorView out, const TensorView& in, const TensorView& bias) const {
  const bool reduce = kind_ == ParallelKind::kRow && group_ != nullptr;
  // A row-parallel layer's bias joins the partial sum of rank 0 only: the reduction adds
  // it once.
  const TensorView own_bias = reduce && group_->rank() != 0 ? TensorView() : bias;
  if (order_ != nullptr) {  // Act-order: the weight reads the input's columns in its own order.
    const int64_t n = in.Rows(), cols = static_cast<int64_t>(order_->cols.size());
    CASCADE_RETURN_IF_ERROR(
        kernels::GrowBuffer(*backend_, order_->gathered, static_cast<size_t>(n * cols) * sizeof(float)));
    const TensorView gathered(order_->gathered->data(), DType::kF32, {n, cols}, backend_->device());
    CASCADE_RETURN_IF_ERROR(backend_->GatherColumns(gathered, in, order_->cols));
    CASCADE_RETURN_IF_ERROR(backend_->Linear(out, gathered, *weight_, own_bias));
  } else {
    CASCADE_RETURN_IF_ERROR(backend_->Linear(out, in, *weight_, own_bias));
  }
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
  for (const std::string& name : names) {  // Act-order parts gather their own inputs: not stacked.
    const std::string order = Linear::InputOrderName(name);
    fuse = fuse && (order.empty() || loader.source().FindTensor(order) == nullptr);
  }
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

bool StackedLinear::reorders_input() const {
  for (const Linear& p : parts_) {
    if (p.reorders_input()) return true;
  }
  return false;
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
