// The cluster's own certificate authority: the coordinator creates one per cluster (or
// loads it from `security.cluster_dir`), issues itself a certificate, and signs a
// certificate for each worker that joins with the cluster's join token. Every cluster
// certificate is an EC P-256 leaf with both serverAuth and clientAuth, because the
// coordinator and the workers each serve gRPC and call each other (mutual TLS).
//
// Roles are names, not hosts: the coordinator's certificate carries the DNS name
// kCoordinatorName and workers' carry kWorkerName, and channels verify the peer's role by
// dialing with that name as the TLS target (grpc_tls.h). The common name says who
// exactly ("coordinator", "worker@NODE") and is what handlers authorize on.
//
// Thread-safety: a ClusterCa is an immutable value (PEM text); its methods are const and
// thread-safe. Free functions are thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::security {

inline constexpr std::string_view kCoordinatorName = "coordinator.cascade";
inline constexpr std::string_view kWorkerName = "worker.cascade";
inline constexpr std::string_view kCoordinatorCommonName = "coordinator";
inline constexpr std::string_view kWorkerCommonNamePrefix = "worker@";  // + node name.

struct KeyAndCert {
  std::string key_pem;   // PKCS#8 private key.
  std::string cert_pem;  // X.509 certificate.
};

struct KeyAndCsr {
  std::string key_pem;  // PKCS#8 private key; never leaves the process that made it.
  std::string csr_pem;  // PKCS#10 request, signed with that key.
};

class ClusterCa {
 public:
  // A new CA: a fresh EC P-256 key and a self-signed certificate (CA:TRUE, keyCertSign),
  // common name "Cascade cluster CA <name>", valid for `days` days from one hour ago.
  // InvalidArgument when the common name would pass 64 bytes (`name` over 45) or `days` is
  // outside 1..36500.
  static absl::StatusOr<ClusterCa> Create(std::string_view name, int days = 3650);
  // A CA loaded from its certificate and key. InvalidArgument when either does not parse,
  // the certificate is not a CA, or the key is not the certificate's. The PEM is stored
  // re-encoded (OpenSSL's canonical text), so a loaded CA's text equals a created one's.
  static absl::StatusOr<ClusterCa> FromPem(std::string_view cert_pem, std::string_view key_pem);

  const std::string& cert_pem() const { return cert_pem_; }
  const std::string& key_pem() const { return key_pem_; }

  // A certificate for the holder of `csr_pem`'s key. The request's signature is checked
  // (InvalidArgument when it is malformed, does not verify, or its key is not EC P-256);
  // its subject and extensions are ignored: the certificate gets `common_name` and
  // `dns_names` (subjectAltName) from the caller, a random 128-bit serial, CA:FALSE,
  // digitalSignature, serverAuth+clientAuth, and `days` days of validity from one hour
  // ago. PEM. InvalidArgument also when `common_name` is empty or over 64 bytes, a DNS
  // name is empty or holds anything but letters, digits, '-', '_', '.' (and a leading
  // "*."), or `days` is outside 1..36500.
  absl::StatusOr<std::string> Sign(std::string_view csr_pem, std::string_view common_name,
                                   const std::vector<std::string>& dns_names, int days = 3650) const;
  // A fresh key and a certificate for it (the coordinator's own), as Sign.
  absl::StatusOr<KeyAndCert> Issue(std::string_view common_name, const std::vector<std::string>& dns_names,
                                   int days = 3650) const;

 private:
  ClusterCa(std::string cert_pem, std::string key_pem) : cert_pem_(std::move(cert_pem)), key_pem_(std::move(key_pem)) {}
  std::string cert_pem_;
  std::string key_pem_;
};

// A fresh EC P-256 key and a certificate request for it (subject CN = common_name),
// signed with ECDSA-SHA256. InvalidArgument when `common_name` is empty or over 64 bytes.
absl::StatusOr<KeyAndCsr> MakeKeyAndCsr(std::string_view common_name);

// 32 random bytes from the OS's CSPRNG, as 64 lowercase hex characters.
absl::StatusOr<std::string> RandomToken();

// Constant-time equality (no early exit on the first differing byte); false when the
// sizes differ.
bool TokensEqual(std::string_view a, std::string_view b);

// The coordinator's cluster secrets in a directory: `ca.pem` (the CA bundle workers
// need; mode 0644), `ca.key` and `join.token` (mode 0600; the directory, created with its
// parents when missing, 0700). Loaded when all three exist, created (with
// ClusterCa::Create under a random name and RandomToken; each file written to a temporary
// file and renamed) when none does; otherwise, or when the mode of `ca.key` or
// `join.token` grants its group or others anything, or `join.token` is empty,
// FailedPrecondition naming the file and what to do. A `ca.pem`/`ca.key` pair that
// FromPem refuses is its InvalidArgument, prefixed with the paths. The key and token are
// never logged.
struct ClusterSecrets {
  ClusterCa ca;
  std::string join_token;
};
absl::StatusOr<ClusterSecrets> OpenClusterDir(const std::string& dir);

// Reads a whole small file (a token, a PEM; at most 1 MiB, else InvalidArgument):
// NotFound / PermissionDenied naming the path. Trailing whitespace (a newline) is dropped.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace cascade::security
