// Tests for Scheduler (coordinator/serving/scheduler.cc): prefill/decode batches, the token
// budget and max_num_seqs edges, chunked prefill, admission by free blocks (FCFS),
// preemption by recompute (victim choice, self-eviction, resumption with the same
// tokens), in-flight exclusion with up to 3 outstanding batches, cancellation in every
// state, result validation, and a randomised run checked against a reference.
//
// `FakeWorker` stands in for the pipeline: it keeps a paged "KV cache" of token ids
// indexed by the block tables it is sent and samples a hash of the whole cached history,
// so a wrong block table or a bad recompute changes the output.
// To add a case: build a `Scheduler` with `Options(...)`, `Add` specs, then drive it with
// `Schedule()` / `Run()` (one batch through the fake worker) or `Driver::RunAll()`.

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "coordinator/serving/scheduler.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::StatusMessage;
using ::testing::HasSubstr;

SchedulerOptions Options(int32_t n_blocks, int32_t block_size = 4, int max_num_seqs = 64, int max_batched_tokens = 2048,
                         int in_flight = 1) {
  SchedulerOptions o;
  o.n_kv_blocks = n_blocks;
  o.kv_block_size = block_size;
  o.max_num_seqs = max_num_seqs;
  o.max_batched_tokens = max_batched_tokens;
  o.max_in_flight_batches = in_flight;
  return o;
}

std::vector<int32_t> Iota(int n, int32_t start = 100) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

SequenceSpec Spec(int64_t id, int n_prompt, int32_t max_tokens) {
  SequenceSpec s;
  s.id = id;
  s.prompt = Iota(n_prompt, static_cast<int32_t>(id * 1000));
  s.max_tokens = max_tokens;
  s.user_tag = static_cast<uint64_t>(id) + 7;
  return s;
}

constexpr uint64_t kFnvBasis = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// The "model": a token determined by the whole history (FakeWorker computes the same
// from its cache); under sink + window (`window` > 0), by the tokens the last position
// sees only: the first `sinks` and the last `window`.
bool Seen(int64_t t, int64_t p, int64_t window, int64_t sinks) { return window == 0 || t < sinks || t > p - window; }

int32_t NextToken(const std::vector<int32_t>& history, int64_t window = 0, int64_t sinks = 0) {
  const int64_t p = static_cast<int64_t>(history.size()) - 1;
  uint64_t h = kFnvBasis;
  for (int64_t t = 0; t <= p; ++t) {
    if (Seen(t, p, window, sinks)) h = (h ^ static_cast<uint32_t>(history[t])) * kFnvPrime;
  }
  return static_cast<int32_t>(h % 5000);
}

std::vector<int32_t> Reference(const SequenceSpec& spec, int64_t window = 0, int64_t sinks = 0) {
  std::vector<int32_t> history = spec.prompt;
  std::vector<int32_t> out;
  for (int i = 0; i < spec.max_tokens; ++i) {
    out.push_back(NextToken(history, window, sinks));
    history.push_back(out.back());
  }
  return out;
}

// One more token into a history hash (NextToken's recurrence).
uint64_t Extend(uint64_t h, int32_t t) { return (h ^ static_cast<uint32_t>(t)) * kFnvPrime; }

class FakeWorker {
 public:
  // With `window` > 0 it runs sink + window attention: a position's "KV" is its token, and
  // a row's output hashes the tokens it sees read back from the cache (a freed block still
  // seen, or reused by another sequence meanwhile, changes it; a -1 one seen fails).
  FakeWorker(int32_t n_blocks, int32_t block_size, int32_t n_host_slots = 0, int64_t window = 0, int64_t sinks = 0)
      : block_size_(block_size),
        window_(window),
        sinks_(sinks),
        kv_(static_cast<size_t>(n_blocks) * block_size),
        host_(static_cast<size_t>(n_host_slots) * block_size) {}

  // The host tier's copies, in order, before a step's compute (StageExecutor::MoveKvBlocks).
  void Move(const std::vector<KvBlockMove>& moves) {
    for (const KvBlockMove& m : moves) {
      Kv* block = &kv_[static_cast<size_t>(m.block) * block_size_];
      Kv* slot = &host_[static_cast<size_t>(m.slot) * block_size_];
      if (m.to_host) {
        std::copy(block, block + block_size_, slot);
      } else {
        std::copy(slot, slot + block_size_, block);
      }
      ++moved;
    }
  }

  // Each position's "KV" is its token and the hash of the history through it, computed
  // from the previous position's KV as read from the cache (as attention would): a block
  // reused after another prefix, or overwritten while shared, changes later tokens.
  std::vector<SampledToken> Run(const Batch& batch) {
    std::vector<SampledToken> out;
    for (const BatchEntry& e : batch.entries) {
      const int64_t end = e.n_past + static_cast<int64_t>(e.tokens.size());
      EXPECT_GE(static_cast<int64_t>(e.block_table.size()) * block_size_, end)
          << "block table too short for sequence " << e.seq_id;
      if (static_cast<int64_t>(e.block_table.size()) * block_size_ < end) continue;
      if (window_ > 0) {
        RunWindowed(e, out);
        continue;
      }
      for (size_t i = 0; i < e.tokens.size(); ++i) {
        const int64_t pos = e.n_past + static_cast<int64_t>(i);
        const uint64_t prev = pos == 0 ? kFnvBasis : Slot(e, pos - 1).history_hash;
        Slot(e, pos) = {e.tokens[i], Extend(prev, e.tokens[i])};
      }
      if (!e.wants_logits) continue;
      // Verification: the history is read back from the cache, so positions the scheduler
      // failed to roll back would change the tokens. Drafts are tokens[1..].
      const int64_t n_draft = e.draft_slots > 0 ? static_cast<int64_t>(e.tokens.size()) - 1 : 0;
      EXPECT_LE(n_draft, e.draft_slots);
      for (int64_t i = 0; i <= n_draft; ++i) {
        const int32_t next = static_cast<int32_t>(Slot(e, end - 1 - n_draft + i).history_hash % 5000);
        out.push_back({e.seq_id, next});
        if (i == n_draft || e.tokens[1 + i] != next) break;
        ++accepted;
      }
    }
    return out;
  }

  // Disaggregation's transfer: block `from` of this worker's KV into block `to` of `other`'s.
  void SendBlock(FakeWorker& other, int32_t from, int32_t to) const {
    std::copy_n(&kv_[static_cast<size_t>(from) * block_size_], block_size_,
                &other.kv_[static_cast<size_t>(to) * block_size_]);
  }

  int64_t accepted = 0;  // Drafts accepted so far.
  int64_t moved = 0;     // Blocks copied between the tiers.

 private:
  struct Kv {
    int32_t token = -1;
    uint64_t history_hash = 0;  // Of tokens [0, pos]; 0 for a never-written slot.
  };
  void RunWindowed(const BatchEntry& e, std::vector<SampledToken>& out) {
    const int64_t end = e.n_past + static_cast<int64_t>(e.tokens.size());
    for (size_t i = 0; i < e.tokens.size(); ++i) Slot(e, e.n_past + static_cast<int64_t>(i)) = {e.tokens[i], 1};
    if (!e.wants_logits) return;
    const int64_t n_draft = e.draft_slots > 0 ? static_cast<int64_t>(e.tokens.size()) - 1 : 0;
    for (int64_t i = 0; i <= n_draft; ++i) {
      const int64_t p = end - 1 - n_draft + i;
      uint64_t h = kFnvBasis;
      for (int64_t t = 0; t <= p; ++t) {
        if (!Seen(t, p, window_, sinks_)) continue;
        if (e.block_table[t / block_size_] < 0) {
          ADD_FAILURE() << "sequence " << e.seq_id << " reads position " << t << " of a freed block at " << p;
          return;
        }
        h = Extend(h, Slot(e, t).token);
      }
      const int32_t next = static_cast<int32_t>(h % 5000);
      out.push_back({e.seq_id, next});
      if (i == n_draft || e.tokens[1 + i] != next) break;
      ++accepted;
    }
  }
  Kv& Slot(const BatchEntry& e, int64_t pos) {
    return kv_[static_cast<size_t>(e.block_table[pos / block_size_]) * block_size_ + pos % block_size_];
  }
  int32_t block_size_;
  int64_t window_, sinks_;
  std::vector<Kv> kv_;
  std::vector<Kv> host_;  // The host tier's slots.
};

// Drives a scheduler with a fake worker, checking what each entry feeds against the true
// history of its sequence, finishing sequences at max_tokens.
class Driver {
 public:
  // With draft_k > 0 every sequence asks for up to draft_k drafts per decode step; the
  // drafts are the true continuation, each corrupted with probability `wrong`.
  explicit Driver(const SchedulerOptions& o, int32_t draft_k = 0, double wrong = 0.3)
      : sched(o),
        worker(o.n_kv_blocks, o.kv_block_size, o.n_host_kv_blocks, o.kv_window_tokens, o.kv_sink_tokens),
        draft_k(draft_k),
        wrong(wrong) {
    for (int lane = 1; lane < o.n_lanes; ++lane) {
      lane_workers.emplace_back(o.n_kv_blocks, o.kv_block_size, o.n_host_kv_blocks, o.kv_window_tokens,
                                o.kv_sink_tokens);
    }
  }

  void Add(const SequenceSpec& spec) {
    ASSERT_TRUE(sched.Add(spec).ok());
    if (draft_k > 0) sched.SetDraftTokens(spec.id, 1 + static_cast<int32_t>(spec.id % draft_k));
    history[spec.id] = spec.prompt;
    specs[spec.id] = spec;
  }

  // Schedules one batch and records it as in flight; false when none.
  bool ScheduleOne() {
    std::optional<Batch> b = sched.Schedule();
    if (!b) return false;
    for (const BatchEntry& e : b->entries) {
      const std::vector<int32_t>& h = history.at(e.seq_id);
      EXPECT_LE(e.n_past + static_cast<int64_t>(e.tokens.size()), static_cast<int64_t>(h.size()));
      EXPECT_TRUE(std::equal(e.tokens.begin(), e.tokens.end(), h.begin() + e.n_past))
          << "sequence " << e.seq_id << " fed the wrong tokens at " << e.n_past;
      EXPECT_EQ(e.wants_logits, e.n_past + static_cast<int64_t>(e.tokens.size()) == static_cast<int64_t>(h.size()));
      EXPECT_TRUE(e.draft_slots == 0 || (!e.is_prefill && e.tokens.size() == 1u));
      EXPECT_GE(static_cast<int64_t>(e.block_table.size()) * sched.options().kv_block_size,
                e.n_past + 1 + e.draft_slots);
      if (sched.options().kv_window_tokens > 0) {  // Sink + window: bounded, however long.
        EXPECT_LE(std::count_if(e.block_table.begin(), e.block_table.end(), [](int32_t b) { return b >= 0; }),
                  sched.WindowPeakBlocks())
            << "sequence " << e.seq_id;
      }
      if (e.first_chunk) {
        // A (re)admission: it starts at a block boundary, past its cached prefix only; or a
        // sequence whose KV arrived by transfer (AddPrefilled) decodes its next token.
        if (e.is_prefill) {
          EXPECT_EQ(e.n_past % sched.options().kv_block_size, 0);
        } else {
          EXPECT_EQ(e.tokens.size(), 1u);
        }
        firsts.push_back({e.seq_id, e.n_past});
      }
    }
    for (BatchEntry& e : b->entries) {
      std::vector<int32_t> truth = history.at(e.seq_id);
      for (int32_t i = 0; i < e.draft_slots; ++i) {
        truth.push_back(NextToken(truth, sched.options().kv_window_tokens, sched.options().kv_sink_tokens));
        const bool corrupt = std::uniform_real_distribution<double>(0, 1)(rng) < wrong;
        e.tokens.push_back(corrupt ? truth.back() + 1 : truth.back());
        ++drafted;
      }
    }
    max_seqs = std::max(max_seqs, static_cast<int>(b->entries.size()));
    in_flight.push_back(std::move(*b));
    return true;
  }

  // Completes in-flight batch `index` (0 = oldest), finishing sequences at max_tokens.
  void CompleteOne(size_t index = 0) {
    ASSERT_LT(index, in_flight.size());
    Batch b = std::move(in_flight[index]);
    in_flight.erase(in_flight.begin() + index);
    // The worker gets the step now, with every copy recorded so far (ServingLoop::SendTarget):
    // a later batch may overtake an earlier one, the copies keep their order.
    const std::vector<KvBlockMove> moves = sched.TakeKvMoves();
    std::vector<SampledToken> sampled;
    if (lane_workers.empty()) {
      worker.Move(moves);
      sampled = worker.Run(b);
    } else {
      // Lanes (all-to-all expert parallelism): each lane's worker runs its own entries and
      // copies over its own cache and host tier, with the block ids of its lane's pool.
      for (int lane = 0; lane <= static_cast<int>(lane_workers.size()); ++lane) {
        FakeWorker& w = lane == 0 ? worker : lane_workers[lane - 1];
        std::vector<KvBlockMove> mine_moves;
        for (const KvBlockMove& m : moves) {
          if (m.lane == lane) mine_moves.push_back(m);
        }
        w.Move(mine_moves);
        Batch mine{b.id, {}};
        for (const BatchEntry& e : b.entries) {
          if (e.lane == lane) mine.entries.push_back(e);
          lanes_seen.insert(e.lane);
        }
        const std::vector<SampledToken> out = w.Run(mine);
        sampled.insert(sampled.end(), out.begin(), out.end());
      }
    }
    absl::StatusOr<std::vector<TokenEvent>> events = sched.Complete(b.id, sampled);
    ASSERT_TRUE(events.ok()) << events.status();
    for (const TokenEvent& ev : *events) {
      history.at(ev.seq_id).push_back(ev.token);
      generated[ev.seq_id].push_back(ev.token);
      EXPECT_EQ(ev.user_tag, specs.at(ev.seq_id).user_tag);
      EXPECT_EQ(ev.n_generated, static_cast<int32_t>(generated[ev.seq_id].size()));
      EXPECT_EQ(ev.reached_max_tokens, ev.n_generated == specs.at(ev.seq_id).max_tokens);
      if (ev.reached_max_tokens) {
        EXPECT_TRUE(sched.Finish(ev.seq_id).ok());
        finished.push_back(ev.seq_id);
      }
    }
  }

  // Keeps up to max_in_flight_batches outstanding until the scheduler is idle.
  void RunAll(int max_rounds = 100000) {
    for (int round = 0; round < max_rounds && !sched.Idle(); ++round) {
      while (ScheduleOne()) {
      }
      ASSERT_FALSE(in_flight.empty()) << "scheduler stalled with live sequences";
      CompleteOne();
    }
    EXPECT_TRUE(sched.Idle());
  }

  Scheduler sched;
  FakeWorker worker;                     // Lane 0's, or the only one.
  std::vector<FakeWorker> lane_workers;  // Lanes 1.. (SchedulerOptions::n_lanes).
  std::set<int32_t> lanes_seen;
  std::map<int64_t, std::vector<int32_t>> history;
  std::map<int64_t, std::vector<int32_t>> generated;
  std::map<int64_t, SequenceSpec> specs;
  std::deque<Batch> in_flight;
  std::vector<int64_t> finished;
  std::vector<std::pair<int64_t, int64_t>> firsts;  // (sequence, n_past) of each first chunk.
  int max_seqs = 0;
  int32_t draft_k = 0;
  double wrong = 0;
  int64_t drafted = 0;
  std::mt19937 rng{17};
};

// Completes `batch` through a throwaway worker that knows nothing (for tests that only
// care about scheduling): one token 1 per entry wanting logits.
std::vector<SampledToken> Tokens(const Batch& batch, int32_t token = 1) {
  std::vector<SampledToken> out;
  for (const BatchEntry& e : batch.entries) {
    if (e.wants_logits) out.push_back({e.seq_id, token});
  }
  return out;
}

std::vector<int64_t> Ids(const Batch& batch) {
  std::vector<int64_t> ids;
  for (const BatchEntry& e : batch.entries) ids.push_back(e.seq_id);
  return ids;
}

void ExpectAllFree(const Scheduler& s) {
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.n_free_blocks, st.n_total_blocks);
  EXPECT_EQ(st.n_running, 0);
  EXPECT_EQ(st.n_waiting, 0);
  EXPECT_EQ(st.n_in_flight_batches, 0);
  EXPECT_TRUE(s.Idle());
}

TEST(SchedulerTest, PrefillThenDecodeThenFinish) {
  Scheduler s(Options(/*n_blocks=*/8, /*block_size=*/4));
  ASSERT_TRUE(s.Add(Spec(1, 5, 3)).ok());
  EXPECT_EQ(s.Lookup(1)->state, SequenceState::kWaiting);

  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->entries.size(), 1u);
  const BatchEntry& e = b->entries[0];
  EXPECT_EQ(e.seq_id, 1);
  EXPECT_EQ(e.tokens, Iota(5, 1000));
  EXPECT_EQ(e.n_past, 0);
  EXPECT_TRUE(e.wants_logits);
  EXPECT_TRUE(e.is_prefill);
  EXPECT_EQ(e.block_table.size(), 2u);  // ceil(5 / 4).
  EXPECT_EQ(s.Lookup(1)->state, SequenceState::kInFlight);
  EXPECT_FALSE(s.Schedule().has_value());  // One batch in flight at most.

  absl::StatusOr<std::vector<TokenEvent>> ev = s.Complete(b->id, Tokens(*b, 42));
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].token, 42);
  EXPECT_EQ((*ev)[0].user_tag, 8u);
  EXPECT_EQ((*ev)[0].n_generated, 1);
  EXPECT_FALSE((*ev)[0].reached_max_tokens);
  EXPECT_EQ(s.Lookup(1)->n_cached, 5);
  EXPECT_EQ(s.Lookup(1)->state, SequenceState::kRunning);

  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->entries.size(), 1u);
  EXPECT_EQ(b->entries[0].tokens, (std::vector<int32_t>{42}));
  EXPECT_EQ(b->entries[0].n_past, 5);
  EXPECT_FALSE(b->entries[0].is_prefill);
  EXPECT_TRUE(b->entries[0].wants_logits);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b, 43)).ok());

  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->entries[0].n_past, 6);
  ev = s.Complete(b->id, Tokens(*b, 44));
  ASSERT_TRUE(ev.ok());
  EXPECT_TRUE((*ev)[0].reached_max_tokens);
  EXPECT_EQ(s.Lookup(1)->generated, (std::vector<int32_t>{42, 43, 44}));
  // At max_tokens it is not scheduled again; Finish frees its blocks.
  EXPECT_FALSE(s.Schedule().has_value());
  EXPECT_EQ(s.Stats().n_free_blocks, 6);
  ASSERT_TRUE(s.Finish(1).ok());
  ExpectAllFree(s);
  EXPECT_FALSE(s.Lookup(1).has_value());
}

TEST(SchedulerTest, AddValidates) {
  Scheduler s(Options(/*n_blocks=*/4, /*block_size=*/4));
  absl::Status st = s.Add(Spec(1, 16, 1));
  EXPECT_STATUS_CODE(st, kInvalidArgument);
  EXPECT_EQ(StatusMessage(st), "prompt of 16 tokens needs 5 KV blocks, the cache has 4");
  EXPECT_TRUE(s.Add(Spec(2, 15, 1)).ok());  // 15 + 1 decode slot = 4 blocks: fits.
  st = s.Add(Spec(3, 10, 7));
  EXPECT_STATUS_CODE(st, kInvalidArgument);
  EXPECT_THAT(StatusMessage(st), HasSubstr("max_tokens"));
  EXPECT_TRUE(s.Add(Spec(4, 10, 6)).ok());  // 16 positions at most.
  EXPECT_STATUS_CODE(s.Add(Spec(2, 3, 1)), kAlreadyExists);
  EXPECT_STATUS_CODE(s.Add(Spec(5, 0, 1)), kInvalidArgument);
  EXPECT_STATUS_CODE(s.Add(Spec(6, 3, 0)), kInvalidArgument);
  EXPECT_EQ(s.Stats().n_waiting, 2);
}

// The pool sized after construction (once the GPUs' memory is known): the new block count
// is what admission checks against.
TEST(SchedulerTest, ResetKvBlocksResizesThePool) {
  Scheduler s(Options(/*n_blocks=*/4, /*block_size=*/4));
  s.ResetKvBlocks(2);
  EXPECT_EQ(s.Stats().n_total_blocks, 2);
  EXPECT_EQ(StatusMessage(s.Add(Spec(1, 12, 1))), "prompt of 12 tokens needs 4 KV blocks, the cache has 2");
  s.ResetKvBlocks(100);
  EXPECT_EQ(s.Stats().n_free_blocks, 100);
  EXPECT_TRUE(s.Add(Spec(1, 12, 1)).ok());
  EXPECT_DEATH(s.ResetKvBlocks(8), "after the scheduler started");
}

TEST(SchedulerTest, TokenBudgetChunksThePromptThatDoesNotFit) {
  Scheduler s(Options(64, 4, 64, /*max_batched_tokens=*/10));
  ASSERT_TRUE(s.Add(Spec(1, 4, 8)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 4, 8)).ok());
  ASSERT_TRUE(s.Add(Spec(3, 4, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->n_tokens(), 10);
  ASSERT_EQ(b->entries.size(), 3u);
  EXPECT_EQ(b->entries[2].seq_id, 3);
  EXPECT_EQ(b->entries[2].tokens.size(), 2u);
  EXPECT_FALSE(b->entries[2].wants_logits);
  EXPECT_EQ(b->entries[2].block_table.size(), 1u);  // The whole prompt's blocks.
  // Sequence 3 asks for no token.
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  EXPECT_EQ(s.Lookup(3)->n_cached, 2);
  EXPECT_TRUE(s.Lookup(3)->generated.empty());

  // Decodes first (1 token each), then the rest of sequence 3's prompt.
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(b->n_tokens(), 4);
  EXPECT_EQ(b->entries[2].n_past, 2);
  EXPECT_EQ(b->entries[2].tokens, (std::vector<int32_t>{3002, 3003}));
  EXPECT_TRUE(b->entries[2].wants_logits);
  EXPECT_TRUE(b->entries[2].is_prefill);
  EXPECT_EQ(s.Stats().max_batch_tokens_seen, 10);
}

TEST(SchedulerTest, TokenBudgetLimitsDecodes) {
  Scheduler s(Options(64, 4, 64, /*max_batched_tokens=*/3));
  for (int id = 1; id <= 3; ++id) ASSERT_TRUE(s.Add(Spec(id, 1, 8)).ok());
  std::optional<Batch> b = s.Schedule();  // Three 1-token prompts: exactly the budget.
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->n_tokens(), 3);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Add(Spec(4, 1, 8)).ok());
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 2, 3}));  // Decodes fill it; 4 waits.
  EXPECT_EQ(s.Stats().n_waiting, 1);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Finish(2).ok());
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 3, 4}));
}

TEST(SchedulerTest, LongPromptIsPrefilledInChunks) {
  Scheduler s(Options(64, 4, 64, /*max_batched_tokens=*/10));
  ASSERT_TRUE(s.Add(Spec(1, 25, 2)).ok());
  const std::vector<int32_t> prompt = Iota(25, 1000);
  int64_t n_past = 0;
  for (int chunk : {10, 10, 5}) {
    std::optional<Batch> b = s.Schedule();
    ASSERT_TRUE(b.has_value());
    ASSERT_EQ(b->entries.size(), 1u);
    const BatchEntry& e = b->entries[0];
    EXPECT_EQ(e.n_past, n_past);
    ASSERT_EQ(static_cast<int>(e.tokens.size()), chunk);
    EXPECT_TRUE(std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin() + n_past));
    EXPECT_EQ(e.wants_logits, chunk == 5);
    EXPECT_EQ(e.block_table.size(), 7u);  // ceil(25 / 4), allocated at admission.
    ASSERT_TRUE(s.Complete(b->id, Tokens(*b, 9)).ok());
    n_past += chunk;
  }
  EXPECT_EQ(s.Lookup(1)->generated, (std::vector<int32_t>{9}));
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->entries[0].n_past, 25);
  EXPECT_EQ(b->entries[0].tokens, (std::vector<int32_t>{9}));
}

TEST(SchedulerTest, MaxNumSeqsCapsBatchAndRunningSet) {
  Scheduler s(Options(64, 4, /*max_num_seqs=*/2));
  for (int id = 1; id <= 5; ++id) ASSERT_TRUE(s.Add(Spec(id, 3, 4)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 2}));
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 2}));  // Running set full: 3.. wait.
  EXPECT_EQ(s.Stats().n_waiting, 3);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Finish(1).ok());
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{2, 3}));  // Decode first, then FCFS admission.
  EXPECT_EQ(s.Stats().max_batch_seqs_seen, 2);
}

TEST(SchedulerTest, AdmissionNeedsPromptPlusOneDecodeSlot) {
  // 4 blocks of 4. Sequence 1: 11 tokens => 3 blocks (3 with the slot), admitted.
  Scheduler s(Options(4, 4));
  ASSERT_TRUE(s.Add(Spec(1, 11, 4)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 4, 4)).ok());  // Needs 2 (4 + slot) with 1 free: waits.
  ASSERT_TRUE(s.Add(Spec(3, 3, 4)).ok());  // Would fit (3 + slot = 1 block) but FCFS.
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1}));
  EXPECT_EQ(s.Stats().n_free_blocks, 1);
  EXPECT_EQ(s.Stats().n_waiting, 2);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Cancel(2).ok());
  // Now the head is 3: exactly one free block covers 3 tokens + the decode slot (and
  // 1's decode at position 11 stays in its third block).
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s.Stats().n_free_blocks, 0);
}

TEST(SchedulerTest, AdmissionEdgeExactFit) {
  Scheduler s(Options(2, 4));
  ASSERT_TRUE(s.Add(Spec(1, 7, 1)).ok());  // 7 + slot = 8 = 2 blocks exactly.
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->entries[0].block_table.size(), 2u);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Finish(1).ok());
  EXPECT_STATUS_CODE(s.Add(Spec(2, 8, 1)), kInvalidArgument);  // 8 + slot = 3 blocks.
  ExpectAllFree(s);
}

TEST(SchedulerTest, PreemptsTheNewestRunningSequence) {
  // 4 blocks of 4; two 7-token prompts take 2 blocks each. When 1 grows past 8 positions
  // it needs a third block and 2 (the newest) is evicted.
  Driver d(Options(4, 4));
  d.Add(Spec(1, 7, 9));
  d.Add(Spec(2, 7, 9));
  ASSERT_TRUE(d.ScheduleOne());
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1, 2}));
  d.CompleteOne();  // Both: 8 tokens, 7 cached.
  ASSERT_TRUE(d.ScheduleOne());
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1, 2}));
  d.CompleteOne();  // Both: 9 tokens, 8 cached.
  EXPECT_EQ(d.sched.Stats().n_free_blocks, 0);
  ASSERT_TRUE(d.ScheduleOne());
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1}));
  SchedulerStats st = d.sched.Stats();
  EXPECT_EQ(st.n_preemptions, 1);
  EXPECT_EQ(st.n_waiting, 1);
  std::optional<SequenceInfo> info = d.sched.Lookup(2);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, SequenceState::kWaiting);
  EXPECT_EQ(info->n_cached, 0);
  EXPECT_EQ(info->n_blocks, 0);
  EXPECT_EQ(info->n_preemptions, 1);
  EXPECT_EQ(info->generated, d.generated[2]);  // Generated tokens are kept.
  ASSERT_EQ(info->generated.size(), 2u);
  const std::vector<int32_t> kept = info->generated;

  // Run 1 to the end; 2 then re-prefills prompt + generated (9 tokens) in one entry.
  while (d.sched.Lookup(1).has_value()) {
    d.CompleteOne();
    if (d.sched.Lookup(1).has_value()) {
      ASSERT_TRUE(d.ScheduleOne());
      EXPECT_EQ(Ids(d.in_flight.back()), (std::vector<int64_t>{1}));
    }
  }
  ASSERT_TRUE(d.ScheduleOne());
  const BatchEntry& e = d.in_flight.back().entries[0];
  EXPECT_EQ(e.seq_id, 2);
  EXPECT_EQ(e.n_past, 0);
  EXPECT_EQ(e.tokens.size(), 9u);
  EXPECT_TRUE(e.is_prefill);
  EXPECT_TRUE(e.wants_logits);
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), e.tokens.begin() + 7));
  d.RunAll();
  EXPECT_EQ(d.generated[1], Reference(d.specs[1]));
  EXPECT_EQ(d.generated[2], Reference(d.specs[2]));  // Same tokens as without preemption.
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, SequenceAskingForABlockCanEvictItself) {
  // 2 blocks of 4. Sequence 1 (1-token prompt) and 2 (3 tokens) take one block each.
  // 2 reaches position 4 first; 1 is older and already in the batch, so 2 evicts itself.
  Driver d(Options(2, 4));
  d.Add(Spec(1, 1, 5));
  d.Add(Spec(2, 3, 5));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(d.ScheduleOne());
    EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1, 2}));
    d.CompleteOne();
  }
  ASSERT_TRUE(d.ScheduleOne());
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.sched.Stats().n_preemptions, 1);
  EXPECT_EQ(d.sched.Lookup(2)->state, SequenceState::kWaiting);
  EXPECT_EQ(d.sched.Lookup(2)->generated.size(), 2u);
  d.RunAll();
  EXPECT_EQ(d.generated[1], Reference(d.specs[1]));
  EXPECT_EQ(d.generated[2], Reference(d.specs[2]));
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, InFlightSequencesAreNeverEvicted) {
  // Sequence 2 is in flight when 1 needs a block: 1 waits instead of evicting it.
  Driver d(Options(4, 4, /*max_num_seqs=*/1, 2048, /*in_flight=*/2));
  d.Add(Spec(1, 7, 9));
  d.Add(Spec(2, 7, 9));
  ASSERT_TRUE(d.ScheduleOne());  // [1]
  ASSERT_TRUE(d.ScheduleOne());  // [2]
  d.CompleteOne();               // 1: 8 tokens.
  ASSERT_TRUE(d.ScheduleOne());  // [1] decode at 7, no new block.
  d.CompleteOne();               // 2 done prefill.
  d.CompleteOne();               // 1: 9 tokens, needs a 3rd block at position 8.
  ASSERT_TRUE(d.ScheduleOne());  // [1] evicts 2 (not in flight).
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.sched.Stats().n_preemptions, 1);
  d.RunAll();
  EXPECT_EQ(d.generated[2], Reference(d.specs[2]));

  // Now the in-flight case proper.
  Driver e(Options(4, 4, /*max_num_seqs=*/1, 2048, /*in_flight=*/2));
  e.Add(Spec(1, 8, 8));          // 2 blocks, needs a 3rd at position 8 (first decode).
  e.Add(Spec(2, 7, 9));          // 2 blocks.
  ASSERT_TRUE(e.ScheduleOne());  // [1]
  ASSERT_TRUE(e.ScheduleOne());  // [2]
  e.CompleteOne();               // 1 wants a block; the newer 2 is in flight: 1 waits for it.
  EXPECT_FALSE(e.sched.Schedule().has_value());
  EXPECT_EQ(e.sched.Lookup(1)->state, SequenceState::kRunning);
  EXPECT_EQ(e.sched.Stats().n_preemptions, 0);
  e.CompleteOne();
  ASSERT_TRUE(e.ScheduleOne());  // Now 2 can be evicted.
  EXPECT_EQ(Ids(e.in_flight[0]), (std::vector<int64_t>{1}));
  EXPECT_EQ(e.sched.Stats().n_preemptions, 1);
  e.RunAll();
  EXPECT_EQ(e.generated[1], Reference(e.specs[1]));
  EXPECT_EQ(e.generated[2], Reference(e.specs[2]));
  ExpectAllFree(e.sched);
}

TEST(SchedulerTest, InFlightBatchesAreDisjoint) {
  Scheduler s(Options(64, 4, /*max_num_seqs=*/2, 2048, /*in_flight=*/3));
  for (int id = 1; id <= 7; ++id) ASSERT_TRUE(s.Add(Spec(id, 3, 8)).ok());
  std::optional<Batch> b1 = s.Schedule();
  std::optional<Batch> b2 = s.Schedule();
  std::optional<Batch> b3 = s.Schedule();
  ASSERT_TRUE(b1 && b2 && b3);
  EXPECT_EQ(Ids(*b1), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Ids(*b2), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(Ids(*b3), (std::vector<int64_t>{5, 6}));
  EXPECT_LT(b1->id, b2->id);
  EXPECT_LT(b2->id, b3->id);
  EXPECT_FALSE(s.Schedule().has_value());  // Three in flight: the limit.
  EXPECT_EQ(s.Stats().n_in_flight_batches, 3);
  EXPECT_EQ(s.Stats().n_in_flight_seqs, 6);

  // Completing the middle one frees exactly its sequences; 7 waits (running set is 6).
  ASSERT_TRUE(s.Complete(b2->id, Tokens(*b2)).ok());
  std::optional<Batch> b4 = s.Schedule();
  ASSERT_TRUE(b4.has_value());
  EXPECT_EQ(Ids(*b4), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(s.Schedule().has_value());
  ASSERT_TRUE(s.Complete(b1->id, Tokens(*b1)).ok());
  ASSERT_TRUE(s.Complete(b3->id, Tokens(*b3)).ok());
  ASSERT_TRUE(s.Finish(5).ok());
  std::optional<Batch> b5 = s.Schedule();
  ASSERT_TRUE(b5.has_value());
  EXPECT_EQ(Ids(*b5), (std::vector<int64_t>{1, 2}));
  std::optional<Batch> b6 = s.Schedule();
  ASSERT_TRUE(b6.has_value());
  EXPECT_EQ(Ids(*b6), (std::vector<int64_t>{6, 7}));  // 6's decode, then 7 admitted.
  EXPECT_EQ(b6->entries[1].n_past, 0);
  EXPECT_FALSE(s.Schedule().has_value());  // 3 and 4 are in b4: nothing left to run.
  EXPECT_EQ(s.Stats().n_in_flight_batches, 3);
}

TEST(SchedulerTest, NothingToScheduleWhileEverythingIsInFlight) {
  Scheduler s(Options(64, 4, 64, 2048, /*in_flight=*/3));
  ASSERT_TRUE(s.Add(Spec(1, 3, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(s.Schedule().has_value());
  ASSERT_TRUE(s.Add(Spec(2, 3, 8)).ok());
  std::optional<Batch> c = s.Schedule();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(Ids(*c), (std::vector<int64_t>{2}));
}

TEST(SchedulerTest, CancelWaiting) {
  Scheduler s(Options(64, 4, /*max_num_seqs=*/1));
  ASSERT_TRUE(s.Add(Spec(1, 3, 8)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 3, 8)).ok());
  ASSERT_TRUE(s.Cancel(1).ok());
  EXPECT_FALSE(s.Lookup(1).has_value());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Ids(*b), (std::vector<int64_t>{2}));
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  ASSERT_TRUE(s.Cancel(2).ok());
  ExpectAllFree(s);
}

TEST(SchedulerTest, CancelRunningFreesAtOnce) {
  Scheduler s(Options(8, 4));
  ASSERT_TRUE(s.Add(Spec(1, 6, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  EXPECT_EQ(s.Stats().n_free_blocks, 6);
  ASSERT_TRUE(s.Cancel(1).ok());
  ExpectAllFree(s);
  EXPECT_STATUS_CODE(s.Cancel(1), kNotFound);
  EXPECT_STATUS_CODE(s.Finish(1), kNotFound);
  EXPECT_STATUS_CODE(s.Cancel(99), kNotFound);
}

TEST(SchedulerTest, CancelInFlightDropsAtCompletion) {
  Scheduler s(Options(8, 4));
  ASSERT_TRUE(s.Add(Spec(1, 6, 8)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 2, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(s.Cancel(1).ok());
  EXPECT_FALSE(s.Lookup(1).has_value());
  EXPECT_STATUS_CODE(s.Cancel(1), kNotFound);
  EXPECT_EQ(s.Stats().n_free_blocks, 5);  // Workers may still write 1's blocks.
  EXPECT_EQ(s.Stats().n_in_flight_seqs, 1);
  // The worker still returns a token for 1; it is ignored.
  absl::StatusOr<std::vector<TokenEvent>> ev = s.Complete(b->id, Tokens(*b));
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].seq_id, 2);
  EXPECT_EQ(s.Stats().n_free_blocks, 7);
  // The id may be reused once it is gone.
  EXPECT_TRUE(s.Add(Spec(1, 2, 2)).ok());
  ASSERT_TRUE(s.Cancel(1).ok());
  ASSERT_TRUE(s.Cancel(2).ok());
  ExpectAllFree(s);
}

TEST(SchedulerTest, CancelInFlightThenFailBatch) {
  Scheduler s(Options(8, 4));
  ASSERT_TRUE(s.Add(Spec(1, 6, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(s.Cancel(1).ok());
  ASSERT_TRUE(s.FailBatch(b->id).ok());
  ExpectAllFree(s);
  EXPECT_STATUS_CODE(s.FailBatch(b->id), kNotFound);
}

TEST(SchedulerTest, CancelPreemptedWaitingSequence) {
  Driver d(Options(4, 4));
  d.Add(Spec(1, 7, 9));
  d.Add(Spec(2, 7, 9));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(d.ScheduleOne());
    d.CompleteOne();
  }
  ASSERT_TRUE(d.ScheduleOne());  // Evicts 2.
  ASSERT_EQ(d.sched.Lookup(2)->state, SequenceState::kWaiting);
  ASSERT_TRUE(d.sched.Cancel(2).ok());
  d.RunAll();
  EXPECT_EQ(d.generated[1], Reference(d.specs[1]));
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, FailBatchRefeedsTheSamePositions) {
  Scheduler s(Options(8, 4));
  ASSERT_TRUE(s.Add(Spec(1, 5, 8)).ok());
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b, 7)).ok());
  b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(s.FailBatch(b->id).ok());
  EXPECT_EQ(s.Lookup(1)->state, SequenceState::kRunning);
  EXPECT_EQ(s.Lookup(1)->n_cached, 5);
  std::optional<Batch> again = s.Schedule();
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->id, b->id);
  EXPECT_EQ(again->entries[0].n_past, 5);
  EXPECT_EQ(again->entries[0].tokens, (std::vector<int32_t>{7}));
  EXPECT_EQ(again->entries[0].block_table, b->entries[0].block_table);
}

TEST(SchedulerTest, CompleteValidatesResults) {
  Scheduler s(Options(64, 4, 64, /*max_batched_tokens=*/6));
  ASSERT_TRUE(s.Add(Spec(1, 3, 8)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 5, 8)).ok());  // Chunk of 3: wants no token.
  std::optional<Batch> b = s.Schedule();
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->entries[1].wants_logits);
  EXPECT_STATUS_CODE(s.Complete(b->id + 100, Tokens(*b)), kNotFound);
  EXPECT_STATUS_CODE(s.Complete(b->id, {}), kInvalidArgument);
  const std::vector<SampledToken> extra = {{1, 5}, {2, 5}};
  EXPECT_STATUS_CODE(s.Complete(b->id, extra), kInvalidArgument);
  const std::vector<SampledToken> twice = {{1, 5}, {1, 6}};
  EXPECT_STATUS_CODE(s.Complete(b->id, twice), kInvalidArgument);
  const std::vector<SampledToken> stranger = {{1, 5}, {9, 5}};
  EXPECT_STATUS_CODE(s.Complete(b->id, stranger), kInvalidArgument);
  const std::vector<SampledToken> negative = {{1, -1}};
  EXPECT_STATUS_CODE(s.Complete(b->id, negative), kInvalidArgument);
  // Nothing changed: the batch is still in flight and a good result is accepted.
  EXPECT_EQ(s.Lookup(1)->n_cached, 0);
  EXPECT_EQ(s.Stats().n_in_flight_batches, 1);
  const std::vector<SampledToken> good = {{1, 5}};
  ASSERT_TRUE(s.Complete(b->id, good).ok());
  EXPECT_EQ(s.Lookup(1)->generated, (std::vector<int32_t>{5}));
  EXPECT_EQ(s.Lookup(2)->n_cached, 3);
  EXPECT_STATUS_CODE(s.Complete(b->id, good), kNotFound);  // Already completed.
}

TEST(SchedulerTest, ConcurrentSequencesMatchTheirSoloRuns) {
  Driver d(Options(64, 4, 64, 2048, /*in_flight=*/2));
  for (int id = 1; id <= 16; ++id) d.Add(Spec(id, 1 + (id * 7) % 20, 3 + id % 9));
  d.RunAll();
  for (int id = 1; id <= 16; ++id) {
    EXPECT_EQ(d.generated[id], Reference(d.specs[id])) << "sequence " << id;
  }
  EXPECT_GT(d.sched.Stats().max_batch_seqs_seen, 1);
  EXPECT_EQ(d.finished.size(), 16u);
  ExpectAllFree(d.sched);
}

// Random arrivals, lengths, completion order and cancellations on a small pool with up
// to 3 batches in flight: every surviving sequence produces its reference tokens, the
// fake KV cache is consistent throughout, and every block is free at the end.
// The randomised workload below, with or without drafts (draft_k > 0: speculation with
// a third of the drafts wrong).
// With `shared_prefixes`, prompts start with one of three "system prompts" or continue a
// finished sequence (prompt + answer + a new turn), so prefix hits happen throughout.
// With `host_blocks`, evicted cached blocks move to a host tier of that many blocks and
// come back on hits.
// With `window` > 0, sink + window (with `sinks`): sequences grow up to several times the
// pool, and what each holds stays bounded (Driver checks).
void RandomisedStress(int32_t draft_k, bool shared_prefixes = false, int32_t host_blocks = 0, int64_t window = 0,
                      int64_t sinks = 0, int lanes = 1) {
  int64_t total_preemptions = 0;
  size_t total_cancelled = 0;
  int max_batch_seqs = 0;
  int64_t accepted = 0, drafted = 0;
  int64_t hit_tokens = 0, host_hit_tokens = 0, onloaded = 0, moved = 0;
  size_t longest = 0;
  std::set<int32_t> lanes_seen;
  for (int seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const int in_flight = 1 + seed % 3;
    SchedulerOptions options = Options(/*n_blocks=*/12, /*block_size=*/4, /*max_num_seqs=*/1 + seed % 5,
                                       /*max_batched_tokens=*/4 + seed % 13, in_flight);
    options.n_host_kv_blocks = host_blocks;
    options.kv_window_tokens = window;
    options.kv_sink_tokens = sinks;
    options.n_lanes = lanes;
    Driver d(options, draft_k);
    std::vector<int64_t> cancelled;
    int64_t next_id = 1;
    for (int step = 0; step < 2000; ++step) {
      const int action = static_cast<int>(rng() % 10);
      if (action < 2 && next_id <= 40) {
        const int n_prompt = 1 + static_cast<int>(rng() % 20);
        SequenceSpec spec = Spec(next_id++, n_prompt, 1);
        if (shared_prefixes && !d.finished.empty() && rng() % 3 == 0) {
          // The next turn of a finished conversation.
          const std::vector<int32_t>& h = d.history.at(d.finished[rng() % d.finished.size()]);
          spec.prompt.assign(h.begin(), h.begin() + std::min<size_t>(h.size(), 36));
          spec.prompt.push_back(static_cast<int32_t>(rng() % 100));
        } else if (shared_prefixes) {
          std::vector<int32_t> prompt =
              Iota(static_cast<int>(rng() % 17), 50000 + 100 * static_cast<int32_t>(rng() % 3));
          prompt.insert(prompt.end(), spec.prompt.begin(), spec.prompt.begin() + std::min(n_prompt, 8));
          spec.prompt = prompt;
        }
        spec.max_tokens = 1 + static_cast<int>(rng() % (window > 0 ? 150 : 48 - spec.prompt.size()));
        d.Add(spec);
      } else if (action == 2 && !d.history.empty() && rng() % 4 == 0) {
        // Cancel a random live sequence in whatever state it is.
        const int64_t id = 1 + static_cast<int64_t>(rng() % (next_id - 1));
        if (d.sched.Lookup(id).has_value()) {
          ASSERT_TRUE(d.sched.Cancel(id).ok());
          cancelled.push_back(id);
        }
      } else if (action < 7) {
        d.ScheduleOne();
      } else if (!d.in_flight.empty()) {
        // Mostly pipeline order, sometimes out of order.
        const size_t index = rng() % 4 == 0 ? rng() % d.in_flight.size() : 0;
        d.CompleteOne(index);
      }
      if (::testing::Test::HasFailure()) return;
    }
    d.RunAll();
    if (::testing::Test::HasFailure()) return;
    for (const auto& [id, spec] : d.specs) {
      if (std::find(cancelled.begin(), cancelled.end(), id) != cancelled.end()) continue;
      EXPECT_EQ(d.generated[id], Reference(spec, window, sinks)) << "sequence " << id;
      longest = std::max(longest, d.history.at(id).size());
    }
    ExpectAllFree(d.sched);
    EXPECT_EQ(d.sched.Stats().n_free_blocks, 12 * lanes);  // Every lane's pool.
    total_preemptions += d.sched.Stats().n_preemptions;
    total_cancelled += cancelled.size();
    max_batch_seqs = std::max(max_batch_seqs, d.sched.Stats().max_batch_seqs_seen);
    accepted += d.worker.accepted;
    drafted += d.drafted;
    hit_tokens += d.sched.Stats().prefix_hit_tokens;
    host_hit_tokens += d.sched.Stats().prefix_host_hit_tokens;
    onloaded += d.sched.Stats().host_onloaded_blocks;
    moved += d.worker.moved;
    EXPECT_TRUE(d.sched.TakeKvMoves().empty()) << "a copy recorded after the last step";
    lanes_seen.insert(d.lanes_seen.begin(), d.lanes_seen.end());
  }
  if (shared_prefixes) {
    EXPECT_GT(hit_tokens, 500);
  }
  if (lanes > 1) {
    EXPECT_EQ(lanes_seen.size(), static_cast<size_t>(lanes));
  }
  if (window > 0) {
    EXPECT_GT(longest, 3u * 12 * 4);  // Sequences three times what the pool holds.
  }
  if (host_blocks > 0) {
    EXPECT_GT(onloaded, 50);
    EXPECT_GT(host_hit_tokens, 4 * 50);
    EXPECT_GT(moved, onloaded);
  }
  // The workload really exercises the interesting paths.
  EXPECT_GT(total_preemptions, 0);
  EXPECT_GT(total_cancelled, 0u);
  EXPECT_GT(max_batch_seqs, 1);
  if (draft_k > 0) {
    EXPECT_GT(accepted, 100);
    EXPECT_LT(accepted, drafted * 0.9);  // Rejections happened too.
  }
}

TEST(SchedulerTest, RandomisedStressAgainstReference) { RandomisedStress(0); }

// Lanes (all-to-all expert parallelism): each lane has a pool of its own (12 blocks, ids from
// 0) and its fake worker holds only its sequences' KV, so a block given to two lanes' live
// sequences, a prefix hit on another lane's blocks, another lane's copy, or a sequence
// changing lanes would change tokens; with shared prefixes, drafts and the host tier, every
// lane is used and the hits still come (a conversation's next turn goes to the lane that
// holds it).
TEST(SchedulerTest, LanesStressAgainstReference) {
  RandomisedStress(4, /*shared_prefixes=*/true, /*host_blocks=*/8, 0, 0, /*lanes=*/3);
}

// Speculation changes no token, under preemption, chunking, cancellation and several
// batches in flight, and every reserved block comes back.
TEST(SchedulerTest, SpeculativeStressAgainstReference) { RandomisedStress(4); }

// Prefix hits change no token either (the fake KV depends on the whole prefix, so a block
// reused after another prefix or written while shared would), with and without drafts.
TEST(SchedulerTest, SharedPrefixStressAgainstReference) { RandomisedStress(0, /*shared_prefixes=*/true); }
TEST(SchedulerTest, SharedPrefixSpeculativeStressAgainstReference) { RandomisedStress(4, /*shared_prefixes=*/true); }

// The host tier changes no token either: a block moved out and back must hold its KV
// (the copies run in the order recorded, even when a later batch overtakes an earlier one).
TEST(SchedulerTest, HostTierStressAgainstReference) {
  RandomisedStress(0, /*shared_prefixes=*/true, /*host_blocks=*/24);
}
TEST(SchedulerTest, HostTierSpeculativeStressAgainstReference) {
  RandomisedStress(4, /*shared_prefixes=*/true, /*host_blocks=*/6);
}

// Sink + window (scheduler.kv_policy): sequences up to ~4x the pool's 48 positions run to
// max_tokens with the tokens of sink + window attention, the blocks they no longer see are
// freed (and reused: a block freed while still seen would change a token), and none holds
// more than its peak; with drafts, shared prefixes and the host tier too.
TEST(SchedulerTest, SinkWindowStressAgainstReference) {
  RandomisedStress(0, /*shared_prefixes=*/false, /*host_blocks=*/0, /*window=*/9, /*sinks=*/2);
}
TEST(SchedulerTest, SinkWindowSpeculativeSharedPrefixStressAgainstReference) {
  RandomisedStress(4, /*shared_prefixes=*/true, /*host_blocks=*/8, /*window=*/8, /*sinks=*/4);
}

// Without the policy a sequence longer than the pool is refused; with it, its peak decides.
TEST(SchedulerTest, SinkWindowAdmitsWhatThePoolCouldNotHoldWhole) {
  SchedulerOptions o = Options(/*n_blocks=*/12, /*block_size=*/4, 64, /*max_batched_tokens=*/8);
  EXPECT_THAT(StatusMessage(Scheduler(o).Add(Spec(1, 10, 100))), HasSubstr("need 28 KV blocks, the cache has 12"));
  o.kv_window_tokens = 16;
  o.kv_sink_tokens = 4;
  EXPECT_EQ(Scheduler::WindowPeakBlocks(o), 1 + (15 + 8) / 4 + 2);
  Driver d(o);
  d.Add(Spec(1, 10, 100));
  d.RunAll();
  EXPECT_EQ(d.generated[1], Reference(d.specs[1], 16, 4));
  EXPECT_NE(d.generated[1], Reference(d.specs[1]));  // The policy did change the tokens.
  o.kv_window_tokens = 40;                           // Peak 1 + 47 / 4 + 2 = 14 blocks: more than the pool.
  EXPECT_THAT(StatusMessage(Scheduler(o).Add(Spec(1, 10, 100))), HasSubstr("scheduler.kv_window_tokens"));
}

// Disaggregation: a sequence prefilled on one scheduler (and its first token sampled) is
// detached with its blocks, admitted on another with blocks of its own, its KV copied over
// (the fake worker's KV reads back the whole history, so a wrong block shows), and decodes
// its reference tokens there; the prefill side gets every block back. A lost transfer
// recomputes on the decode side, with the same tokens.
TEST(SchedulerTest, APrefilledSequenceDecodesOnAnotherSchedulerFromItsKv) {
  for (bool lost : {false, true}) {
    SCOPED_TRACE(lost ? "transfer lost" : "transfer done");
    Driver prefill(Options(12, 4)), decode(Options(10, 4));
    const SequenceSpec spec = Spec(1, 9, 6);
    prefill.Add(spec);
    ASSERT_TRUE(prefill.ScheduleOne());
    prefill.CompleteOne();
    ASSERT_EQ(prefill.generated[1].size(), 1u);
    absl::StatusOr<std::vector<int32_t>> table = prefill.sched.Detach(1);
    ASSERT_OK(table);
    EXPECT_FALSE(prefill.sched.Lookup(1).has_value());
    EXPECT_EQ(prefill.sched.Stats().used_blocks(), 3);  // Still held: 9 positions + a decode slot.
    SequenceSpec moved = spec;
    std::vector<int32_t> decode_table;
    decode.history[1] = prefill.history[1];
    decode.generated[1] = prefill.generated[1];
    decode.specs[1] = spec;
    ASSERT_OK(decode.sched.AddPrefilled(moved, prefill.generated[1], 9, 0, &decode_table));
    EXPECT_EQ(decode.sched.Lookup(1)->state, SequenceState::kInFlight);  // Not scheduled before its KV.
    EXPECT_FALSE(decode.sched.Schedule().has_value());
    for (int b = 0; b < 3; ++b) prefill.worker.SendBlock(decode.worker, (*table)[b], decode_table[b]);
    prefill.sched.FreeDetached(*table);
    ExpectAllFree(prefill.sched);
    if (lost) {
      decode.sched.KvLost(1);
    } else {
      decode.sched.KvArrived(1);
    }
    decode.RunAll();
    EXPECT_EQ(decode.generated[1], Reference(spec));
    ASSERT_FALSE(decode.firsts.empty());
    EXPECT_EQ(decode.firsts[0], (std::pair<int64_t, int64_t>{1, lost ? 0 : 9}));  // First chunk either way.
    ExpectAllFree(decode.sched);
  }
  // Not enough free blocks now: nothing changes.
  Driver small(Options(2, 4));
  std::vector<int32_t> t;
  EXPECT_STATUS_CODE(small.sched.AddPrefilled(Spec(2, 9, 2), {5}, 9, 0, &t), kResourceExhausted);
  EXPECT_TRUE(small.sched.Idle());
}

TEST(SchedulerTest, DraftSlotsRespectMaxTokensAndRollBack) {
  Scheduler s(Options(/*n_blocks=*/8, /*block_size=*/4));
  ASSERT_TRUE(s.Add(Spec(1, 3, /*max_tokens=*/4)).ok());
  s.SetDraftTokens(1, 8);
  auto b = s.Schedule();  // Prefill: no drafts.
  ASSERT_TRUE(b);
  EXPECT_EQ(b->entries[0].draft_slots, 0);
  ASSERT_TRUE(s.Complete(b->id, Tokens(*b)).ok());
  b = s.Schedule();  // Decode at position 3: 4 - 1 tokens left, so 2 drafts at most.
  ASSERT_TRUE(b);
  EXPECT_EQ(b->entries[0].draft_slots, 2);
  EXPECT_EQ(b->entries[0].block_table.size(), 2u);  // Positions [0, 6).
  // One token emitted (the first draft rejected): the second block goes back.
  auto ev = s.Complete(b->id, std::vector<SampledToken>{{1, 5}});
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(s.Lookup(1)->n_cached, 4);
  EXPECT_EQ(s.Lookup(1)->n_blocks, 2);  // Positions [0, 5) still need 2 blocks.
  b = s.Schedule();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->entries[0].draft_slots, 1);
  std::vector<SampledToken> three = {{1, 6}, {1, 7}, {1, 8}};
  EXPECT_STATUS_CODE(s.Complete(b->id, three), kInvalidArgument);  // 1 draft: 2 tokens at most.
  ev = s.Complete(b->id, std::vector<SampledToken>{{1, 6}, {1, 7}});
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 2u);
  EXPECT_TRUE((*ev)[1].reached_max_tokens);
  EXPECT_EQ(s.Lookup(1)->generated, (std::vector<int32_t>{1, 5, 6, 7}));
  ASSERT_TRUE(s.Finish(1).ok());
  ExpectAllFree(s);
}

TEST(SchedulerTest, StressPreemptsAndBatches) {
  // The same workload on a pool that forces preemption: preemptions happen and the
  // results do not change.
  Driver d(Options(/*n_blocks=*/10, /*block_size=*/2, 8, 64, /*in_flight=*/2));
  for (int id = 1; id <= 12; ++id) d.Add(Spec(id, 2 + id % 5, 4 + id % 7));
  d.RunAll();
  const SchedulerStats st = d.sched.Stats();
  EXPECT_GT(st.n_preemptions, 0);
  EXPECT_GT(st.max_batch_seqs_seen, 1);
  for (int id = 1; id <= 12; ++id) EXPECT_EQ(d.generated[id], Reference(d.specs[id])) << id;
  ExpectAllFree(d.sched);
}

// --- Prefix caching ---------------------------------------------------------------

SequenceSpec WithPrompt(int64_t id, std::vector<int32_t> prompt, int32_t max_tokens) {
  SequenceSpec s;
  s.id = id;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.user_tag = static_cast<uint64_t>(id) + 7;
  return s;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Head(const std::vector<int32_t>& v, size_t n) { return {v.begin(), v.begin() + n}; }

const BatchEntry* Find(const Batch& b, int64_t id) {
  for (const BatchEntry& e : b.entries) {
    if (e.seq_id == id) return &e;
  }
  return nullptr;
}

// n_past of each first chunk of `id` (one per admission), in order.
std::vector<int64_t> FirstNPast(const Driver& d, int64_t id) {
  std::vector<int64_t> out;
  for (const auto& [seq, n_past] : d.firsts) {
    if (seq == id) out.push_back(n_past);
  }
  return out;
}

void ExpectReference(Driver& d) {
  for (const auto& [id, spec] : d.specs) EXPECT_EQ(d.generated[id], Reference(spec)) << "sequence " << id;
}

TEST(SchedulerTest, PrefixHitReusesFullBlocksOnly) {
  Driver d(Options(/*n_blocks=*/16, /*block_size=*/4));
  const std::vector<int32_t> p = Iota(10, 500);
  d.Add(WithPrompt(1, p, 6));
  ASSERT_TRUE(d.ScheduleOne());
  const std::vector<int32_t> table1 = d.in_flight[0].entries[0].block_table;
  d.CompleteOne();  // 10 positions cached: blocks 0 and 1 are full and registered.
  SchedulerStats st = d.sched.Stats();
  EXPECT_EQ(st.n_cached_blocks, 2);
  EXPECT_EQ(st.prefix_query_tokens, 10);
  EXPECT_EQ(st.prefix_hit_tokens, 0);

  // 2 shares 9 tokens with 1: two full blocks. 3 shares 7: one (a partial block never matches).
  d.Add(WithPrompt(2, Concat(Head(p, 9), {7, 7}), 6));
  d.Add(WithPrompt(3, Concat(Head(p, 7), {9, 9, 9, 9}), 6));
  ASSERT_TRUE(d.ScheduleOne());
  const Batch& b = d.in_flight[0];
  const BatchEntry* e2 = Find(b, 2);
  const BatchEntry* e3 = Find(b, 3);
  ASSERT_TRUE(e2 != nullptr && e3 != nullptr && Find(b, 1) != nullptr);
  EXPECT_FALSE(Find(b, 1)->first_chunk);  // A decode.
  EXPECT_TRUE(e2->first_chunk);
  EXPECT_EQ(e2->n_past, 8);
  EXPECT_EQ(e2->tokens, (std::vector<int32_t>{p[8], 7, 7}));
  EXPECT_EQ(Head(e2->block_table, 2), Head(table1, 2));
  EXPECT_NE(e2->block_table[2], table1[2]);
  EXPECT_EQ(e3->n_past, 4);
  EXPECT_EQ(e3->block_table[0], table1[0]);
  EXPECT_EQ(d.sched.Lookup(1)->n_cached_prompt_tokens, 0);
  EXPECT_EQ(d.sched.Lookup(2)->n_cached_prompt_tokens, 8);
  EXPECT_EQ(d.sched.Lookup(3)->n_cached_prompt_tokens, 4);
  st = d.sched.Stats();
  EXPECT_EQ(st.prefix_query_tokens, 10 + 11 + 11);
  EXPECT_EQ(st.prefix_hit_tokens, 8 + 4);
  d.RunAll();
  ExpectReference(d);
  ExpectAllFree(d.sched);
  EXPECT_GT(d.sched.Stats().n_cached_blocks, 2);  // Cached-free now, still registered.
}

TEST(SchedulerTest, SameBlockAfterAnotherPrefixIsNoHit) {
  Driver d(Options(16, 4));
  const std::vector<int32_t> x = Iota(4, 500), y = Iota(4, 600), w = Iota(4, 700);
  d.Add(WithPrompt(1, Concat(Concat(x, y), {1}), 2));
  d.RunAll();
  d.Add(WithPrompt(2, Concat(Concat(w, y), {1}), 2));  // y's block follows w here, x in 1.
  d.Add(WithPrompt(3, Concat(Concat(x, y), {2}), 2));
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{0}));
  EXPECT_EQ(FirstNPast(d, 3), (std::vector<int64_t>{8}));
  ExpectReference(d);
}

TEST(SchedulerTest, PrefixHitLeavesOneTokenToCompute) {
  Driver d(Options(16, 4));
  const std::vector<int32_t> p = Iota(8, 500);
  d.Add(WithPrompt(1, p, 1));
  d.RunAll();                               // Both blocks registered.
  d.Add(WithPrompt(2, p, 3));               // The same 8 tokens: 1 block reused, 4 computed.
  d.Add(WithPrompt(3, Concat(p, {5}), 3));  // 9 tokens: both blocks, 1 computed.
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{4}));
  EXPECT_EQ(FirstNPast(d, 3), (std::vector<int64_t>{8}));
  ExpectReference(d);
}

TEST(SchedulerTest, SharersKeepTheirBlocksWhenOneIsCancelled) {
  for (bool in_flight : {false, true}) {
    SCOPED_TRACE(in_flight ? "cancelled in flight" : "cancelled while running");
    Driver d(Options(8, 4));
    const std::vector<int32_t> p = Iota(9, 500);
    d.Add(WithPrompt(1, p, 6));
    ASSERT_TRUE(d.ScheduleOne());
    d.CompleteOne();  // 1 holds 3 blocks, 2 of them full and registered.
    d.Add(WithPrompt(2, Concat(Head(p, 8), {4}), 6));
    ASSERT_TRUE(d.ScheduleOne());  // 1 decodes; 2 shares 2 blocks and takes 1.
    EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{8}));
    EXPECT_EQ(d.sched.Stats().n_free_blocks, 8 - 3 - 1);
    if (in_flight) {  // Dropped when the batch is back.
      ASSERT_TRUE(d.sched.Cancel(1).ok());
    }
    d.CompleteOne();
    if (!in_flight) {
      ASSERT_TRUE(d.sched.Cancel(1).ok());
    }
    // 1's partial block is free; the shared ones are 2's alone now.
    EXPECT_EQ(d.sched.Stats().n_free_blocks, 8 - 3);
    EXPECT_EQ(d.sched.Stats().n_cached_blocks, 2);
    d.RunAll();
    EXPECT_EQ(d.generated[2], Reference(d.specs[2]));
    ExpectAllFree(d.sched);
  }
}

TEST(SchedulerTest, AdmissionCountsOnlyBlocksTakenFromThePool) {
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    SchedulerOptions o = Options(5, 4);
    o.prefix_caching = caching;
    Driver d(o);
    const std::vector<int32_t> p = Iota(12, 500);
    d.Add(WithPrompt(1, p, 4));  // 3 blocks, a 4th at its first decode.
    ASSERT_TRUE(d.ScheduleOne());
    d.CompleteOne();
    d.Add(WithPrompt(2, Concat(p, {1, 2, 3}), 1));  // 15 tokens + a slot: 4 blocks, 3 cached.
    ASSERT_TRUE(d.ScheduleOne());                   // 1's decode takes the 4th block: 1 left.
    EXPECT_EQ(Ids(d.in_flight[0]), caching ? (std::vector<int64_t>{1, 2}) : (std::vector<int64_t>{1}));
    d.RunAll();
    ExpectReference(d);
    ExpectAllFree(d.sched);
  }
}

TEST(SchedulerTest, CachedFreeBlocksAreRevivedOrEvictedLeastRecentlyUsedFirst) {
  Driver d(Options(6, 4));
  const std::vector<int32_t> a = Iota(8, 500), b = Iota(8, 600);
  d.Add(WithPrompt(1, a, 1));
  d.RunAll();  // a0 a1 cached-free, the tail a1 first in line.
  d.Add(WithPrompt(2, b, 1));
  d.RunAll();  // Plain free blocks first: b0 b1 are new ones, then cached-free too.
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 4);
  EXPECT_EQ(d.sched.Stats().n_free_blocks, 6);  // Cached-free blocks count as free.
  d.Add(WithPrompt(3, Iota(9, 700), 1));
  d.RunAll();                               // 3 blocks: the 2 plain free ones, then a1 is evicted.
  d.Add(WithPrompt(4, Concat(b, {1}), 1));  // Revives b0 b1, takes 3's plain free block.
  d.Add(WithPrompt(5, Concat(a, {1}), 1));  // a0 is left of a.
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 4), (std::vector<int64_t>{8}));
  EXPECT_EQ(FirstNPast(d, 5), (std::vector<int64_t>{4}));
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, ReadmissionAfterPreemptionReusesItsCachedBlocks) {
  // As PreemptsTheNewestRunningSequence: 2 is evicted when 1 needs a third block. 1 takes
  // 2's tail block (least recently used), so 2 comes back with its first block cached.
  Driver d(Options(4, 4));
  d.Add(Spec(1, 7, 3));
  d.Add(Spec(2, 7, 9));
  d.RunAll();
  EXPECT_EQ(d.sched.Stats().n_preemptions, 1);
  EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(d.sched.Stats().prefix_query_tokens, 7 + 7 + 9);  // The readmission looks up prompt + 2 generated.
  EXPECT_EQ(d.sched.Stats().prefix_hit_tokens, 4);
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, OnlyPrefilledBlocksAreRegistered) {
  // 1's prompt fills one block of 4 and a token of the next; decoding fills that block
  // and two more, none registered. A next turn that resends them prefills them, and then
  // they are reused.
  Driver d(Options(16, 4));
  d.Add(WithPrompt(1, Iota(5, 500), 8));
  d.RunAll();
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 1);
  d.Add(WithPrompt(2, Concat(d.history[1], {7}), 1));
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{4}));
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 3);  // 2's prompt: 14 tokens, 3 full blocks.
  d.Add(WithPrompt(3, Concat(d.history[1], {8}), 1));
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 3), (std::vector<int64_t>{12}));
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, RequeueAllRecomputesEverySequenceInOrder) {
  // A worker died: the batch in flight is given up, every sequence goes back to the queue
  // holding no blocks, and readmission recomputes prompt + generated from position 0 (the
  // prefix cache forgotten, as the serving loop does), in admission order, to the same tokens.
  Driver d(Options(/*n_blocks=*/32, /*block_size=*/4));
  d.Add(Spec(1, 7, 12));
  d.Add(Spec(2, 5, 12));
  d.Add(Spec(3, 9, 12));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(d.ScheduleOne());
    d.CompleteOne();
  }
  ASSERT_TRUE(d.ScheduleOne());
  ASSERT_TRUE(d.sched.FailBatch(d.in_flight[0].id).ok());
  d.in_flight.clear();
  d.sched.RequeueAll();
  d.sched.ClearPrefixCache();
  SchedulerStats st = d.sched.Stats();
  EXPECT_EQ(st.n_running, 0);
  EXPECT_EQ(st.n_waiting, 3);
  EXPECT_EQ(st.n_free_blocks, 32);
  EXPECT_EQ(st.n_preemptions, 0);  // Not a preemption.
  for (int64_t id : {1, 2, 3}) EXPECT_EQ(d.sched.Lookup(id)->generated.size(), 4u) << id;
  d.firsts.clear();
  ASSERT_TRUE(d.ScheduleOne());
  EXPECT_EQ(Ids(d.in_flight[0]), (std::vector<int64_t>{1, 2, 3}));
  for (const auto& [id, n_past] : d.firsts) EXPECT_EQ(n_past, 0) << id;
  d.RunAll();
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, QueueCapRefusesMore) {
  SchedulerOptions o = Options(16, 4);
  o.max_queued = 2;
  Scheduler s(o);
  EXPECT_TRUE(s.Add(Spec(1, 3, 2)).ok());
  EXPECT_TRUE(s.Add(Spec(2, 3, 2)).ok());
  const absl::Status st = s.Add(Spec(3, 3, 2));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("scheduler.max_queued"));
  ASSERT_TRUE(s.Schedule().has_value());  // Both admitted: the queue is empty again.
  EXPECT_TRUE(s.Add(Spec(3, 3, 2)).ok());
}

TEST(SchedulerTest, DraftsOnSharedPrefixesChangeNoToken) {
  Driver d(Options(64, 4), /*draft_k=*/4, /*wrong=*/0.5);
  const std::vector<int32_t> system = Iota(10, 500);
  d.Add(WithPrompt(1, Concat(system, {1}), 20));
  d.RunAll();
  for (int id = 2; id <= 5; ++id) d.Add(WithPrompt(id, Concat(system, {id}), 20));
  d.Add(WithPrompt(6, Concat(d.history[1], {9}), 20));  // The next turn of 1's conversation.
  d.RunAll();
  for (int id = 2; id <= 5; ++id) EXPECT_EQ(FirstNPast(d, id), (std::vector<int64_t>{8})) << id;
  // 31 + 1 tokens, 30 of them cached, but only 1's prefilled prompt blocks are reused: its
  // answer's KV came from decode (and verify) steps, which are never registered.
  EXPECT_EQ(FirstNPast(d, 6), (std::vector<int64_t>{8}));
  EXPECT_GT(d.worker.accepted, 0);
  EXPECT_LT(d.worker.accepted, d.drafted);
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, PrefixCachingOffNeverHits) {
  SchedulerOptions o = Options(16, 4);
  o.prefix_caching = false;
  Driver d(o);
  const std::vector<int32_t> p = Iota(9, 500);
  d.Add(WithPrompt(1, p, 3));
  d.RunAll();
  d.Add(WithPrompt(2, p, 3));
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 2), (std::vector<int64_t>{0}));
  const SchedulerStats st = d.sched.Stats();
  EXPECT_EQ(st.prefix_query_tokens, 0);
  EXPECT_EQ(st.prefix_hit_tokens, 0);
  EXPECT_EQ(st.n_cached_blocks, 0);
  ExpectReference(d);
}

TEST(SchedulerTest, ClearPrefixCacheForgetsEveryBlock) {
  Driver d(Options(16, 4));
  const std::vector<int32_t> p = Iota(9, 500);
  d.Add(WithPrompt(1, p, 1));
  d.RunAll();
  d.Add(WithPrompt(2, Concat(p, {3}), 6));
  ASSERT_TRUE(d.ScheduleOne());
  d.CompleteOne();
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 2);
  d.sched.ClearPrefixCache();  // A worker restarted: 2 keeps its blocks, none is matchable.
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 0);
  EXPECT_EQ(d.sched.Stats().n_free_blocks, 16 - 3);
  d.RunAll();
  EXPECT_EQ(d.sched.Stats().n_cached_blocks, 0);  // Nor registered later.
  d.Add(WithPrompt(3, Concat(p, {3}), 2));
  d.RunAll();
  EXPECT_EQ(FirstNPast(d, 3), (std::vector<int64_t>{0}));
  ExpectReference(d);
  ExpectAllFree(d.sched);
}

TEST(SchedulerTest, ChunkedPrefillAfterAPrefixHit) {
  Driver d(Options(32, 4, 64, /*max_batched_tokens=*/8));
  const std::vector<int32_t> p = Iota(16, 500);
  d.Add(WithPrompt(1, p, 1));
  d.RunAll();
  d.Add(WithPrompt(2, Concat(p, Iota(12, 900)), 2));  // 16 cached, 12 in chunks of 8 and 4.
  ASSERT_TRUE(d.ScheduleOne());
  const BatchEntry first = d.in_flight[0].entries[0];
  EXPECT_EQ(first.n_past, 16);
  EXPECT_EQ(first.tokens.size(), 8u);
  EXPECT_TRUE(first.first_chunk);
  EXPECT_FALSE(first.wants_logits);
  d.CompleteOne();
  ASSERT_TRUE(d.ScheduleOne());
  const BatchEntry second = d.in_flight[0].entries[0];
  EXPECT_EQ(second.n_past, 24);
  EXPECT_EQ(second.tokens.size(), 4u);
  EXPECT_FALSE(second.first_chunk);
  EXPECT_TRUE(second.wants_logits);
  d.RunAll();
  ExpectReference(d);
}

}  // namespace
}  // namespace cascade::coordinator

namespace cascade::coordinator {
namespace {

// Replicas' stats add field by field (the largest batches seen take the larger), and the
// derived figures status and metrics show come from the sums.
TEST(SchedulerStatsTest, ReplicasAddUpFieldByField) {
  SchedulerStats a{.n_running = 1,
                   .n_in_flight_seqs = 2,
                   .n_waiting = 3,
                   .n_in_flight_batches = 1,
                   .n_free_blocks = 10,
                   .n_total_blocks = 40,
                   .n_preemptions = 5,
                   .n_batches = 7,
                   .max_batch_seqs_seen = 4,
                   .max_batch_tokens_seen = 90,
                   .prefix_query_tokens = 100,
                   .prefix_hit_tokens = 20,
                   .n_cached_blocks = 6,
                   .n_host_blocks = 8,
                   .n_host_cached_blocks = 2,
                   .host_offloaded_blocks = 9,
                   .host_onloaded_blocks = 3,
                   .prefix_host_hit_tokens = 16};
  const SchedulerStats b{.n_running = 10,
                         .n_in_flight_seqs = 20,
                         .n_waiting = 30,
                         .n_in_flight_batches = 2,
                         .n_free_blocks = 30,
                         .n_total_blocks = 40,
                         .n_preemptions = 50,
                         .n_batches = 70,
                         .max_batch_seqs_seen = 3,
                         .max_batch_tokens_seen = 120,
                         .prefix_query_tokens = 300,
                         .prefix_hit_tokens = 180,
                         .n_cached_blocks = 60,
                         .n_host_blocks = 80,
                         .n_host_cached_blocks = 20,
                         .host_offloaded_blocks = 90,
                         .host_onloaded_blocks = 30,
                         .prefix_host_hit_tokens = 160};
  a += b;
  EXPECT_EQ(a.n_running, 11);
  EXPECT_EQ(a.n_in_flight_seqs, 22);
  EXPECT_EQ(a.n_waiting, 33);
  EXPECT_EQ(a.n_in_flight_batches, 3);
  EXPECT_EQ(a.n_free_blocks, 40);
  EXPECT_EQ(a.n_total_blocks, 80);
  EXPECT_EQ(a.n_preemptions, 55);
  EXPECT_EQ(a.n_batches, 77);
  EXPECT_EQ(a.max_batch_seqs_seen, 4);
  EXPECT_EQ(a.max_batch_tokens_seen, 120);
  EXPECT_EQ(a.prefix_query_tokens, 400);
  EXPECT_EQ(a.prefix_hit_tokens, 200);
  EXPECT_EQ(a.n_cached_blocks, 66);
  EXPECT_EQ(a.n_host_blocks, 88);
  EXPECT_EQ(a.n_host_cached_blocks, 22);
  EXPECT_EQ(a.host_offloaded_blocks, 99);
  EXPECT_EQ(a.host_onloaded_blocks, 33);
  EXPECT_EQ(a.prefix_host_hit_tokens, 176);
  EXPECT_EQ(a.running(), 33);
  EXPECT_EQ(a.used_blocks(), 40);
  EXPECT_DOUBLE_EQ(a.kv_usage(), 0.5);
  EXPECT_DOUBLE_EQ(a.prefix_hit_rate(), 0.5);
  EXPECT_DOUBLE_EQ(SchedulerStats{}.prefix_hit_rate(), 0.0);
  EXPECT_DOUBLE_EQ(SchedulerStats{}.kv_usage(), 0.0);
  // A field added to SchedulerStats must be added to operator+= and to this test.
  static_assert(sizeof(SchedulerStats) == 104, "SchedulerStats changed: update operator+= and this test");
}

}  // namespace
}  // namespace cascade::coordinator
