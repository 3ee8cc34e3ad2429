// TLS on the public API (`server.tls_cert_file`, `server.tls_key_file`;
// docs/ARCHITECTURE.md §8): the coordinator reads and checks the certificate and key once
// at start-up, then both public doors serve them, the gRPC listener (`server.listen`,
// through PublicServerCredentials) and the HTTP front (`server.http_listen`, whose
// httplib::SSLServer reads the same files). Server authentication only: no client
// certificate is requested; callers prove who they are with API keys. Without the keys
// both doors are plaintext.
//
// Clients must trust the certificate's issuer and dial a name the certificate carries
// (an IP address dialled needs an IP subjectAltName).
//
// Thread-safety: free functions, stateless and thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/config.h"
#include "grpcpp/security/server_credentials.h"

namespace cascade::coordinator {

// The public API's certificate chain and private key, as read from their files (PEM).
struct PublicTlsPem {
  std::string cert_chain_pem;
  std::string key_pem;
};

// Reads `cert_file` (one or more PEM certificates, the server's first) and `key_file` (an
// unencrypted PEM private key) and checks that the key is the first certificate's.
// Errors name the config key and the file: NotFound or PermissionDenied when a file cannot
// be read; InvalidArgument when it holds no PEM certificate / key (an encrypted key
// included) or the key is not the certificate's.
absl::StatusOr<PublicTlsPem> LoadPublicTls(const std::string& cert_file, const std::string& key_file);

// The credentials of the public gRPC listener: TLS with `server`'s certificate and key
// (checked by LoadPublicTls, whose errors it returns), or insecure when they are unset.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> PublicServerCredentials(const ServerSection& server);

}  // namespace cascade::coordinator
