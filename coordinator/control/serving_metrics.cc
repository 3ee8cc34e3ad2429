#include "coordinator/control/serving_metrics.h"

#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

// Seconds; a CPU token takes milliseconds, a long prefill on a loaded cluster seconds.
std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2,
          0.3,   0.5,    0.75,  1,      1.5,  2,     3,    5,    7.5,  10,    20,  40,   80};
}

}  // namespace

std::string_view RequestOutcomeName(RequestOutcome o) {
  switch (o) {
    case RequestOutcome::kStop: return "stop";
    case RequestOutcome::kLength: return "length";
    case RequestOutcome::kCancelled: return "cancelled";
    case RequestOutcome::kInvalid: return "invalid";
    case RequestOutcome::kRefused: return "refused";
    case RequestOutcome::kError: return "error";
    case RequestOutcome::kCount: break;
  }
  return "unknown";
}

RequestOutcome RequestOutcomeOf(const absl::Status& status, v1::FinishReason finish) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return finish == v1::FINISH_REASON_LENGTH ? RequestOutcome::kLength : RequestOutcome::kStop;
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded: return RequestOutcome::kCancelled;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound: return RequestOutcome::kInvalid;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted: return RequestOutcome::kRefused;
    default: return RequestOutcome::kError;
  }
}

ServingMetrics::ServingMetrics()
    : ttft(LatencyBuckets()),
      tpot(LatencyBuckets()),
      itl(LatencyBuckets()),
      queue_time(LatencyBuckets()),
      e2e(LatencyBuckets()),
      kv_transfer_bytes({1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30}),
      kv_transfer_time(LatencyBuckets()) {}

void ServingMetrics::ObserveKvTransfer(int64_t bytes, double seconds, int64_t tokens) {
  kv_transfer_bytes.Observe(static_cast<double>(bytes));
  kv_transfer_time.Observe(seconds);
  kv_transfer_tokens += tokens;
}

void ServingMetrics::CountRequest(std::string_view api, RequestOutcome outcome) {
  absl::MutexLock lock(&mu_);
  ++requests_[{std::string(api), outcome}];
}

ServingMetrics::StepHistograms::StepHistograms()
    : forward(LatencyBuckets()), handoff(LatencyBuckets()), round_trip(LatencyBuckets()) {}

void ServingMetrics::ObserveStep(int replica, int stage, int tp_rank, const StepTimes& times) {
  StepHistograms* h;
  {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<StepHistograms>& slot = steps_[{replica, stage, tp_rank}];
    if (slot == nullptr) slot = std::make_unique<StepHistograms>();
    h = slot.get();  // Never erased: safe to use outside the lock.
  }
  h->forward.Observe(times.forward_s);
  h->handoff.Observe(times.handoff_s);
  if (times.round_trip_s >= 0) h->round_trip.Observe(times.round_trip_s);
}

void ServingMetrics::CountHttp(std::string_view path, int status) {
  absl::MutexLock lock(&mu_);
  ++http_[{std::string(path), status}];
}

ServingMetrics::Counts ServingMetrics::Snapshot() const {
  absl::MutexLock lock(&mu_);
  Counts c;
  c.requests = requests_;
  c.http = http_;
  for (const auto& [key, h] : steps_) c.steps[key] = {h->forward.Get(), h->handoff.Get(), h->round_trip.Get()};
  return c;
}

}  // namespace cascade::coordinator
