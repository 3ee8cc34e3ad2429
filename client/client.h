// The C++ client of a Cascade cluster (inference.proto). Wraps the gRPC stub with
// deadlines and absl::Status results.
// Thread-safe: one Client may be used from many threads (gRPC stubs are).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.grpc.pb.h"

namespace cascade::client {

struct ClientOptions {
  std::string address;                        // host:port of the coordinator.
  std::chrono::milliseconds timeout{600000};  // Deadline of each call.
  std::string api_key;                        // Sent as `authorization: Bearer KEY` when set.
  // A PEM bundle of the CAs that may have issued the server's certificate: when set, the
  // channel is TLS and verifies the server (its certificate must name the host dialled;
  // an IP address needs an IP subjectAltName). Empty (the default): plaintext.
  std::string tls_ca_file;
};

// The API key in the environment (CASCADE_API_KEY), or "": the CLI's source of keys (a
// flag would show the key in `ps`).
std::string ApiKeyFromEnv();

// The CA bundle in the environment (CASCADE_TLS_CA), or "": the CLI's fallback for --tls-ca.
std::string TlsCaFromEnv();

class Client {
 public:
  // A client of `options.address`; no connection is made yet. NotFound / PermissionDenied
  // naming the file when `tls_ca_file` cannot be read, InvalidArgument when it holds no
  // PEM certificate.
  static absl::StatusOr<Client> Create(const ClientOptions& options);

  // Streams a generation: `on_chunk` gets every message, the last one with
  // finish_reason and usage. Returns the call's status (the server's error as is).
  absl::Status Generate(const v1::GenerateRequest& request,
                        const std::function<void(const v1::GenerateResponse&)>& on_chunk);
  absl::StatusOr<v1::CompleteResponse> Complete(const v1::GenerateRequest& request);
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request);
  absl::StatusOr<v1::ModelInfo> GetModelInfo();
  absl::StatusOr<v1::ClusterStatus> GetClusterStatus();

 private:
  Client(const ClientOptions& options, const std::shared_ptr<grpc::Channel>& channel);
  std::unique_ptr<grpc::ClientContext> Context() const;
  ClientOptions options_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

}  // namespace cascade::client
