// The mixture-of-experts FFN of one layer (Mixtral, Qwen2-MoE, Qwen3-MoE), beside the dense
// MLP (docs/ARCHITECTURE.md §4):
//
//  1. Router: logits [n, n_experts] = x * router^T (replicated on every rank, so every rank
//     routes alike), read back to the host; per token the softmax over all experts, the
//     top n_experts_used, their probabilities renormalised to sum 1 when the family does
//     (ModelConfig::norm_topk_prob).
//  2. Tokens grouped by expert: the rows of x for each held expert are gathered into one
//     contiguous block (one Embedding gather over x as an f32 table), so each active expert
//     runs one stacked gate/up matmul and one down matmul over its tokens: a grouped GEMM
//     for prefill, k GEMVs for a decode token. Experts no token chose cost nothing.
//  3. One weighted scatter (Backend::AddScaledRows) adds every expert row back into its
//     token's row, scaled by its routing weight; Qwen2-MoE's shared expert adds its output
//     scaled by sigmoid(shared gate) (Backend::AddSigmoidGatedRows).
//
// On the device: where the backend prepared this layer's experts (Backend::PrepareExperts:
// the CUDA backend, for the block types with an integer form and the float types, with
// act-order GPTQ's input orders, gpt-oss's biases and clamped SwiGLU) and runs the batch
// there now (RoutesExperts: the tuned kernels, any batch), steps 1-3 run as one backend
// call from the router's logits in device memory (Backend::RoutedExperts), with no copy to
// the host; the counts of each expert's tokens go to a device counter instead
// (`device_load`). A shared expert then runs as on the host path; all-to-all dispatch
// keeps the host path.
//
// Tensor parallelism (TpShard): with expert parallelism a rank holds whole experts
// [expert_begin, expert_end) and computes only the routed tokens of those; otherwise it
// holds every expert's FFN columns [ffe_begin, ffe_end). Either way a rank's output is a
// partial sum, all-reduced once per layer over the group (the existing collective).
//
// Redundant experts (EPLB, `SetReplicas`): under expert parallelism other ranks may hold
// replicas of an expert beside its own rank. Every rank routes alike, so each splits an
// expert's tokens among its holders the same way without talking: the j-th (token, expert)
// pair of the batch, in token order, goes to holder j mod (its holders), its own rank
// first. Each pair is still computed once, so the all-reduced sum is the same FFN output.
//
// All-to-all expert parallelism (TpShard::expert_all_to_all; parallel.expert_comm: all_to_all;
// model/layers/moe_all_to_all.cc): attention is data parallel over the group, so each rank
// brings only its own sequences' tokens. Each rank routes its tokens, tells every rank how
// many tokens and (token, expert) pairs it will send there (the counts go first), then
// dispatches each token's row once to every rank holding one of its experts, with the
// pairs; each rank runs its experts over what it received, sums each token's experts
// (weighted), and the combine sends one row per token back to the rank it came from, which
// adds them to its residual stream. A rank with no tokens in a step still takes part. With
// replicas (SetReplicas), a rank holding one of a token's experts keeps that pair, and the
// other ranks send an expert's pairs to its holders in turn.
//
// Weights are borrowed from the WeightLoader, the backend and group from the model.
// Thread-safety: single owner (the device thread); Forward is a collective over the group.
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
#include "model/format/model_files.h"
#include "model/format/tp_shard.h"
#include "model/layers/linear.h"
#include "model/layers/weight_loader.h"

namespace cascade::model {

// Workspaces of MoeBlock::Forward, shared by every MoE layer of a stage and grown to the
// largest batch seen.
struct MoeScratch {
  std::unique_ptr<kernels::Buffer> logits, shared_logits;  // Router outputs (backend memory).
  // Grouped rows (backend memory). The experts' outputs go into `x`, over the inputs they
  // were computed from (dead once gate/up have run): a 512-token prefill of a top-8 MoE at
  // hidden 2048 saves 32 MiB.
  std::unique_ptr<kernels::Buffer> x, gate, up;
  std::unique_ptr<kernels::Buffer> partial;  // The rank's partial sum under TP.
  std::vector<float> host_logits, zeros;
  std::vector<int32_t> token_of_row;  // Grouped row -> token.
  std::vector<float> weight_of_row;   // Grouped row -> routing weight.
  std::vector<int64_t> expert_rows;   // Held expert -> its first grouped row (+ end).
  // All-to-all: the rows dispatched and received, the experts' sums sent back and those
  // received (backend memory), and the counts and pairs on their way (backend memory).
  std::unique_ptr<kernels::Buffer> sent, received, summed, combined, meta_out, meta_in;
  std::vector<int32_t> sent_token;  // Dispatched row -> own token, rank by rank.
  std::vector<float> ones;          // The combine's scale (1 per row).
};

// The top `k` experts of one token's router logits [n_experts] and their weights: the
// softmax probabilities over all experts, renormalised over the chosen k when `norm`.
// Ties go to the lower expert id. `experts` and `weights` receive k entries each.
void RouteToken(std::span<const float> logits, int64_t k, bool norm, std::span<int32_t> experts,
                std::span<float> weights);

class MoeBlock {
 public:
  MoeBlock() = default;
  // Layer `layer`'s router, this rank's experts (or expert columns) and shared expert.
  // NotFound / InvalidArgument naming a missing or misshapen tensor.
  static absl::StatusOr<MoeBlock> Load(WeightLoader& loader, const ModelFiles& files, int64_t layer,
                                       const TpShard& shard, BackendComm* group, bool fuse);

  // hidden [n, n_embd] += the FFN's output for x [n, n_embd] (the normed hidden state),
  // complete on every rank of the group. `load` [n_experts] gains, per expert, the number
  // of tokens routed to it (every expert's, held here or not).
  // With the device path, `device_load` (int32 [n_experts], backend memory; or null) gains
  // the counts instead of `load`.
  absl::Status Forward(TensorView hidden, const TensorView& x, MoeScratch& scratch, std::span<int64_t> load,
                       void* device_load = nullptr) const;
  // Expert parallelism's replicas (above): `extra` lists (expert, rank) pairs beyond each
  // expert's own rank, replacing the previous list; this rank loads the experts it newly
  // holds through `w` (row ranges of the file) and drops those it no longer does. The
  // device path stays off while any replica is placed. InvalidArgument for a pair outside
  // the group or the experts, naming an expert's own rank, or twice; FailedPrecondition
  // without expert parallelism.
  absl::Status SetReplicas(WeightLoader& w, const ModelFiles& files, int64_t layer,
                           std::span<const std::pair<int32_t, int32_t>> extra);
  // Whether some batches may run on the device path (its experts are prepared for it).
  bool routes_on_device() const { return device_experts_ != nullptr; }
  // Why not, when not (the backend's refusal, or all-to-all dispatch); empty when it does.
  const std::string& host_routing_reason() const { return host_reason_; }
  // Bytes of the routed experts' weights held here (as read from the file).
  int64_t expert_bytes() const { return expert_bytes_; }

 private:
  struct Expert {
    StackedLinear gate_up;  // This rank's columns of the expert's gate and up.
    Linear down;            // The same columns of down: a partial sum, reduced by the block.
    // gpt-oss: the biases of this rank's gate and up columns, and down's on the rank that
    // adds it (every expert-parallel rank; rank 0 of a column-split group); else empty.
    TensorView gate_bias, up_bias, down_bias;
  };
  // Reads held expert `e` of layer `l` whole or in columns [f0, f1), its biases included.
  static absl::StatusOr<Expert> LoadExpert(WeightLoader& w, const ModelFiles& files, int64_t l, int64_t e, int64_t f0,
                                           int64_t f1, bool adds_down, bool fuse);
  // Reads expert `e`'s biases (ModelConfig::expert_bias) for columns [f0, f1).
  static absl::Status LoadExpertBiases(WeightLoader& w, const ModelFiles& files, int64_t layer, int64_t e, int64_t f0,
                                       int64_t f1, bool adds_down, Expert& ex);
  // Runs the held experts' activation over their grouped rows (gate = act(gate, up)).
  absl::Status Activate(const TensorView& gate, const TensorView& up) const;
  // The top-k experts and weights of each of the n tokens of x (router on the backend, top-k
  // on the host): chosen and weights [n * top_k].
  absl::Status RouteTokens(const TensorView& x, int64_t n, MoeScratch& s, std::vector<int32_t>& chosen,
                           std::vector<float>& weights) const;
  // All-to-all expert parallelism's Forward (above; moe_all_to_all.cc).
  absl::Status ForwardAllToAll(TensorView hidden, const TensorView& x, MoeScratch& s, std::span<int64_t> load) const;
  // Moves blocks of `unit` bytes between the group's ranks: count_out[q] units to rank q
  // from `out`, count_in[q] from q into `in` (backend memory), as the counts say.
  absl::Status Exchange(const void* out, std::span<const int64_t> count_out, void* in,
                        std::span<const int64_t> count_in, size_t unit) const;
  // Routes every token and groups the rows of held experts (scratch's host vectors).
  absl::Status Route(const TensorView& x, int64_t n, MoeScratch& s, std::span<int64_t> load) const;
  // Runs the held experts over their grouped rows and scatters them into `acc`.
  absl::Status RunExperts(TensorView acc, const TensorView& x, MoeScratch& s) const;
  // Qwen2-MoE: acc += sigmoid(shared gate) * shared expert(x).
  absl::Status RunShared(TensorView acc, const TensorView& x, MoeScratch& s) const;
  // Workspaces for n tokens and `grouped` rows of experts (-1: n * top_k).
  absl::Status Grow(MoeScratch& s, int64_t n, int64_t grouped = -1) const;
  // Backend::PrepareExperts over the held experts; Unimplemented leaves the host path.
  absl::Status PrepareDeviceExperts();
  TensorView View(const kernels::Buffer& b, int64_t rows, int64_t cols) const;

  kernels::Backend* backend_ = nullptr;  // Borrowed.
  BackendComm* group_ = nullptr;         // Borrowed; null without TP.
  int64_t n_embd_ = 0, n_experts_ = 0, top_k_ = 0, expert_begin_ = 0, n_ff_ = 0, n_ff_shared_ = 0;
  bool norm_topk_ = false;
  float swiglu_limit_ = 0, swiglu_alpha_ = 0;  // gpt-oss's clamped SwiGLU when the limit is > 0.
  TensorView router_bias_;                     // gpt-oss: [n_experts], the router's bias; else empty.
  int64_t expert_bytes_ = 0;
  Linear router_;
  std::vector<Expert> experts_;  // Held experts: [expert_begin_, ...) and then replicas.
  // Expert parallelism: the expert each held slot is, the slot of each expert held here
  // (-1: none), and each expert's holders in turn (its own rank first; empty without
  // replicas, when its own rank holds it alone).
  std::vector<int64_t> expert_of_slot_;
  std::vector<int32_t> slot_of_expert_;
  std::vector<std::vector<int32_t>> holders_;
  int rank_ = 0, n_ranks_ = 1;
  bool expert_parallel_ = false, fuse_ = true;
  bool all_to_all_ = false;  // TpShard::expert_all_to_all (with a group).
  Linear shared_router_;     // [1, n_embd]; with a shared expert only.
  Expert shared_;
  std::unique_ptr<kernels::PreparedExperts> device_experts_;  // Null: host routing only.
  std::string host_reason_;                                   // Why device_experts_ is null.
};

}  // namespace cascade::model
