// The tensor-parallel plan of one rank of a TP group (docs/ARCHITECTURE.md §4): which KV heads,
// query heads, FFN columns and vocabulary rows it owns. Decided once, before loading, and
// passed down to the loader and the forward (STYLE.md "Decide once").
//
//  * Attention, column-parallel by KV-head groups. With tp_size <= n_kv_heads, the KV heads
//    are split as evenly as possible (the first n_kv_heads % tp_size ranks own one more),
//    and each rank owns the query heads that attend to its KV heads. With tp_size >
//    n_kv_heads, KV heads are replicated: rank r uses KV head r * n_kv_heads / tp_size, and
//    the query heads of that KV head are split as evenly as possible among the ranks that
//    share it. The O projection is row-parallel over the owned query heads' columns.
//  * FFN: gate/up own rows [ff_begin, ff_end) of the intermediate size, down the same
//    columns; the split is in whole quantization blocks of the column-sliced weight.
//  * MoE layers: with expert parallelism (`parallel.expert`) a rank holds whole experts
//    [expert_begin, expert_end), split as evenly as possible (a rank may hold none);
//    otherwise it holds every expert cut to columns [ffe_begin, ffe_end) of its FFN, in
//    whole blocks, like the dense FFN. The router is replicated, and Qwen2-MoE's shared
//    expert is always cut by columns [ffs_begin, ffs_end). Either way each rank's output
//    is a partial sum that the group all-reduces once per layer.
//  * All-to-all expert parallelism (`parallel.expert_comm: all_to_all`, ForExpertGroup):
//    attention is data parallel over the group instead (each rank runs its own sequences),
//    so a rank holds everything whole, tp_size 1, but the routed experts: those split as
//    expert parallelism splits them over `expert_ranks` (expert_rank's share).
//  * Embedding and LM head: vocabulary rows [vocab_begin, vocab_end), in chunks of
//    ceil(n_vocab / tp_size) (the last rank's may be shorter), so that logits gather in
//    equal-sized pieces.
//
// Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/model_config.h"

namespace cascade::model {

struct ModelFiles;

struct TpShard {
  int tp_rank = 0;
  int tp_size = 1;
  int64_t head_dim = 0;
  int64_t kv_head_begin = 0, kv_head_end = 0;  // Global KV heads [begin, end) held here.
  int64_t q_head_begin = 0, q_head_end = 0;    // Global query heads [begin, end) computed here.
  int64_t ff_begin = 0, ff_end = 0;            // Intermediate columns [begin, end).
  int64_t vocab_begin = 0, vocab_end = 0;      // Vocabulary rows [begin, end).
  int64_t vocab_chunk = 0;                     // ceil(n_vocab / tp_size): rows per rank, padded.

  int64_t n_kv_heads() const { return kv_head_end - kv_head_begin; }
  int64_t n_heads() const { return q_head_end - q_head_begin; }
  int64_t n_ff() const { return ff_end - ff_begin; }
  int64_t n_vocab() const { return vocab_end - vocab_begin; }
  int64_t q_dim() const { return n_heads() * head_dim; }
  int64_t kv_dim() const { return n_kv_heads() * head_dim; }
  // Whether other ranks hold the same KV head(s) (tp_size > n_kv_heads).
  bool kv_replicated = false;
  // MoE layers (see above); all zero for a dense model.
  bool expert_parallel = false;
  int64_t expert_begin = 0, expert_end = 0;  // Experts held here.
  int64_t ffe_begin = 0, ffe_end = 0;        // Columns of each held expert's FFN.
  int64_t ffs_begin = 0, ffs_end = 0;        // Columns of the shared expert's FFN.
  // All-to-all expert parallelism: this rank's place in its expert group (else 0 of 1).
  bool expert_all_to_all = false;
  int expert_rank = 0, expert_ranks = 1;
  int64_t n_experts() const { return expert_end - expert_begin; }
  int64_t n_ff_expert() const { return ffe_end - ffe_begin; }
  int64_t n_ff_shared() const { return ffs_end - ffs_begin; }
  std::string ToString() const;

  // The plan of `tp_rank` in a group of `tp_size`. `ffn_block` is the element block of the
  // FFN down weight (it is column-sliced: 32 for Q8_0/Q4_0/Q4_1, 256 for K types, 1 for
  // float) and `attn_out_block` that of the attention output weight (its columns are the
  // owned query heads, so every head-group boundary must fall on a block). InvalidArgument
  // with the reason for a layout that cannot split (more ranks than FFN blocks, than query
  // heads, or than vocabulary rows; head-group boundaries inside a block; a bad rank).
  static absl::StatusOr<TpShard> Plan(const ModelConfig& config, int tp_rank, int tp_size, int64_t ffn_block = 1,
                                      int64_t attn_out_block = 1);
  // Fills the MoE fields (nothing for a dense model): `expert_block` is the element block
  // of the experts' down weight (column-sliced without expert parallelism), `shared_block`
  // that of the shared expert's. InvalidArgument when the columns cannot split.
  absl::Status PlanExperts(const ModelConfig& config, bool expert_parallel, int64_t expert_block = 1,
                           int64_t shared_block = 1);
  // Plan() and PlanExperts() with the blocks read from the weight types of layers
  // [first_layer, last_layer) (last_layer -1: through the last) of `files`: the worker's
  // check at start.
  static absl::StatusOr<TpShard> ForFiles(const ModelFiles& files, int64_t first_layer, int64_t last_layer, int tp_rank,
                                          int tp_size, bool expert_parallel = false);
  // All-to-all expert parallelism's plan of rank `rank` of `size` (above): the whole model
  // but for the routed experts. InvalidArgument for a bad rank or a dense model.
  static absl::StatusOr<TpShard> ForExpertGroup(const ModelConfig& config, int rank, int size);
  // Under expert parallelism, the rank of `tp_size` holding expert `expert` of `n_experts`
  // (the split PlanExperts makes).
  static int ExpertRank(int64_t n_experts, int tp_size, int64_t expert);
};

}  // namespace cascade::model
