#include "coordinator/serving_metrics.h"

#include "coordinator/engine.h"
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
      e2e(LatencyBuckets()) {}

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

std::string ServingMetrics::Render(const EngineStats& engine, const v1::ClusterStatus& cluster) const {
  PrometheusText out;
  const SchedulerStats& sched = engine.scheduler;
  {
    absl::MutexLock lock(&mu_);
    out.Family("cascade_requests_total", "counter", "Requests ended, by API and outcome.");
    for (const auto& [key, n] : requests_) {
      out.Sample("cascade_requests_total",
                 {{"api", key.first}, {"outcome", std::string(RequestOutcomeName(key.second))}},
                 static_cast<double>(n));
    }
    out.Family("cascade_http_requests_total", "counter", "HTTP requests answered, by path and status code.");
    for (const auto& [key, n] : http_) {
      out.Sample("cascade_http_requests_total", {{"path", key.first}, {"code", StrCat(key.second)}},
                 static_cast<double>(n));
    }
    out.Family("cascade_stage_step_seconds", "histogram",
               "Forward time of one step on each worker (replica, stage, tp_rank; stage \"draft\" is the "
               "drafter).");
    const auto labels = [](const std::tuple<int, int, int>& key) -> MetricLabels {
      const auto& [replica, stage, tp_rank] = key;
      return {{"replica", StrCat(replica)}, {"stage", stage < 0 ? "draft" : StrCat(stage)}, {"tp_rank", StrCat(tp_rank)}};
    };
    for (const auto& [key, h] : steps_) out.Histogram("cascade_stage_step_seconds", labels(key), h->forward.Get());
    out.Family("cascade_stage_handoff_seconds", "histogram",
               "Of each step's forward time, the time in the stage hand-off: receiving the hidden states "
               "(waiting for the previous stage included) and sending them.");
    for (const auto& [key, h] : steps_) out.Histogram("cascade_stage_handoff_seconds", labels(key), h->handoff.Get());
    out.Family("cascade_stage_round_trip_seconds", "histogram",
               "From the coordinator's sending a step to the worker's result arriving: its forward time plus the "
               "step's and the result's trips.");
    for (const auto& [key, h] : steps_) {
      out.Histogram("cascade_stage_round_trip_seconds", labels(key), h->round_trip.Get());
    }
  }
  const std::pair<const char*, const Histogram*> latencies[] = {
      {"cascade_time_to_first_token_seconds", &ttft}, {"cascade_time_per_output_token_seconds", &tpot},
      {"cascade_inter_token_latency_seconds", &itl},  {"cascade_queue_time_seconds", &queue_time},
      {"cascade_e2e_request_latency_seconds", &e2e},
  };
  const char* helps[] = {
      "Arrival to the first generated token.",
      "Per finished request: time after the first token over the tokens after it.",
      "Per output token: time since the request's previous output (tokens that arrive together share it).",
      "Arrival to the first step that carries the request.",
      "Arrival to the end of finished requests.",
  };
  for (size_t i = 0; i < std::size(latencies); ++i) {
    out.Family(latencies[i].first, "histogram", helps[i]);
    out.Histogram(latencies[i].first, {}, latencies[i].second->Get());
  }

  const auto gauge = [&](const char* name, const char* help, double v) {
    out.Family(name, "gauge", help);
    out.Sample(name, {}, v);
  };
  const auto counter = [&](const char* name, const char* help, double v) {
    out.Family(name, "counter", help);
    out.Sample(name, {}, v);
  };
  gauge("cascade_running_sequences", "Sequences holding KV blocks (decoding or in a step).",
        sched.n_running + sched.n_in_flight_seqs);
  gauge("cascade_waiting_sequences", "Sequences queued for admission.", sched.n_waiting);
  gauge("cascade_kv_blocks_total", "KV cache blocks per stage.", sched.n_total_blocks);
  gauge("cascade_kv_blocks_used", "KV cache blocks held by sequences.", sched.n_total_blocks - sched.n_free_blocks);
  gauge("cascade_kv_usage_ratio", "Used over total KV cache blocks.",
        sched.n_total_blocks > 0 ? 1.0 - static_cast<double>(sched.n_free_blocks) / sched.n_total_blocks : 0.0);
  counter("cascade_preemptions_total", "Sequences evicted and recomputed.", static_cast<double>(sched.n_preemptions));
  counter("cascade_steps_total", "Forward steps sent to the workers.", static_cast<double>(engine.steps));
  counter("cascade_prompt_tokens_total", "Prompt tokens of finished requests.",
          static_cast<double>(engine.prompt_tokens));
  counter("cascade_generation_tokens_total", "Tokens generated by finished requests.",
          static_cast<double>(engine.generation_tokens));

  counter("cascade_prefix_cache_query_tokens_total", "Tokens looked up in the prefix cache at admissions.",
          static_cast<double>(sched.prefix_query_tokens));
  counter("cascade_prefix_cache_hit_tokens_total", "Of those, tokens served from cached KV blocks.",
          static_cast<double>(sched.prefix_hit_tokens));
  gauge("cascade_prefix_cache_hit_rate", "Hit over looked-up tokens since start (0 before any lookup).",
        sched.prefix_query_tokens > 0 ? static_cast<double>(sched.prefix_hit_tokens) / sched.prefix_query_tokens : 0.0);
  gauge("cascade_kv_blocks_cached", "KV blocks registered as reusable prefixes (held or cached-free).",
        sched.n_cached_blocks);

  const v1::SpeculativeStats& spec = engine.speculative;
  counter("cascade_spec_verify_steps_total", "Verify steps that carried drafts.", static_cast<double>(spec.steps()));
  counter("cascade_spec_draft_tokens_total", "Drafted tokens proposed.", static_cast<double>(spec.drafted_tokens()));
  counter("cascade_spec_accepted_tokens_total", "Drafted tokens accepted.",
          static_cast<double>(spec.accepted_tokens()));
  gauge("cascade_spec_acceptance_rate", "Accepted over drafted tokens, finished requests.", spec.acceptance_rate());
  gauge("cascade_spec_mean_accepted_length", "Tokens emitted per verify step (accepted drafts + 1).",
        spec.mean_accepted_length());

  gauge("cascade_cluster_ready", "1 while every worker serves, else 0.", cluster.ready() ? 1 : 0);
  out.Family("cascade_workers", "gauge", "Workers by state.");
  std::map<std::string, int> by_state;
  for (const v1::StageStatus& s : cluster.stages()) ++by_state[s.state()];
  for (const auto& [state, n] : by_state) out.Sample("cascade_workers", {{"state", state}}, n);
  return out.text();
}

}  // namespace cascade::coordinator
