#include "model/layers/vocab_parallel.h"

#include <algorithm>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {
namespace {

// A view of `rows` x `cols` f32 at the start of a workspace buffer.
TensorView View(const kernels::Backend& backend, const kernels::Buffer& b, int64_t rows, int64_t cols) {
  return TensorView(b.data(), DType::kF32, {rows, cols}, backend.device());
}

}  // namespace

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Load(WeightLoader& loader, const std::string& name,
                                                                    int64_t n_vocab, int64_t n_embd,
                                                                    const TpShard& shard, BackendComm* group,
                                                                    bool lookup_only) {
  VocabParallelEmbedding e;
  const IndexRange rows{shard.vocab_begin, shard.vocab_end};
  CASCADE_ASSIGN_OR_RETURN(e.table_, lookup_only ? loader.LookupTable(name, n_vocab, n_embd, rows)
                                                 : loader.Matrix(name, n_vocab, n_embd, rows));
  e.backend_ = loader.backend();
  e.n_vocab_ = n_vocab;
  e.n_embd_ = n_embd;
  e.vocab_begin_ = shard.vocab_begin;
  e.vocab_end_ = shard.vocab_end;
  e.group_ = group;
  return e;
}

absl::Status VocabParallelEmbedding::Forward(TensorView hidden, std::span<const int32_t> tokens) {
  if (group_ == nullptr) return backend_->Embedding(hidden, *table_, tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (hidden.Rows() != n || hidden.Cols() != n_embd_) {
    return absl::InvalidArgumentError(StrCat("embedding: out ", hidden.ShapeString(), " for ", n, " ids"));
  }
  // Rows [0, k) of the workspace are the k local ids' embeddings, row k is zeros; hidden's
  // row i is then workspace row rows_[i], gathered by the backend (no host loop over
  // backend memory).
  local_ids_.clear();
  rows_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[i];
    if (id < 0 || id >= n_vocab_) {  // Every rank sees the same ids, so all refuse together.
      return absl::InvalidArgumentError(StrCat("token id ", id, " is outside the vocabulary [0, ", n_vocab_, ")"));
    }
    const bool local = id >= vocab_begin_ && id < vocab_end_;
    if (local) local_ids_.push_back(static_cast<int32_t>(id - vocab_begin_));
    rows_.push_back(local ? static_cast<int32_t>(local_ids_.size() - 1) : -1);
  }
  const int64_t k = static_cast<int64_t>(local_ids_.size());
  for (int32_t& row : rows_) {
    if (row < 0) row = static_cast<int32_t>(k);
  }
  kernels::Backend& b = *backend_;
  const size_t row_bytes = static_cast<size_t>(n_embd_) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, ws_, static_cast<size_t>(k + 1) * row_bytes));
  if (k > 0) CASCADE_RETURN_IF_ERROR(b.Embedding(View(b, *ws_, k, n_embd_), *table_, local_ids_));
  zero_row_.assign(n_embd_, 0.0f);
  CASCADE_RETURN_IF_ERROR(b.CopyIn(ws_->f32() + k * n_embd_, zero_row_.data(), row_bytes));
  CASCADE_RETURN_IF_ERROR(b.Embedding(hidden, View(b, *ws_, k + 1, n_embd_), rows_));
  return group_->AllReduceSum(hidden.As<float>(), static_cast<size_t>(hidden.NumElements()));
}

VocabParallelHead::VocabParallelHead(kernels::Backend* backend, const kernels::PreparedWeight* weight, int64_t n_vocab,
                                     const TpShard& shard, BackendComm* group)
    : backend_(backend), weight_(weight), n_vocab_(n_vocab), shard_(shard), group_(group) {}

absl::StatusOr<VocabParallelHead> VocabParallelHead::Load(WeightLoader& loader, const std::string& name,
                                                          int64_t n_vocab, int64_t n_embd, const TpShard& shard,
                                                          BackendComm* group) {
  CASCADE_ASSIGN_OR_RETURN(const kernels::PreparedWeight* w,
                           loader.Matrix(name, n_vocab, n_embd, {shard.vocab_begin, shard.vocab_end}));
  return VocabParallelHead(loader.backend(), w, n_vocab, shard, group);
}

absl::Status VocabParallelHead::Forward(TensorView logits, const TensorView& norm) {
  kernels::Backend& b = *backend_;
  const int64_t m = norm.Rows();
  const size_t logits_bytes = static_cast<size_t>(m * n_vocab_) * sizeof(float);
  if (group_ == nullptr) {
    // Host memory on a host backend, or a device's own memory: written where it is.
    if (b.host_memory() || logits.device.kind != DeviceKind::kCpu) return b.Linear(logits, norm, *weight_, {});
    CASCADE_RETURN_IF_ERROR(GrowBuffer(b, ws_, logits_bytes));
    CASCADE_RETURN_IF_ERROR(b.Linear(View(b, *ws_, m, n_vocab_), norm, *weight_, {}));
    return b.CopyOut(logits.data, ws_->data(), logits_bytes);
  }
  // This rank's [m, n_vocab_local] logits, gathered in equal pieces of [m, vocab_chunk]
  // (the last rank's rows are shorter; its padding is never read).
  const int64_t chunk = shard_.vocab_chunk, local = shard_.n_vocab(), tp = shard_.tp_size;
  const size_t piece = static_cast<size_t>(m * chunk) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, local_, piece));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, all_, tp * piece));
  CASCADE_RETURN_IF_ERROR(b.Linear(View(b, *local_, m, local), norm, *weight_, {}));
  CASCADE_RETURN_IF_ERROR(group_->AllGather(local_->data(), piece, all_->data()));
  const float* all = all_->f32();
  if (!b.host_memory()) {
    CASCADE_RETURN_IF_ERROR(GrowBuffer(b, host_, tp * piece, /*staging=*/true));
    CASCADE_RETURN_IF_ERROR(b.CopyOut(host_->data(), all, tp * piece));
    all = host_->f32();
  }
  for (int64_t r = 0; r < tp; ++r) {
    const int64_t v0 = r * chunk, len = std::min(chunk, n_vocab_ - v0);
    const float* src = all + r * m * chunk;
    for (int64_t i = 0; i < m; ++i) std::copy_n(src + i * len, len, logits.As<float>() + i * n_vocab_ + v0);
  }
  return absl::OkStatus();
}

}  // namespace cascade::model
