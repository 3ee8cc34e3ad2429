#include "client/client.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/grpc_status.h"

namespace cascade::client {
namespace {

// The channel's credentials: TLS verified against `tls_ca_file`, or insecure.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientOptions& options) {
  if (options.tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(options.tls_ca_file, std::ios::binary);
  std::ostringstream pem;
  if (in) pem << in.rdbuf();
  if (!in || in.bad()) {
    const int err = errno;
    const std::string why = StrCat("cannot read the TLS CA bundle '", options.tls_ca_file, "': ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(why) : absl::NotFoundError(why);
  }
  if (pem.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("the TLS CA bundle '", options.tls_ca_file, "' holds no PEM certificate"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<Client> Client::Create(const ClientOptions& options) {
  auto credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  return Client(options, grpc::CreateChannel(options.address, *credentials));
}

Client::Client(const ClientOptions& options, const std::shared_ptr<grpc::Channel>& channel)
    : options_(options), stub_(v1::Inference::NewStub(channel)) {}

std::string ApiKeyFromEnv() {
  const char* key = std::getenv("CASCADE_API_KEY");
  return key == nullptr ? "" : key;
}

std::string TlsCaFromEnv() {
  const char* ca = std::getenv("CASCADE_TLS_CA");
  return ca == nullptr ? "" : ca;
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
