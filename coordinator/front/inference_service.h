// The public API (inference.proto `Inference`). Each handler validates, looks up,
// delegates to the ServingLoop and converts: requests are checked field by field
// (INVALID_ARGUMENT naming the field), tokenized here, and streamed from the request's
// channel; a client that goes away or a passed deadline cancels the request, which frees
// its KV blocks at once.
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/front/api_keys.h"
#include "coordinator/serving/replicas.h"
#include "coordinator/serving/serving_loop.h"
#include "model/format/model_config.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

struct InferenceServiceOptions {
  std::string model_path;
  int64_t max_context = 0;         // Positions per sequence the cluster serves.
  std::string drafter;             // DraftKindName of the configured drafter ("" for none).
  std::string kv_policy = "full";  // scheduler.kv_policy as served (KvPolicyDescription).
  std::string expert_comm;         // parallel.expert_comm as served (ExpertCommDescription).
  // scheduler.cpu_prefill_activations as served (CpuPrefillActivationsDescription).
  std::string cpu_prefill_activations = "f32";
};

// A request in flight, read by one front-end thread. Destroying it before the request
// ended cancels the request; either way the outcome is counted then.
class InferenceCall {
 public:
  // `live` counts the calls not yet destroyed (InferenceService::live_calls).
  InferenceCall(std::shared_ptr<RequestChannel> channel, Replicas* replicas, ServingMetrics* metrics, std::string api,
                std::atomic<int>* live);
  ~InferenceCall();
  InferenceCall(const InferenceCall&) = delete;
  InferenceCall& operator=(const InferenceCall&) = delete;

  // Waits up to `timeout` for output and appends it to `out`. True once the request has
  // ended (everything read; `status()` is final).
  bool Read(absl::Duration timeout, std::vector<v1::GenerateResponse>* out);
  // Ends the request (its KV blocks are freed at once) with CANCELLED and `why`.
  void Cancel(std::string_view why);
  bool ended() const { return ended_; }
  const absl::Status& status() const { return status_; }

 private:
  std::shared_ptr<RequestChannel> channel_;
  Replicas* replicas_;
  ServingMetrics* metrics_;
  std::string api_;
  std::atomic<int>* live_;
  bool ended_ = false;
  absl::Status status_;
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
};

class InferenceService final : public v1::Inference::Service {
 public:
  InferenceService(Replicas* replicas, const text::Tokenizer* tokenizer, const model::ModelConfig& config,
                   const InferenceServiceOptions& options);

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Complete(grpc::ServerContext* ctx, const v1::GenerateRequest* req, v1::CompleteResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req, v1::TokenizeResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::ModelInfoRequest* req, v1::ModelInfo* resp) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* ctx, const v1::ClusterStatusRequest* req,
                                v1::ClusterStatus* resp) override;

  // The context once the KV pool is sized (at bring-up, before serving starts).
  void SetMaxContext(int64_t max_context) { max_context_.store(max_context); }
  int64_t max_context() const { return max_context_.load(); }

  // Runs a request for any front end (gRPC here, HTTP in http_front): `on_message` gets
  // each output message and returns false when the client went away; `cancelled` is asked
  // at least every 100 ms while no output comes. Either cancels the request (its KV blocks
  // are freed at once). The final status; the outcome is counted under `api`.
  absl::Status Execute(std::string_view api, const v1::GenerateRequest& req,
                       const std::function<bool(const v1::GenerateResponse&)>& on_message,
                       const std::function<bool()>& cancelled);
  // Validates and submits a request for any front end; its outcome is counted under `api`.
  absl::StatusOr<std::unique_ptr<InferenceCall>> Begin(std::string_view api, const v1::GenerateRequest& req);
  // Graceful shutdown: from now on `Begin` refuses new requests with UNAVAILABLE, while
  // the calls already begun run to their end.
  void Drain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Requests begun and not yet over (on any front).
  int live_calls() const { return live_.load(); }
  // The API keys every RPC wants (nullptr or empty: open). REQUIRES: before serving.
  void SetApiKeys(const ApiKeys* keys) { keys_ = keys; }
  // Where request outcomes are counted (nullptr: nowhere). REQUIRES: before serving.
  void SetMetrics(ServingMetrics* metrics) { metrics_ = metrics; }

  // Validation and tokenization of a request (public for tests): `ValidateGenerateRequest`
  // and `TokenizePrompt` (coordinator/front/request_validation.h) with this model's vocabulary
  // size and the current context.
  absl::StatusOr<ServingRequest> Prepare(const v1::GenerateRequest& req) const;
  absl::StatusOr<std::vector<int32_t>> PromptIds(const v1::Prompt& prompt, bool add_special) const;

 private:
  // UNAUTHENTICATED unless the call's `authorization` metadata carries a configured key.
  grpc::Status Authorize(const grpc::ServerContext* ctx) const;

  Replicas* replicas_;
  const text::Tokenizer* tokenizer_;
  model::ModelConfig config_;
  InferenceServiceOptions options_;
  std::atomic<int64_t> max_context_;  // options_.max_context until SetMaxContext.
  ServingMetrics* metrics_ = nullptr;
  const ApiKeys* keys_ = nullptr;
  std::atomic<bool> draining_{false};
  std::atomic<int> live_{0};
};

}  // namespace cascade::coordinator
