// ServingLoop's part in disaggregated serving (coordinator/serving/replicas.h): a prefill
// serving loop hands each request over after its first token, a decode serving loop takes
// it with its KV, which moves between the two replicas' workers over their KV group
// (model/kv_transfer.h, worker/kv_channel.h):
//  * the step that samples a request's first token also sends its KV: each prefill worker
//    packs its slices once the step's compute wrote them and sends them in the background,
//    so the prefill pipeline never waits for the decode side;
//  * once that step is back, the request (detached from the prefill scheduler, whose blocks
//    are free again: the KV left with the step) is adopted by the decode loop, which gives
//    it blocks and receives the KV with its next step out, before that step's compute;
//  * the request decodes once every decode worker has its part; a transfer that failed
//    costs a recompute of its KV on the decode side, never the request.
#include <algorithm>
#include <atomic>

#include "absl/container/flat_hash_set.h"
#include "coordinator/serving/serving_loop.h"
#include "core/clock.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

// Transfer ids, unique in the coordinator: the tag of every message of a transfer.
std::atomic<uint64_t> next_transfer_id{1};

}  // namespace

void ServingLoop::AdoptPrefilled(std::shared_ptr<Active> a, KvHandoff h) {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      kv_inbox_.prefilled.push_back({next_seq_id_++, std::move(a), std::move(h)});
      cv_.SignalAll();
      return;
    }
  }
  Push(*a->channel, {}, true, absl::UnavailableError("the coordinator is shutting down"));
}

void ServingLoop::JoinKvGroup(v1::KvGroupJoin join) {
  absl::MutexLock lock(&mu_);
  kv_inbox_.join = std::move(join);
  cv_.SignalAll();
}

void ServingLoop::DiscardKv(KvHandoff h) {
  absl::MutexLock lock(&mu_);
  kv_inbox_.prefilled.push_back({-1, nullptr, std::move(h)});
  cv_.SignalAll();
}

void ServingLoop::AddSends(const Batch& batch, v1::StepRequest& step) {
  const int64_t bs = scheduler_.options().kv_block_size;
  for (const BatchEntry& e : batch.entries) {
    const Active& a = *active_.at(e.seq_id);
    if (!e.wants_logits || !a.generated.empty()) continue;  // Not the step of its first token.
    ServingLoop* target = pick_decode_();
    if (target == nullptr) return;  // No decode replica in the KV group serves: they decode here.
    absl::StatusOr<std::vector<KvPiece>> pieces = PlanKvTransfer(kv_holders_, target->kv_holders());
    if (!pieces.ok()) {
      CASCADE_LOG(Error) << "disaggregation: " << pieces.status().ToString();
      return;
    }
    Outgoing out{.step_id = step.step_id(), .target = target, .handoff = {}};
    KvHandoff& h = out.handoff;
    h.transfer_id = next_transfer_id++;
    h.n_cached = e.n_past + static_cast<int64_t>(e.tokens.size());  // The whole prompt, once computed.
    h.n_blocks = static_cast<int32_t>((h.n_cached + bs - 1) / bs);
    h.pieces = *std::move(pieces);
    AddKvTransfer(h.transfer_id, std::span(e.block_table).first(h.n_blocks), h.pieces, /*send=*/true, &step);
    outgoing_[e.seq_id] = std::move(out);
  }
}

void ServingLoop::HandOff(int64_t step_id) {
  // In transfer order, the order the workers send them in (see awaiting_blocks_).
  std::vector<std::pair<int64_t, Outgoing>> done;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    if (it->second.step_id == step_id) {
      done.emplace_back(it->first, std::move(it->second));
      outgoing_.erase(it++);
    } else {
      ++it;
    }
  }
  std::sort(done.begin(), done.end(),
            [](const auto& a, const auto& b) { return a.second.handoff.transfer_id < b.second.handoff.transfer_id; });
  for (auto& [id, out] : done) {
    auto a = active_.find(id);
    const std::optional<SequenceInfo> info = scheduler_.Lookup(id);
    absl::StatusOr<std::vector<int32_t>> table =
        a != active_.end() && info ? scheduler_.Detach(id) : absl::NotFoundError("gone");
    if (!table.ok()) {  // Finished with its first token, cancelled or failed: the KV is not wanted.
      out.target->DiscardKv(std::move(out.handoff));
      continue;
    }
    scheduler_.FreeDetached(*table);  // Its KV left with the step.
    out.handoff.cached_prompt_tokens = info->n_cached_prompt_tokens;
    release_.push_back(id);  // The last stage's sampler state of it goes.
    std::shared_ptr<Active> request = std::move(a->second);
    active_.erase(a);
    out.target->AdoptPrefilled(std::move(request), std::move(out.handoff));
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

void ServingLoop::DrainKvInbox() {
  KvInbox inbox;
  {
    absl::MutexLock lock(&mu_);
    std::swap(inbox, kv_inbox_);
  }
  if (inbox.join && workers_->Healthy()) {
    if (absl::Status st = SendTransfers(std::move(inbox.join)); !st.ok()) Suspend(std::string(st.message()));
  }
  for (Prefilled& p : inbox.prefilled) awaiting_blocks_.push_back(std::move(p));
  // In arrival order; the first that does not fit waits for blocks, and so do those behind it.
  while (!awaiting_blocks_.empty() && !suspended_at_ && AdmitPrefilled(awaiting_blocks_.front())) {
    awaiting_blocks_.pop_front();
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

bool ServingLoop::AdmitPrefilled(Prefilled& p) {
  const KvHandoff& h = p.handoff;
  if (p.request == nullptr) {  // A discard.
    receives_.push_back({-1, std::vector<int32_t>(h.n_blocks, 0), h});
    return true;
  }
  Active& a = *p.request;
  const auto give_up = [&](const absl::Status& st) {
    receives_.push_back({-1, std::vector<int32_t>(h.n_blocks, 0), h});  // Its senders go on.
    Push(*a.channel, {}, true, st);
    return true;
  };
  if (a.channel->cancelled) return give_up(absl::CancelledError("cancelled"));
  // As an adopted request: what it generated joins its prompt, and it may generate the rest.
  SequenceSpec spec;
  spec.id = p.seq_id;
  spec.prompt = a.req.prompt;
  spec.prompt.insert(spec.prompt.end(), a.generated.begin(), a.generated.end());
  spec.max_tokens = a.req.max_tokens - static_cast<int32_t>(a.generated.size());
  spec.user_tag = static_cast<uint64_t>(p.seq_id);
  if (absl::Status st = StartConstraint(a); !st.ok()) return give_up(st);
  std::vector<int32_t> table;
  const absl::Status added = scheduler_.AddPrefilled(spec, {}, h.n_cached, h.cached_prompt_tokens, &table);
  if (added.code() == absl::StatusCode::kResourceExhausted) return false;  // Later, once blocks are free.
  if (!added.ok()) return give_up(added);
  active_[p.seq_id] = p.request;
  table.resize(h.n_blocks);
  receives_.push_back({p.seq_id, std::move(table), h});
  return true;
}

std::vector<uint64_t> ServingLoop::TakeReceives(v1::StepRequest& step) {
  std::vector<uint64_t> ids;
  for (Receive& r : receives_) {
    AddKvTransfer(r.handoff.transfer_id, r.blocks, r.handoff.pieces, /*send=*/false, &step);
    step.mutable_kv_transfers()->rbegin()->set_discard(r.seq_id < 0);
    ids.push_back(r.handoff.transfer_id);
    incoming_[r.handoff.transfer_id] = std::move(r);
  }
  receives_.clear();
  return ids;
}

absl::Status ServingLoop::SendTransfers(std::optional<v1::KvGroupJoin> join) {
  v1::StepRequest step;
  step.set_step_id(next_transfer_step_++);
  if (join) *step.mutable_kv_join() = *std::move(join);
  for (int64_t id : release_) step.add_release(id);
  release_.clear();
  Sent sent;
  sent.t0 = std::chrono::steady_clock::now();
  sent.decode_only = false;
  return Dispatch(step, std::move(sent));
}

void ServingLoop::OnTransfers(const v1::StepResult& r, const Sent& sent) {
  const absl::flat_hash_set<uint64_t> failed(r.failed_transfers().begin(), r.failed_transfers().end());
  int64_t bytes = r.transfer_bytes();
  for (uint64_t id : sent.transfers) {
    auto in = incoming_.find(id);
    if (in == incoming_.end()) continue;
    const Receive rec = std::move(in->second);
    incoming_.erase(in);
    if (rec.seq_id < 0) continue;  // Discarded.
    if (r.code() == 0 && !failed.contains(id)) {
      if (metrics_ != nullptr) {
        metrics_->ObserveKvTransfer(bytes, SecondsSince(sent.t0), rec.handoff.n_cached);
        bytes = 0;  // A step's receive bytes go to its first transfer (one per step, mostly).
      }
      scheduler_.KvArrived(rec.seq_id);
    } else {
      CASCADE_LOG(Warning) << "KV transfer " << id << " failed (" << (r.code() != 0 ? r.error() : r.transfer_error())
                           << "): sequence " << rec.seq_id << " recomputes its KV here";
      scheduler_.KvLost(rec.seq_id);
    }
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

void ServingLoop::DropTransfers() {
  // Sends in flight: whether their KV left is unknown; the decode side's receive fails or
  // times out, and recomputes. Receives in flight: their sequences were requeued.
  outgoing_.clear();
  incoming_.clear();
  receives_.clear();  // Their sequences (if any) were requeued with the rest; senders time out.
  // Not admitted yet: they go back to the queue as plain arrivals, to prefill here.
  absl::MutexLock lock(&mu_);
  for (Prefilled& p : awaiting_blocks_) {
    if (p.request != nullptr) submitted_.emplace_back(p.seq_id, std::move(p.request));
  }
  awaiting_blocks_.clear();
}

}  // namespace cascade::coordinator
