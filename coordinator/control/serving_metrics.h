// What the coordinator measures while it serves: latencies as histograms observed as
// requests run (the serving loop, the API handlers, the step streams), and counts of requests by
// outcome and of HTTP answers. The page that shows them is coordinator/front/metrics_page.h; it
// reads the counts the serving loop and the scheduler already keep at scrape time, so nothing is
// counted twice.
//
// Thread-safe: every member may be touched from any thread.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/inference.pb.h"
#include "core/prometheus.h"

namespace cascade::coordinator {

// How a request ended, as a client sees it.
enum class RequestOutcome { kStop, kLength, kCancelled, kInvalid, kRefused, kError, kCount };
std::string_view RequestOutcomeName(RequestOutcome o);
// The outcome of a request that ended with `status` (and `finish`, when it is OK).
RequestOutcome RequestOutcomeOf(const absl::Status& status, v1::FinishReason finish);

class ServingMetrics {
 public:
  ServingMetrics();

  Histogram ttft;        // Arrival to the first token, seconds.
  Histogram tpot;        // Per finished request: (end - first token) / (tokens - 1).
  Histogram itl;         // Per output token: time since the request's previous output.
  Histogram queue_time;  // Arrival to the first step that carries the request.
  Histogram e2e;         // Arrival to the end, finished requests.
  // Disaggregated serving, per KV transfer received: its bytes (over every receiving
  // worker) and its time (the receive step's send to its last worker's result).
  Histogram kv_transfer_bytes;
  Histogram kv_transfer_time;
  std::atomic<int64_t> kv_transfer_tokens{0};  // Positions whose KV arrived by transfer.
  void ObserveKvTransfer(int64_t bytes, double seconds, int64_t tokens);

  void CountRequest(std::string_view api, RequestOutcome outcome);
  // A Step result of worker (stage, tp_rank) of a data-parallel replica, or the drafter
  // (stage -1), in seconds.
  struct StepTimes {
    double forward_s = 0;      // StepResult.forward_s: the worker's time on the step.
    double handoff_s = 0;      // StepResult.handoff_s: of it, the stage hand-off's.
    double round_trip_s = -1;  // From sending the step to its result's arrival; < 0: unknown.
  };
  void ObserveStep(int replica, int stage, int tp_rank, const StepTimes& times);
  void CountHttp(std::string_view path, int status);

  // The counts and the step histograms as they stand, copied under the lock.
  struct Counts {
    std::map<std::pair<std::string, RequestOutcome>, int64_t> requests;  // (api, outcome).
    std::map<std::pair<std::string, int>, int64_t> http;                 // (path, code).
    struct Steps {
      Histogram::Snapshot forward, handoff, round_trip;
    };
    std::map<std::tuple<int, int, int>, Steps> steps;  // (replica, stage, tp_rank).
  };
  Counts Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  // (api, outcome) -> requests.
  std::map<std::pair<std::string, RequestOutcome>, int64_t> requests_ ABSL_GUARDED_BY(mu_);
  struct StepHistograms {
    StepHistograms();  // Latency buckets.
    Histogram forward, handoff, round_trip;
  };
  // (replica, stage, tp_rank) -> its step times.
  std::map<std::tuple<int, int, int>, std::unique_ptr<StepHistograms>> steps_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, int64_t> http_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade::coordinator
