#include "model/layers/linear.h"

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {
namespace {

// Row t * size + r of a [n * size, d] view of a token-major buffer is row r * n + t of the
// rank-major one an all-gather of [n, d] per rank gives: the ids that reorder it.
std::vector<int32_t> TokenMajorRows(int64_t n, int size) {
  std::vector<int32_t> ids(static_cast<size_t>(n * size));
  for (int64_t t = 0; t < n; ++t)
    for (int r = 0; r < size; ++r) ids[t * size + r] = static_cast<int32_t>(r * n + t);
  return ids;
}

}  // namespace

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
    return LoadRowsOfWholeInput(loader, name, rows, cols, in_cols, group, out_rows, std::move(order));
  }
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w, loader.Matrix(name, rows, cols, out_rows, in_cols));
  Linear l(loader.backend(), w, ParallelKind::kRow, group);
  l.order_ = std::move(order);
  return l;
}

absl::StatusOr<Linear> Linear::LoadRowsOfWholeInput(WeightLoader& loader, const std::string& name, int64_t rows,
                                                    int64_t cols, IndexRange in_cols, BackendComm* group,
                                                    IndexRange out_rows, std::shared_ptr<const InputOrder> order) {
  const auto refuse = [&](std::string_view why) {
    return absl::UnimplementedError(StrCat("'", name, "' is an act-order (desc_act) GPTQ weight split by its inputs ",
                                           why, "; serve it at TP=1 or use a desc_act=false checkpoint"));
  };
  if (group == nullptr) return refuse("without a group to gather them (an expert's down: use expert parallelism)");
  const int size = group->size(), rank = group->rank();
  const int64_t per_rank = cols / size, row0 = out_rows.begin;
  const int64_t n_out = (out_rows.end < 0 ? rows : out_rows.end) - row0;
  if (cols % size != 0 || in_cols.begin != rank * per_rank || in_cols.end != (rank + 1) * per_rank) {
    return refuse(StrCat("unevenly (columns [", in_cols.begin, ", ", in_cols.end, ") of ", cols, " on rank ", rank,
                         " of ", size, ")"));
  }
  if (n_out % size != 0) return refuse(StrCat("with ", n_out, " outputs over ", size, " ranks"));
  const int64_t mine = n_out / size;
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w,
                           loader.Matrix(name, rows, cols, IndexRange{row0 + rank * mine, row0 + (rank + 1) * mine}));
  Linear l(loader.backend(), w, ParallelKind::kRow, group);
  l.order_ = std::move(order);
  l.whole_input_ = std::make_shared<RowsOfWholeInput>();
  return l;
}

absl::Status Linear::ForwardRowsOfWholeInput(TensorView out, const TensorView& in, const TensorView& bias) const {
  kernels::Backend& b = *backend_;
  const int size = group_->size();
  const int64_t n = in.Rows(), part = in.Cols(), n_in = part * size, mine = weight_->n_out();
  if (n_in != static_cast<int64_t>(order_->cols.size()) || out.Rows() != n || out.Cols() != mine * size) {
    return absl::InvalidArgumentError(StrCat("linear over the gathered inputs: in ", in.ShapeString(), " on ", size,
                                             " ranks, out ", out.ShapeString(), " for ", mine, " rows a rank"));
  }
  const auto grow = [&](std::unique_ptr<kernels::Buffer>& buf, int64_t floats) {
    return kernels::GrowBuffer(b, buf, static_cast<size_t>(floats) * sizeof(float));
  };
  const RowsOfWholeInput& w = *whole_input_;
  CASCADE_RETURN_IF_ERROR(grow(w.inputs, n * n_in));
  CASCADE_RETURN_IF_ERROR(grow(w.whole, n * n_in));
  CASCADE_RETURN_IF_ERROR(grow(w.rows, n * mine));
  CASCADE_RETURN_IF_ERROR(grow(w.all_rows, n * mine * size));
  const auto view = [&](const kernels::Buffer& buf, int64_t r, int64_t c) {
    return TensorView(buf.data(), DType::kF32, {r, c}, b.device());
  };
  const std::vector<int32_t> token_major = TokenMajorRows(n, size);
  // Every rank's input share, rank-major, then token-major: the layer's whole input.
  CASCADE_RETURN_IF_ERROR(group_->AllGather(in.data, static_cast<size_t>(n * part) * sizeof(float), w.inputs->data()));
  CASCADE_RETURN_IF_ERROR(b.Embedding(view(*w.whole, n * size, part), view(*w.inputs, size * n, part), token_major));
  // This rank's rows over it, in the weight's input order.
  CASCADE_RETURN_IF_ERROR(grow(order_->gathered, n * n_in));
  const TensorView gathered = view(*order_->gathered, n, n_in);
  CASCADE_RETURN_IF_ERROR(b.GatherColumns(gathered, view(*w.whole, n, n_in), order_->cols));
  CASCADE_RETURN_IF_ERROR(b.Linear(view(*w.rows, n, mine), gathered, *weight_, {}));
  // Every rank's rows, token-major into out; every rank adds the whole bias.
  CASCADE_RETURN_IF_ERROR(
      group_->AllGather(w.rows->data(), static_cast<size_t>(n * mine) * sizeof(float), w.all_rows->data()));
  const TensorView out_rows(out.data, DType::kF32, {n * size, mine}, out.device);
  CASCADE_RETURN_IF_ERROR(b.Embedding(out_rows, view(*w.all_rows, size * n, mine), token_major));
  return bias.data != nullptr ? b.AddBias(out, bias) : absl::OkStatus();
}

absl::Status Linear::Forward(TensorView out, const TensorView& in, const TensorView& bias) const {
  if (whole_input_ != nullptr) return ForwardRowsOfWholeInput(out, in, bias);
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
