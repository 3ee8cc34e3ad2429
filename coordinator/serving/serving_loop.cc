#include "coordinator/serving/serving_loop.h"

#include <algorithm>

#include "absl/time/time.h"
#include "coordinator/serving/ngram_drafter.h"
#include "core/clock.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "wire/step_wire.h"

namespace cascade::coordinator {
namespace {

// The token's logprob and its top alternatives, as the last stage reported them.
void AddLogprob(const v1::SampledToken& t, v1::TokenLogprob* lp) {
  lp->set_id(t.token());
  lp->set_logprob(t.logprob());
  for (int i = 0; i < t.top_ids_size(); ++i) {
    auto* top = lp->add_top();
    top->set_id(t.top_ids(i));
    top->set_logprob(t.top_logprobs(i));
  }
}

}  // namespace

ServingLoop::ServingLoop(StageWorkers* workers, const text::Tokenizer* tokenizer, const SchedulerOptions& options,
                         const SpeculationOptions& speculation)
    : workers_(workers),
      tokenizer_(tokenizer),
      constraint_vocab_(tokenizer),
      scheduler_(options),
      speculation_(speculation),
      balancer_(workers->options().redundant_experts, workers->options().eplb_interval_steps, workers->tp_size()) {
  stats_.scheduler = scheduler_.Stats();
  stats_.prefix_caching = options.prefix_caching;
}

ServingLoop::~ServingLoop() { Stop(); }

void ServingLoop::Stop() {
  stop_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
}

void ServingLoop::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ServingLoop::ResetKvBlocks(int32_t n_blocks) {
  CASCADE_CHECK(!thread_.joinable()) << "ResetKvBlocks after Start";
  scheduler_.ResetKvBlocks(n_blocks);
}

void ServingLoop::Wake() { cv_.SignalAll(); }

std::shared_ptr<RequestChannel> ServingLoop::Submit(ServingRequest request) {
  auto a = std::make_shared<Active>();
  a->channel = std::make_shared<RequestChannel>();
  a->output = std::make_unique<text::OutputFilter>(*tokenizer_, request.stops, request.output_format);
  a->arrival = std::chrono::steady_clock::now();
  a->spec = std::make_unique<SpeculativeState>(speculation_, request.speculate, request.num_tokens);
  a->req = std::move(request);
  auto channel = a->channel;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) {  // The loop is gone (or going): nothing would ever answer.
      Push(*channel, {}, true, absl::UnavailableError("the coordinator is shutting down"));
      return channel;
    }
    submitted_.emplace_back(next_seq_id_++, std::move(a));
  }
  cv_.SignalAll();
  return channel;
}

void ServingLoop::Adopt(std::shared_ptr<Active> a) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) {
      Push(*a->channel, {}, true, absl::UnavailableError("the coordinator is shutting down"));
      return;
    }
    submitted_.emplace_back(next_seq_id_++, std::move(a));
  }
  cv_.SignalAll();
}

ServingStats ServingLoop::Stats() const {
  absl::MutexLock lock(&mu_);
  ServingStats st = stats_;
  st.n_live += static_cast<int64_t>(submitted_.size());
  return st;
}

void ServingLoop::PublishStats() {
  stats_.scheduler = scheduler_.Stats();
  stats_.n_live = static_cast<int64_t>(active_.size());
}

void ServingLoop::Push(RequestChannel& c, v1::GenerateResponse msg, bool done, absl::Status status) {
  // Releasing c.mu wakes the API thread awaiting output on it.
  absl::MutexLock lock(&c.mu);
  c.out.push_back(std::move(msg));
  if (done) {
    c.done = true;
    c.status = std::move(status);
  }
}

void ServingLoop::Loop() {
  auto last_check = std::chrono::steady_clock::now();
  while (!stop_) {
    Admit();
    DrainKvInbox();
    DropCancelled();
    if (SecondsSince(last_check) > 0.2) {
      last_check = std::chrono::steady_clock::now();
      if (const std::string dead = workers_->CheckHeartbeats(); !dead.empty()) Suspend(dead);
      // Requests that arrived (or were adopted) since the death move on too.
      if (suspended_at_) Evacuate("this replica is rebuilding");
      CheckRecoveryBudget();
    }
    if (in_flight_.empty() && drafting_.empty() && workers_->CanRecover()) {
      // A restarted worker registered: rebuild the pipeline, then serve again.
      // The restarted worker's KV cache is empty: no cached prefix may be matched again.
      scheduler_.ClearPrefixCache();
      if (absl::Status st = workers_->Recover(); !st.ok()) {
        CASCADE_LOG(Error) << "recovery failed: " << st.ToString();
      } else {
        Resume();
        balancer_.Resend();  // The restarted worker holds no replica.
        if (on_recovered_) on_recovered_();
      }
      continue;
    }
    const bool sent = FillPipeline();
    // KV receives with no step to ride on (nothing else runs here): a step of their own.
    if (!receives_.empty() && in_flight_.empty() && workers_->Healthy()) {
      if (absl::Status st = SendTransfers(); !st.ok()) Suspend(std::string(st.message()));
    }
    if (!in_flight_.empty() || !drafting_.empty()) {
      auto r = workers_->NextResult(std::chrono::milliseconds(100));
      if (r.ok() && r->draft()) {
        OnDraft(*r);
      } else if (r.ok()) {
        OnResult(*r);
      } else if (r.status().code() == absl::StatusCode::kUnavailable) {
        Suspend(std::string(r.status().message()));
      }
      continue;
    }
    if (!sent) {
      // Up to 50 ms, until a submission or stop (Submit and Wake signal cv_).
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
      while (submitted_.empty() && kv_inbox_.empty() && !stop_) {
        if (cv_.WaitWithDeadline(&mu_, deadline)) break;  // Timed out.
      }
    }
  }
  const absl::Status shutting_down = absl::UnavailableError("the coordinator is shutting down");
  FailAll(shutting_down);
  std::vector<std::pair<int64_t, std::shared_ptr<Active>>> never_admitted;
  {
    absl::MutexLock lock(&mu_);  // Submit refuses by itself from now on (stop_ is set).
    never_admitted.swap(submitted_);
  }
  for (auto& [id, a] : never_admitted) Push(*a->channel, {}, true, shutting_down);
}

void ServingLoop::Admit() {
  std::vector<std::pair<int64_t, std::shared_ptr<Active>>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(submitted_);
    // Still live while they are admitted: Stats (what the router weighs replicas by) must
    // not lose them between the queue and active_, or a request arriving meanwhile sees
    // this replica idle and joins them (PublishStats below recounts).
    stats_.n_live += static_cast<int64_t>(batch.size());
  }
  for (auto& [id, a] : batch) {
    // While a dead worker is being replaced, arrivals wait in the queue (bounded by their
    // deadline and the queue's cap); once the recovery timeout passed, they are refused.
    if (recovery_failed_ && !workers_->Healthy()) {
      v1::GenerateResponse last;
      Push(*a->channel, last, true, absl::UnavailableError(StrCat("the cluster is degraded, not serving: ", [&] {
        v1::ClusterStatus st;
        workers_->FillStatus(&st);
        return st.detail().empty() ? st.state() : st.detail();
      }())));
      continue;
    }
    SequenceSpec spec;
    spec.id = id;
    spec.prompt = a->req.prompt;
    // An adopted request goes on: what it generated is prefilled with its prompt, and it
    // may generate the rest.
    spec.prompt.insert(spec.prompt.end(), a->generated.begin(), a->generated.end());
    spec.max_tokens = a->req.max_tokens - static_cast<int32_t>(a->generated.size());
    if (absl::Status s = StartConstraint(*a); !s.ok()) {
      Push(*a->channel, {}, true, s);
      continue;
    }
    spec.user_tag = static_cast<uint64_t>(id);
    if (absl::Status s = scheduler_.Add(spec); !s.ok()) {
      Push(*a->channel, {}, true, s);
      continue;
    }
    active_[id] = a;
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

absl::Status ServingLoop::StartConstraint(Active& a) {
  if (a.req.grammar == nullptr) return absl::OkStatus();
  // On the loop's thread: the grammar's masks are this loop's. An adopted request's state
  // is replayed from what it generated.
  a.constraint = constraint_vocab_.Start(a.req.grammar, a.req.stops);
  for (int32_t t : a.generated) {
    if (absl::Status st = a.constraint->Accept(t); !st.ok()) {
      return absl::InternalError(StrCat("constrained decoding: replaying the request's output: ", st.message()));
    }
  }
  return absl::OkStatus();
}

void ServingLoop::FailRequest(int64_t seq_id, const absl::Status& status) {
  auto it = active_.find(seq_id);
  if (it == active_.end()) return;
  CASCADE_LOG(Error) << "request " << it->second->req.request_id << " failed: " << status.ToString();
  (void)scheduler_.Cancel(seq_id);
  release_.push_back(seq_id);
  Push(*it->second->channel, {}, true, status);
  active_.erase(it);
}

void ServingLoop::DropCancelled() {
  bool dropped = false;
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second->channel->cancelled) {
      (void)scheduler_.Cancel(it->first);
      release_.push_back(it->first);
      Push(*it->second->channel, {}, true, absl::CancelledError("the client cancelled the request"));
      active_.erase(it++);
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped) {
    absl::MutexLock lock(&mu_);
    PublishStats();
  }
}

void ServingLoop::SetDraftTokens() {
  if (!speculation_.enabled()) return;
  const int n_decoding = static_cast<int>(active_.size());
  for (const auto& [id, a] : active_) {
    scheduler_.SetDraftTokens(id, a->spec->DraftTokens(n_decoding, step_cost_.RowCost(n_decoding)));
  }
}

v1::StepRequest ServingLoop::BuildStep(const Batch& batch, bool* needs_drafter) {
  *needs_drafter = false;
  v1::StepRequest step;
  step.set_step_id(batch.id);
  for (int64_t id : release_) step.add_release(id);
  release_.clear();
  for (const BatchEntry& e : batch.entries) {
    Active& a = *active_.at(e.seq_id);
    if (!a.scheduled) {
      a.scheduled = true;
      if (metrics_ != nullptr) metrics_->queue_time.Observe(SecondsSince(a.arrival));
    }
    v1::StepSequence* s = step.add_seqs();
    s->set_seq_id(e.seq_id);
    s->mutable_tokens()->Add(e.tokens.begin(), e.tokens.end());
    s->set_n_past(e.n_past);
    s->mutable_block_table()->Add(e.block_table.begin(), e.block_table.end());
    s->set_sample(e.wants_logits);
    s->set_lane(e.lane);
    if (e.first_chunk) {
      // New, or recomputed after a preemption (n_past > 0 after a prefix-cache hit): the
      // last stage starts its sampler and penalty history afresh from everything the
      // sequence holds.
      s->set_reset(true);
      *s->mutable_sampling() = wire::ToStepSampling(a.req.sampling);
      s->mutable_history()->Add(a.req.prompt.begin(), a.req.prompt.end());
      s->mutable_history()->Add(a.generated.begin(), a.generated.end());
      // Its blocks were given back (or are new, or shared): the drafter starts over from
      // position 0. The drafter keeps its own KV under the same block ids, and whether a
      // shared prefix block holds this prefix in the drafter's cache is unknown (its
      // first owner may never have drafted), so the drafter rewrites the shared blocks
      // of its cache with the same tokens: the same values up to rounding, and harmless
      // even if they differ, since the target verifies every draft. The target's shared
      // blocks are never written (it writes positions >= n_past only).
      a.spec->draft_cached = 0;
    }
    if (e.draft_slots == 0) continue;
    if (speculation_.has_worker()) {
      *needs_drafter = true;
      continue;
    }
    // Prompt lookup over everything the sequence holds.
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> history = a.req.prompt;
    history.insert(history.end(), a.generated.begin(), a.generated.end());
    const std::vector<int32_t> drafts =
        ProposeNgramDraft(history, {.max_n = speculation_.ngram_n, .min_n = 1, .n_draft = e.draft_slots});
    s->mutable_tokens()->Add(drafts.begin(), drafts.end());
    s->set_n_draft(static_cast<int32_t>(drafts.size()));
    a.spec->OnDrafted(SecondsSince(t0));
  }
  if (pick_decode_) AddSends(batch, step);  // A prefill replica: first tokens' KV moves on.
  return step;
}

v1::StepRequest ServingLoop::BuildDraftStep(const Batch& batch, const v1::StepRequest& step) {
  // For each sequence with draft slots: feed the drafter what its cache lacks, through
  // the token the target is about to get, then propose `slots` tokens.
  v1::StepRequest draft;
  draft.set_step_id(step.step_id());
  draft.mutable_release()->CopyFrom(step.release());
  for (const BatchEntry& e : batch.entries) {
    if (e.draft_slots == 0) continue;
    Active& a = *active_.at(e.seq_id);
    const int64_t last = e.n_past;  // Position of the token fed to the target.
    const int64_t n_prompt = static_cast<int64_t>(a.req.prompt.size());
    v1::StepSequence* d = draft.add_seqs();
    d->set_seq_id(e.seq_id);
    for (int64_t p = a.spec->draft_cached; p <= last; ++p) {
      d->add_tokens(p < n_prompt ? a.req.prompt[p] : a.generated[p - n_prompt]);
    }
    d->set_n_past(a.spec->draft_cached);
    // The drafter keeps every lane's blocks (all-to-all's lanes each number theirs from 0):
    // lane l's block b is its block l * (blocks a lane) + b.
    const int32_t base = e.lane * scheduler_.options().n_kv_blocks;
    for (int32_t b : e.block_table) d->add_block_table(base + b);
    d->set_propose(e.draft_slots);
    a.spec->draft_fed = last + e.draft_slots;  // The last draft is proposed, not fed.
  }
  return draft;
}

absl::Status ServingLoop::SendTarget(v1::StepRequest step, Sent sent) {
  sent.t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<int64_t, absl::Status>> failed;
  for (v1::StepSequence& s : *step.mutable_seqs()) {
    if (!s.sample()) continue;
    const auto it = active_.find(s.seq_id());
    if (it == active_.end() || it->second->constraint == nullptr) continue;
    // A grammar too ambiguous to follow fails its request once the step is out, as a
    // cancelled one does (its row's result is dropped with it).
    if (absl::Status st = ConstrainStep(*it->second->constraint, s); !st.ok()) failed.emplace_back(s.seq_id(), st);
  }
  for (const v1::StepSequence& s : step.seqs()) {
    sent.seqs.push_back(s.seq_id());
    if (s.n_draft() > 0) sent.drafted[s.seq_id()] = {s.n_draft(), s.n_past()};
    sent.rows += s.tokens_size();
    sent.decode_only = sent.decode_only && s.sample() && s.tokens_size() == 1 + s.n_draft();
  }
  CASCADE_RETURN_IF_ERROR(Dispatch(step, std::move(sent)));
  for (const auto& [id, status] : failed) FailRequest(id, status);
  absl::MutexLock lock(&mu_);
  ++stats_.steps;
  return absl::OkStatus();
}

absl::Status ServingLoop::Dispatch(v1::StepRequest& step, Sent sent) {
  // The host tier's copies recorded so far go with whichever target step leaves first, and
  // so do the KV receives queued (disaggregation's decode side).
  for (const KvBlockMove& m : scheduler_.TakeKvMoves()) {
    v1::KvBlockMove* out = step.add_kv_moves();
    out->set_to_host(m.to_host);
    out->set_block(m.block);
    out->set_slot(m.slot);
    out->set_lane(m.lane);
  }
  sent.transfers = TakeReceives(step);
  sent.kv_join = step.has_kv_join();
  AttachPlacement(step);
  CASCADE_RETURN_IF_ERROR(workers_->SendStep(step));
  in_flight_.push_back(step.step_id());
  sent_[step.step_id()] = std::move(sent);
  return absl::OkStatus();
}

void ServingLoop::AttachPlacement(v1::StepRequest& step) {
  if (workers_->options().redundant_experts == 0) return;
  const ExpertPlacementPlan* plan = balancer_.Next(workers_->ExpertTokens());
  if (plan == nullptr) return;
  StageWorkers::ReplicaPlacement status;
  v1::ExpertPlacement* out = step.mutable_expert_placement();  // Set even when empty: it clears.
  for (const ExpertReplicaSlot& r : plan->replicas) {
    v1::ExpertReplica* rep = out->add_replicas();
    rep->set_layer(r.layer);
    rep->set_expert(r.expert);
    rep->set_rank(r.rank);
    status.replicas.push_back({r.layer, r.expert, r.rank});
  }
  double before = 0, after = 0;
  for (const LayerBalance& l : plan->layers) {
    status.imbalance[l.layer] = {l.imbalance_before, l.imbalance_after};
    before = std::max(before, l.imbalance_before);
    after = std::max(after, l.imbalance_after);
  }
  workers_->SetReplicaPlacement(std::move(status));
  CASCADE_LOG(Info) << "redundant experts: " << plan->replicas.size() << " replicas placed with step " << step.step_id()
                    << "; the worst layer's busiest rank over the mean " << before << " -> " << after;
}

bool ServingLoop::FillPipeline() {
  bool sent = false;
  if (!workers_->Healthy()) return sent;  // Requests wait for the cluster to rebuild.
  // One more batch than stages with a drafter worker: one drafts while the others verify.
  const int limit = workers_->n_stages() + (speculation_.has_worker() ? 1 : 0);
  while (static_cast<int>(in_flight_.size() + drafting_.size()) < limit) {
    SetDraftTokens();
    std::optional<Batch> batch = scheduler_.Schedule();
    if (!batch) break;
    bool needs_drafter = false;
    v1::StepRequest step = BuildStep(*batch, &needs_drafter);
    absl::Status st;
    if (needs_drafter) {
      const v1::StepRequest draft = BuildDraftStep(*batch, step);
      st = workers_->SendDraft(draft);
      if (st.ok()) drafting_[batch->id] = {std::move(step), std::chrono::steady_clock::now()};
    } else {
      st = SendTarget(std::move(step), {});
    }
    if (!st.ok()) {
      (void)scheduler_.FailBatch(batch->id);
      Suspend(std::string(st.message()));
      return sent;
    }
    sent = true;
  }
  return sent;
}

void ServingLoop::OnDraft(const v1::StepResult& r) {
  auto it = drafting_.find(r.step_id());
  if (it == drafting_.end()) return;  // Given up already (FailAll).
  Drafting d = std::move(it->second);
  drafting_.erase(it);
  if (r.code() != 0) {
    std::vector<int64_t> seqs;
    for (const v1::StepSequence& s : d.step.seqs()) seqs.push_back(s.seq_id());
    FailStep(r.step_id(), seqs, absl::Status(static_cast<absl::StatusCode>(r.code()), r.error()));
    return;
  }
  absl::flat_hash_map<int64_t, std::vector<int32_t>> drafts;
  for (const v1::SampledToken& t : r.tokens()) drafts[t.seq_id()].push_back(t.token());
  const double draft_s = SecondsSince(d.t0);
  size_t proposed = 0;
  for (const auto& [id, ids] : drafts) proposed = std::max(proposed, ids.size());
  step_cost_.ObserveDraft(static_cast<int64_t>(proposed), draft_s);
  for (v1::StepSequence& s : *d.step.mutable_seqs()) {
    auto found = drafts.find(s.seq_id());
    if (found == drafts.end()) continue;
    s.mutable_tokens()->Add(found->second.begin(), found->second.end());
    s.set_n_draft(static_cast<int32_t>(found->second.size()));
    if (auto a = active_.find(s.seq_id()); a != active_.end()) a->second->spec->OnDrafted(draft_s);
  }
  if (absl::Status st = SendTarget(std::move(d.step), {}); !st.ok()) {
    (void)scheduler_.FailBatch(r.step_id());
    Suspend(std::string(st.message()));
  }
}

ServingLoop::Sent ServingLoop::TakeSent(int64_t step_id) {
  auto it = sent_.find(step_id);
  if (it == sent_.end()) return {};
  Sent sent = std::move(it->second);
  sent_.erase(it);
  return sent;
}

void ServingLoop::OnResult(const v1::StepResult& r) {
  // In order, but for a transfers-only step, whose result waits for every worker.
  if (auto it = std::find(in_flight_.begin(), in_flight_.end(), r.step_id()); it != in_flight_.end()) {
    in_flight_.erase(it);
  }
  const Sent sent = TakeSent(r.step_id());
  if (sent.kv_join) {
    const bool joined = r.code() == 0 && r.kv_join_error().empty();
    workers_->set_kv_linked(joined);
    if (joined) {
      CASCADE_LOG(Info) << "rejoined the KV group: KV moves to and from this replica again";
    } else {
      CASCADE_LOG(Warning) << "joining the KV group failed (" << (r.code() != 0 ? r.error() : r.kv_join_error())
                           << "): this replica serves whole requests";
    }
  }
  if (!sent.transfers.empty()) OnTransfers(r, sent);
  if (sent.seqs.empty()) return;  // Transfers only.
  if (r.code() != 0) {
    // Refused before any compute: no KV left with it.
    absl::erase_if(outgoing_, [&](const auto& o) { return o.second.step_id == r.step_id(); });
    FailStep(r.step_id(), sent.seqs, absl::Status(static_cast<absl::StatusCode>(r.code()), r.error()));
    return;
  }
  TokensBySeq by_seq;
  for (const v1::SampledToken& t : r.tokens()) by_seq[t.seq_id()].push_back(&t);
  absl::StatusOr<std::vector<TokenEvent>> events = Complete(r);
  if (events.ok()) {
    Account(sent, by_seq);
    Emit(*events, by_seq);
  }
  if (!outgoing_.empty()) HandOff(r.step_id());  // First tokens out: their requests move on.
  absl::MutexLock lock(&mu_);
  PublishStats();
}

absl::StatusOr<std::vector<TokenEvent>> ServingLoop::Complete(const v1::StepResult& r) {
  std::vector<SampledToken> sampled;
  for (const v1::SampledToken& t : r.tokens()) sampled.push_back({t.seq_id(), t.token()});
  absl::StatusOr<std::vector<TokenEvent>> events = scheduler_.Complete(r.step_id(), sampled);
  if (!events.ok()) {
    CASCADE_LOG(Error) << "step " << r.step_id() << " result rejected: " << events.status().ToString();
    (void)scheduler_.FailBatch(r.step_id());
  }
  return events;
}

void ServingLoop::Account(const Sent& sent, const TokensBySeq& by_seq) {
  const double verify_s = SecondsSince(sent.t0);
  // Only a step that finishes with nothing else in flight feeds the fit: with several in
  // flight, the time from send to result includes waiting behind the others.
  if (sent.decode_only && sent.rows > 0 && in_flight_.empty()) step_cost_.Observe(sent.rows, verify_s);
  for (const auto& [id, toks] : by_seq) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    SpeculativeState& spec = *it->second->spec;
    auto v = sent.drafted.find(id);
    if (v == sent.drafted.end()) {
      spec.OnPlainStep();
      continue;
    }
    const int32_t emitted = static_cast<int32_t>(toks.size());
    spec.OnVerified(v->second.n_draft, emitted, verify_s);
    // The drafter's cache is valid through what it was fed and the target kept.
    spec.draft_cached = std::min(spec.draft_fed, v->second.n_past + emitted);
  }
}

void ServingLoop::Emit(const std::vector<TokenEvent>& events, const TokensBySeq& by_seq) {
  // One message per sequence and step, carrying all of its new tokens.
  absl::flat_hash_map<int64_t, v1::GenerateResponse> pending;
  std::vector<int64_t> order;
  absl::flat_hash_map<int64_t, int> seen;   // Events of each sequence so far.
  absl::flat_hash_map<int64_t, int> n_new;  // Events of each sequence in all.
  for (const TokenEvent& ev : events) ++n_new[ev.seq_id];
  const auto now = std::chrono::steady_clock::now();
  for (const TokenEvent& ev : events) {
    auto it = active_.find(ev.seq_id);
    if (it == active_.end()) continue;
    Active& a = *it->second;
    if (a.constraint != nullptr) {
      if (absl::Status st = a.constraint->Accept(ev.token); !st.ok()) {
        // The last stage sampled outside the mask it was sent: a broken worker, not input.
        pending.erase(ev.seq_id);
        FailRequest(ev.seq_id, absl::InternalError(StrCat("constrained decoding: ", st.message())));
        continue;
      }
    }
    const int index = seen[ev.seq_id]++;
    ObserveOutput(a, index, n_new[ev.seq_id], now);
    a.generated.push_back(ev.token);
    if (!pending.contains(ev.seq_id)) order.push_back(ev.seq_id);
    v1::GenerateResponse& msg = pending[ev.seq_id];
    msg.set_request_id(a.req.request_id);
    msg.add_token_ids(ev.token);
    const auto found = by_seq.find(ev.seq_id);
    if (found != by_seq.end() && index < static_cast<int>(found->second.size()) && a.req.sampling.n_logprobs > 0) {
      AddLogprob(*found->second[index], msg.add_logprobs());
    }
    msg.mutable_text()->append(a.output->Push(ev.token, ev.reached_max_tokens));
    msg.mutable_reasoning()->append(a.output->TakeReasoning());
    if (a.output->done()) {
      Finish(ev.seq_id, a, msg);
      pending.erase(ev.seq_id);
      active_.erase(it);
    }
  }
  for (int64_t id : order) {
    auto it = pending.find(id);
    if (it != pending.end()) Push(*active_.at(id)->channel, std::move(it->second), false);
  }
}

void ServingLoop::ObserveOutput(Active& a, int index, int n_new, std::chrono::steady_clock::time_point now) {
  if (a.ttft_s < 0) {  // The request's first token.
    a.ttft_s = std::chrono::duration<double>(now - a.arrival).count();
    if (metrics_ != nullptr) metrics_->ttft.Observe(a.ttft_s);
  } else if (metrics_ != nullptr) {
    // Tokens that arrive together share the time since the previous output.
    metrics_->itl.Observe(std::chrono::duration<double>(now - a.last_output).count() / n_new);
  }
  if (index == n_new - 1) a.last_output = now;
}

void ServingLoop::Finish(int64_t seq_id, Active& a, v1::GenerateResponse& last) {
  last.mutable_text()->append(a.output->Flush());
  last.mutable_reasoning()->append(a.output->TakeReasoning());
  last.set_finish_reason(std::string(text::FinishReasonName(a.output->reason())));
  last.set_finish(a.output->reason() == text::FinishReason::kLength ? v1::FINISH_REASON_LENGTH
                                                                    : v1::FINISH_REASON_STOP);
  v1::Usage* u = last.mutable_usage();
  u->set_prompt_tokens(static_cast<int32_t>(a.req.prompt.size()));
  u->set_completion_tokens(static_cast<int32_t>(a.generated.size()));
  if (const std::optional<SequenceInfo> info = scheduler_.Lookup(seq_id)) {
    u->set_cached_tokens(static_cast<int32_t>(info->n_cached_prompt_tokens));
    u->set_kv_hidden_tokens(info->n_hidden);
  }
  u->set_ttft_s(a.ttft_s);
  u->set_total_s(SecondsSince(a.arrival));
  if (metrics_ != nullptr) {
    metrics_->e2e.Observe(u->total_s());
    if (a.generated.size() > 1) metrics_->tpot.Observe((u->total_s() - a.ttft_s) / (a.generated.size() - 1));
  }
  const v1::SpeculativeStats spec = a.spec->Stats();
  if (a.spec->used()) *u->mutable_speculative() = spec;
  u->set_expert_load_max_mean(workers_->ExpertLoadMaxMean());
  const int64_t hidden = u->kv_hidden_tokens();
  (void)scheduler_.Finish(seq_id);
  release_.push_back(seq_id);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.finished;
    stats_.prompt_tokens += static_cast<int64_t>(a.req.prompt.size());
    stats_.generation_tokens += static_cast<int64_t>(a.generated.size());
    stats_.kv_narrowed_requests += hidden > 0 ? 1 : 0;
    stats_.kv_hidden_tokens += hidden;
    AccumulateStats(spec, &stats_.speculative);
    PublishStats();
  }
  // The last chunk goes after the counts: a client that reads /metrics or `cascade status`
  // once its answer is whole sees it counted (cluster_kv_sink_window read one narrowed
  // request of two under load when the chunk went first).
  Push(*a.channel, std::move(last), true);
}

void ServingLoop::FailStep(int64_t step_id, const std::vector<int64_t>& seqs, const absl::Status& status) {
  CASCADE_LOG(Warning) << "step " << step_id << " refused by a worker: " << status.ToString();
  (void)scheduler_.FailBatch(step_id);
  for (int64_t id : seqs) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    (void)scheduler_.Cancel(id);
    release_.push_back(id);
    Push(*it->second->channel, {}, true, status);
    active_.erase(it);
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

void ServingLoop::GiveUpInFlight() {
  for (int64_t id : in_flight_) (void)scheduler_.FailBatch(id);
  for (const auto& [id, d] : drafting_) (void)scheduler_.FailBatch(id);
  in_flight_.clear();
  drafting_.clear();
  sent_.clear();
}

void ServingLoop::Suspend(std::string_view why) {
  GiveUpInFlight();  // Their positions are re-fed once the cluster is whole.
  DropTransfers();
  Evacuate(why);
  scheduler_.RequeueAll();
  if (!suspended_at_) {
    suspended_at_ = std::chrono::steady_clock::now();
    down_reason_ = std::string(why);
    CASCADE_LOG(Warning) << why << ": " << active_.size() << " request(s) wait for the cluster to rebuild (up to "
                         << recovery_timeout_.count() << " s), then recompute their KV and go on";
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

void ServingLoop::Evacuate(std::string_view why) {
  if (!evacuate_ || active_.empty()) return;
  int moved = 0;
  const size_t before = active_.size();
  for (auto it = active_.begin(); it != active_.end();) {
    if (!evacuate_(it->second)) {
      ++it;
      continue;
    }
    (void)scheduler_.Cancel(it->first);  // Its blocks here are free; its tokens went with it.
    release_.push_back(it->first);
    active_.erase(it++);
    ++moved;
  }
  if (moved > 0) {
    CASCADE_LOG(Warning) << why << ": " << moved << " of " << before
                         << " request(s) moved to another replica, to go on there";
  }
}

void ServingLoop::Resume() {
  if (suspended_at_) {
    CASCADE_LOG(Info) << "resuming " << active_.size() << " request(s) after " << SecondsSince(*suspended_at_)
                      << " s: their KV is recomputed from the tokens they hold";
  }
  suspended_at_.reset();
  recovery_failed_ = false;
}

void ServingLoop::CheckRecoveryBudget() {
  if (!suspended_at_ || recovery_failed_ || workers_->Healthy()) return;
  if (SecondsSince(*suspended_at_) < static_cast<double>(recovery_timeout_.count())) return;
  recovery_failed_ = true;
  FailAll(absl::UnavailableError(StrCat(down_reason_, "; the cluster did not rebuild within ",
                                        recovery_timeout_.count(), " s (server.recovery_timeout_s)")));
}

void ServingLoop::FailAll(const absl::Status& status) {
  for (auto& [id, a] : active_) {
    (void)scheduler_.Cancel(id);
    Push(*a->channel, {}, true, status);
  }
  active_.clear();
  GiveUpInFlight();
  DropTransfers();
  absl::MutexLock lock(&mu_);
  PublishStats();
}

}  // namespace cascade::coordinator
