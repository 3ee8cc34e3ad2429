// The token embedding and the LM head, split over a tensor-parallel group by vocabulary
// rows (docs/ARCHITECTURE.md §4, model/format/tp_shard.h): rank r holds rows [vocab_begin, vocab_end),
// in chunks of TpShard::vocab_chunk so that logits gather in equal-sized pieces. Without a
// group (no TP) a rank holds every row and both are a plain lookup / product.
//
//  * VocabParallelEmbedding: each rank writes the embeddings of the ids it holds and zeros
//    for the others; an all-reduce then adds exactly one non-zero term per element, so
//    every rank gets the full rows.
//  * VocabParallelHead: each rank computes the logits of its vocabulary rows; the group
//    all-gathers them, so every rank returns all the logits (host memory).
//
// With tied embeddings the head borrows the embedding's table. Weights are borrowed from the
// WeightLoader, the backend and the group's BackendComm from the model; all must outlive
// these.
//
// Thread-safety: single owner (the device thread). Forward is a collective with a group:
// every rank calls it with the same batch, in the same order. Workspaces grow to the
// largest batch seen.
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
#include "model/format/tp_shard.h"
#include "model/layers/weight_loader.h"

namespace cascade::model {

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  // The shard's vocabulary rows of table `name` [n_vocab, n_embd]; `group` borrowed, null
  // without TP. `lookup_only`: the table is not also the LM head, so it is read only by
  // row (WeightLoader::LookupTable).
  static absl::StatusOr<VocabParallelEmbedding> Load(WeightLoader& loader, const std::string& name, int64_t n_vocab,
                                                     int64_t n_embd, const TpShard& shard, BackendComm* group,
                                                     bool lookup_only);

  // This rank's rows of the table (null before Load).
  const kernels::PreparedWeight* table() const { return table_; }

  // hidden [n_tokens, n_embd] (backend memory) = the embedding rows of `tokens`.
  // InvalidArgument for an id outside the vocabulary or a bad shape.
  absl::Status Forward(TensorView hidden, std::span<const int32_t> tokens);

 private:
  kernels::Backend* backend_ = nullptr;             // Borrowed.
  const kernels::PreparedWeight* table_ = nullptr;  // Borrowed from the loader.
  int64_t n_vocab_ = 0, n_embd_ = 0;
  int64_t vocab_begin_ = 0, vocab_end_ = 0;
  BackendComm* group_ = nullptr;  // Borrowed; null without TP.
  // With a group: the local ids, each token's workspace row, and the workspace (the local
  // rows, then one row of zeros).
  std::vector<int32_t> local_ids_, rows_;
  std::vector<float> zero_row_;
  std::unique_ptr<kernels::Buffer> ws_;
};

class VocabParallelHead {
 public:
  VocabParallelHead() = default;
  // The head over `weight`: the shard's vocabulary rows of the output matrix [n_vocab,
  // n_embd] (borrowed; the embedding's table when tied). `group` borrowed, null without TP.
  VocabParallelHead(kernels::Backend* backend, const kernels::PreparedWeight* weight, int64_t n_vocab,
                    const TpShard& shard, BackendComm* group);
  // Loads the shard's rows of `name` [n_vocab, n_embd].
  static absl::StatusOr<VocabParallelHead> Load(WeightLoader& loader, const std::string& name, int64_t n_vocab,
                                                int64_t n_embd, const TpShard& shard, BackendComm* group);

  // logits [m, n_vocab] for the normed hidden rows norm [m, n_embd] (backend memory):
  // host memory, or, without a group, also a device backend's memory (logits.device names
  // the device). REQUIRES: logits has that shape.
  absl::Status Forward(TensorView logits, const TensorView& norm);

 private:
  kernels::Backend* backend_ = nullptr;              // Borrowed.
  const kernels::PreparedWeight* weight_ = nullptr;  // Borrowed from the loader.
  int64_t n_vocab_ = 0;
  TpShard shard_;
  BackendComm* group_ = nullptr;         // Borrowed; null without TP.
  std::unique_ptr<kernels::Buffer> ws_;  // The logits where they are not host memory (no TP).
  // With a group: this rank's logits, everyone's, and those copied out of a device.
  std::unique_ptr<kernels::Buffer> local_, all_;
  // The gathered pieces on the host, in staging memory (pinned on a GPU), grown once.
  std::unique_ptr<kernels::Buffer> host_;
};

}  // namespace cascade::model
