// Linear layers that know how they are split over a tensor-parallel group (docs/ARCHITECTURE.md §4),
// so the model code calls them the same way with or without TP:
//
//  * kReplicated: every rank holds the whole weight and computes every output.
//  * kColumn: a rank holds rows [r0, r1) of the weight [n_out, n_in], i.e. its share of the
//    outputs, each a complete sum (Q/K/V heads, gate/up FFN columns). Nothing to reduce.
//  * kRow: a rank holds columns [c0, c1), i.e. its share of the inputs (the O projection
//    over its heads, down over its FFN columns), and computes partial sums of every output;
//    Forward all-reduces them over the group so every rank returns the full result.
//    An act-order GPTQ weight cannot be split by its inputs (its groups mix inputs from
//    every rank's share): such a layer instead holds rows [r * n_out / size, ...) over all
//    inputs, gathers every rank's input share (an all-gather), computes its rows, and
//    all-gathers the rows, so every rank again returns the full result.
//
// `StackedLinear` is column-parallel projections of one input (Q/K/V, gate/up): one stacked
// weight and one Backend::LinearParts dispatch where the loader can stack them, the separate
// weights otherwise; callers do not see which. Both give bit-identical results.
//
// Weights are borrowed from the WeightLoader that loaded them, the backend and the group's
// BackendComm from the model; all must outlive the layer.
//
// Thread-safety: single owner (the device thread); Forward calls the backend and, for kRow,
// the group's communicator, so ranks must call in the same order (a collective).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "model/backend_comm.h"
#include "model/layers/weight_loader.h"

namespace cascade::model {

enum class ParallelKind { kReplicated, kColumn, kRow };

class Linear {
 public:
  Linear() = default;
  // The whole of weight `name` [rows, cols].
  static absl::StatusOr<Linear> LoadReplicated(WeightLoader& loader, const std::string& name, int64_t rows,
                                               int64_t cols);
  // Output rows `out_rows` of weight `name` [rows, cols] (this rank's outputs).
  static absl::StatusOr<Linear> LoadColumn(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                           IndexRange out_rows);
  // Input columns `in_cols` of weight `name` [rows, cols] (whole blocks of its type); the
  // partial sums are all-reduced over `group` (borrowed; null without TP, when the slice
  // is the whole weight).
  // `out_rows` keeps only those rows of the stored tensor (one expert of a merged one).
  static absl::StatusOr<Linear> LoadRow(WeightLoader& loader, const std::string& name, int64_t rows, int64_t cols,
                                        IndexRange in_cols, BackendComm* group, IndexRange out_rows = {});

  ParallelKind kind() const { return kind_; }
  // Whether the weight's inputs are a reordering of the layer's (act-order GPTQ).
  bool reorders_input() const { return order_ != nullptr; }
  // That order (column j of the weight multiplies input column order[j]); empty without one.
  std::span<const int32_t> input_order() const {
    return order_ == nullptr ? std::span<const int32_t>() : std::span<const int32_t>(order_->cols);
  }
  const kernels::PreparedWeight& weight() const { return *weight_; }

  // out [n_tokens, n_out] = in [n_tokens, n_in] * weight^T (+ bias [n_out] when it has
  // data), all-reduced over the group for kRow (whose bias rank 0 alone adds, before the
  // reduction). An act-order GPTQ weight (its
  // file's `P.input_order`, model/format/int4_checkpoint.h) multiplies the input's columns
  // gathered in that order (Backend::GatherColumns); split by its inputs over a group it
  // runs as the rows of the whole input (above): LoadRow then needs the inputs and the
  // outputs split evenly over the ranks, in rank order, and a group (an expert's down,
  // whose layer reduces, cannot: Unimplemented, naming expert parallelism).
  absl::Status Forward(TensorView out, const TensorView& in, const TensorView& bias = {}) const;

 private:
  Linear(kernels::Backend* backend, const kernels::PreparedWeight* weight, ParallelKind kind, BackendComm* group)
      : backend_(backend), weight_(weight), kind_(kind), group_(group) {}
  friend class StackedLinear;  // Reads its parts' input orders.
  // The input order of an act-order weight, and the buffer its gathered input goes to
  // (shared by copies of the layer, grown to the largest batch).
  struct InputOrder {
    std::vector<int32_t> cols;
    mutable std::unique_ptr<kernels::Buffer> gathered;
  };
  // The name of weight `name`'s input order (`P.input_order` for `P.weight`; empty for
  // another name), and the order itself if its file has one (null otherwise).
  static std::string InputOrderName(const std::string& name);
  static absl::StatusOr<std::shared_ptr<const InputOrder>> ReadInputOrder(WeightLoader& loader, const std::string& name,
                                                                          int64_t cols);
  // An act-order row-parallel layer's rows over the whole input (see kRow above), and the
  // buffers of its two all-gathers (shared by copies of the layer, grown to the batch).
  struct RowsOfWholeInput {
    mutable std::unique_ptr<kernels::Buffer> inputs, whole, rows, all_rows;
  };
  static absl::StatusOr<Linear> LoadRowsOfWholeInput(WeightLoader& loader, const std::string& name, int64_t rows,
                                                     int64_t cols, IndexRange in_cols, BackendComm* group,
                                                     IndexRange out_rows, std::shared_ptr<const InputOrder> order);
  absl::Status ForwardRowsOfWholeInput(TensorView out, const TensorView& in, const TensorView& bias) const;

  kernels::Backend* backend_ = nullptr;              // Borrowed.
  const kernels::PreparedWeight* weight_ = nullptr;  // Borrowed from the loader.
  ParallelKind kind_ = ParallelKind::kReplicated;
  BackendComm* group_ = nullptr;                         // Borrowed; kRow with TP only.
  std::shared_ptr<const InputOrder> order_;              // Act-order GPTQ only.
  std::shared_ptr<const RowsOfWholeInput> whole_input_;  // Act-order kRow split over a group only.
};

class StackedLinear {
 public:
  StackedLinear() = default;
  // Column-parallel parts of one input: part i keeps rows `out_rows[i]` of `names[i]`
  // [rows[i], cols]. Stacked into one weight when `fuse` and WeightLoader::Stacked can
  // (its conditions), loaded one by one otherwise (with Matrix's errors).
  static absl::StatusOr<StackedLinear> LoadColumn(WeightLoader& loader, std::span<const std::string> names,
                                                  std::span<const int64_t> rows, int64_t cols,
                                                  std::span<const IndexRange> out_rows, bool fuse);

  // Whether the parts run as one stacked weight, and that weight (for Backend::LinearBatch).
  bool stacked() const { return stacked_ != nullptr; }
  const kernels::PreparedWeight* stacked_weight() const { return stacked_; }
  // Whether some part's weight reorders its input (act-order GPTQ: never stacked).
  bool reorders_input() const;
  // Part i's weight when the parts did not stack.
  const kernels::PreparedWeight& part_weight(size_t i) const { return parts_[i].weight(); }
  // Part i's input order (Linear::input_order) when the parts did not stack.
  std::span<const int32_t> part_input_order(size_t i) const { return parts_[i].input_order(); }

  // outs[i] [n_tokens, rows of part i] = in * part i^T (+ biases[i] when that view has
  // data); `biases` is empty or has one view per part.
  absl::Status Forward(std::span<const TensorView> outs, const TensorView& in,
                       std::span<const TensorView> biases) const;

 private:
  kernels::Backend* backend_ = nullptr;               // Borrowed.
  const kernels::PreparedWeight* stacked_ = nullptr;  // Borrowed from the loader; or:
  std::vector<Linear> parts_;                         // the parts, when they did not stack.
};

}  // namespace cascade::model
