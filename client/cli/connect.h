// How the cluster commands (generate, chat, status, bench) reach a server: --server, the
// TLS CA bundle (--tls-ca, or CASCADE_TLS_CA) and the API key (CASCADE_API_KEY).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "core/args.h"

namespace cascade::cli {

// The --tls-ca option, for every command that talks to a server.
ArgOption TlsCaOption();

// A client of --server (required) with `timeout` per call, the CA bundle of --tls-ca (else
// CASCADE_TLS_CA; neither: plaintext) and the key in CASCADE_API_KEY. InvalidArgument
// without --server; the client library's errors for an unreadable bundle.
absl::StatusOr<client::Client> ConnectToServer(const Args& args, std::chrono::seconds timeout);

// `status` (a failed call's) with a hint when it may come from a TLS mismatch: UNAVAILABLE
// from a plaintext client suggests --tls-ca. Otherwise `status` unchanged.
absl::Status WithTlsHint(const Args& args, const absl::Status& status);

}  // namespace cascade::cli
