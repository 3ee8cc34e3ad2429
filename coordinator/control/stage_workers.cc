#include "coordinator/control/stage_workers.h"

#include <algorithm>

#include "coordinator/control/kv_budget.h"
#include "wire/step_wire.h"

#include "core/clock.h"
#include "core/load_balance.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "proto/grpc_status.h"
#include "security/cluster_ca.h"
#include "security/grpc_tls.h"

namespace cascade::coordinator {

std::string_view WorkerStateName(WorkerState s) {
  switch (s) {
    case WorkerState::kWaiting: return "waiting";
    case WorkerState::kRegistered: return "registered";
    case WorkerState::kLoading: return "loading";
    case WorkerState::kReady: return "ready";
    case WorkerState::kDead: return "dead";
  }
  return "?";
}

v1::WorkerState WorkerStateProto(WorkerState s) {
  switch (s) {
    case WorkerState::kWaiting: return v1::WORKER_STATE_WAITING;
    case WorkerState::kRegistered: return v1::WORKER_STATE_REGISTERED;
    case WorkerState::kLoading: return v1::WORKER_STATE_LOADING;
    case WorkerState::kReady: return v1::WORKER_STATE_READY;
    case WorkerState::kDead: return v1::WORKER_STATE_DEAD;
  }
  return v1::WORKER_STATE_UNSPECIFIED;
}

StageWorkers::StageWorkers(Plan plan, StageWorkersOptions options)
    : plan_(std::move(plan)), options_(std::move(options)) {
  kv_blocks_ = options_.kv_blocks;
  for (const StagePlan& s : plan_.stages) {
    std::vector<TpMember> members = s.tp;
    if (members.empty()) members.push_back({0, s.rank, s.node, s.host, s.device});
    for (const TpMember& m : members) {
      auto slot = std::make_unique<Slot>();
      slot->stage = s;
      slot->tp_rank = m.tp_rank;
      slot->rank = m.rank;
      slot->node = m.node;
      slot->device = m.device;
      slots_.push_back(std::move(slot));
    }
  }
  if (options_.draft) {
    auto slot = std::make_unique<Slot>();
    slot->stage.first_layer = 0;
    slot->stage.last_layer = static_cast<int>(options_.draft_layers);
    slot->stage.weight_bytes = options_.draft_weight_bytes;
    slot->draft = true;
    slot->rank = n_workers();
    slot->node = options_.draft_node;
    slot->device = options_.draft_device;
    slots_.push_back(std::move(slot));
  }
}

StageWorkers::~StageWorkers() { Close(); }

void StageWorkers::Close() {
  std::vector<std::thread> readers;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (auto& s : slots_) {
      if (s->step_ctx) s->step_ctx->TryCancel();
      if (s->reader.joinable()) readers.push_back(std::move(s->reader));
    }
  }
  for (std::thread& t : readers) t.join();
}

v1::Transport StageWorkers::TpTransport(int pp_stage) const {
  if (tp_size() == 1) return v1::TRANSPORT_UCX;
  for (const auto& s : slots_) {
    if (!s->draft && s->stage.pp_stage == pp_stage && (s->device.kind != DeviceKind::kCuda || !s->nccl)) {
      return v1::TRANSPORT_UCX;
    }
  }
  return v1::TRANSPORT_NCCL;
}

absl::StatusOr<v1::RegisterResponse> StageWorkers::Register(const v1::RegisterRequest& req) {
  absl::MutexLock lock(&mu_);
  const std::string device = req.device();
  for (auto& s : slots_) {
    // A dead stage takes a new worker too (a restarted one): Recover then rebuilds.
    const bool open = s->state == WorkerState::kWaiting || s->state == WorkerState::kDead;
    if (!open || s->draft != req.draft() || s->node != req.node() || s->device.ToString() != device) continue;
    s->state = WorkerState::kRegistered;
    s->worker_id = ++last_worker_id_;
    s->address = req.address();
    s->pid = req.pid();
    s->nccl = req.nccl();
    s->memory_bytes = req.memory_bytes();
    s->last_seen = std::chrono::steady_clock::now();
    s->channel = security::ClusterChannel(req.address(), options_.tls.get(), security::kWorkerName);
    s->stub = v1::Worker::NewStub(s->channel);
    v1::RegisterResponse resp;
    resp.set_rank(s->rank);
    resp.set_stage(s->stage.pp_stage);
    resp.set_n_stages(n_stages());
    resp.set_tp_rank(s->tp_rank);
    resp.set_tp_size(tp_size());
    resp.set_group(options_.group);
    resp.set_heartbeat_ms(options_.heartbeat_ms);
    resp.set_worker_id(s->worker_id);
    resp.set_model_path(s->draft ? options_.draft_model_path : options_.model_path);
    resp.set_first_layer(s->stage.first_layer);
    resp.set_last_layer(s->stage.last_layer);
    resp.set_replica(options_.replica);
    CASCADE_LOG(Info) << "worker " << req.address() << " (pid " << req.pid() << ", node " << req.node() << ", "
                      << device << ") registered as "
                      << (s->draft ? std::string("the drafter")
                                   : StrCat("stage ", s->stage.pp_stage, " tp rank ", s->tp_rank))
                      << (options_.replica > 0 ? StrCat(" of replica ", options_.replica) : std::string());
    return resp;
  }
  std::string open;
  for (auto& s : slots_) {
    if (s->state == WorkerState::kWaiting || s->state == WorkerState::kDead) {
      open += StrCat(open.empty() ? "" : ", ", s->draft ? "drafter " : "", s->node, "/", s->device.ToString());
    }
  }
  return absl::FailedPreconditionError(StrCat("no stage waits for a worker on node '", req.node(), "' device '", device,
                                              "'; waiting: ", open.empty() ? "none" : open));
}

bool StageWorkers::PlansNode(std::string_view node) const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : slots_) {
    if (s->node == node) return true;
  }
  return false;
}

bool StageWorkers::Heartbeat(int rank, int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  for (auto& s : slots_) {
    if (s->rank != rank) continue;
    // A replaced worker must not keep its successor's slot looking alive.
    if (s->state == WorkerState::kDead || s->worker_id != worker_id) return false;
    s->last_seen = std::chrono::steady_clock::now();
    return true;
  }
  return false;
}

absl::Status StageWorkers::BringUp(std::chrono::milliseconds timeout) {
  {
    absl::MutexLock lock(&mu_);
    // Re-evaluated whenever mu_ is released (Register, AbortStartup), until it holds or
    // the timeout passes.
    const auto registered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!startup_error_.empty()) return true;
      for (auto& s : slots_) {
        if (s->state != WorkerState::kRegistered) return false;
      }
      return true;
    };
    const bool all = mu_.AwaitWithTimeout(absl::Condition(&registered), absl::FromChrono(timeout));
    if (!all) {
      std::string missing;
      for (auto& s : slots_) {
        if (s->state == WorkerState::kWaiting)
          missing +=
              StrCat(" stage ", s->stage.pp_stage, " tp ", s->tp_rank, " (", s->node, "/", s->device.ToString(), ")");
      }
      return absl::DeadlineExceededError(StrCat("workers did not register within ", timeout.count(), " ms:", missing));
    }
    if (!startup_error_.empty()) return absl::FailedPreconditionError(startup_error_);
    CASCADE_RETURN_IF_ERROR(SizeKvFromGpus());
    for (auto& s : slots_) s->state = WorkerState::kLoading;
  }
  return LoadAllAndOpenStreams();
}

int64_t StageWorkers::kv_blocks() const {
  absl::MutexLock lock(&mu_);
  return kv_blocks_;
}

absl::Status StageWorkers::SizeKvFromGpus() {
  if (!options_.size_kv_from_gpus) return absl::OkStatus();
  int64_t blocks = kv_blocks_;
  std::string tightest;
  for (const auto& s : slots_) {
    if (s->device.kind != DeviceKind::kCuda) continue;
    const std::string who = s->draft ? StrCat("the drafter on node ", s->node, ", ", s->device.ToString())
                                     : StrCat("stage ", s->stage.pp_stage, " tp ", s->tp_rank, " on node ", s->node,
                                              ", ", s->device.ToString());
    // The planner's estimate of the stage's weights, split evenly over its TP ranks.
    const int64_t weights = s->stage.weight_bytes / (s->draft ? 1 : tp_size());
    const int64_t block_bytes = s->draft ? options_.draft_block_bytes : s->stage.kv_block_bytes;
    CASCADE_ASSIGN_OR_RETURN(int64_t fit,
                             GpuKvBlocks(s->memory_bytes, weights, block_bytes, options_.gpu_memory_fraction, who));
    if (s->draft && options_.expert_all_to_all) fit /= tp_size();  // It holds every lane's pool.
    if (fit < blocks) {
      blocks = fit;
      tightest = who;
    }
  }
  if (blocks != kv_blocks_) {
    CASCADE_LOG(Info) << "KV pool: " << blocks << " blocks, what " << tightest << " holds in "
                      << options_.gpu_memory_fraction << " of its free memory after its weights";
    kv_blocks_ = blocks;
  }
  return absl::OkStatus();
}

void StageWorkers::AbortStartup(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (streams_open_ || !startup_error_.empty()) return;
  startup_error_ = why;
}

absl::Status StageWorkers::LoadAllAndOpenStreams() {
  // Load all stages at once: their data plane connects during the load.
  const std::string group = StrCat(options_.group, "/g", generation_);
  // The KV group forms once, with every replica loading at once; a replica rebuilt alone
  // cannot rejoin it (its peers are not reconnecting) and serves without it.
  const bool join_kv = options_.kv_group_size > 0 && generation_ == 0;
  kv_linked_ = false;
  // The number of slots is fixed at construction, so reading it unlocked is safe.
  const int n_slots = static_cast<int>(ABSL_TS_UNCHECKED_READ(slots_).size());
  std::vector<absl::Status> results(n_slots);
  std::vector<std::thread> loaders;
  for (int i = 0; i < n_slots; ++i) loaders.emplace_back([&, i] { results[i] = LoadOne(i, group, join_kv); });
  for (auto& t : loaders) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  kv_linked_ = join_kv;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n_slots; ++i) {
    Slot& s = *slots_[i];
    s.step_ctx = std::make_unique<grpc::ClientContext>();
    s.stream = s.stub->Step(s.step_ctx.get());
    s.state = WorkerState::kReady;
    s.reader = std::thread([this, i] { ReadResults(i); });
  }
  streams_open_ = true;
  return absl::OkStatus();
}

bool StageWorkers::CanRecover() const {
  absl::MutexLock lock(&mu_);
  if (!streams_open_) return false;
  bool any_registered = false;
  for (const auto& s : slots_) {
    if (s->state == WorkerState::kDead || s->state == WorkerState::kWaiting) return false;
    any_registered = any_registered || s->state == WorkerState::kRegistered;
  }
  return any_registered;
}

absl::Status StageWorkers::Recover() {
  std::vector<std::thread> readers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& s : slots_) {
      s->state = WorkerState::kLoading;  // Before cancelling: a closed stream is expected now.
      if (s->step_ctx) s->step_ctx->TryCancel();
      if (s->reader.joinable()) readers.push_back(std::move(s->reader));
    }
  }
  for (auto& t : readers) t.join();
  {
    absl::MutexLock lock(&mu_);
    streams_open_ = false;
    results_.clear();
    gathering_.clear();
    for (auto& s : slots_) {
      s->stream.reset();
      s->step_ctx.reset();
      s->state = WorkerState::kLoading;
      s->death.clear();
    }
  }
  ++generation_;
  CASCADE_LOG(Info) << "recovering: reloading " << n_stages() << " stage(s) into data-plane generation " << generation_;
  absl::Status s = LoadAllAndOpenStreams();
  if (s.ok()) CASCADE_LOG(Info) << "recovered: every stage is ready again";
  return s;
}

absl::Status StageWorkers::LoadOne(int i, const std::string& group, bool join_kv) {
  v1::Worker::Stub* stub;
  std::shared_ptr<grpc::Channel> channel;
  StagePlan stage;
  std::string address;
  int tp_rank;
  bool draft;
  v1::Transport tp_transport = v1::TRANSPORT_UCX;
  int64_t kv_blocks;
  {
    absl::MutexLock lock(&mu_);
    stub = slots_[i]->stub.get();
    channel = slots_[i]->channel;
    stage = slots_[i]->stage;
    address = slots_[i]->address;
    tp_rank = slots_[i]->tp_rank;
    draft = slots_[i]->draft;
    tp_transport = TpTransport(stage.pp_stage);
    kv_blocks = kv_blocks_;
  }
  v1::LoadShardRequest req;
  req.set_model_path(draft ? options_.draft_model_path : options_.model_path);
  req.set_first_layer(stage.first_layer);
  req.set_last_layer(stage.last_layer);
  req.set_stage(stage.pp_stage);
  req.set_n_stages(draft ? 1 : n_stages());
  // All-to-all's lanes each have a pool of kv_blocks; the drafter holds all of them.
  req.set_kv_blocks(draft && options_.expert_all_to_all ? kv_blocks * tp_size() : kv_blocks);
  req.set_kv_block_size(options_.kv_block_size);
  req.set_kv_cache_dtype(wire::ToKvCacheDType(options_.kv_cache_dtype));
  req.set_group(draft ? StrCat(group, "/draft") : group);
  req.set_max_batched_tokens(options_.max_batched_tokens);
  req.set_tp_rank(draft ? 0 : tp_rank);
  req.set_tp_size(draft ? 1 : tp_size());
  req.set_draft(draft);
  req.set_host_kv_blocks(draft ? 0 : options_.host_kv_blocks);
  if (!draft && join_kv) {
    req.set_kv_group(options_.kv_group);
    req.set_kv_group_size(options_.kv_group_size);
    req.set_kv_rank(options_.kv_rank_base + stage.pp_stage * tp_size() + tp_rank);
  }
  req.set_expert_parallel(!draft && options_.expert_parallel);
  req.set_expert_all_to_all(!draft && options_.expert_all_to_all);
  req.set_kv_window_tokens(options_.kv_window_tokens);
  req.set_kv_sink_tokens(options_.kv_sink_tokens);
  if (!draft) {
    req.set_tp_transport(tp_transport);
    req.set_pp_transport(options_.pp_nccl ? v1::TRANSPORT_NCCL : v1::TRANSPORT_UCX);
    req.set_pp_handoff(options_.pp_handoff);
    req.set_host_sampling(!options_.device_sampling);
    req.set_cuda_graphs(options_.cuda_graphs);
    req.set_cpu_bf16_prefill(options_.cpu_bf16_prefill);
  }
  // A first connection attempt to a worker that has just registered can fail
  // transiently (seen in CI as ENOENT from connect); a fail-fast RPC would then
  // kill a healthy worker. Wait for the channel (retrying with gRPC's backoff)
  // for a bounded time first, so a truly dead worker still fails the load.
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(15));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  auto reader = stub->LoadShard(&ctx, req);
  v1::LoadProgress p;
  bool done = false;
  while (reader->Read(&p)) done = done || p.done();
  const grpc::Status s = reader->Finish();
  if (!s.ok() || !done) {
    const std::string why =
        StrCat(draft ? std::string("the drafter") : StrCat("stage ", stage.pp_stage), " (worker ", address,
               ") failed to load: ", s.ok() ? std::string("stream ended early") : s.error_message());
    absl::MutexLock lock(&mu_);
    MarkDead(i, why);
    return absl::UnavailableError(why);
  }
  CASCADE_LOG(Info) << (draft ? std::string("the drafter") : StrCat("stage ", stage.pp_stage))
                    << " loaded: " << p.weight_bytes() / 1048576.0 << " MiB weights, " << p.kv_bytes() / 1048576.0
                    << " MiB KV";
  absl::MutexLock lock(&mu_);
  slots_[i]->stage.weight_bytes = p.weight_bytes();  // This worker's share.
  slots_[i]->kv_bytes = p.kv_bytes();
  slots_[i]->expert_begin = p.expert_begin();
  slots_[i]->expert_end = p.expert_end();
  slots_[i]->expert_bytes = p.expert_bytes();
  return absl::OkStatus();
}

void StageWorkers::ReadResults(int i) {
  grpc::ClientReaderWriter<v1::StepRequest, v1::StepResult>* stream;
  {
    absl::MutexLock lock(&mu_);
    stream = slots_[i]->stream.get();
  }
  // Results come from the last stage's TP rank 0 and the drafter; every other worker only
  // acknowledges.
  const bool last = i == n_workers() - tp_size() || i == n_workers();
  const bool drafter = i == n_workers();
  const bool last_stage = i >= n_workers() - tp_size() && !drafter;  // Any of its ranks.
  v1::StepResult r;
  std::string error;
  while (stream->Read(&r)) {
    // A refused step (INVALID_ARGUMENT) fails only its requests (ServingLoop::FailStep): every
    // stage refuses it alike and keeps its stream; any other error means the worker failed.
    if (r.code() != 0 && r.code() != static_cast<int32_t>(absl::StatusCode::kInvalidArgument)) {
      error = r.error();
      break;
    }
    absl::MutexLock lock(&mu_);
    if (metrics_ != nullptr) {
      ServingMetrics::StepTimes times{.forward_s = r.forward_s(), .handoff_s = r.handoff_s()};
      const auto& [sent_id, sent_at] = sent_[r.step_id() % sent_.size()];
      if (!drafter && sent_id == r.step_id()) {
        times.round_trip_s = SecondsSince(sent_at);
      }
      metrics_->ObserveStep(options_.replica, drafter ? -1 : i / tp_size(), drafter ? 0 : i % tp_size(), times);
    }
    for (const v1::LayerExpertTokens& layer : r.expert_tokens()) {
      std::vector<int64_t>& total = expert_tokens_[layer.layer()];
      total.resize(std::max<size_t>(total.size(), layer.tokens_size()), 0);
      for (int e = 0; e < layer.tokens_size(); ++e) total[e] += layer.tokens(e);
    }
    if (auto g = gathering_.find(r.step_id()); !drafter && g != gathering_.end()) {
      Gathered& all = g->second;
      all.failed.insert(all.failed.end(), r.failed_transfers().begin(), r.failed_transfers().end());
      if (all.error.empty()) all.error = r.transfer_error();
      if (all.join_error.empty()) all.join_error = r.kv_join_error();
      all.bytes += r.transfer_bytes();
      if (r.code() != 0 && all.code == 0) all.code = r.code(), all.step_error = r.error();
      if (last) {
        google::protobuf::RepeatedPtrField<v1::SampledToken> tokens = std::move(*all.result.mutable_tokens());
        all.result = r;  // Its tokens, and those its other ranks answered (all-to-all's lanes).
        all.result.mutable_tokens()->MergeFrom(tokens);
      } else if (last_stage) {
        all.result.mutable_tokens()->MergeFrom(r.tokens());
      }
      if (--all.remaining == 0) {
        v1::StepResult out = std::move(all.result);
        out.mutable_failed_transfers()->Assign(all.failed.begin(), all.failed.end());
        out.set_transfer_error(all.error);
        out.set_transfer_bytes(all.bytes);
        out.set_kv_join_error(all.join_error);
        if (all.code != 0) out.set_code(all.code), out.set_error(all.step_error);
        results_.push_back(std::move(out));
        gathering_.erase(g);
      }
      continue;
    }
    if (!last) continue;
    results_.push_back(r);
  }
  const grpc::Status s = stream->Finish();
  absl::MutexLock lock(&mu_);
  if (!error.empty()) {
    MarkDead(i, StrCat("step failed: ", error));
  } else if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
    MarkDead(i, s.error_message());
  } else if (slots_[i]->state == WorkerState::kReady) {
    MarkDead(i, "step stream closed");
  }
}

void StageWorkers::MarkDead(int i, const std::string& why) {
  Slot& s = *slots_[i];
  if (s.state == WorkerState::kDead || closing_) return;  // Closing: workers are expected to go.
  s.state = WorkerState::kDead;
  s.death = why;
  CASCADE_LOG(Error) << (s.draft ? std::string("the drafter") : StrCat("stage ", s.stage.pp_stage, " tp ", s.tp_rank))
                     << " worker " << s.address << " is dead: " << why;
}

std::string StageWorkers::DeadDescription() const {
  std::string out;
  for (const auto& s : slots_) {
    if (s->state == WorkerState::kDead) {
      out += StrCat(out.empty() ? "" : "; ", s->draft ? std::string("drafter") : StrCat("stage ", s->stage.pp_stage),
                    tp_size() > 1 && !s->draft ? StrCat(" tp ", s->tp_rank) : "", " worker ",
                    s->address.empty() ? "?" : s->address, " (pid ", s->pid, ") is dead: ", s->death);
    }
  }
  return out;
}

absl::Status StageWorkers::SendStep(const v1::StepRequest& step) {
  std::vector<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResult>*> streams;
  {
    absl::MutexLock lock(&mu_);
    if (const std::string dead = DeadDescription(); !dead.empty()) return absl::UnavailableError(dead);
    if (!streams_open_) return absl::FailedPreconditionError("the cluster is not up yet");
    for (int i = 0; i < n_workers(); ++i) streams.push_back(slots_[i]->stream.get());
    sent_[step.step_id() % sent_.size()] = {step.step_id(), std::chrono::steady_clock::now()};
    // KV transfers run on every worker apart (no hand-off orders them): the step is done
    // once all of them answered.
    if (step.kv_transfers_size() > 0 || step.has_kv_join() || options_.expert_all_to_all) {
      Gathered& g = gathering_[step.step_id()];
      g.remaining = n_workers();
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    if (!streams[i]->Write(step)) {
      absl::MutexLock lock(&mu_);
      MarkDead(static_cast<int>(i), "step stream broken");
      return absl::UnavailableError(DeadDescription());
    }
  }
  return absl::OkStatus();
}

absl::Status StageWorkers::SendDraft(const v1::StepRequest& step) {
  grpc::ClientReaderWriter<v1::StepRequest, v1::StepResult>* stream;
  {
    absl::MutexLock lock(&mu_);
    CASCADE_CHECK(options_.draft) << "SendDraft without a drafter";
    if (const std::string dead = DeadDescription(); !dead.empty()) return absl::UnavailableError(dead);
    if (!streams_open_) return absl::FailedPreconditionError("the cluster is not up yet");
    stream = slots_.back()->stream.get();
  }
  if (!stream->Write(step)) {
    absl::MutexLock lock(&mu_);
    MarkDead(n_workers(), "step stream broken");
    return absl::UnavailableError(DeadDescription());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::StepResult> StageWorkers::NextResult(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  // Re-evaluated whenever mu_ is released (a result arrives, a worker is marked dead).
  const auto ready = [&]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !results_.empty() || !DeadDescription().empty(); };
  const bool got = mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
  if (!results_.empty()) {
    v1::StepResult r = std::move(results_.front());
    results_.pop_front();
    return r;
  }
  if (got) return absl::UnavailableError(DeadDescription());
  return absl::DeadlineExceededError("no step result yet");
}

bool StageWorkers::Healthy() const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : slots_) {
    if (s->state != WorkerState::kReady) return false;
  }
  return true;
}

std::string StageWorkers::CheckHeartbeats() {
  absl::MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    Slot& s = *slots_[i];
    if (s.state == WorkerState::kWaiting || s.state == WorkerState::kDead) continue;
    if (now - s.last_seen > std::chrono::milliseconds(options_.dead_after_ms)) {
      MarkDead(i, StrCat("no heartbeat for ", options_.dead_after_ms, " ms"));
      if (s.step_ctx) s.step_ctx->TryCancel();
    }
  }
  return DeadDescription();
}

void StageWorkers::FillStatus(v1::ClusterStatus* st) const {
  absl::MutexLock lock(&mu_);
  bool ready = true, dead = false;
  for (const auto& s : slots_) {
    v1::StageStatus* out = st->add_stages();
    out->set_stage(s->stage.pp_stage);
    out->set_first_layer(s->stage.first_layer);
    out->set_last_layer(s->stage.last_layer);
    out->set_node(s->node);
    out->set_device(s->device.ToString());
    out->set_tp_rank(s->tp_rank);
    out->set_worker_address(s->address);
    out->set_state(std::string(WorkerStateName(s->state)));
    out->set_worker_state(WorkerStateProto(s->state));
    out->set_weight_bytes(s->stage.weight_bytes);
    out->set_kv_bytes(s->kv_bytes);
    out->set_draft(s->draft);
    out->set_expert_begin(s->expert_begin);
    out->set_expert_end(s->expert_end);
    out->set_expert_bytes(s->expert_bytes);
    out->set_expert_parallel(options_.expert_parallel && !s->draft);
    out->set_replica(options_.replica);
    ready = ready && s->state == WorkerState::kReady;
    dead = dead || s->state == WorkerState::kDead;
  }
  st->set_ready(ready);
  st->set_state(ready ? "ready" : dead ? "degraded" : "starting");
  st->set_cluster_state(ready  ? v1::CLUSTER_STATE_READY
                        : dead ? v1::CLUSTER_STATE_DEGRADED
                               : v1::CLUSTER_STATE_STARTING);
  if (dead) st->set_detail(DeadDescription());
  for (const auto& [layer, tokens] : expert_tokens_) {
    v1::ExpertLoad* load = st->add_expert_load();
    load->set_layer(layer);
    load->mutable_tokens()->Add(tokens.begin(), tokens.end());
    load->set_max_mean_ratio(MaxMeanRatio(tokens));
    for (const auto& [l, expert, rank] : replica_placement_.replicas) {
      if (l != layer) continue;
      load->add_replica_experts(static_cast<int32_t>(expert));
      load->add_replica_ranks(static_cast<int32_t>(rank));
    }
    if (auto it = replica_placement_.imbalance.find(layer); it != replica_placement_.imbalance.end()) {
      load->set_rank_imbalance_before(it->second.first);
      load->set_rank_imbalance_after(it->second.second);
    }
  }
}

std::map<int64_t, std::vector<int64_t>> StageWorkers::ExpertTokens() const {
  absl::MutexLock lock(&mu_);
  return expert_tokens_;
}

void StageWorkers::SetReplicaPlacement(ReplicaPlacement placement) {
  absl::MutexLock lock(&mu_);
  replica_placement_ = std::move(placement);
}

double StageWorkers::ExpertLoadMaxMean() const {
  absl::MutexLock lock(&mu_);
  double worst = 0;
  for (const auto& [layer, tokens] : expert_tokens_) worst = std::max(worst, MaxMeanRatio(tokens));
  return worst;
}

}  // namespace cascade::coordinator
