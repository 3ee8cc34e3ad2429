#include "client/client.h"

#include <cstdlib>

#include "grpcpp/create_channel.h"
#include "proto/grpc_status.h"

namespace cascade::client {

Client::Client(const ClientOptions& options)
    : options_(options),
      stub_(v1::Inference::NewStub(grpc::CreateChannel(options.address, grpc::InsecureChannelCredentials()))) {}

std::string ApiKeyFromEnv() {
  const char* key = std::getenv("CASCADE_API_KEY");
  return key == nullptr ? "" : key;
}

std::unique_ptr<grpc::ClientContext> Client::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + options_.timeout);
  if (!options_.api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.api_key);
  return ctx;
}

absl::Status Client::Generate(const v1::GenerateRequest& request,
                              const std::function<void(const v1::GenerateResponse&)>& on_chunk) {
  auto ctx = Context();
  auto reader = stub_->Generate(ctx.get(), request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    if (on_chunk) on_chunk(chunk);
  }
  return FromGrpc(reader->Finish());
}

absl::StatusOr<v1::CompleteResponse> Client::Complete(const v1::GenerateRequest& request) {
  auto ctx = Context();
  v1::CompleteResponse resp;
  if (grpc::Status s = stub_->Complete(ctx.get(), request, &resp); !s.ok()) return FromGrpc(s);
  return resp;
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request) {
  auto ctx = Context();
  v1::TokenizeResponse resp;
  if (grpc::Status s = stub_->Tokenize(ctx.get(), request, &resp); !s.ok()) return FromGrpc(s);
  return resp;
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo() {
  auto ctx = Context();
  v1::ModelInfo resp;
  if (grpc::Status s = stub_->GetModelInfo(ctx.get(), v1::ModelInfoRequest(), &resp); !s.ok()) return FromGrpc(s);
  return resp;
}

absl::StatusOr<v1::ClusterStatus> Client::GetClusterStatus() {
  auto ctx = Context();
  v1::ClusterStatus resp;
  if (grpc::Status s = stub_->GetClusterStatus(ctx.get(), v1::ClusterStatusRequest(), &resp); !s.ok())
    return FromGrpc(s);
  return resp;
}

}  // namespace cascade::client
