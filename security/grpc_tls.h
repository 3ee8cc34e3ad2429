// gRPC credentials for the cluster's mutual TLS, and who a caller is.
//
// Servers (the coordinator's control plane, every worker) present their cluster
// certificate and *request* a client certificate, verified against the cluster CA when
// one is sent. They do not require it at the handshake so that a caller without one gets
// a clear UNAUTHENTICATED from the handler instead of a bare handshake failure; a
// certificate from another CA still fails the handshake. Handlers then authorize with
// PeerCommonName. (Checked with gRPC 1.51 in tests/security/grpc_tls_test.cc: a caller
// without a certificate completes the handshake and its PeerCommonName is "".)
//
// A failed handshake (a certificate of another CA, the wrong role, TLS against
// plaintext) reaches the caller as UNAVAILABLE, like an unreachable peer.
//
// Channels verify the server against the cluster CA *and its role*: they dial with the
// role's DNS name (kCoordinatorName or kWorkerName) as the TLS target name, so a worker's
// certificate cannot pose as the coordinator and the other way round.
//
// Plaintext (`security.insecure: true`) is a null TlsIdentity: insecure credentials, and
// PeerCommonName returns "" for everyone.
// Thread-safety: free functions, thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace cascade::security {

// One process's cluster identity: the CA bundle it trusts and its own certificate.
struct TlsIdentity {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

// Server credentials for a cluster listener: TLS with `tls` (request and verify a client
// certificate, not require it), or insecure when `tls` is null.
std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials(const TlsIdentity* tls);

// A channel to a cluster peer whose certificate must carry `peer_role_name` (kCoordinatorName
// or kWorkerName), presenting `tls`'s certificate; insecure when `tls` is null. `args` are
// extra channel arguments (message sizes).
std::shared_ptr<grpc::Channel> ClusterChannel(const std::string& address, const TlsIdentity* tls,
                                              std::string_view peer_role_name,
                                              grpc::ChannelArguments args = grpc::ChannelArguments());

// A channel that verifies the server against `ca_pem` and its role, presenting no
// certificate: how a worker calls Join before it has one.
std::shared_ptr<grpc::Channel> ServerAuthChannel(const std::string& address, const std::string& ca_pem,
                                                 std::string_view peer_role_name);

// The common name of the caller's verified certificate; "" when it sent none (or the
// server is insecure).
std::string PeerCommonName(const grpc::ServerContext& context);

}  // namespace cascade::security
