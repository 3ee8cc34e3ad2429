// gRPC's SSL credentials set up for the cluster's mutual TLS (grpc_tls.h).
#include "security/grpc_tls.h"

#include <vector>

#include "grpc/grpc_security_constants.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/auth_context.h"

namespace cascade::security {

std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials(const TlsIdentity* tls) {
  if (tls == nullptr) return grpc::InsecureServerCredentials();
  // Request a client certificate and verify it when sent; a caller without one still
  // completes the handshake and is refused by the handler (PeerCommonName is "").
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls->ca_pem;
  options.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::Channel> ClusterChannel(const std::string& address, const TlsIdentity* tls,
                                              std::string_view peer_role_name, grpc::ChannelArguments args) {
  if (tls == nullptr) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca_pem;
  options.pem_private_key = tls->key_pem;
  options.pem_cert_chain = tls->cert_pem;
  // The server's certificate must name the role (a DNS subjectAltName), whatever host we dial.
  args.SetSslTargetNameOverride(std::string(peer_role_name));
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
}

std::shared_ptr<grpc::Channel> ServerAuthChannel(const std::string& address, const std::string& ca_pem,
                                                 std::string_view peer_role_name) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem;
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(std::string(peer_role_name));
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
}

std::string PeerCommonName(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  const std::vector<grpc::string_ref> names = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (names.empty()) return "";
  return std::string(names.front().data(), names.front().size());
}

}  // namespace cascade::security
