// The public API (inference.proto `Inference`). Each handler validates, looks up,
// delegates to the Engine and converts: requests are checked field by field
// (INVALID_ARGUMENT naming the field), tokenized here, and streamed from the request's
// channel; a client that goes away or a passed deadline cancels the request, which frees
// its KV blocks at once.
// Thread-safe.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "coordinator/cluster.h"
#include "coordinator/engine.h"
#include "model/format/model_config.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

struct InferenceServiceOptions {
  std::string model_path;
  int64_t max_context = 0;  // Positions per sequence the cluster serves.
  std::string drafter;      // DraftKindName of the configured drafter ("" for none).
};

class InferenceService final : public v1::Inference::Service {
 public:
  InferenceService(Engine* engine, Cluster* cluster, const text::Tokenizer* tokenizer, const model::ModelConfig& config,
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

  // Validation and tokenization of a request (public for tests).
  absl::StatusOr<EngineRequest> Prepare(const v1::GenerateRequest& req) const;
  absl::StatusOr<std::vector<int32_t>> PromptIds(const v1::Prompt& prompt, bool add_special) const;

 private:
  // Runs a request, calling `on_message` for each output message; the final status.
  grpc::Status Run(grpc::ServerContext* ctx, const v1::GenerateRequest& req,
                   const std::function<bool(const v1::GenerateResponse&)>& on_message);

  Engine* engine_;
  Cluster* cluster_;
  const text::Tokenizer* tokenizer_;
  model::ModelConfig config_;
  InferenceServiceOptions options_;
  std::atomic<int64_t> max_context_;  // options_.max_context until SetMaxContext.
};

}  // namespace cascade::coordinator
