#include "coordinator/serving/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

int Batch::n_tokens() const {
  int n = 0;
  for (const BatchEntry& e : entries) n += static_cast<int>(e.tokens.size());
  return n;
}

int32_t Scheduler::Sequence::token(int64_t i) const {
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  return i < n_prompt ? spec.prompt[i] : generated[i - n_prompt];
}

SchedulerStats& SchedulerStats::operator+=(const SchedulerStats& o) {
  n_running += o.n_running;
  n_in_flight_seqs += o.n_in_flight_seqs;
  n_waiting += o.n_waiting;
  n_in_flight_batches += o.n_in_flight_batches;
  n_free_blocks += o.n_free_blocks;
  n_total_blocks += o.n_total_blocks;
  n_preemptions += o.n_preemptions;
  n_batches += o.n_batches;
  max_batch_seqs_seen = std::max(max_batch_seqs_seen, o.max_batch_seqs_seen);
  max_batch_tokens_seen = std::max(max_batch_tokens_seen, o.max_batch_tokens_seen);
  prefix_query_tokens += o.prefix_query_tokens;
  prefix_hit_tokens += o.prefix_hit_tokens;
  n_cached_blocks += o.n_cached_blocks;
  n_host_blocks += o.n_host_blocks;
  n_host_cached_blocks += o.n_host_cached_blocks;
  host_offloaded_blocks += o.host_offloaded_blocks;
  host_onloaded_blocks += o.host_onloaded_blocks;
  prefix_host_hit_tokens += o.prefix_host_hit_tokens;
  return *this;
}

Scheduler::Scheduler(const SchedulerOptions& options) : options_(options) {
  CASCADE_CHECK(options.n_lanes >= 1) << "n_lanes " << options.n_lanes;
  for (int lane = 0; lane < options.n_lanes; ++lane) {
    pools_.emplace_back(options.n_kv_blocks, options.kv_block_size, options.n_host_kv_blocks);
  }
  CASCADE_CHECK(options.max_num_seqs >= 1) << "max_num_seqs " << options.max_num_seqs;
  CASCADE_CHECK(options.max_batched_tokens >= 1) << "max_batched_tokens " << options.max_batched_tokens;
  CASCADE_CHECK(options.max_in_flight_batches >= 1) << "max_in_flight_batches " << options.max_in_flight_batches;
  CASCADE_CHECK(options.n_host_kv_blocks >= 0) << "n_host_kv_blocks " << options.n_host_kv_blocks;
  CASCADE_CHECK(options.kv_window_tokens >= 0 && options.kv_sink_tokens >= 0 &&
                (options.kv_window_tokens > 0 || options.kv_sink_tokens == 0))
      << "kv window " << options.kv_window_tokens << ", sinks " << options.kv_sink_tokens;
}

int64_t Scheduler::WindowPeakBlocks(const SchedulerOptions& o) {
  if (o.kv_window_tokens == 0) return 0;
  const int64_t bs = o.kv_block_size;
  // Rows [p, p + n) read and write positions [p + 1 - W, p + n): at most (W - 1 + n) / bs + 2
  // blocks, n up to a prefill chunk (max_batched_tokens), beside the sinks' blocks.
  return (o.kv_sink_tokens + bs - 1) / bs + (o.kv_window_tokens - 1 + o.max_batched_tokens) / bs + 2;
}

void Scheduler::ReleaseHidden(Sequence& seq) {
  const int64_t w = options_.kv_window_tokens, sinks = options_.kv_sink_tokens, bs = options_.kv_block_size;
  if (w == 0 || seq.n_cached + 1 - w <= sinks) return;
  const int64_t end = std::min<int64_t>((seq.n_cached + 1 - w) / bs, static_cast<int64_t>(seq.block_table.size()));
  std::vector<int32_t> freed;
  for (int64_t b = (sinks + bs - 1) / bs; b < end; ++b) {
    if (seq.block_table[b] == kHiddenBlock) continue;
    freed.push_back(seq.block_table[b]);
    seq.block_table[b] = kHiddenBlock;
  }
  Pool(seq).Free(freed);
}

bool Scheduler::Grow(Sequence& seq, int32_t need, const std::vector<int64_t>& batch_ids, bool* preempted) {
  while (need > Pool(seq).n_free()) {
    Sequence* victim = PickVictim(batch_ids, seq.lane);
    if (victim == nullptr) return false;  // Everything else is in flight: wait for it.
    // Rather than evict itself, an older sequence waits for newer in-flight ones to
    // come back and evicts them then (pass 1 reaches it first in that round).
    if (victim == &seq && NewerInFlight(seq)) return false;
    Preempt(*victim);
    *preempted = true;
    if (victim == &seq) return false;
  }
  CASCADE_CHECK(Pool(seq).AllocateInto(need, &seq.block_table).ok());
  return true;
}

void Scheduler::ResetKvBlocks(int32_t n_blocks) {
  CASCADE_CHECK(seqs_.empty() && next_batch_id_ == 1) << "ResetKvBlocks after the scheduler started";
  options_.n_kv_blocks = n_blocks;
  for (BlockAllocator& pool : pools_)
    pool = BlockAllocator(n_blocks, options_.kv_block_size, options_.n_host_kv_blocks);
}

absl::Status Scheduler::Add(SequenceSpec spec) {
  if (seqs_.contains(spec.id)) {
    return absl::AlreadyExistsError(StrCat("sequence ", spec.id, " is already live"));
  }
  if (spec.prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(StrCat("the queue is full: ", waiting_.size(),
                                               " requests wait for admission (scheduler.max_queued); retry later"));
  }
  if (spec.max_tokens < 1) {
    return absl::InvalidArgumentError(StrCat("max_tokens: must be >= 1, got ", spec.max_tokens));
  }
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  // The prompt plus one decode slot must fit, as for admission, in one lane's pool (they
  // are all alike).
  const BlockAllocator& pool = pools_[0];
  const int64_t prompt_blocks = pool.BlocksForTokens(n_prompt + 1);
  if (const int64_t peak = WindowPeakBlocks(); peak > 0) {
    // Sink + window: never more than its peak at once, however long it grows.
    if (std::min<int64_t>(pool.BlocksForTokens(n_prompt + spec.max_tokens), peak) > pool.n_total()) {
      return absl::InvalidArgumentError(StrCat("scheduler.kv_window_tokens: a sequence may hold ", peak,
                                               " KV blocks at once (sinks, window and a prefill chunk), the cache has ",
                                               pool.n_total()));
    }
  } else if (prompt_blocks > pool.n_total()) {
    return absl::InvalidArgumentError(
        StrCat("prompt of ", n_prompt, " tokens needs ", prompt_blocks, " KV blocks, the cache has ", pool.n_total()));
  }
  // The last generated token is never fed, so prompt + max_tokens - 1 positions at most.
  const int64_t full_blocks = pool.BlocksForTokens(n_prompt + spec.max_tokens);
  if (WindowPeakBlocks() == 0 && full_blocks > pool.n_total()) {
    return absl::InvalidArgumentError(StrCat("max_tokens: prompt of ", n_prompt, " tokens + max_tokens ",
                                             spec.max_tokens, " need ", full_blocks, " KV blocks, the cache has ",
                                             pool.n_total()));
  }
  const int64_t id = spec.id;
  Sequence seq;
  seq.spec = std::move(spec);
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  return absl::OkStatus();
}

void Scheduler::RequeueAll() {
  CASCADE_CHECK(in_flight_.empty()) << "RequeueAll with " << in_flight_.size() << " batch(es) in flight";
  // Newest first to the front: the queue ends in admission order, ahead of later arrivals.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence& seq = seqs_.at(*it);
    seq.in_flight_batch = -1;  // A transfer in progress is given up with the steps.
    Unadmit(seq);
  }
  running_.clear();
  // Cancelled while their KV was in transit: nothing will end the transfer now.
  std::vector<int64_t> dropped;
  for (const auto& [id, seq] : seqs_) {
    if (seq.dropped && seq.in_flight_batch == kAwaitingKv) dropped.push_back(id);
  }
  for (int64_t id : dropped) Drop(id);
}

absl::StatusOr<std::vector<int32_t>> Scheduler::Detach(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second.dropped) return absl::NotFoundError(StrCat("sequence ", seq_id, " is not live"));
  Sequence& seq = it->second;
  if (!seq.running || seq.in_flight_batch >= 0) {
    return absl::FailedPreconditionError(StrCat("sequence ", seq_id, " is not running idle"));
  }
  running_.erase(std::find(running_.begin(), running_.end(), seq_id));
  std::vector<int32_t> table = std::move(seq.block_table);
  seqs_.erase(it);
  return table;
}

void Scheduler::FreeDetached(std::span<const int32_t> blocks) {
  const std::vector<int32_t> tail_first(blocks.rbegin(), blocks.rend());
  pools_[0].Free(tail_first);  // Disaggregation: one lane.
}

absl::Status Scheduler::AddPrefilled(SequenceSpec spec, std::vector<int32_t> generated, int64_t n_cached,
                                     int64_t n_cached_prompt_tokens, std::vector<int32_t>* table) {
  const int64_t id = spec.id;
  const int64_t n_tokens = static_cast<int64_t>(spec.prompt.size() + generated.size());
  CASCADE_CHECK(n_cached > 0 && n_cached < n_tokens) << "AddPrefilled: " << n_cached << " of " << n_tokens;
  BlockAllocator& pool = pools_[0];  // Disaggregation: one lane.
  const int32_t need = pool.BlocksForTokens(n_tokens + 1);
  if (need > pool.n_free()) {
    return absl::ResourceExhaustedError(StrCat("KV cache: ", need, " blocks wanted, ", pool.n_free(), " free"));
  }
  CASCADE_RETURN_IF_ERROR(Add(std::move(spec)));
  waiting_.pop_back();
  Sequence& seq = seqs_.at(id);
  seq.generated = std::move(generated);
  CASCADE_CHECK(pool.AllocateInto(need, &seq.block_table).ok());
  seq.n_cached = n_cached;
  seq.n_cached_prompt_tokens = n_cached_prompt_tokens;
  seq.admitted = seq.running = seq.restart = true;
  seq.in_flight_batch = kAwaitingKv;
  running_.push_back(id);
  *table = seq.block_table;
  return absl::OkStatus();
}

Scheduler::Sequence* Scheduler::EndTransfer(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second.in_flight_batch != kAwaitingKv) return nullptr;
  Sequence& seq = it->second;
  seq.in_flight_batch = -1;
  if (seq.dropped) {
    Drop(seq_id);
    return nullptr;
  }
  return &seq;
}

void Scheduler::KvArrived(int64_t seq_id) {
  Sequence* seq = EndTransfer(seq_id);
  if (seq == nullptr) return;
  seq->n_prefilled = seq->n_cached;  // Prefill-computed on the other side: registrable.
  RegisterCachedBlocks(*seq);
}

void Scheduler::KvLost(int64_t seq_id) {
  Sequence* seq = EndTransfer(seq_id);
  if (seq == nullptr) return;
  running_.erase(std::find(running_.begin(), running_.end(), seq_id));
  seq->restart = false;
  Unadmit(*seq);  // Readmitted, it recomputes prompt + generated here.
}

void Scheduler::ClearPrefixCache() {
  for (BlockAllocator& pool : pools_) pool.ClearPrefixCache();
  for (auto& [id, seq] : seqs_) {
    seq.chain.clear();
    seq.chain_open = false;  // Its blocks' KV may be gone too; never register them.
  }
}

void Scheduler::AddEntry(Sequence& seq, int64_t n_new, bool is_prefill, Batch& batch, bool first_chunk) {
  BatchEntry entry;
  entry.seq_id = seq.spec.id;
  entry.n_past = seq.n_cached;
  entry.tokens.reserve(n_new);
  for (int64_t i = 0; i < n_new; ++i) entry.tokens.push_back(seq.token(seq.n_cached + i));
  entry.block_table = seq.block_table;
  entry.wants_logits = seq.n_cached + n_new == seq.n_tokens();
  entry.is_prefill = is_prefill;
  entry.first_chunk = first_chunk;
  entry.lane = seq.lane;
  batch.entries.push_back(std::move(entry));
}

void Scheduler::ReserveDraftSlots(Sequence& seq, int64_t budget, BatchEntry& entry) {
  // Every emitted token counts against max_tokens: k drafts emit up to k + 1 tokens.
  const int64_t left = seq.spec.max_tokens - static_cast<int64_t>(seq.generated.size()) - 1;
  int64_t k = std::min<int64_t>({seq.draft_tokens, left, budget});
  while (k > 0) {
    const int32_t need = Pool(seq).BlocksForTokens(seq.n_cached + 1 + k) - static_cast<int32_t>(seq.block_table.size());
    if (need <= Pool(seq).n_free()) {
      if (need > 0) CASCADE_CHECK(Pool(seq).AllocateInto(need, &seq.block_table).ok());
      break;
    }
    --k;  // Drafts never preempt: fewer of them when blocks are short.
  }
  entry.draft_slots = static_cast<int32_t>(std::max<int64_t>(k, 0));
  entry.block_table = seq.block_table;
}

void Scheduler::SetDraftTokens(int64_t seq_id, int32_t k) {
  CASCADE_CHECK(k >= 0) << "draft tokens " << k;
  if (auto it = seqs_.find(seq_id); it != seqs_.end()) it->second.draft_tokens = k;
}

void Scheduler::FreeBlocks(Sequence& seq) {
  std::vector<int32_t> tail_first;
  tail_first.reserve(seq.block_table.size());
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    if (*it != kHiddenBlock) tail_first.push_back(*it);
  }
  Pool(seq).Free(tail_first);
  seq.block_table.clear();
  seq.chain.clear();
}

int32_t Scheduler::PickLane(std::span<const int32_t> tokens, int32_t max_blocks, std::vector<PrefixLink>* hit) const {
  int32_t best = 0;
  hit->clear();
  for (int32_t lane = 0; lane < options_.n_lanes; ++lane) {
    std::vector<PrefixLink> chain = pools_[lane].Match(tokens, max_blocks);
    if (lane == 0 || chain.size() > hit->size() ||
        (chain.size() == hit->size() && pools_[lane].n_free() > pools_[best].n_free())) {
      best = lane;
      *hit = std::move(chain);
    }
  }
  return best;
}

std::vector<KvBlockMove> Scheduler::TakeKvMoves() {
  std::vector<KvBlockMove> moves;
  for (int32_t lane = 0; lane < options_.n_lanes; ++lane) {
    for (KvBlockMove& m : pools_[lane].TakeMoves()) {
      m.lane = lane;
      moves.push_back(m);
    }
  }
  return moves;
}

void Scheduler::RegisterCachedBlocks(Sequence& seq) {
  if (!options_.prefix_caching) return;
  const int64_t bs = options_.kv_block_size;
  std::vector<int32_t> tokens(bs);
  // Only blocks a prefill computed: on the quantized CPU path a decode step's KV differs
  // from a prefill's in the last bits (one-row GEMV against the tiled GEMM), so reusing it
  // would make a cached answer differ from an uncached one. Prefill blocks reused are
  // bit-identical to recomputing them; a chat's next turn recomputes only the last answer.
  const int64_t end = std::min(seq.n_cached, seq.n_prefilled);
  while (seq.chain_open && static_cast<int64_t>(seq.chain.size() + 1) * bs <= end) {
    const int64_t i = static_cast<int64_t>(seq.chain.size());
    for (int64_t j = 0; j < bs; ++j) tokens[j] = seq.token(i * bs + j);
    const PrefixLink parent = i == 0 ? PrefixLink{} : seq.chain.back();
    if (seq.block_table[i] == kHiddenBlock) {  // Freed before it could be registered.
      seq.chain_open = false;
      break;
    }
    std::optional<PrefixLink> link = Pool(seq).Register(parent, tokens, seq.block_table[i]);
    if (!link) {
      seq.chain_open = false;  // Its parent was evicted, or a hash collision: stop here.
      break;
    }
    seq.chain.push_back(*link);
  }
}

bool Scheduler::AdmitHead(int64_t budget, Batch& batch) {
  Sequence& seq = seqs_.at(waiting_.front());
  const int64_t n_tokens = seq.n_tokens();
  std::vector<PrefixLink> hit;
  if (options_.prefix_caching) {
    // At least one token is computed: its logits give the next token.
    const int32_t max_blocks = static_cast<int32_t>((n_tokens - 1) / options_.kv_block_size);
    std::vector<int32_t> tokens = seq.spec.prompt;
    tokens.insert(tokens.end(), seq.generated.begin(), seq.generated.end());
    if (!seq.admitted && options_.n_lanes > 1) {
      seq.lane = PickLane(tokens, max_blocks, &hit);
    } else {
      hit = Pool(seq).Match(tokens, max_blocks);
    }
  } else if (!seq.admitted && options_.n_lanes > 1) {
    seq.lane = PickLane({}, 0, &hit);
  }
  const int32_t n_hit = static_cast<int32_t>(hit.size());
  // Cached-free blocks it revives and host blocks it brings back leave the free pool too.
  BlockAllocator& pool = Pool(seq);
  const int32_t n_revived = pool.BlocksTakenBy(hit);
  // The rest of its tokens plus one decode slot must fit; under sink + window, its first
  // chunk's (the later ones take theirs as they go).
  const int64_t n_first = std::min(n_tokens - static_cast<int64_t>(n_hit) * options_.kv_block_size, budget);
  const int64_t end = WindowPeakBlocks() > 0 ? n_hit * options_.kv_block_size + n_first : n_tokens;
  if (pool.BlocksForTokens(end + 1) - n_hit + n_revived > pool.n_free()) return false;
  waiting_.pop_front();
  int64_t n_host_hit = 0;
  for (const PrefixLink& link : hit) n_host_hit += pool.on_host(link) ? options_.kv_block_size : 0;
  pool.Share(hit, &seq.block_table);  // First: the allocation below must not evict them.
  CASCADE_CHECK(pool.AllocateInto(pool.BlocksForTokens(end) - n_hit, &seq.block_table).ok());
  seq.chain = std::move(hit);
  seq.chain_open = true;
  seq.n_cached = static_cast<int64_t>(n_hit) * options_.kv_block_size;
  seq.n_prefilled = seq.n_cached;
  ReleaseHidden(seq);  // A long cached prefix: its middle is not seen.
  if (options_.prefix_caching) {
    prefix_query_tokens_ += n_tokens;
    prefix_hit_tokens_ += seq.n_cached;
    prefix_host_hit_tokens_ += n_host_hit;
  }
  if (!seq.admitted) seq.n_cached_prompt_tokens = seq.n_cached;
  seq.admitted = true;
  seq.running = true;
  running_.push_back(seq.spec.id);
  AddEntry(seq, n_first, /*is_prefill=*/true, batch, /*first_chunk=*/true);
  return true;
}

void Scheduler::Unadmit(Sequence& seq) {
  FreeBlocks(seq);  // Its registered blocks stay matchable: a readmission may find them.
  seq.n_cached = 0;
  seq.n_prefilled = 0;
  seq.running = false;
  waiting_.push_front(seq.spec.id);
}

void Scheduler::Preempt(Sequence& seq) {
  CASCADE_CHECK(seq.running && seq.in_flight_batch < 0) << "preempting sequence " << seq.spec.id;
  ++seq.n_preemptions;
  ++n_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq.spec.id));
  Unadmit(seq);
}

Scheduler::Sequence* Scheduler::PickVictim(const std::vector<int64_t>& batch_ids, int32_t lane) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence& seq = seqs_.at(*it);
    if (seq.lane != lane || seq.in_flight_batch >= 0 || seq.at_max_tokens()) continue;
    if (std::find(batch_ids.begin(), batch_ids.end(), *it) != batch_ids.end()) continue;
    return &seq;  // `running_` is in admission order: the back is the newest.
  }
  return nullptr;
}

bool Scheduler::NewerInFlight(const Sequence& seq) const {
  for (auto it = running_.rbegin(); it != running_.rend() && *it != seq.spec.id; ++it) {
    if (seqs_.at(*it).lane == seq.lane && seqs_.at(*it).in_flight_batch >= 0) return true;
  }
  return false;
}

std::optional<Batch> Scheduler::Schedule() {
  if (static_cast<int>(in_flight_.size()) >= options_.max_in_flight_batches) return std::nullopt;
  Batch batch;
  std::vector<int64_t> batch_ids;
  int64_t budget = options_.max_batched_tokens;
  bool preempted = false;
  auto full = [&] { return static_cast<int>(batch.entries.size()) >= options_.max_num_seqs || budget <= 0; };

  // 1. Decodes, oldest admission first; they may evict newer sequences for a block.
  // Iterate over a snapshot: preemption edits `running_`.
  const std::vector<int64_t> running = running_;
  for (int64_t id : running) {
    if (full()) break;
    auto found = seqs_.find(id);
    if (found == seqs_.end()) continue;
    Sequence& seq = found->second;
    if (!seq.running || seq.in_flight_batch >= 0 || seq.at_max_tokens()) continue;
    if (seq.n_tokens() - seq.n_cached != 1) continue;  // A prefill chunk: pass 2.
    const int32_t need = Pool(seq).BlocksForTokens(seq.n_cached + 1) - static_cast<int32_t>(seq.block_table.size());
    if (!Grow(seq, need, batch_ids, &preempted)) continue;
    AddEntry(seq, 1, /*is_prefill=*/false, batch, /*first_chunk=*/std::exchange(seq.restart, false));
    batch_ids.push_back(id);
    budget -= 1;
    ReserveDraftSlots(seq, budget, batch.entries.back());
    budget -= batch.entries.back().draft_slots;
  }

  // 2. Remaining chunks of partly cached prompts (their blocks were allocated at
  // admission; under sink + window, each chunk's now, evicting as a decode would).
  for (int64_t id : std::vector<int64_t>(running_)) {
    if (full()) break;
    auto found = seqs_.find(id);
    if (found == seqs_.end()) continue;
    Sequence& seq = found->second;
    if (!seq.running || seq.in_flight_batch >= 0 || seq.n_tokens() - seq.n_cached <= 1) continue;
    if (std::find(batch_ids.begin(), batch_ids.end(), id) != batch_ids.end()) continue;
    const int64_t n_new = std::min(seq.n_tokens() - seq.n_cached, budget);
    const int32_t need = Pool(seq).BlocksForTokens(seq.n_cached + n_new) - static_cast<int32_t>(seq.block_table.size());
    if (need > 0 && !Grow(seq, need, batch_ids, &preempted)) continue;
    AddEntry(seq, n_new, /*is_prefill=*/true, batch);
    batch_ids.push_back(id);
    budget -= n_new;
  }

  // 3. Admissions, FCFS: stop at the first sequence that does not fit.
  const size_t max_running = static_cast<size_t>(options_.max_num_seqs) * options_.max_in_flight_batches;
  while (!preempted && !waiting_.empty() && !full() && running_.size() < max_running) {
    if (!AdmitHead(budget, batch)) break;
    batch_ids.push_back(batch.entries.back().seq_id);
    budget -= static_cast<int64_t>(batch.entries.back().tokens.size());
  }

  if (batch.entries.empty()) return std::nullopt;
  batch.id = next_batch_id_++;
  std::vector<InFlightEntry>& record = in_flight_[batch.id];
  for (const BatchEntry& e : batch.entries) {
    seqs_.at(e.seq_id).in_flight_batch = batch.id;
    record.push_back({e.seq_id, static_cast<int64_t>(e.tokens.size()), e.wants_logits, e.draft_slots, e.is_prefill});
  }
  ++n_batches_;
  max_batch_seqs_seen_ = std::max(max_batch_seqs_seen_, static_cast<int>(batch.entries.size()));
  max_batch_tokens_seen_ = std::max(max_batch_tokens_seen_, batch.n_tokens());
  return batch;
}

absl::StatusOr<std::vector<TokenEvent>> Scheduler::Complete(int64_t batch_id, std::span<const SampledToken> sampled) {
  auto it = in_flight_.find(batch_id);
  if (it == in_flight_.end()) {
    return absl::NotFoundError(StrCat("batch ", batch_id, " is not in flight"));
  }
  const std::vector<InFlightEntry>& entries = it->second;
  // Validate before changing anything.
  absl::flat_hash_map<int64_t, std::vector<int32_t>> tokens;
  for (const SampledToken& s : sampled) {
    const auto entry =
        std::find_if(entries.begin(), entries.end(), [&](const InFlightEntry& e) { return e.seq_id == s.seq_id; });
    if (entry == entries.end() || !entry->wants_logits) {
      return absl::InvalidArgumentError(
          StrCat("batch ", batch_id, ": sequence ", s.seq_id, " did not ask for a token"));
    }
    if (s.token < 0) {
      return absl::InvalidArgumentError(
          StrCat("batch ", batch_id, ": negative token ", s.token, " for sequence ", s.seq_id));
    }
    std::vector<int32_t>& mine = tokens[s.seq_id];
    if (static_cast<int32_t>(mine.size()) > entry->draft_slots) {
      return absl::InvalidArgumentError(
          StrCat("batch ", batch_id, ": more than ", entry->draft_slots + 1, " tokens for sequence ", s.seq_id));
    }
    mine.push_back(s.token);
  }
  for (const InFlightEntry& e : entries) {
    if (e.wants_logits && !tokens.contains(e.seq_id)) {
      return absl::InvalidArgumentError(StrCat("batch ", batch_id, ": no token for sequence ", e.seq_id));
    }
  }

  std::vector<TokenEvent> events;
  for (const InFlightEntry& e : entries) {
    Sequence& seq = seqs_.at(e.seq_id);
    if (seq.dropped) continue;  // ReleaseBatch frees it.
    seq.n_cached += e.n_new;
    if (e.is_prefill) seq.n_prefilled = seq.n_cached;
    if (!e.wants_logits) {
      RegisterCachedBlocks(seq);
      ReleaseHidden(seq);
      continue;
    }
    const std::vector<int32_t>& emitted = tokens.at(e.seq_id);
    // The fed token is cached; so are the accepted drafts, all emitted tokens but the last.
    seq.n_cached += static_cast<int64_t>(emitted.size()) - 1;
    for (int32_t t : emitted) {
      seq.generated.push_back(t);
      TokenEvent event;
      event.seq_id = e.seq_id;
      event.user_tag = seq.spec.user_tag;
      event.token = t;
      event.n_generated = static_cast<int32_t>(seq.generated.size());
      event.reached_max_tokens = seq.at_max_tokens();
      events.push_back(event);
    }
    if (e.draft_slots > 0) {
      // Roll back: blocks reserved for rejected drafts return to the pool.
      const size_t keep = static_cast<size_t>(Pool(seq).BlocksForTokens(seq.n_tokens()));
      if (seq.block_table.size() > keep) {
        Pool(seq).Free(std::span<const int32_t>(seq.block_table).subspan(keep));
        seq.block_table.resize(keep);
      }
    }
    RegisterCachedBlocks(seq);
    ReleaseHidden(seq);
  }
  ReleaseBatch(batch_id);
  return events;
}

absl::Status Scheduler::FailBatch(int64_t batch_id) {
  if (!in_flight_.contains(batch_id)) {
    return absl::NotFoundError(StrCat("batch ", batch_id, " is not in flight"));
  }
  ReleaseBatch(batch_id);
  return absl::OkStatus();
}

void Scheduler::ReleaseBatch(int64_t batch_id) {
  auto it = in_flight_.find(batch_id);
  CASCADE_CHECK(it != in_flight_.end());
  const std::vector<InFlightEntry> entries = std::move(it->second);
  in_flight_.erase(it);
  for (const InFlightEntry& e : entries) {
    Sequence& seq = seqs_.at(e.seq_id);
    CASCADE_CHECK(seq.in_flight_batch == batch_id);
    seq.in_flight_batch = -1;
    if (seq.dropped) Drop(e.seq_id);
  }
}

void Scheduler::Drop(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  CASCADE_CHECK(it != seqs_.end());
  FreeBlocks(it->second);
  seqs_.erase(it);
}

absl::Status Scheduler::Finish(int64_t seq_id) { return Cancel(seq_id); }

absl::Status Scheduler::Cancel(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second.dropped) {
    return absl::NotFoundError(StrCat("sequence ", seq_id, " is not live"));
  }
  Sequence& seq = it->second;
  if (seq.running) {
    running_.erase(std::find(running_.begin(), running_.end(), seq_id));
    seq.running = false;
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq_id));
  }
  if (seq.in_flight_batch >= 0) {
    seq.dropped = true;  // Workers may still be writing its blocks.
  } else {
    Drop(seq_id);
  }
  return absl::OkStatus();
}

std::optional<SequenceInfo> Scheduler::Lookup(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second.dropped) return std::nullopt;
  const Sequence& seq = it->second;
  SequenceInfo info;
  info.state = seq.in_flight_batch >= 0 ? SequenceState::kInFlight
               : seq.running            ? SequenceState::kRunning
                                        : SequenceState::kWaiting;
  info.n_cached = seq.n_cached;
  info.n_blocks = static_cast<int32_t>(seq.block_table.size() -
                                       std::count(seq.block_table.begin(), seq.block_table.end(), kHiddenBlock));
  if (options_.kv_window_tokens > 0) {  // Its last row, at n_cached - 1, saw [0, sinks) and the window.
    info.n_hidden = std::max<int64_t>(0, seq.n_cached - options_.kv_window_tokens - options_.kv_sink_tokens);
  }
  info.n_preemptions = seq.n_preemptions;
  info.generated = seq.generated;
  info.n_cached_prompt_tokens = seq.n_cached_prompt_tokens;
  return info;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats;
  for (int64_t id : running_) {
    if (seqs_.at(id).in_flight_batch >= 0) {
      ++stats.n_in_flight_seqs;
    } else {
      ++stats.n_running;
    }
  }
  stats.n_waiting = static_cast<int>(waiting_.size());
  stats.n_in_flight_batches = static_cast<int>(in_flight_.size());
  for (const BlockAllocator& pool : pools_) {  // Every lane's pool together.
    stats.n_free_blocks += pool.n_free();
    stats.n_total_blocks += pool.n_total();
    stats.n_cached_blocks += pool.n_registered();
    const PrefixCache& cache = pool.prefix_cache();
    stats.n_host_blocks += cache.n_host_slots();
    stats.n_host_cached_blocks += cache.n_on_host();
    stats.host_offloaded_blocks += cache.n_offloaded();
    stats.host_onloaded_blocks += cache.n_onloaded();
  }
  stats.n_preemptions = n_preemptions_;
  stats.n_batches = n_batches_;
  stats.max_batch_seqs_seen = max_batch_seqs_seen_;
  stats.max_batch_tokens_seen = max_batch_tokens_seen_;
  stats.prefix_query_tokens = prefix_query_tokens_;
  stats.prefix_hit_tokens = prefix_hit_tokens_;
  stats.prefix_host_hit_tokens = prefix_host_hit_tokens_;
  return stats;
}

bool Scheduler::Idle() const { return seqs_.empty() && in_flight_.empty(); }

}  // namespace cascade::coordinator
