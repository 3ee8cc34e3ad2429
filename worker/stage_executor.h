// Executes the steps of one pipeline stage: the stage's layers over the paged KV cache,
// hidden states received from the previous stage and sent to the next over
// comm::Communicator, and on the last stage the LM head and per-sequence sampling.
// Steps must arrive in the same order on every stage (the coordinator's step order), so
// each hand-off pairs up without any extra protocol.
//
// Thread-safety: single owner (the worker's step thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/cluster.pb.h"
#include "comm/communicator.h"
#include "kernels/ops.h"
#include "model/backend_comm.h"
#include "model/format/model_files.h"
#include "model/kv_cache.h"
#include "model/step_sampler.h"
#include "model/transformer.h"
#include "worker/kv_channel.h"

namespace cascade::worker {

struct StageExecutorOptions {
  std::string model_path;   // GGUF file or HF directory.
  int64_t first_layer = 0;  // Layers [first_layer, last_layer).
  int64_t last_layer = 0;
  int stage = 0;  // Pipeline stage index.
  int n_stages = 1;
  int64_t kv_blocks = 0;  // Blocks in this stage's KV cache.
  // Slots of the host tier of the prefix cache (StepRequest.kv_moves), in the backend's
  // staging memory (pinned on a GPU). 0: none.
  int64_t host_kv_blocks = 0;
  // This worker's rank in the KV group of disaggregated serving (LoadShard's kv_rank): it
  // runs the pieces of StepRequest.kv_transfers with that rank.
  int kv_rank = 0;
  int64_t kv_block_size = 16;
  DType kv_dtype = DType::kF16;  // The KV cache's element type (f32, f16, q8_0).
  int n_threads = 1;             // CPU compute threads.
  Device device;                 // cpu, or cuda:N (weights, KV cache and activations there).
  int tp_rank = 0;               // Rank in the stage's tensor-parallel group.
  int tp_size = 1;               // Its size (1: no tensor parallelism).
  bool expert_parallel = false;  // MoE layers: whole experts per TP rank (TpShard).
  // Its all-to-all form (model::StageOptions::expert_all_to_all): this rank runs only the
  // sequences of its lane (StepSequence.lane == tp_rank), hands them to the same rank of
  // the next stage, and on the last stage samples them itself.
  bool expert_all_to_all = false;
  // Hand-off under TP (transport.pp_handoff): false, `split`: each TP rank sends its 1/t
  // of the rows and the next stage all-gathers; true, `full`: each sends every row.
  bool full_handoff = false;
  // Last stage on a GPU without TP: sample where the logits are (model/step_sampler.h)
  // rather than copying them to the host (scheduler.device_sampling).
  bool device_sampling = true;
  // Decode steps as CUDA graphs on a GPU (model/graph_step.h; scheduler.cuda_graphs).
  bool cuda_graphs = false;
  // A CPU worker's prefills of FP8 weights round activations to bf16 where the CPU
  // multiplies bf16 pairs (kernels::CpuBackendOptions; scheduler.cpu_prefill_activations).
  bool cpu_bf16_prefill = false;
  // A drafter (speculative decoding): one process holding layers [first_layer,
  // last_layer) of its model and the model's head (an early exit when last_layer is not
  // the last layer). Its steps carry `propose`; see Draft.
  bool draft = false;
  // scheduler.kv_policy's sink + window (model::StageOptions): block-table entries the
  // window has left behind may be -1, and positions may pass the cache's capacity.
  int64_t kv_window_tokens = 0;
  int64_t kv_sink_tokens = 0;
  // Fault injection for tests (`cascade-worker --refuse-token-for-testing ID`): refuse,
  // as malformed, every step that feeds token `refuse_token`. -1: off.
  int32_t refuse_token = -1;
  // Fault injection for tests: sleep this long before each KV transfer this worker sends.
  int kv_send_delay_ms = 0;
};

class StageExecutor {
 public:
  // Opens the model and loads the stage (reading only its tensors, and with TP only this
  // rank's shard); `progress` gets the fraction of weight bytes faulted in. `pp_comm`
  // (borrowed, null when n_stages is 1) links this TP rank across the stages: its rank is
  // the stage. `tp_comm` (borrowed, null when tp_size is 1) is the stage's TP group.
  // Hand-off between stages of TP size t: TP rank r sends rows [r*c, (r+1)*c) (c =
  // ceil(n/t)) to TP rank r of the next stage, which all-gathers them inside its group, so
  // each cross-stage link carries 1/t of the bytes; with `full_handoff` it sends all n
  // rows and the next stage gathers nothing. On cuda:N the communicators may work on
  // host memory (UCX: staged through host copies) or GPU memory (NCCL).
  // `backend` (optional) is the one to run on; by default one is made for options.device.
  static absl::StatusOr<std::unique_ptr<StageExecutor>> Create(const StageExecutorOptions& options,
                                                               comm::Communicator* pp_comm, comm::Communicator* tp_comm,
                                                               const std::function<void(double)>& progress,
                                                               std::unique_ptr<kernels::Backend> backend = nullptr);

  // Runs one step. On the last stage the result carries a sampled token for every
  // sequence with `sample` set, or, for a verification (`n_draft` > 0), the accepted
  // drafts and the correction or bonus token. A drafter answers `propose` drafted tokens
  // per sequence. InvalidArgument for a malformed step (bad ids, block tables, n_draft or
  // propose out of range), found before any compute or data-plane traffic and by every
  // stage alike; errors after that never use InvalidArgument (Internal instead), so a
  // refusal always means the whole pipeline refused. The communicator's error when a
  // peer is gone.
  absl::StatusOr<v1::StepResult> Execute(const v1::StepRequest& step);

  int64_t weight_bytes() const { return transformer_->weight_bytes(); }
  int64_t kv_bytes() const { return cache_->bytes(); }
  // Disaggregated serving: the group StepRequest.kv_transfers move KV over (borrowed;
  // null: none, and a step with transfers fails them).
  void set_kv_comm(comm::Communicator* comm);
  // How StepRequest.kv_join meets a new KV group (the worker's rendezvous); unset: refused.
  using KvConnect =
      std::function<absl::StatusOr<std::unique_ptr<comm::Communicator>>(const std::string& group, int rank, int size)>;
  void set_kv_connect(KvConnect connect) { kv_connect_ = std::move(connect); }
  int64_t host_kv_bytes() const { return host_kv_ != nullptr ? static_cast<int64_t>(host_kv_->bytes()) : 0; }
  const model::TpShard& shard() const { return transformer_->tp_shard(); }
  int64_t expert_bytes() const { return transformer_->expert_bytes(); }
  bool is_last() const { return options_.stage == options_.n_stages - 1; }

 private:
  // A step flattened into rows, sequence by sequence.
  struct Rows {
    std::vector<int32_t> tokens, positions;
    std::vector<kernels::AttentionSeq> seqs;
    std::vector<int64_t> logit_rows;           // Last row per sampled sequence; n_draft + 1 rows to verify.
    std::vector<std::vector<int32_t>> tables;  // Reserved up front: `seqs` points into it.
  };
  StageExecutor() = default;
  // Runs the step's copies between the KV cache and the host tier, in order. A move out
  // of range is the coordinator's bug, not a malformed request: Internal.
  absl::Status MoveKvBlocks(const v1::StepRequest& step);
  // Runs this worker's receiving (`sends` false: before the compute) or sending (after it)
  // pieces of the step's KV transfers, in order; a failed transfer goes into `result` and
  // the rest go on. Sends are packed here and leave in the background (KvChannel); the
  // ones that failed since the last step are reported with the sends.
  void TransferKv(const v1::StepRequest& step, bool sends, v1::StepResult& result);
  absl::Status RunTransfer(const v1::KvTransfer& t, bool sends, int64_t* bytes);
  absl::Status Flatten(const v1::StepRequest& step, Rows& rows) const;
  // Token ids in the vocabulary, block ids in the cache, blocks covering `n_positions`.
  absl::Status CheckIds(const std::string& what, const v1::StepSequence& s, int64_t n_positions) const;
  // StepRequest.expert_placement: the stage's MoE layers take the replicas (EPLB).
  absl::Status PlaceExperts(const v1::ExpertPlacement& placement);
  // Everything after validation: the forward (or the drafts) and sampling.
  // TP rank 0 of a stage with MoE layers: the step's tokens per expert into `result`.
  void ReportExpertLoad(v1::StepResult& result);
  absl::Status Run(const v1::StepRequest& step, Rows& rows, v1::StepResult& result);
  // Starts or extends each sequence's sampler history (last stage, TP rank 0).
  void TrackHistory(const v1::StepRequest& step);
  absl::Status Sample(const v1::StepRequest& step, v1::StepResult& result);
  // Embeds or receives the rows, runs the stage's layers, then sends them on or, on the
  // last stage, computes logits_ for rows.logit_rows.
  absl::Status Forward(const Rows& rows, int64_t step_id);
  // Drafter: feeds the rows, then proposes `propose` tokens per sequence greedily, one
  // forward over all proposing sequences per drafted token.
  absl::Status Draft(const v1::StepRequest& step, Rows& rows, v1::StepResult& result);

  absl::Status ReceiveHidden(int64_t n_rows, uint64_t tag);
  absl::Status SendHidden(int64_t n_rows, uint64_t tag);
  // Rows per TP rank in a hand-off of n rows: ceil(n / t).
  int64_t SliceRows(int64_t n) const { return (n + options_.tp_size - 1) / options_.tp_size; }
  // The rows [first, first + count) of hidden_ this TP rank sends to (or receives from)
  // its peer rank in a hand-off of n rows: its slice, or all n with `full_handoff`.
  struct HandoffRows {
    int64_t first = 0, count = 0;
  };
  HandoffRows Handoff(int64_t n) const;
  // Whether this worker runs sequence `s`: always, but under all-to-all expert parallelism
  // only its lane's.
  bool Runs(const v1::StepSequence& s) const { return !options_.expert_all_to_all || s.lane() == options_.tp_rank; }
  StageExecutorOptions options_;
  model::BackendComm pp_;  // Pipeline link (this TP rank across stages), when n_stages > 1.
  model::BackendComm tp_;  // The stage's TP group, when tp_size > 1.
  model::ModelFiles files_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<model::Transformer> transformer_;
  std::unique_ptr<model::KvCache> cache_;
  std::unique_ptr<kernels::Buffer> host_kv_;  // [host_kv_blocks, KvCache::BlockBytes] slots.
  int64_t host_block_bytes_ = 0;
  // Joins the group StepRequest.kv_join names, replacing the channel (after its jobs).
  absl::Status JoinKvGroup(const v1::KvGroupJoin& join);
  KvConnect kv_connect_;
  std::unique_ptr<comm::Communicator> joined_kv_comm_;  // A group joined by kv_join (owned).
  std::unique_ptr<KvChannel> kv_channel_;               // Over the KV group, when there is one.
  std::vector<uint8_t> kv_packed_;                      // A received piece's bytes.
  // Last stage, TP rank 0 (every rank, all-to-all): every sequence's sampler and history.
  std::unique_ptr<model::StepSampler> sampler_;
  // The step's hidden states in the backend's memory: [c * t, n_embd] rows (c =
  // SliceRows(n)), so each TP rank's hand-off slice is whole; rows past n are padding.
  std::unique_ptr<kernels::Buffer> hidden_;
  // The step's logit rows [n, n_vocab] f32. On a GPU whose head needs no TP gather they
  // stay in device memory and are sampled there (model/step_sampler.h); otherwise they are
  // in the backend's staging memory (pinned on a GPU, so that the copy out runs at the
  // bus's speed; plain host memory on the CPU). Grows to the largest step seen, then
  // allocates nothing.
  std::unique_ptr<kernels::Buffer> logits_;
  bool logits_on_device_ = false;
  TensorView LogitsView(int64_t n_rows) const;
  double handoff_s_ = 0;  // This step's time in ReceiveHidden and SendHidden.
};

}  // namespace cascade::worker
