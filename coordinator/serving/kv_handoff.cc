// ServingLoop's part in disaggregated serving (coordinator/serving/replicas.h): a prefill
// serving loop hands each request over after its first token, a decode serving loop takes
// it with its KV. The KV moves between the two replicas' workers over their KV group
// (model/kv_transfer.h), in steps of transfers only: the decode side's receive step goes
// out when the request has blocks there, and asks the prefill side to send; the prefill
// side keeps the request's blocks until its send step is back. A failed transfer costs a
// recompute on the decode side, never the request.
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
  h.source->ReleaseKv(h.transfer_id);
  Push(*a->channel, {}, true, absl::UnavailableError("the coordinator is shutting down"));
}

void ServingLoop::SendKv(uint64_t id, std::vector<KvPiece> pieces) {
  absl::MutexLock lock(&mu_);
  kv_inbox_.sends.emplace_back(id, std::move(pieces));
  cv_.SignalAll();
}

void ServingLoop::ReleaseKv(uint64_t id) {
  absl::MutexLock lock(&mu_);
  kv_inbox_.releases.push_back(id);
  cv_.SignalAll();
}

void ServingLoop::DrainKvInbox() {
  KvInbox inbox;
  {
    absl::MutexLock lock(&mu_);
    std::swap(inbox, kv_inbox_);
  }
  for (uint64_t id : inbox.releases) {
    if (auto it = held_kv_.find(id); it != held_kv_.end()) {
      scheduler_.FreeDetached(it->second.table);
      held_kv_.erase(it);
    }
  }
  for (auto& [id, pieces] : inbox.sends) {
    auto it = held_kv_.find(id);
    if (it == held_kv_.end()) continue;  // Freed already (this replica's worker died): the receiver times out.
    v1::StepRequest step;
    AddKvTransfer(id, std::span(it->second.table).first(it->second.n_blocks), pieces, /*send=*/true, &step);
    if (absl::Status st = SendTransfers(std::move(step), {id}); !st.ok()) Suspend(std::string(st.message()));
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
  Active& a = *p.request;
  const KvHandoff& h = p.handoff;
  const auto give_up = [&](const absl::Status& st) {
    h.source->ReleaseKv(h.transfer_id);
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
  absl::StatusOr<std::vector<KvPiece>> pieces = PlanKvTransfer(*h.senders, kv_holders_);
  if (!pieces.ok()) return give_up(pieces.status());
  if (absl::Status st = StartConstraint(a); !st.ok()) return give_up(st);
  std::vector<int32_t> table;
  const absl::Status added = scheduler_.AddPrefilled(spec, {}, h.n_cached, h.cached_prompt_tokens, &table);
  if (added.code() == absl::StatusCode::kResourceExhausted) return false;  // Later, once blocks are free.
  if (!added.ok()) return give_up(added);
  active_[p.seq_id] = p.request;
  incoming_[h.transfer_id] = {p.seq_id, h.source, h.n_cached};
  v1::StepRequest step;
  AddKvTransfer(h.transfer_id, std::span(table).first(h.blocks.size()), *pieces, /*send=*/false, &step);
  h.source->SendKv(h.transfer_id, *std::move(pieces));
  if (absl::Status st = SendTransfers(std::move(step), {h.transfer_id}); !st.ok()) Suspend(std::string(st.message()));
  return true;
}

void ServingLoop::HandOff(const std::vector<int64_t>& seqs) {
  for (int64_t id : seqs) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;  // Finished with its first tokens.
    ServingLoop* target = pick_decode_();
    if (target == nullptr) return;  // No decode replica serves: they decode here.
    const std::optional<SequenceInfo> info = scheduler_.Lookup(id);
    if (!info || info->state != SequenceState::kRunning) continue;
    absl::StatusOr<std::vector<int32_t>> table = scheduler_.Detach(id);
    if (!table.ok()) continue;
    const uint64_t transfer = next_transfer_id++;
    KvHandoff h{.source = this,
                .transfer_id = transfer,
                .n_cached = info->n_cached,
                .cached_prompt_tokens = info->n_cached_prompt_tokens,
                .blocks = {},
                .senders = &kv_holders_};
    const int32_t n_blocks = static_cast<int32_t>((info->n_cached + scheduler_.options().kv_block_size - 1) /
                                                  scheduler_.options().kv_block_size);
    h.blocks.assign(table->begin(), table->begin() + n_blocks);
    held_kv_[transfer] = {*std::move(table), n_blocks};
    release_.push_back(id);  // The last stage's sampler state of it goes.
    std::shared_ptr<Active> a = std::move(it->second);
    active_.erase(it);
    target->AdoptPrefilled(std::move(a), std::move(h));
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

absl::Status ServingLoop::SendTransfers(v1::StepRequest step, std::vector<uint64_t> transfers) {
  step.set_step_id(next_transfer_step_++);
  for (int64_t id : release_) step.add_release(id);
  release_.clear();
  // The host tier's copies recorded so far go first, as with every target step.
  for (const KvBlockMove& m : scheduler_.TakeKvMoves()) {
    v1::KvBlockMove* out = step.add_kv_moves();
    out->set_to_host(m.to_host);
    out->set_block(m.block);
    out->set_slot(m.slot);
  }
  Sent sent;
  sent.t0 = std::chrono::steady_clock::now();
  sent.decode_only = false;
  sent.transfers = std::move(transfers);
  CASCADE_RETURN_IF_ERROR(workers_->SendStep(step));
  in_flight_.push_back(step.step_id());
  sent_[step.step_id()] = std::move(sent);
  return absl::OkStatus();
}

void ServingLoop::OnTransfers(const v1::StepResult& r, const Sent& sent) {
  absl::flat_hash_set<uint64_t> failed(r.failed_transfers().begin(), r.failed_transfers().end());
  for (uint64_t id : sent.transfers) {
    const bool ok = r.code() == 0 && !failed.contains(id);
    if (auto held = held_kv_.find(id); held != held_kv_.end()) {  // Sent (or not): the blocks come back.
      if (!ok) {
        CASCADE_LOG(Warning) << "KV transfer " << id << ": sending failed ("
                             << (r.code() != 0 ? r.error() : r.transfer_error()) << ")";
      }
      scheduler_.FreeDetached(held->second.table);
      held_kv_.erase(held);
    }
    if (auto in = incoming_.find(id); in != incoming_.end()) {
      if (ok && metrics_ != nullptr)
        metrics_->ObserveKvTransfer(r.transfer_bytes(), SecondsSince(sent.t0), in->second.n_cached);
      if (ok) {
        scheduler_.KvArrived(in->second.seq_id);
      } else {
        CASCADE_LOG(Warning) << "KV transfer " << id << " failed (" << (r.code() != 0 ? r.error() : r.transfer_error())
                             << "): sequence " << in->second.seq_id << " recomputes its KV here";
        scheduler_.KvLost(in->second.seq_id);
      }
      incoming_.erase(in);
    }
  }
  absl::MutexLock lock(&mu_);
  PublishStats();
}

void ServingLoop::DropTransfers() {
  for (auto& [id, held] : held_kv_) scheduler_.FreeDetached(held.table);
  held_kv_.clear();
  for (auto& [id, in] : incoming_) in.source->ReleaseKv(id);  // Its sequence was requeued with the rest.
  incoming_.clear();
  for (Prefilled& p : awaiting_blocks_) p.handoff.source->ReleaseKv(p.handoff.transfer_id);
  // Not admitted yet: they go back to the queue as plain arrivals, to prefill here.
  absl::MutexLock lock(&mu_);
  for (Prefilled& p : awaiting_blocks_) submitted_.emplace_back(p.seq_id, std::move(p.request));
  awaiting_blocks_.clear();
}

}  // namespace cascade::coordinator
