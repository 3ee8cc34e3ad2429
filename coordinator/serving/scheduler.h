// The coordinator's scheduler: iteration-level continuous batching over a paged KV cache
// (Orca, OSDI'22; vLLM's PagedAttention scheduler, SOSP'23; TGI's backends/v3 queue).
//
// Each `Schedule()` builds one batch (a `Step` for the workers) from the sequences that
// are not already in a batch in flight:
//   1. decodes first: every running sequence whose prompt is fully cached feeds its last
//      token (1 token each), oldest admission first;
//   2. then prefill chunks of running sequences whose prompt is only partly cached;
//   3. then new admissions, strictly FCFS from the waiting queue, while the head's
//      prompt (plus generated tokens after a preemption) and one decode slot fit in the
//      free KV blocks (those of a cached prefix apart, below). Admission allocates the
//      blocks for the whole prompt at once.
// A batch holds at most `max_num_seqs` sequences and `max_batched_tokens` tokens. A
// prompt that does not fit in the batch's remaining token budget is split into chunks
// (chunked prefill): the first chunk goes in this batch and the rest in later ones, each
// chunk at positions [n_past, n_past + n) of the same sequence, logits only for the last.
//
// Preemption by recompute: when a decoding sequence needs a new block and none is free,
// the most recently admitted running sequence that is neither in flight nor already in
// this batch is evicted (possibly the one asking): its blocks are freed, its generated
// tokens kept, and it goes back to the front of the waiting queue; when readmitted it
// re-prefills prompt + generated tokens. No new sequence is admitted in a round that
// preempted. Sequences in flight are never evicted (workers are writing their blocks):
// a sequence that would have to evict itself while a newer one is in flight skips this
// round instead, and evicts that newer one once its batch is back.
//
// Pipeline parallelism: up to `max_in_flight_batches` (the pipeline size S) batches may be
// outstanding; a sequence in one of them is not scheduled again until `Complete` (or
// `FailBatch`) for that batch, so consecutive calls to `Schedule()` yield disjoint
// batches that fill the stages.
//
// Speculative decoding (docs/ARCHITECTURE.md §5): `SetDraftTokens` asks for up to k drafted tokens
// per decode step of a sequence. A decode entry then reserves `draft_slots` positions
// after its token (within max_tokens, the token budget and the free blocks; drafts never
// preempt anyone) and the caller appends up to that many drafts to `tokens` before sending
// it. `Complete` takes the 1..draft_slots + 1 tokens the verifier emitted: the fed token
// and the accepted drafts become cached positions, and the blocks reserved past the
// sequence's tokens go back to the pool (rollback of rejected drafts: their KV is garbage
// that the next step's positions overwrite, on every stage).
//
// Automatic prefix caching (`prefix_caching`, coordinator/serving/prefix_cache.h): once all
// positions of a full block are cached (drafts only once accepted), the block is
// registered under its tokens and its parent chain. Admission (and readmission after a
// preemption) looks up the longest registered chain for the sequence's tokens and starts
// with those blocks in its table and n_past past them, keeping at least one token to
// compute (its logits are needed). Shared blocks are reference counted and never written:
// a sequence writes positions >= n_past only, past its shared prefix. A block nobody
// holds stays matchable in the allocator's cached-free LRU until a new allocation evicts
// it; admission counts only the blocks it takes from the free pool (new or revived).
//
// Sink + window (`kv_window_tokens` > 0; scheduler.kv_policy, opt-in and lossy; StreamingLLM,
// Xiao et al. 2023): the workers' attention shows a row at position p only positions
// [0, kv_sink_tokens) and (p - kv_window_tokens, p], so a sequence's blocks wholly between
// are freed once its next row no longer sees them, and its table holds -1 there
// (kHiddenBlock). Its blocks are then taken chunk by chunk rather than for the whole prompt
// at admission (a prefill chunk may evict newer sequences for them, as a decode does), and
// what it holds at once is bounded by `WindowPeakBlocks()` however long it grows.
//
// Progress guarantee: `Add` rejects a sequence whose prompt + max_tokens could not fit
// in the whole cache (under sink + window: whose peak could not), so a sequence left alone
// can always run to max_tokens.
//
// Thread safety: single owner. The coordinator's loop thread owns the scheduler and its
// block allocator; API threads hand requests to that thread, never call in directly.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "coordinator/serving/block_allocator.h"

namespace cascade::coordinator {

struct SchedulerOptions {
  // Most sequences in one batch. The running set (sequences holding KV blocks) is
  // capped at max_num_seqs * max_in_flight_batches. Default 64. REQUIRES >= 1.
  int max_num_seqs = 64;
  // Most tokens fed in one batch (prefill chunk tokens plus one per decode).
  // Default 2048. REQUIRES >= 1.
  int max_batched_tokens = 2048;
  // Tokens per KV block. Default 16. REQUIRES >= 1.
  int32_t kv_block_size = 16;
  // KV blocks in the pool (the smallest capacity any worker reported). Default 0.
  // REQUIRES >= 1 for anything to be admitted.
  int32_t n_kv_blocks = 0;
  // Batches that may be outstanding at once; the pipeline size. Default 1.
  // REQUIRES >= 1.
  int max_in_flight_batches = 1;
  // Reuse the KV of registered full blocks across sequences with a common prefix
  // (automatic prefix caching, above). Default true.
  bool prefix_caching = true;
  // Most sequences waiting for admission; `Add` refuses more. Default 4096. REQUIRES >= 1.
  int max_queued = 4096;
  // Blocks of the host tier of the prefix cache (scheduler.host_kv_cache_mb): evicted
  // cached blocks move there and come back on a hit. 0: none. REQUIRES >= 0.
  int32_t n_host_kv_blocks = 0;
  // Sink + window (above): the window in positions, 0: off (every position is kept); and
  // the first positions kept besides it. REQUIRES >= 0, sinks only with a window.
  int64_t kv_window_tokens = 0;
  int64_t kv_sink_tokens = 0;
  // All-to-all expert parallelism (parallel.expert_comm): the ranks of a stage, each running
  // its own sequences with their KV. Each lane has a pool of its own, `n_kv_blocks` blocks
  // (ids [0, n_kv_blocks) on its rank), with its own prefix cache and host tier. A sequence
  // gets a lane at its first admission (the lane whose prefix cache holds most of it, then
  // the one with the most free blocks) and keeps it; it evicts only in its lane. Default 1.
  // REQUIRES >= 1.
  int n_lanes = 1;
};

// A request's sequence as handed to `Add`.
struct SequenceSpec {
  int64_t id = 0;               // Unique among live sequences.
  std::vector<int32_t> prompt;  // Prompt token ids, [n_prompt]; REQUIRES non-empty.
  int32_t max_tokens = 1;       // Most tokens to generate; REQUIRES >= 1.
  uint64_t user_tag = 0;        // Opaque to the scheduler; returned in `TokenEvent`s.
};

// One sequence's part of a batch.
struct BatchEntry {
  int64_t seq_id = 0;
  // Tokens to feed, [n_new]: an uncached prompt chunk (prefill, also after a
  // preemption, then covering prompt + generated) or the last generated token (decode).
  std::vector<int32_t> tokens;
  // Positions of `tokens` are [n_past, n_past + n_new); positions [0, n_past) are cached.
  int64_t n_past = 0;
  // The sequence's KV block ids; covers at least positions [0, n_past + n_new).
  std::vector<int32_t> block_table;
  // True when the last token's logits are needed (a token is sampled); false for a
  // prefill chunk that is not the last one.
  bool wants_logits = true;
  // True for a prefill chunk (tokens of a sequence admitted or readmitted in this batch,
  // or the next chunk of such a prompt), false for a decode step. Informational: a
  // worker runs both the same way, positions [n_past, n_past + n_new).
  bool is_prefill = false;
  // True for the first entry of a sequence since its admission or readmission: workers
  // start its per-sequence state (sampler, penalty history) afresh. With a prefix hit
  // n_past is > 0 then, so n_past == 0 does not tell.
  bool first_chunk = false;
  // Decode entries: positions reserved after `tokens[0]` for drafted tokens (the block
  // table covers them). The caller may append up to this many drafts to `tokens`.
  int32_t draft_slots = 0;
  // SchedulerOptions::n_lanes: the lane that runs it (0 with one lane).
  int32_t lane = 0;
};

struct Batch {
  int64_t id = 0;  // Unique, increasing; pass to `Complete`.
  std::vector<BatchEntry> entries;
  int n_tokens() const;
};

// A token emitted for a batch entry with `wants_logits`: one per entry, or for a decode
// entry that carried drafts, 1..draft_slots + 1 of them in order (accepted drafts, then
// the correction or bonus token).
struct SampledToken {
  int64_t seq_id = 0;
  int32_t token = 0;
};

// A token appended to a live sequence by `Complete`.
struct TokenEvent {
  int64_t seq_id = 0;
  uint64_t user_tag = 0;
  int32_t token = 0;
  int32_t n_generated = 0;  // Generated tokens so far, this one included.
  // True when n_generated == max_tokens: the sequence is not scheduled again and the
  // caller should `Finish` it.
  bool reached_max_tokens = false;
};

enum class SequenceState { kWaiting, kRunning, kInFlight };

// A snapshot of one sequence, for status pages and tests.
struct SequenceInfo {
  SequenceState state = SequenceState::kWaiting;
  int64_t n_cached = 0;            // Positions whose KV is in the cache.
  int32_t n_blocks = 0;            // Blocks held.
  int32_t n_preemptions = 0;       // Times this sequence was evicted.
  std::vector<int32_t> generated;  // Generated tokens so far.
  // Prompt tokens served from the prefix cache at its first admission (0 before it).
  int64_t n_cached_prompt_tokens = 0;
  // Sink + window: positions its last computed row did not see (0: its attention was exact).
  int64_t n_hidden = 0;
};

struct SchedulerStats {
  int n_running = 0;         // Holding blocks, not in flight.
  int n_in_flight_seqs = 0;  // In a batch in flight (cancelled ones excluded).
  int n_waiting = 0;         // Queued, holding no blocks.
  int n_in_flight_batches = 0;
  int32_t n_free_blocks = 0;
  int32_t n_total_blocks = 0;
  int64_t n_preemptions = 0;      // Since construction.
  int64_t n_batches = 0;          // Batches scheduled since construction.
  int max_batch_seqs_seen = 0;    // Largest batch, in sequences.
  int max_batch_tokens_seen = 0;  // Largest batch, in tokens.
  // Prefix caching, since construction: tokens looked up at admissions (prompt, plus the
  // generated tokens at a readmission), and of those the tokens served from cached blocks.
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int32_t n_cached_blocks = 0;  // Blocks registered as reusable prefixes now (held or cached-free).
  // The host tier: its size, the blocks it holds now, and since construction the blocks
  // copied to it and back, and the prefix tokens served from it at admissions (part of
  // prefix_hit_tokens).
  int32_t n_host_blocks = 0;
  int32_t n_host_cached_blocks = 0;
  int64_t host_offloaded_blocks = 0;
  int64_t host_onloaded_blocks = 0;
  int64_t prefix_host_hit_tokens = 0;

  // What status, metrics and the CLI show, derived once here.
  int running() const { return n_running + n_in_flight_seqs; }  // Holding blocks, in a step or not.
  int32_t used_blocks() const { return n_total_blocks - n_free_blocks; }
  double kv_usage() const {
    return n_total_blocks > 0 ? 1.0 - static_cast<double>(n_free_blocks) / n_total_blocks : 0.0;
  }
  double prefix_hit_rate() const {  // 0 before any lookup.
    return prefix_query_tokens > 0 ? static_cast<double>(prefix_hit_tokens) / prefix_query_tokens : 0.0;
  }
  // Adds another scheduler's (a data-parallel replica's): counts and blocks add up, the
  // largest batches seen are the larger. The one walk over every field.
  SchedulerStats& operator+=(const SchedulerStats& o);
};

class Scheduler {
 public:
  // REQUIRES the option ranges above (programmer errors abort).
  explicit Scheduler(const SchedulerOptions& options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a sequence at the back of the waiting queue.
  // Errors (nothing is queued): AlreadyExists for a live id; InvalidArgument for an
  // empty prompt, max_tokens < 1, "prompt of N tokens needs M KV blocks, the cache has
  // K", or when prompt + max_tokens cannot fit in the whole cache; ResourceExhausted when
  // max_queued sequences wait already.
  absl::Status Add(SequenceSpec spec);

  // Builds the next batch, or nullopt when `max_in_flight_batches` are outstanding or
  // nothing can run now. The batch is in flight until `Complete` or `FailBatch`.
  std::optional<Batch> Schedule();

  // Records the result of batch `batch_id`: `sampled` holds the tokens of each entry with
  // `wants_logits` (sequences in any order, each sequence's tokens in order; see
  // SampledToken). Cached positions advance, tokens are appended and returned as events
  // in batch order; draft blocks no longer needed are freed; sequences cancelled while in
  // flight are dropped now (their tokens ignored, blocks freed).
  // Errors (nothing changes; the batch stays in flight): NotFound for an unknown batch;
  // InvalidArgument when `sampled` misses or adds a sequence, has more tokens for one
  // than its entry allows, or has a negative token.
  absl::StatusOr<std::vector<TokenEvent>> Complete(int64_t batch_id, std::span<const SampledToken> sampled);

  // Gives up on batch `batch_id` (a worker failed): its sequences stop being in flight
  // with no progress, so a later batch re-feeds the same positions; cancelled ones are
  // dropped. Errors: NotFound for an unknown batch.
  absl::Status FailBatch(int64_t batch_id);

  // Ends a sequence (a stop condition or max_tokens was hit): its blocks are freed at
  // once, or, when it is in flight, as soon as its batch completes. Same as `Cancel`.
  // Errors: NotFound when the id is not live.
  absl::Status Finish(int64_t seq_id);

  // Ends a sequence in any state (client gone, deadline passed), as `Finish`.
  absl::Status Cancel(int64_t seq_id);

  // Drafted tokens wanted per decode step of `seq_id` from now on (0: plain decoding).
  // Ignored for ids that are not live. REQUIRES k >= 0.
  void SetDraftTokens(int64_t seq_id, int32_t k);

  // The sequence's current state, or nullopt when the id is not live.
  std::optional<SequenceInfo> Lookup(int64_t seq_id) const;

  SchedulerStats Stats() const;
  // True when no sequence is live and no batch is in flight.
  bool Idle() const;
  const SchedulerOptions& options() const { return options_; }
  // Replaces the block pool with `n_blocks` free blocks (the pool is sized once the
  // workers' memory is known). REQUIRES: no sequence was ever added.
  void ResetKvBlocks(int32_t n_blocks);
  // A worker died: every running sequence goes back to the front of the waiting queue, in
  // admission order, holding no blocks and keeping its generated tokens, so that its
  // readmission recomputes prompt + generated (as after a preemption, not counted as one).
  // REQUIRES: no batch in flight (FailBatch them first).
  void RequeueAll();
  // Forgets every cached prefix (the workers' KV is gone: a worker restarted). Blocks held
  // by live sequences stay theirs; no block is matched again until registered anew. The
  // copies between tiers not yet taken are forgotten too.
  void ClearPrefixCache();
  // The copies between the device and host tiers recorded by the batches scheduled since
  // the last call, in order. The caller sends them with the next step that goes to the
  // target workers, whichever batch that is, and the workers run them before its compute:
  // a later batch's step may overtake an earlier one (one waiting for drafts), and the
  // copies must run in the order they were recorded.
  std::vector<KvBlockMove> TakeKvMoves();

  // Disaggregated serving (coordinator/serving/replicas.h). The prefill side: takes running
  // sequence `seq_id` (not in flight) out of the scheduler, its blocks still held, and
  // returns its block table; `FreeDetached` gives them back once its KV was sent (tail
  // first, as a finished sequence's). NotFound / FailedPrecondition otherwise.
  absl::StatusOr<std::vector<int32_t>> Detach(int64_t seq_id);
  void FreeDetached(std::span<const int32_t> blocks);
  // The decode side: a sequence whose positions [0, n_cached) arrive by transfer, with the
  // tokens it generated already. Admitted at once with blocks for its tokens and a decode
  // slot (its table in `table`), it counts as in flight (never scheduled or evicted) until
  // `KvArrived`; then its first entry resets the workers' state, as a first chunk does.
  // `KvLost`: the transfer failed, and it is recomputed as after a preemption. Errors:
  // those of Add, and ResourceExhausted when the blocks are not free now (nothing changes).
  absl::Status AddPrefilled(SequenceSpec spec, std::vector<int32_t> generated, int64_t n_cached,
                            int64_t n_cached_prompt_tokens, std::vector<int32_t>* table);
  void KvArrived(int64_t seq_id);
  void KvLost(int64_t seq_id);

  // A freed block in a sink + window table: no row reads it.
  static constexpr int32_t kHiddenBlock = -1;
  // Sink + window: the most blocks one sequence holds at once (its sinks, a window, a prefill
  // chunk of max_batched_tokens and the blocks they straddle); 0 without the policy.
  static int64_t WindowPeakBlocks(const SchedulerOptions& options);
  int64_t WindowPeakBlocks() const { return WindowPeakBlocks(options_); }

 private:
  struct Sequence {
    SequenceSpec spec;
    std::vector<int32_t> generated;
    std::vector<int32_t> block_table;
    int64_t n_cached = 0;          // Positions [0, n_cached) are in the cache.
    int64_t in_flight_batch = -1;  // The batch it is in, or -1.
    bool running = false;          // Holds blocks (admitted).
    bool dropped = false;          // Finished/cancelled while in flight.
    int32_t n_preemptions = 0;
    int32_t draft_tokens = 0;            // Wanted per decode step (SetDraftTokens).
    bool admitted = false;               // Admitted at least once.
    int64_t n_cached_prompt_tokens = 0;  // Prefix hit at its first admission.
    // Prefix caching: the registered block holding each of its first full blocks' content
    // (its own block or an identical one registered earlier), [n_registered_blocks].
    std::vector<PrefixLink> chain;
    bool chain_open = true;  // False once a registration failed: no later block is registered.
    // Positions [0, n_prefilled) got their KV from prefill chunks or a prefix hit; only
    // blocks inside it are registered (RegisterCachedBlocks says why).
    int64_t n_prefilled = 0;
    bool restart = false;  // Its KV arrived by transfer: its next entry is a first chunk.
    int32_t lane = 0;      // SchedulerOptions::n_lanes: chosen at its first admission.

    int64_t n_tokens() const { return static_cast<int64_t>(spec.prompt.size() + generated.size()); }
    int32_t token(int64_t i) const;
    bool at_max_tokens() const { return static_cast<int32_t>(generated.size()) >= spec.max_tokens; }
  };

  struct InFlightEntry {
    int64_t seq_id = 0;
    int64_t n_new = 0;
    bool wants_logits = false;
    int32_t draft_slots = 0;
    bool is_prefill = false;
  };

  // `in_flight_batch` of a sequence whose KV is being transferred (AddPrefilled).
  static constexpr int64_t kAwaitingKv = INT64_MAX;
  // The AddPrefilled sequence `seq_id` whose transfer ended; false when it was cancelled
  // meanwhile (it is dropped then).
  Sequence* EndTransfer(int64_t seq_id);

  // n_lanes > 1: the lane for a sequence's first admission (SchedulerOptions::n_lanes) and
  // the chain its prefix cache holds of `tokens` there.
  int32_t PickLane(std::span<const int32_t> tokens, int32_t max_blocks, std::vector<PrefixLink>* hit) const;
  // The pool of `seq`'s lane (the only one without lanes).
  BlockAllocator& Pool(const Sequence& seq) { return pools_[seq.lane]; }
  // Evicts `seq` (running, not in flight): frees its blocks and puts it at the front
  // of the waiting queue.
  void Preempt(Sequence& seq);
  // Preempt's work without the bookkeeping: frees `seq`'s blocks, forgets its cached
  // positions and puts it at the front of the waiting queue (the caller updates running_).
  void Unadmit(Sequence& seq);
  // Admits the head of the waiting queue if its blocks fit, reusing its longest cached
  // prefix, and adds its first chunk to `batch`; false (nothing changes) when it does not fit.
  bool AdmitHead(int64_t budget, Batch& batch);
  // Registers the full blocks of `seq` whose positions are all cached now.
  void RegisterCachedBlocks(Sequence& seq);
  // Frees `seq`'s blocks, tail first (so its cached-free tail is evicted first), and
  // forgets its chain.
  void FreeBlocks(Sequence& seq);
  // Allocates `need` blocks to `seq`, first evicting newer sequences not in `batch_ids`
  // (possibly `seq` itself, unless a newer one is in flight: it waits then) while too few are
  // free. False when it could not; `preempted` is set when anyone was evicted.
  bool Grow(Sequence& seq, int32_t need, const std::vector<int64_t>& batch_ids, bool* preempted);
  // Sink + window: frees the blocks of `seq` that its next row (at n_cached) and every later
  // one no longer see, marking them kHiddenBlock.
  void ReleaseHidden(Sequence& seq);
  // Appends an entry feeding the next `n_new` uncached tokens of `seq` to `batch`.
  void AddEntry(Sequence& seq, int64_t n_new, bool is_prefill, Batch& batch, bool first_chunk = false);
  // Reserves up to seq.draft_tokens draft positions for the decode `entry` of `seq`.
  void ReserveDraftSlots(Sequence& seq, int64_t budget, BatchEntry& entry);
  // Frees the blocks of `seq` and forgets it.
  void Drop(int64_t seq_id);
  // The most recently admitted running sequence of `lane` not in flight and not in
  // `batch_ids`.
  Sequence* PickVictim(const std::vector<int64_t>& batch_ids, int32_t lane);
  // Whether a sequence of its lane admitted after `seq` is in flight.
  bool NewerInFlight(const Sequence& seq) const;
  // Clears the in-flight marks of batch `batch_id` (dropping cancelled sequences).
  void ReleaseBatch(int64_t batch_id);

  SchedulerOptions options_;           // n_kv_blocks changes only in ResetKvBlocks.
  std::vector<BlockAllocator> pools_;  // One per lane (SchedulerOptions::n_lanes).
  absl::flat_hash_map<int64_t, Sequence> seqs_;
  std::deque<int64_t> waiting_;   // FCFS; preempted sequences go to the front.
  std::vector<int64_t> running_;  // Admitted and not dropped, in admission order.
  absl::flat_hash_map<int64_t, std::vector<InFlightEntry>> in_flight_;
  int64_t next_batch_id_ = 1;
  int64_t n_preemptions_ = 0;
  int64_t n_batches_ = 0;
  int max_batch_seqs_seen_ = 0;
  int max_batch_tokens_seen_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prefix_host_hit_tokens_ = 0;
};

}  // namespace cascade::coordinator
