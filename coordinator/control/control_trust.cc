#include "coordinator/control/control_trust.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

namespace {

// A fresh 0700 directory under $TMPDIR (or /tmp) for this run's secrets.
absl::StatusOr<std::string> MakePrivateDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/cascade-cluster-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(StrCat("cannot create a directory for the cluster's CA (", pattern,
                                      "): ", std::strerror(errno), "; set security.cluster_dir"));
  }
  return pattern;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlTrust>> ControlTrust::Create(const ClusterConfig& config) {
  std::unique_ptr<ControlTrust> trust(new ControlTrust());
  const ServerSection& server = config.server;
  if (config.security.insecure) {
    if (!IsLoopbackHost(server.cluster_host)) {
      CASCADE_LOG(Warning) << "security.insecure: the control plane on " << server.cluster_listen
                           << " is plaintext and checks no one: whoever reaches it can join the cluster, take a "
                              "restarting worker's place and overwrite the data plane's rendezvous keys";
    }
    trust->worker_args_ = {"--insecure"};
    return trust;
  }
  std::string dir = config.security.cluster_dir;
  if (dir.empty()) {
    CASCADE_ASSIGN_OR_RETURN(dir, MakePrivateDir());
    trust->temporary_dir_ = dir;
  }
  auto secrets = security::OpenClusterDir(dir);
  if (!secrets.ok()) return Annotate(secrets.status(), "security.cluster_dir");
  auto own = secrets->ca.Issue(security::kCoordinatorCommonName, {std::string(security::kCoordinatorName)});
  if (!own.ok()) return Annotate(own.status(), "the coordinator's certificate");
  trust->identity_ = std::make_shared<security::TlsIdentity>(
      security::TlsIdentity{secrets->ca.cert_pem(), std::move(own->cert_pem), std::move(own->key_pem)});
  trust->ca_.emplace(std::move(secrets->ca));
  trust->join_token_ = std::move(secrets->join_token);
  trust->worker_args_ = {"--ca", (std::filesystem::path(dir) / "ca.pem").string()};
  trust->worker_env_ = {StrCat(kJoinTokenEnv, "=", trust->join_token_)};
  CASCADE_LOG(Info) << "control plane: mutual TLS with the cluster CA in " << dir
                    << (trust->temporary_dir_.empty() ? "" : " (made for this run)");
  return trust;
}

ControlTrust::~ControlTrust() {
  if (temporary_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(temporary_dir_, ec);
}

}  // namespace cascade::coordinator
