#include "client/cli/connect.h"

#include "core/str_cat.h"

namespace cascade::cli {
namespace {

// --tls-ca, else CASCADE_TLS_CA, else "".
std::string TlsCa(const Args& args) { return args.GetOr("tls-ca", client::TlsCaFromEnv()); }

}  // namespace

ArgOption TlsCaOption() {
  return {"tls-ca", "FILE",
          "PEM bundle of the CA(s) to verify the server with: TLS (default: $CASCADE_TLS_CA; unset: plaintext)"};
}

absl::StatusOr<client::Client> ConnectToServer(const Args& args, std::chrono::seconds timeout) {
  auto server = args.Require("server");
  if (!server.ok()) return server.status();
  return client::Client::Create(
      {.address = *server, .timeout = timeout, .api_key = client::ApiKeyFromEnv(), .tls_ca_file = TlsCa(args)});
}

absl::Status WithTlsHint(const Args& args, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable || !TlsCa(args).empty()) return status;
  return absl::Status(status.code(), StrCat(status.message(), " (if the server serves TLS, pass --tls-ca FILE)"));
}

}  // namespace cascade::cli
