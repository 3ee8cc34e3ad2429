#include "coordinator/front/inference_service.h"

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/front/request_validation.h"
#include "core/kv_cache_dtype.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "proto/grpc_status.h"
#include "text/chat_template.h"

namespace cascade::coordinator {

InferenceService::InferenceService(Replicas* replicas, const text::Tokenizer* tokenizer,
                                   const model::ModelConfig& config, const InferenceServiceOptions& options)
    : replicas_(replicas),
      tokenizer_(tokenizer),
      config_(config),
      options_(options),
      max_context_(options.max_context) {}

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(const v1::Prompt& prompt, bool add_special) const {
  return TokenizePrompt(prompt, *tokenizer_, config_.n_vocab, add_special);
}

absl::StatusOr<ServingRequest> InferenceService::Prepare(const v1::GenerateRequest& req) const {
  return ValidateGenerateRequest(req, *tokenizer_, config_.n_vocab, max_context_.load());
}

InferenceCall::InferenceCall(std::shared_ptr<RequestChannel> channel, Replicas* replicas, ServingMetrics* metrics,
                             std::string api, std::atomic<int>* live)
    : channel_(std::move(channel)), replicas_(replicas), metrics_(metrics), api_(std::move(api)), live_(live) {
  ++*live_;
}

InferenceCall::~InferenceCall() {
  if (!ended_) Cancel("the caller went away");
  if (metrics_ != nullptr) metrics_->CountRequest(api_, RequestOutcomeOf(status_, finish_));
  --*live_;
}

bool InferenceCall::Read(absl::Duration timeout, std::vector<v1::GenerateResponse>* out) {
  if (ended_) return true;
  std::deque<v1::GenerateResponse> batch;
  bool done;
  {
    // Until the serving loop pushed output or ended the request (releasing mu re-evaluates the
    // condition), at most `timeout`.
    absl::MutexLock lock(&channel_->mu);
    const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(channel_->mu) {
      return !channel_->out.empty() || channel_->done;
    };
    channel_->mu.AwaitWithTimeout(absl::Condition(&ready), timeout);
    batch.swap(channel_->out);
    done = channel_->done;
    if (done) status_ = channel_->status;
  }
  for (auto& m : batch) {
    if (m.finish() != v1::FINISH_REASON_UNSPECIFIED) finish_ = m.finish();
    out->push_back(std::move(m));
  }
  ended_ = done;
  return done;
}

void InferenceCall::Cancel(std::string_view why) {
  if (ended_) return;
  channel_->cancelled = true;
  replicas_->Wake();
  ended_ = true;
  status_ = absl::CancelledError(std::string(why));
}

absl::StatusOr<std::unique_ptr<InferenceCall>> InferenceService::Begin(std::string_view api,
                                                                       const v1::GenerateRequest& req) {
  absl::StatusOr<ServingRequest> prepared =
      draining_.load() ? absl::UnavailableError(
                             "the server is shutting down: it finishes the requests it has and "
                             "takes no new ones (retry on another replica)")
                       : Prepare(req);
  if (!prepared.ok()) {
    if (metrics_ != nullptr) metrics_->CountRequest(api, RequestOutcomeOf(prepared.status(), {}));
    return prepared.status();
  }
  return std::make_unique<InferenceCall>(replicas_->Submit(std::move(*prepared)), replicas_, metrics_, std::string(api),
                                         &live_);
}

absl::Status InferenceService::Execute(std::string_view api, const v1::GenerateRequest& req,
                                       const std::function<bool(const v1::GenerateResponse&)>& on_message,
                                       const std::function<bool()>& cancelled) {
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<InferenceCall> call, Begin(api, req));
  std::vector<v1::GenerateResponse> batch;
  while (true) {
    batch.clear();
    const bool done = call->Read(absl::Milliseconds(100), &batch);
    for (const auto& m : batch) {
      if (!on_message(m)) {
        call->Cancel("the client went away");
        return call->status();
      }
    }
    if (done) return call->status();
    if (cancelled()) {
      call->Cancel("the request was cancelled or its deadline passed");
      return call->status();
    }
  }
}

grpc::Status InferenceService::Authorize(const grpc::ServerContext* ctx) const {
  if (keys_ == nullptr || !keys_->enabled()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  const std::string_view value =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return ToGrpc(keys_->Check(value));
}

grpc::Status InferenceService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (grpc::Status st = Authorize(ctx); !st.ok()) return st;
  return ToGrpc(Execute(
      "grpc", *req, [&](const v1::GenerateResponse& m) { return writer->Write(m); },
      [ctx] { return ctx->IsCancelled(); }));
}

grpc::Status InferenceService::Complete(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                        v1::CompleteResponse* resp) {
  if (grpc::Status st = Authorize(ctx); !st.ok()) return st;
  if (auto ids = PromptIds(req->prompt(), true); ids.ok()) resp->mutable_prompt_ids()->Add(ids->begin(), ids->end());
  absl::Status s = Execute(
      "grpc", *req,
      [&](const v1::GenerateResponse& m) {
        resp->mutable_token_ids()->Add(m.token_ids().begin(), m.token_ids().end());
        resp->mutable_text()->append(m.text());
        resp->mutable_reasoning()->append(m.reasoning());
        for (const auto& lp : m.logprobs()) *resp->add_logprobs() = lp;
        if (!m.finish_reason().empty()) resp->set_finish_reason(m.finish_reason());
        if (m.finish() != v1::FINISH_REASON_UNSPECIFIED) resp->set_finish(m.finish());
        if (m.has_usage()) *resp->mutable_usage() = m.usage();
        resp->set_request_id(m.request_id());
        return true;
      },
      [ctx] { return ctx->IsCancelled(); });
  return ToGrpc(s);
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                        v1::TokenizeResponse* resp) {
  if (grpc::Status st = Authorize(ctx); !st.ok()) return st;
  auto ids = PromptIds(req->prompt(), req->add_special());
  if (!ids.ok()) return ToGrpc(ids.status());
  for (int32_t id : *ids) {
    resp->add_ids(id);
    resp->add_pieces(std::string(tokenizer_->TokenText(id)));
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* ctx, const v1::ModelInfoRequest*,
                                            v1::ModelInfo* resp) {
  if (grpc::Status st = Authorize(ctx); !st.ok()) return st;
  resp->set_name(config_.name);
  resp->set_path(options_.model_path);
  resp->set_arch(config_.arch);
  resp->set_n_layers(config_.n_layers);
  resp->set_n_embd(config_.n_embd);
  resp->set_n_heads(config_.n_heads);
  resp->set_n_kv_heads(config_.n_kv_heads);
  resp->set_n_ff(config_.n_ff);
  resp->set_n_experts(config_.n_experts);
  resp->set_n_experts_used(config_.n_experts_used);
  resp->set_n_vocab(config_.n_vocab);
  resp->set_max_context(max_context_.load());
  resp->set_kv_policy(options_.kv_policy);
  resp->set_expert_comm(options_.expert_comm);
  resp->set_cpu_prefill_activations(options_.cpu_prefill_activations);
  if (auto kind = text::DetectChatTemplate(tokenizer_->chat_template()); kind.ok()) {
    resp->set_chat_template(std::string(text::ChatTemplateName(*kind)));
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetClusterStatus(grpc::ServerContext* ctx, const v1::ClusterStatusRequest*,
                                                v1::ClusterStatus* resp) {
  if (grpc::Status st = Authorize(ctx); !st.ok()) return st;
  replicas_->FillStatus(resp);
  const ServingStats st = replicas_->Stats();
  resp->set_kv_blocks_total(st.scheduler.n_total_blocks);
  resp->set_kv_blocks_free(st.scheduler.n_free_blocks);
  resp->set_kv_block_size(replicas_->workers(0).options().kv_block_size);
  resp->set_kv_cache_dtype(std::string(KvCacheDTypeName(replicas_->workers(0).options().kv_cache_dtype)));
  resp->set_running(st.scheduler.running());
  resp->set_waiting(st.scheduler.n_waiting);
  resp->set_max_batch_seen(st.scheduler.max_batch_seqs_seen);
  resp->set_steps(st.steps);
  resp->set_preemptions(st.scheduler.n_preemptions);
  resp->set_prefix_caching(st.prefix_caching);
  resp->set_prefix_query_tokens(st.scheduler.prefix_query_tokens);
  resp->set_prefix_hit_tokens(st.scheduler.prefix_hit_tokens);
  resp->set_kv_blocks_cached(st.scheduler.n_cached_blocks);
  resp->set_host_kv_blocks_total(st.scheduler.n_host_blocks);
  resp->set_host_kv_blocks_cached(st.scheduler.n_host_cached_blocks);
  resp->set_host_kv_offloaded_blocks(st.scheduler.host_offloaded_blocks);
  resp->set_host_kv_onloaded_blocks(st.scheduler.host_onloaded_blocks);
  resp->set_prefix_host_hit_tokens(st.scheduler.prefix_host_hit_tokens);
  resp->set_requests_finished(st.finished);
  resp->set_drafter(options_.drafter);
  *resp->mutable_speculative() = st.speculative;
  return grpc::Status::OK;
}

}  // namespace cascade::coordinator
