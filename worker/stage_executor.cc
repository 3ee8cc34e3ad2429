#include "worker/stage_executor.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/clock.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cuda_backend.h"
#include "model/graph_step.h"
#include "model/kv_transfer.h"
#include "sampling/sampler.h"
#include "wire/step_wire.h"

namespace cascade::worker {
namespace {

absl::StatusOr<std::unique_ptr<kernels::Backend>> MakeBackend(const StageExecutorOptions& options) {
  if (options.device.kind == DeviceKind::kCpu) {
    return kernels::MakeCpuBackend({.n_threads = options.n_threads, .bf16_prefill = options.cpu_bf16_prefill});
  }
  absl::StatusOr<std::unique_ptr<kernels::CudaBackend>> gpu =
      kernels::CudaBackend::Create({.device = options.device.index});
  if (!gpu.ok()) return Annotate(gpu.status(), StrCat("device cuda:", options.device.index));
  return std::unique_ptr<kernels::Backend>(*std::move(gpu));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StageExecutor>> StageExecutor::Create(const StageExecutorOptions& options,
                                                                     comm::Communicator* pp_comm,
                                                                     comm::Communicator* tp_comm,
                                                                     const std::function<void(double)>& progress,
                                                                     std::unique_ptr<kernels::Backend> backend) {
  std::unique_ptr<StageExecutor> e(new StageExecutor());
  e->options_ = options;
  if (options.n_stages > 1 && pp_comm == nullptr) {
    return absl::InvalidArgumentError("a pipeline of several stages needs a communicator");
  }
  if (options.tp_size > 1 && tp_comm == nullptr) {
    return absl::InvalidArgumentError("a tensor-parallel stage needs its group's communicator");
  }
  if (backend != nullptr) {
    e->backend_ = std::move(backend);
  } else {
    CASCADE_ASSIGN_OR_RETURN(e->backend_, MakeBackend(options));
  }
  if (pp_comm != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(e->pp_, model::BackendComm::Create(e->backend_.get(), pp_comm));
  }
  if (tp_comm != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(e->tp_, model::BackendComm::Create(e->backend_.get(), tp_comm));
  }
  CASCADE_ASSIGN_OR_RETURN(e->files_, model::OpenModelFiles(options.model_path));
  model::StageOptions stage;
  stage.first_layer = options.first_layer;
  stage.last_layer = options.last_layer;
  stage.tp_rank = options.tp_rank;
  stage.tp_size = options.tp_size;
  stage.expert_parallel = options.expert_parallel;
  stage.expert_all_to_all = options.expert_all_to_all;
  stage.kv_window_tokens = options.kv_window_tokens;
  stage.kv_sink_tokens = options.kv_sink_tokens;
  stage.exit_head = options.draft;
  if (options.draft && (options.n_stages != 1 || options.tp_size != 1)) {
    return absl::InvalidArgumentError("a drafter runs in one process: 1 stage, tensor 1");
  }
  CASCADE_ASSIGN_OR_RETURN(e->transformer_, model::Transformer::Load(e->files_, e->backend_.get(), stage, tp_comm));
  // A drafter's rounds read each round's logits on the host: no graphs there.
  e->transformer_->set_cuda_graphs(options.cuda_graphs && !options.draft);
  model::LogDefaultedKeys(e->files_);
  if (e->transformer_->has_embedding() != (options.stage == 0) ||
      e->transformer_->has_head() != (options.stage == options.n_stages - 1)) {
    return absl::InvalidArgumentError(
        StrCat("stage ", options.stage, " of ", options.n_stages, " got layers [", options.first_layer, ", ",
               options.last_layer, "): the first stage must start at layer 0 and the last end at the last layer"));
  }
  e->transformer_->Prefault(progress);
  absl::StatusOr<model::KvCache> cache = model::KvCache::Create(
      e->transformer_->CacheOptions(options.kv_blocks, options.kv_block_size, options.kv_dtype), e->backend_.get());
  if (!cache.ok()) {
    return Annotate(cache.status(),
                    StrCat("on ", options.device.ToString(), " after ", e->transformer_->weight_bytes(),
                           " bytes of weights (lower scheduler.kv_cache_mb or scheduler.gpu_memory_fraction)"));
  }
  e->cache_ = std::make_unique<model::KvCache>(*std::move(cache));
  if (options.host_kv_blocks > 0 && !options.draft) {
    e->host_block_bytes_ = model::KvCache::BlockBytes(e->cache_->options());
    const size_t bytes = static_cast<size_t>(options.host_kv_blocks * e->host_block_bytes_);
    absl::StatusOr<std::unique_ptr<kernels::Buffer>> host = e->backend_->AllocateStaging(bytes);
    if (!host.ok()) {
      return Annotate(host.status(), StrCat("the host KV tier: ", options.host_kv_blocks, " blocks of ",
                                            e->host_block_bytes_, " bytes (lower scheduler.host_kv_cache_mb)"));
    }
    e->host_kv_ = *std::move(host);
    CASCADE_LOG(Info) << "host KV tier: " << options.host_kv_blocks << " blocks, " << bytes << " bytes";
  }
  if (e->is_last() && (options.tp_rank == 0 || options.expert_all_to_all) && !options.draft) {
    e->sampler_ = std::make_unique<model::StepSampler>(e->backend_.get(), options.n_threads);
    // A GPU head without a TP gather leaves its logits on the device: sample them there.
    e->logits_on_device_ = options.device_sampling && !e->backend_->host_memory() &&
                           (options.tp_size == 1 || options.expert_all_to_all) &&
                           dynamic_cast<kernels::CudaBackend*>(e->backend_.get()) != nullptr;
    if (!e->backend_->host_memory()) {
      CASCADE_LOG(Info) << "sampling on "
                        << (e->logits_on_device_       ? options.device.ToString() + ": the logits stay on the device"
                            : !options.device_sampling ? "the host (scheduler.device_sampling: false)"
                                                       : "the host: the TP group gathers the logits there");
    }
  }
  return e;
}

absl::Status StageExecutor::CheckIds(const std::string& what, const v1::StepSequence& s, int64_t n_positions) const {
  const int64_t n_vocab = transformer_->config().n_vocab, n_blocks = cache_->options().n_blocks;
  for (int32_t id : s.tokens()) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          StrCat(what, ": token id ", id, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
    if (id == options_.refuse_token) {
      return absl::InvalidArgumentError(StrCat(what, ": token id ", id, " refused (--refuse-token-for-testing)"));
    }
  }
  const int64_t block_size = cache_->options().block_size;
  if (static_cast<int64_t>(s.block_table_size()) * block_size < n_positions) {
    return absl::InvalidArgumentError(
        StrCat(what, ": ", s.block_table_size(), " KV blocks do not cover ", n_positions, " positions"));
  }
  // Under the sink + window policy, blocks [gap_begin, gap_end) are read by no row: freed.
  int64_t gap_begin = 0, gap_end = 0;
  if (const int64_t w = options_.kv_window_tokens; w > 0 && s.n_past() + 1 - w > options_.kv_sink_tokens) {
    gap_begin = (options_.kv_sink_tokens + block_size - 1) / block_size;
    gap_end = (s.n_past() + 1 - w) / block_size;
  }
  for (int i = 0; i < s.block_table_size(); ++i) {
    const int32_t b = s.block_table(i);
    if (b == -1 && i >= gap_begin && i < gap_end) continue;
    if (b < 0 || b >= n_blocks) {
      return absl::InvalidArgumentError(StrCat(what, ": KV block ", b, " at ", i, " is outside [0, ", n_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status StageExecutor::Flatten(const v1::StepRequest& step, Rows& rows) const {
  // Under the sink + window policy a sequence holds only the blocks it reads: the model's
  // context bounds its positions instead.
  const int64_t max_pos =
      options_.kv_window_tokens > 0
          ? std::max(transformer_->config().n_ctx_train, cache_->options().n_blocks * cache_->options().block_size)
          : cache_->options().n_blocks * cache_->options().block_size;
  rows.tables.reserve(step.seqs_size());
  for (const v1::StepSequence& s : step.seqs()) {
    const std::string what = StrCat("step ", step.step_id(), ": sequence ", s.seq_id());
    if (s.tokens_size() == 0) return absl::InvalidArgumentError(StrCat(what, " has no tokens"));
    // A drafter also writes all its proposals but the last.
    const int64_t end_pos = s.n_past() + s.tokens_size() + std::max(0, s.propose() - 1);
    if (s.n_past() < 0 || end_pos > max_pos) {
      return absl::InvalidArgumentError(StrCat(what, " positions [", s.n_past(), ", ", end_pos, ") exceed the cache"));
    }
    if (s.n_draft() < 0 || s.n_draft() >= s.tokens_size() || (s.n_draft() > 0 && !s.sample())) {
      return absl::InvalidArgumentError(
          StrCat(what, ": n_draft ", s.n_draft(), " must be in [0, ", s.tokens_size(), ") and needs sample"));
    }
    if (!s.allowed_tokens().empty() && (!s.sample() || s.allowed_tokens().size() % (s.n_draft() + 1) != 0)) {
      return absl::InvalidArgumentError(StrCat(what, ": ", s.allowed_tokens().size(), " bytes of token masks for ",
                                               s.n_draft() + 1, " rows", s.sample() ? "" : " and no sampling"));
    }
    if (s.propose() < 0 || (s.propose() > 0 && !options_.draft)) {
      return absl::InvalidArgumentError(StrCat(what, ": propose ", s.propose(), " on a worker that does not draft"));
    }
    CASCADE_RETURN_IF_ERROR(CheckIds(what, s, s.n_past() + s.tokens_size()));
    if (options_.expert_all_to_all && (s.lane() < 0 || s.lane() >= options_.tp_size)) {
      return absl::InvalidArgumentError(StrCat(what, ": lane ", s.lane(), " outside the group of ", options_.tp_size));
    }
    if (!Runs(s)) continue;  // Validated like the rest: every rank refuses a step alike.
    const int64_t row = static_cast<int64_t>(rows.tokens.size());
    for (int i = 0; i < s.tokens_size(); ++i) {
      rows.tokens.push_back(s.tokens(i));
      rows.positions.push_back(static_cast<int32_t>(s.n_past() + i));
    }
    rows.tables.emplace_back(s.block_table().begin(), s.block_table().end());
    rows.seqs.push_back({row, s.tokens_size(), s.n_past(), rows.tables.back()});
    // A verification scores the last token and every draft; otherwise only the last.
    const int64_t end = static_cast<int64_t>(rows.tokens.size());
    if (s.sample() || s.propose() > 0) {
      for (int64_t r = end - 1 - s.n_draft(); r < end; ++r) rows.logit_rows.push_back(r);
    }
  }
  return absl::OkStatus();
}

void StageExecutor::TrackHistory(const v1::StepRequest& step) {
  for (const v1::StepSequence& s : step.seqs()) {
    if (!Runs(s)) continue;
    if (s.reset() || !sampler_->Has(s.seq_id())) {
      std::vector<int32_t> history(s.history().begin(), s.history().end());
      if (history.empty()) history.assign(s.tokens().begin(), s.tokens().end() - s.n_draft());
      sampler_->Start(s.seq_id(), wire::FromStepSampling(s.sampling()), std::move(history));
    } else if (s.n_draft() == 0) {
      // History holds positions [0, size): the reset entry's whole history (the coordinator
      // sends prompt and generated tokens there), then each sampled token. A later prefill
      // chunk adds only positions past it (none, when the reset carried the history);
      // decode and verify steps feed the token sampled last, which it already holds, and
      // drafts join it only once accepted.
      sampler_->Extend(s.seq_id(), s.n_past(), {s.tokens().data(), static_cast<size_t>(s.tokens_size())});
    }
  }
}

absl::StatusOr<v1::StepResult> StageExecutor::Execute(const v1::StepRequest& step) {
  const auto t0 = std::chrono::steady_clock::now();
  handoff_s_ = 0;
  v1::StepResult result;
  result.set_step_id(step.step_id());
  if (sampler_ != nullptr) {
    for (int64_t id : step.release()) sampler_->Release(id);
  }
  if (step.has_kv_join()) {
    if (absl::Status st = JoinKvGroup(step.kv_join()); !st.ok()) {
      result.set_kv_join_error(std::string(st.message()));
      CASCADE_LOG(Warning) << "joining KV group " << step.kv_join().group() << ": " << st.ToString();
    }
  }
  // First, even for a step refused below: the coordinator counts the copies done.
  CASCADE_RETURN_IF_ERROR(MoveKvBlocks(step));
  if (step.has_expert_placement()) CASCADE_RETURN_IF_ERROR(PlaceExperts(step.expert_placement()));
  TransferKv(step, /*sends=*/false, result);  // KV arriving: before the compute that reads it.
  if (step.seqs().empty()) {  // A step of copies and transfers only: every stage skips the compute alike.
    TransferKv(step, /*sends=*/true, result);
    result.set_forward_s(SecondsSince(t0));
    return result;
  }
  Rows rows;
  CASCADE_RETURN_IF_ERROR(Flatten(step, rows));  // The only InvalidArgument: a refusal.
  if (absl::Status st = Run(step, rows, result); !st.ok()) {
    if (st.code() != absl::StatusCode::kInvalidArgument) return st;
    return absl::InternalError(StrCat("step ", step.step_id(), " failed after validation: ", st.message()));
  }
  TransferKv(step, /*sends=*/true, result);  // KV leaving: written by this step's compute.
  result.set_forward_s(SecondsSince(t0));
  result.set_handoff_s(handoff_s_);
  ReportExpertLoad(result);
  return result;
}

absl::Status StageExecutor::MoveKvBlocks(const v1::StepRequest& step) {
  if (step.kv_moves().empty() || options_.draft) return absl::OkStatus();
  const int64_t n_slots = host_kv_ != nullptr ? options_.host_kv_blocks : 0;
  for (const v1::KvBlockMove& m : step.kv_moves()) {
    if (options_.expert_all_to_all && m.lane() != options_.tp_rank) continue;  // Another lane's pool.
    if (m.block() < 0 || m.block() >= cache_->options().n_blocks || m.slot() < 0 || m.slot() >= n_slots) {
      return absl::InternalError(StrCat("step ", step.step_id(), ": KV move of block ", m.block(), " and host slot ",
                                        m.slot(), " is outside ", cache_->options().n_blocks, " blocks and ", n_slots,
                                        " host slots"));
    }
    uint8_t* slot = static_cast<uint8_t*>(host_kv_->data()) + m.slot() * host_block_bytes_;
    CASCADE_RETURN_IF_ERROR(m.to_host() ? cache_->SaveBlock(backend_.get(), m.block(), slot)
                                        : cache_->LoadBlock(backend_.get(), m.block(), slot));
  }
  return absl::OkStatus();
}

void StageExecutor::set_kv_comm(comm::Communicator* comm) {
  kv_channel_ = comm != nullptr ? std::make_unique<KvChannel>(comm, options_.kv_send_delay_ms) : nullptr;
}

absl::Status StageExecutor::JoinKvGroup(const v1::KvGroupJoin& join) {
  kv_channel_.reset();  // The old group's jobs finish (each bounded by its timeout), then it goes.
  joined_kv_comm_.reset();
  if (!kv_connect_) return absl::FailedPreconditionError("this worker cannot join a KV group");
  const int rank = join.rank_base() + options_.stage * options_.tp_size + options_.tp_rank;
  CASCADE_ASSIGN_OR_RETURN(joined_kv_comm_, kv_connect_(join.group(), rank, join.size()));
  options_.kv_rank = rank;
  kv_channel_ = std::make_unique<KvChannel>(joined_kv_comm_.get(), options_.kv_send_delay_ms);
  return absl::OkStatus();
}

void StageExecutor::TransferKv(const v1::StepRequest& step, bool sends, v1::StepResult& result) {
  int64_t bytes = result.transfer_bytes();
  for (const v1::KvTransfer& t : step.kv_transfers()) {
    const absl::Status st = RunTransfer(t, sends, &bytes);
    if (st.ok()) continue;
    result.add_failed_transfers(t.id());
    if (result.transfer_error().empty()) result.set_transfer_error(std::string(st.message()));
    CASCADE_LOG(Warning) << "KV transfer " << t.id() << ": " << st.ToString();
  }
  result.set_transfer_bytes(bytes);
  if (!sends || kv_channel_ == nullptr) return;
  for (const auto& [id, why] : kv_channel_->TakeFailures()) {  // Earlier sends, failed since.
    result.add_failed_transfers(id);
    if (result.transfer_error().empty()) result.set_transfer_error(why);
    CASCADE_LOG(Warning) << "KV transfer " << id << ": sending failed: " << why;
  }
}

absl::Status StageExecutor::RunTransfer(const v1::KvTransfer& t, bool sends, int64_t* bytes) {
  const auto mine = [&](const v1::KvTransferPiece& p) { return p.rank() == options_.kv_rank && p.send() == sends; };
  if (std::none_of(t.pieces().begin(), t.pieces().end(), mine)) return absl::OkStatus();
  if (kv_channel_ == nullptr) return absl::FailedPreconditionError("this worker is in no KV group");
  if (t.id() > comm::kMaxUserTag) return absl::InvalidArgumentError(StrCat("transfer id ", t.id(), " is too large"));
  const model::KvPlacement at{options_.first_layer, transformer_->tp_shard().kv_head_begin};
  const std::span<const int32_t> blocks(t.blocks().data(), static_cast<size_t>(t.blocks_size()));
  for (const v1::KvTransferPiece& p : t.pieces()) {
    if (!mine(p)) continue;
    const model::KvSlice slice{p.first_layer(), p.last_layer(), p.head_begin(), p.head_end()};
    if (sends) {
      // Packed now, after the step's compute wrote the KV; sent behind the next steps.
      std::vector<uint8_t> packed;
      CASCADE_RETURN_IF_ERROR(model::PackKvSlice(*cache_, backend_.get(), at, slice, blocks, &packed));
      *bytes += static_cast<int64_t>(packed.size());
      kv_channel_->Send(t.id(), p.peer(), std::move(packed));
      continue;
    }
    kv_packed_.resize(
        static_cast<size_t>(model::KvSliceBytes(cache_->options(), slice, static_cast<int64_t>(blocks.size()))));
    CASCADE_RETURN_IF_ERROR(kv_channel_->Recv(t.id(), p.peer(), kv_packed_));
    if (!t.discard())
      CASCADE_RETURN_IF_ERROR(model::UnpackKvSlice(*cache_, backend_.get(), at, slice, blocks, kv_packed_));
    *bytes += static_cast<int64_t>(kv_packed_.size());
  }
  return absl::OkStatus();
}

absl::Status StageExecutor::PlaceExperts(const v1::ExpertPlacement& placement) {
  if (options_.draft) return absl::OkStatus();  // The drafter holds no experts of the target's group.
  std::vector<model::Transformer::ExpertReplica> replicas;
  for (const v1::ExpertReplica& r : placement.replicas()) replicas.push_back({r.layer(), r.expert(), r.rank()});
  const int64_t before = transformer_->weight_bytes();
  if (absl::Status st = transformer_->PlaceExperts(replicas); !st.ok()) {
    return absl::InternalError(StrCat("placing redundant experts: ", st.message()));
  }
  CASCADE_LOG(Info) << "redundant experts: " << replicas.size() << " replicas in the group, "
                    << transformer_->weight_bytes() - before << " bytes read here";
  return absl::OkStatus();
}

void StageExecutor::ReportExpertLoad(v1::StepResult& result) {
  model::Transformer& t = *transformer_;
  if (t.moe_layers().empty()) return;
  // Every rank routes alike, and one per stage reports; under all-to-all each routes its
  // own tokens, and every rank reports (the coordinator adds them up).
  if ((options_.tp_rank == 0 || options_.expert_all_to_all) && !options_.draft) {
    const int64_t n_experts = t.config().n_experts;
    for (size_t i = 0; i < t.moe_layers().size(); ++i) {
      v1::LayerExpertTokens* layer = result.add_expert_tokens();
      layer->set_layer(t.moe_layers()[i]);
      const auto counts = std::span(t.expert_load()).subspan(i * n_experts, n_experts);
      layer->mutable_tokens()->Add(counts.begin(), counts.end());
    }
  }
  t.ResetExpertLoad();
}

absl::Status StageExecutor::Run(const v1::StepRequest& step, Rows& rows, v1::StepResult& result) {
  if (options_.draft) return Draft(step, rows, result);
  if (sampler_ != nullptr) TrackHistory(step);
  CASCADE_RETURN_IF_ERROR(Forward(rows, step.step_id()));
  // Logits are a collective over the TP group (vocab-parallel head); TP rank 0 samples.
  if (sampler_ != nullptr && !rows.logit_rows.empty()) return Sample(step, result);
  return absl::OkStatus();
}

absl::Status StageExecutor::Forward(const Rows& rows, int64_t step_id) {
  const int64_t n = static_cast<int64_t>(rows.tokens.size());
  const int64_t n_embd = transformer_->config().n_embd;
  const size_t capacity =
      static_cast<size_t>(std::max<int64_t>(SliceRows(n) * options_.tp_size, 1) * n_embd) * sizeof(float);
  CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(*backend_, hidden_, capacity));
  TensorView hidden(hidden_->data(), DType::kF32, {n, n_embd}, backend_->device());
  const uint64_t tag = static_cast<uint64_t>(step_id);
  // Under all-to-all a lane may be empty in a step: nothing moves between its stages.
  const bool hands_off = n > 0 || !options_.expert_all_to_all;
  if (options_.stage > 0 && hands_off) {
    const auto t = std::chrono::steady_clock::now();
    const absl::Status received = ReceiveHidden(n, tag);
    handoff_s_ += SecondsSince(t);
    CASCADE_RETURN_IF_ERROR(Annotate(received, StrCat("receiving step ", step_id, " from stage ", options_.stage - 1)));
  }
  // The stage's own compute: one CUDA graph for a decode step when graphs are on.
  const model::ForwardBatch batch{rows.tokens, rows.positions, rows.seqs, rows.logit_rows};
  const auto compute = [&]() -> absl::Status {
    if (options_.stage == 0 && n > 0) CASCADE_RETURN_IF_ERROR(transformer_->Embed(rows.tokens, hidden));
    CASCADE_RETURN_IF_ERROR(transformer_->RunLayers(hidden, batch, *cache_));
    if (!is_last() || rows.logit_rows.empty()) return absl::OkStatus();
    const int64_t V = transformer_->config().n_vocab;
    const int64_t n_rows = static_cast<int64_t>(rows.logit_rows.size());
    CASCADE_RETURN_IF_ERROR(kernels::GrowBuffer(*backend_, logits_, static_cast<size_t>(n_rows * V) * sizeof(float),
                                                /*staging=*/!logits_on_device_));
    return transformer_->Logits(hidden, rows.logit_rows, LogitsView(n_rows));
  };
  CASCADE_RETURN_IF_ERROR(transformer_->GraphsFor(batch) ? model::RunGraphStep(*backend_, compute) : compute());
  if (is_last() || !hands_off) return absl::OkStatus();
  const auto t = std::chrono::steady_clock::now();
  const absl::Status sent = SendHidden(n, tag);
  handoff_s_ += SecondsSince(t);
  return Annotate(sent, StrCat("sending step ", step_id, " to stage ", options_.stage + 1));
}

TensorView StageExecutor::LogitsView(int64_t n_rows) const {
  const int64_t V = transformer_->config().n_vocab;
  if (logits_on_device_) return TensorView(logits_->data(), DType::kF32, {n_rows, V}, backend_->device());
  return TensorView(logits_->data(), DType::kF32, {n_rows, V});
}

absl::Status StageExecutor::Draft(const v1::StepRequest& step, Rows& rows, v1::StepResult& result) {
  // Round 0 feeds the step's tokens; round j feeds every sequence's draft j - 1 alone.
  // Drafts are the argmax of the drafter's logits: deterministic, so verification treats
  // q as one-hot on them.
  const int64_t V = transformer_->config().n_vocab;
  const int n_seqs = step.seqs_size();
  std::vector<std::vector<int32_t>> drafts(n_seqs);
  int rounds = 0;
  for (const v1::StepSequence& s : step.seqs()) rounds = std::max(rounds, s.propose());
  for (int j = 0; j < rounds; ++j) {
    CASCADE_RETURN_IF_ERROR(Forward(rows, step.step_id()));
    // Rows of logits, in order, belong to the sequences still proposing.
    size_t r = 0;
    Rows next;
    next.tables.reserve(n_seqs);
    for (int i = 0; i < n_seqs; ++i) {
      const v1::StepSequence& s = step.seqs(i);
      if (s.propose() <= j) continue;
      drafts[i].push_back(sampling::Argmax(std::span<const float>(logits_->f32() + r * V, V)));
      ++r;
      if (s.propose() <= j + 1) continue;
      const int64_t pos = s.n_past() + s.tokens_size() + j;
      next.tokens.push_back(drafts[i].back());
      next.positions.push_back(static_cast<int32_t>(pos));
      next.tables.emplace_back(s.block_table().begin(), s.block_table().end());
      const int64_t row = static_cast<int64_t>(next.tokens.size()) - 1;
      next.seqs.push_back({row, 1, pos, next.tables.back()});
      next.logit_rows.push_back(row);
    }
    rows = std::move(next);
  }
  for (int i = 0; i < n_seqs; ++i) {
    for (int32_t d : drafts[i]) {
      v1::SampledToken* out = result.add_tokens();
      out->set_seq_id(step.seqs(i).seq_id());
      out->set_token(d);
    }
  }
  result.set_draft(true);
  return absl::OkStatus();
}

StageExecutor::HandoffRows StageExecutor::Handoff(int64_t n) const {
  if (options_.full_handoff || options_.expert_all_to_all) return {0, n};  // (All-to-all: the lane's rows.)
  const int64_t c = SliceRows(n);
  return {options_.tp_rank * c, c};
}

// Every TP rank holds the full hidden state: each sends its slice of c rows (with TP 1,
// all n), padding rows past n included, so every link carries the same bytes; or, with
// `full_handoff`, all n rows.
absl::Status StageExecutor::SendHidden(int64_t n, uint64_t tag) {
  const int64_t d = transformer_->config().n_embd;
  const HandoffRows rows = Handoff(n);
  return pp_.Send(hidden_->f32() + rows.first * d, static_cast<size_t>(rows.count * d) * sizeof(float),
                  options_.stage + 1, tag);
}

// Receives this rank's rows in place; from split hand-offs the TP group then all-gathers
// the slices, each already at its own offset.
absl::Status StageExecutor::ReceiveHidden(int64_t n, uint64_t tag) {
  const int64_t d = transformer_->config().n_embd;
  const HandoffRows rows = Handoff(n);
  const size_t bytes = static_cast<size_t>(rows.count * d) * sizeof(float);
  float* mine = hidden_->f32() + rows.first * d;
  CASCADE_RETURN_IF_ERROR(pp_.Recv(mine, bytes, options_.stage - 1, tag));
  if (options_.tp_size == 1 || options_.full_handoff || options_.expert_all_to_all) return absl::OkStatus();
  return tp_.AllGather(mine, bytes, hidden_->data());
}

absl::Status StageExecutor::Sample(const v1::StepRequest& step, v1::StepResult& result) {
  // Logit rows, in order: n_draft + 1 per sampled sequence, its drafts its last tokens.
  std::vector<model::SampleSeq> seqs;
  for (const v1::StepSequence& s : step.seqs()) {
    if (!s.sample() || !Runs(s)) continue;
    const std::span<const int32_t> tokens(s.tokens().data(), static_cast<size_t>(s.tokens_size()));
    const auto* mask = reinterpret_cast<const uint8_t*>(s.allowed_tokens().data());
    seqs.push_back({s.seq_id(), tokens.last(static_cast<size_t>(s.n_draft())), {mask, s.allowed_tokens().size()}});
  }
  int64_t n_rows = 0;
  for (const model::SampleSeq& q : seqs) n_rows += static_cast<int64_t>(q.drafts.size()) + 1;
  absl::StatusOr<std::vector<std::vector<sampling::SampledToken>>> emitted = sampler_->Sample(LogitsView(n_rows), seqs);
  if (!emitted.ok()) return absl::InternalError(emitted.status().message());  // Not a refusal: validated before.
  for (size_t j = 0; j < seqs.size(); ++j) {
    for (const sampling::SampledToken& tok : (*emitted)[j]) {
      v1::SampledToken* out = result.add_tokens();
      out->set_seq_id(seqs[j].seq_id);
      out->set_token(tok.id);
      out->set_logprob(tok.logprob);
      for (const auto& [id, lp] : tok.top) {
        out->add_top_ids(id);
        out->add_top_logprobs(lp);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cascade::worker
