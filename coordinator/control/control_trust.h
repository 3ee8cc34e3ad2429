// The trust the coordinator runs its control plane with, made from `security:` and
// `server.cluster_listen` at start-up: the cluster CA and join token (from
// security.cluster_dir, or a private directory for this run), the coordinator's own
// certificate, and what the workers it launches are given to join (the CA bundle's path
// as an argument, the token in their environment, never on a command line). With
// security.insecure: none of it, and a warning when the control plane is off loopback.
// Thread-safety: built once by main, read-only afterwards.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/config.h"
#include "security/cluster_ca.h"
#include "security/grpc_tls.h"

namespace cascade::coordinator {

// The environment variable a launched worker reads its join token from.
inline constexpr char kJoinTokenEnv[] = "CASCADE_JOIN_TOKEN";

class ControlTrust {
 public:
  static absl::StatusOr<std::unique_ptr<ControlTrust>> Create(const ClusterConfig& config);
  ~ControlTrust();  // Removes a directory made for this run.
  ControlTrust(const ControlTrust&) = delete;
  ControlTrust& operator=(const ControlTrust&) = delete;

  bool insecure() const { return !ca_.has_value(); }
  const security::ClusterCa* ca() const { return ca_ ? &*ca_ : nullptr; }
  const std::string& join_token() const { return join_token_; }
  // The coordinator's certificate (server and client); null when insecure.
  std::shared_ptr<const security::TlsIdentity> identity() const { return identity_; }
  // What every launched worker gets: `--ca DIR/ca.pem` (or `--insecure`), and its token as
  // kJoinTokenEnv.
  const std::vector<std::string>& worker_args() const { return worker_args_; }
  const std::vector<std::string>& worker_env() const { return worker_env_; }

 private:
  ControlTrust() = default;
  std::optional<security::ClusterCa> ca_;
  std::string join_token_;
  std::shared_ptr<const security::TlsIdentity> identity_;
  std::string temporary_dir_;  // Removed by the destructor when set.
  std::vector<std::string> worker_args_;
  std::vector<std::string> worker_env_;
};

}  // namespace cascade::coordinator
