// The coordinator's serving loop: one thread owns the Scheduler (and so the KV block
// allocator), turns its batches into steps for every stage, keeps up to n_stages steps
// in flight so the pipeline stages overlap, and turns the last stage's sampled tokens
// into streamed text: incremental detokenization, stop ids/strings, EOS, max tokens.
// API threads only enqueue requests and read their channels.
//
// Speculative decoding (docs/ARCHITECTURE.md §5, coordinator/serving/speculation.h): before each batch the
// loop tells the scheduler how many drafts each sequence wants; decode entries that got
// draft slots are drafted — by prompt lookup here (n-gram), or by the drafter worker
// (self / model), whose step goes out first while other batches verify on the target —
// then the target verifies them and the scheduler keeps the accepted prefix.
//
// Thread-safety: Submit/Stats/Wake are thread-safe; everything else runs on the loop
// thread. The submission queue, the sequence-id counter and the stats copy are guarded by
// `mu_`; the loop-thread state below is touched by the loop thread only (and by
// ResetKvBlocks before Start). A RequestChannel's output, done flag and status are guarded
// by its own `mu` (`cancelled` is atomic); the serving loop never holds both locks at once.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/control/stage_workers.h"
#include "coordinator/serving/expert_balance.h"
#include "coordinator/serving/kv_transfer_plan.h"
#include "coordinator/serving/output_constraint.h"
#include "coordinator/serving/scheduler.h"
#include "coordinator/serving/serving_request.h"
#include "coordinator/serving/speculation.h"
#include "sampling/sampler.h"
#include "text/output_filter.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

// Where a request's output goes: the loop pushes messages, the API thread pops them,
// waiting on `mu` (Mutex::Await) until there is output or the request is done.
struct RequestChannel {
  absl::Mutex mu;
  std::deque<v1::GenerateResponse> out ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);  // Final status once done.
  std::atomic<bool> cancelled{false};       // Set by the API thread (client gone, deadline).
};

struct ServingStats {
  SchedulerStats scheduler;
  int64_t steps = 0;
  int64_t finished = 0;
  int64_t prompt_tokens = 0;      // Over finished requests.
  int64_t generation_tokens = 0;  // Over finished requests.
  // scheduler.kv_policy sink_window, over finished requests: those whose attention it
  // narrowed, and the positions their last tokens did not see (Usage.kv_hidden_tokens).
  int64_t kv_narrowed_requests = 0;
  int64_t kv_hidden_tokens = 0;
  v1::SpeculativeStats speculative;  // Over finished requests.
  bool prefix_caching = false;       // SchedulerOptions::prefix_caching.
  int64_t n_live = 0;                // Requests submitted or adopted and not finished.
};

class ServingLoop {
 public:
  // A request as the serving loop carries it. Only serving loops read it; others hand it between the
  // serving loops of data-parallel replicas when one's worker dies (OnEvacuate, Adopt).
  struct Active {
    ServingRequest req;
    std::shared_ptr<RequestChannel> channel;
    std::unique_ptr<text::OutputFilter> output;            // Detokenizer, stops, finish reason.
    std::unique_ptr<grammar::TokenConstraint> constraint;  // Constrained decoding; null: free text.
    std::vector<int32_t> generated;
    std::chrono::steady_clock::time_point arrival;
    std::chrono::steady_clock::time_point last_output;  // When tokens last reached the channel.
    bool scheduled = false;                             // A step has carried it.
    double ttft_s = -1;
    std::unique_ptr<SpeculativeState> spec;
  };
  // Borrows `workers` and `tokenizer`, which must outlive the serving loop.
  ServingLoop(StageWorkers* workers, const text::Tokenizer* tokenizer, const SchedulerOptions& options,
              const SpeculationOptions& speculation = {});
  ~ServingLoop();  // Stop().

  void Start();
  // Stops the loop: requests not finished end with UNAVAILABLE, and later submissions are
  // refused at once. Idempotent.
  void Stop();
  // Sizes the KV block pool (Scheduler::ResetKvBlocks). REQUIRES: before Start.
  void ResetKvBlocks(int32_t n_blocks);
  // How long requests wait for a dead worker's replacement before they fail
  // (server.recovery_timeout_s). REQUIRES: before Start.
  void SetRecoveryTimeout(std::chrono::seconds timeout) { recovery_timeout_ = timeout; }
  // Where latencies are observed (nullptr: nowhere). REQUIRES: before Start.
  void SetMetrics(ServingMetrics* metrics) { metrics_ = metrics; }
  // Queues a request; its output arrives on the returned channel.
  std::shared_ptr<RequestChannel> Submit(ServingRequest request);
  // Wakes the loop (after a channel was cancelled).
  void Wake();
  // Takes over a request another serving loop gave up (OnEvacuate): it goes on where it was,
  // its prompt and generated tokens prefilled here, on the same channel, with the same
  // sampler positions (so the same tokens as if nothing had happened).
  void Adopt(std::shared_ptr<Active> request);
  // Disaggregated serving (coordinator/serving/kv_handoff.cc). A request moving from a
  // prefill serving loop to a decode one, its KV already on its way: the transfer, the
  // positions it brings, and the pieces (which worker sends which layers and heads to which).
  struct KvHandoff {
    uint64_t transfer_id = 0;
    int64_t n_cached = 0;              // Positions whose KV moves: [0, n_cached).
    int64_t cached_prompt_tokens = 0;  // The prompt's prefix hit on the prefill side.
    int32_t n_blocks = 0;              // Blocks holding them.
    std::vector<KvPiece> pieces;
  };
  // This serving loop's workers as KV holders (ServingPlan::kv_holders). REQUIRES: before Start.
  void SetKvHolders(std::vector<KvHolder> holders) { kv_holders_ = std::move(holders); }
  const std::vector<KvHolder>& kv_holders() const { return kv_holders_; }
  // A prefill serving loop: when a step is about to sample a request's first token, `pick`
  // names the decode serving loop it moves to (null: none serves, it decodes here). Called
  // on the loop thread. REQUIRES: before Start.
  void SetHandoff(std::function<ServingLoop*()> pick) { pick_decode_ = std::move(pick); }
  // The decode side: takes over request `a`, its KV arriving as `h` says.
  void AdoptPrefilled(std::shared_ptr<Active> a, KvHandoff h);
  // Every worker of this serving loop joins KV group `join` (a step of its own); once all
  // did, its StageWorkers is linked again (Replicas::RejoinKvGroup).
  void JoinKvGroup(v1::KvGroupJoin join);
  // Called on the loop thread once the cluster rebuilt after a death. REQUIRES: before Start.
  void OnRecovered(std::function<void()> fn) { on_recovered_ = std::move(fn); }
  // The decode side: transfer `h` was sent but its request stays (it finished with its first
  // token, or failed): its workers receive it and drop it, so that the senders go on.
  void DiscardKv(KvHandoff h);

  // When a worker of this serving loop's cluster dies, each request is offered to `fn` first
  // (another replica's Adopt); those it takes leave this serving loop, the rest wait here for
  // the cluster to rebuild. `fn` runs on the loop thread. REQUIRES: before Start.
  void OnEvacuate(std::function<bool(std::shared_ptr<Active>)> fn) { evacuate_ = std::move(fn); }
  ServingStats Stats() const;

 private:
  // A batch sent to the target: what verification needs to account for it.
  struct Verified {
    int32_t n_draft = 0;  // Drafts sent.
    int64_t n_past = 0;   // Positions cached before the step.
  };
  struct Sent {
    std::chrono::steady_clock::time_point t0;
    int64_t rows = 0;                                // Positions scored by the step.
    bool decode_only = true;                         // No prompt chunk: its time feeds the step cost model.
    absl::flat_hash_map<int64_t, Verified> drafted;  // Sequences whose drafts are verified.
    std::vector<int64_t> seqs;                       // Every sequence in the step.
    std::vector<uint64_t> transfers;                 // A transfers-only step's KV transfers.
    bool kv_join = false;                            // It joins a KV group.
  };
  // Disaggregation's state (kv_handoff.cc). A request to admit with its KV (or, `request`
  // null, a transfer to discard), in transfer order.
  struct Prefilled {
    int64_t seq_id = 0;
    std::shared_ptr<Active> request;
    KvHandoff handoff;
  };
  // The prefill side: a request whose step sends its KV to `target`.
  struct Outgoing {
    int64_t step_id = 0;
    ServingLoop* target = nullptr;
    KvHandoff handoff;
  };
  // The decode side: a transfer to receive with the next step out (`seq_id` < 0: discard).
  struct Receive {
    int64_t seq_id = -1;
    std::vector<int32_t> blocks;
    KvHandoff handoff;
  };
  // What other serving loops' threads hand this one, in the order they sent it.
  struct KvInbox {
    std::vector<Prefilled> prefilled;
    std::optional<v1::KvGroupJoin> join;
    bool empty() const { return prefilled.empty() && !join; }
  };
  // Takes the inbox: admits prefilled requests whose blocks fit; queues their receives and
  // the discards.
  void DrainKvInbox();
  bool AdmitPrefilled(Prefilled& p);
  // The prefill side, building step `step`: the entries that sample a request's first token
  // send its KV to the decode loop `pick_decode_` names.
  void AddSends(const Batch& batch, v1::StepRequest& step);
  // The prefill side, step `step_id` back: its requests that sent their KV move to their
  // decode loop (the KV left with the step); those that finished have theirs discarded.
  void HandOff(int64_t step_id);
  // The decode side: the receives queued go with `step` (the next target step out).
  std::vector<uint64_t> TakeReceives(v1::StepRequest& step);
  // A step of KV transfers only (receives with nothing else to send, or a group to join), in
  // flight like a batch.
  absl::Status SendTransfers(std::optional<v1::KvGroupJoin> join = std::nullopt);
  // A step's transfers are back (every worker answered): received KV arrived, or was lost
  // (the request recomputes it here).
  void OnTransfers(const v1::StepResult& r, const Sent& sent);
  // A worker died: transfers in flight are given up (their requests were requeued).
  void DropTransfers();
  // A batch waiting for the drafter worker.
  struct Drafting {
    v1::StepRequest step;
    std::chrono::steady_clock::time_point t0;
  };
  void Loop();
  void Admit();
  // Starts `a`'s grammar state (constrained decoding), on the loop's thread.
  absl::Status StartConstraint(Active& a);
  // Ends request `seq_id` with `status`, giving its blocks back.
  void FailRequest(int64_t seq_id, const absl::Status& status);
  void DropCancelled();
  bool FillPipeline();
  // The target step of `batch`; entries with draft slots get n-gram drafts here, and
  // `needs_drafter` is set when the drafter worker must propose them instead.
  v1::StepRequest BuildStep(const Batch& batch, bool* needs_drafter);
  // The drafter's step for the entries of `batch` with draft slots (`step` is its target step).
  v1::StepRequest BuildDraftStep(const Batch& batch, const v1::StepRequest& step);
  absl::Status SendTarget(v1::StepRequest step, Sent sent);
  // Every target step's way out (SendTarget, SendTransfers): the host tier's copies and the
  // KV receives queued go with it, then it is in flight as `sent`.
  absl::Status Dispatch(v1::StepRequest& step, Sent sent);
  void OnDraft(const v1::StepResult& result);
  // A target step's result: Complete (the scheduler keeps the tokens), Account (step
  // cost fit, speculative acceptance), Emit (logprobs, text, stops, finished requests).
  using TokensBySeq = std::unordered_map<int64_t, std::vector<const v1::SampledToken*>>;
  void OnResult(const v1::StepResult& result);
  absl::StatusOr<std::vector<TokenEvent>> Complete(const v1::StepResult& result);
  void Account(const Sent& sent, const TokensBySeq& by_seq);
  void Emit(const std::vector<TokenEvent>& events, const TokensBySeq& by_seq);
  void SetDraftTokens();
  Sent TakeSent(int64_t step_id);
  // A worker refused step `step_id` (a malformed step): its sequences end with `status`,
  // the others go on.
  void FailStep(int64_t step_id, const std::vector<int64_t>& seqs, const absl::Status& status);
  void FailAll(const absl::Status& status);
  // Batches in flight will never complete (a worker died): gives them up, without progress.
  void GiveUpInFlight();
  // A worker died (`why`): batches in flight are given up and every request goes back to
  // the queue, keeping its tokens, to recompute its KV once the cluster has rebuilt.
  void Suspend(std::string_view why);
  // Offers every request to `evacuate_` (another replica); those taken leave this serving loop.
  void Evacuate(std::string_view why);
  // Copies the scheduler's stats and the live request count into stats_ (what Stats and
  // the router read), after either changed. Loop thread.
  void PublishStats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cluster rebuilt: the queued requests are scheduled again.
  void Resume();
  // Fails every request once the cluster stayed down past the recovery timeout.
  void CheckRecoveryBudget();
  // Ends a finished sequence: the held-back text, finish reason and usage in `last`.
  void Finish(int64_t seq_id, Active& a, v1::GenerateResponse& last);
  // Latency metrics of the `index`-th of `n_new` tokens the request got from one step.
  void ObserveOutput(Active& a, int index, int n_new, std::chrono::steady_clock::time_point now);
  static void Push(RequestChannel& c, v1::GenerateResponse msg, bool done, absl::Status status = absl::OkStatus());
  // Redundant experts: the placement due with `step` (ExpertBalancer), if any, rides on it.
  void AttachPlacement(v1::StepRequest& step);

  StageWorkers* workers_;
  const text::Tokenizer* tokenizer_;
  ConstraintVocabulary constraint_vocab_;
  Scheduler scheduler_;  // Loop thread only (ResetKvBlocks before Start); not guarded.
  const SpeculationOptions speculation_;
  StepCostModel step_cost_;            // Decode-step time against rows, for the choice of k. Loop thread only.
  ExpertBalancer balancer_;            // parallel.redundant_experts. Loop thread only.
  ServingMetrics* metrics_ = nullptr;  // Thread-safe itself; set before Start.
  std::chrono::seconds recovery_timeout_{60};
  std::function<bool(std::shared_ptr<Active>)> evacuate_;  // Set before Start; loop thread.
  std::thread thread_;                                     // Start and the destructor only (the owner's thread).
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;  // Guards the submission queue and the stats copy.
  absl::CondVar cv_;        // Signalled by Submit and Wake; the idle loop waits on it.
  std::vector<std::pair<int64_t, std::shared_ptr<Active>>> submitted_ ABSL_GUARDED_BY(mu_);
  ServingStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_id_ ABSL_GUARDED_BY(mu_) = 1;

  KvInbox kv_inbox_ ABSL_GUARDED_BY(mu_);

  // Loop-thread state: touched by the loop thread only, so not guarded.
  absl::flat_hash_map<int64_t, std::shared_ptr<Active>> active_;
  std::vector<int64_t> release_;   // Sequences whose worker state can be dropped.
  std::deque<int64_t> in_flight_;  // Batch ids sent, oldest first (results come in order).
  absl::flat_hash_map<int64_t, Sent> sent_;
  absl::flat_hash_map<int64_t, Drafting> drafting_;  // Batch id -> step awaiting drafts.
  // While a worker is dead: since when, and why; `recovery_failed_` once the timeout passed
  // (then arrivals are refused until the cluster is whole again).
  std::optional<std::chrono::steady_clock::time_point> suspended_at_;
  std::string down_reason_;
  bool recovery_failed_ = false;
  // Disaggregation (set before Start, then loop thread only).
  std::vector<KvHolder> kv_holders_;
  std::function<ServingLoop*()> pick_decode_;
  std::function<void()> on_recovered_;
  // Decode side, in transfer order: every worker takes its transfers in the order the
  // senders send them (a large message waits for its receiver), so a discard waits too.
  std::deque<Prefilled> awaiting_blocks_;
  absl::flat_hash_map<int64_t, Outgoing> outgoing_;  // Prefill side, by sequence.
  std::vector<Receive> receives_;                    // Decode side: for the next step out.
  absl::flat_hash_map<uint64_t, Receive> incoming_;  // Decode side: in flight, by transfer id.
  int64_t next_transfer_step_ = int64_t{1} << 48;    // Transfers-only steps' ids: apart from batches'.
};

}  // namespace cascade::coordinator
