#include "coordinator/front/public_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace cascade::coordinator {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// The whole file at `path`, or NotFound / PermissionDenied / Unavailable naming `key` and it.
absl::StatusOr<std::string> ReadPem(const std::string& path, std::string_view key) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string why = StrCat(key, ": cannot read '", path, "': ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(why);
    if (err == EACCES) return absl::PermissionDeniedError(why);
    return absl::UnavailableError(why);
  }
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return absl::UnavailableError(StrCat(key, ": cannot read '", path, "': ", std::strerror(err)));
  return text;
}

// OpenSSL's reason for the last failure ("" when none), and the error queue cleared.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  std::string reason;
  if (e != 0) {
    const char* r = ERR_reason_error_string(e);
    if (r != nullptr) reason = StrCat(" (", r, ")");
  }
  ERR_clear_error();
  return reason;
}

// A password callback that refuses: an encrypted key fails instead of prompting on a tty.
int NoPassword(char*, int, int, void*) { return -1; }

}  // namespace

absl::StatusOr<PublicTlsPem> LoadPublicTls(const std::string& cert_file, const std::string& key_file) {
  PublicTlsPem out;
  CASCADE_ASSIGN_OR_RETURN(out.cert_chain_pem, ReadPem(cert_file, "server.tls_cert_file"));
  CASCADE_ASSIGN_OR_RETURN(out.key_pem, ReadPem(key_file, "server.tls_key_file"));
  ERR_clear_error();
  BioPtr cert_bio(BIO_new_mem_buf(out.cert_chain_pem.data(), static_cast<int>(out.cert_chain_pem.size())));
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassword, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("server.tls_cert_file: '", cert_file, "' holds no PEM certificate", OpenSslReason()));
  }
  // The rest of the chain (intermediates) must parse too: gRPC and httplib send it as is.
  for (int i = 2;; ++i) {
    X509Ptr more(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassword, nullptr));
    if (more != nullptr) continue;
    const unsigned long e = ERR_peek_last_error();
    if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) break;  // The end.
    return absl::InvalidArgumentError(
        StrCat("server.tls_cert_file: '", cert_file, "': certificate ", i, " does not parse", OpenSslReason()));
  }
  ERR_clear_error();
  BioPtr key_bio(BIO_new_mem_buf(out.key_pem.data(), static_cast<int>(out.key_pem.size())));
  PkeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
  if (key == nullptr) {  // OpenSSL's reason ("unsupported") would only mislead here.
    ERR_clear_error();
    return absl::InvalidArgumentError(
        StrCat("server.tls_key_file: '", key_file, "' holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(StrCat("server.tls_key_file: '", key_file,
                                             "' is not the private key of the certificate in server.tls_cert_file '",
                                             cert_file, "'"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    CASCADE_LOG(Warning) << "server.tls_cert_file: the certificate in '" << cert_file
                         << "' has expired: clients will refuse it";
  }
  return out;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> PublicServerCredentials(const ServerSection& server) {
  if (server.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  CASCADE_ASSIGN_OR_RETURN(PublicTlsPem pem, LoadPublicTls(server.tls_cert_file, server.tls_key_file));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({std::move(pem.key_pem), std::move(pem.cert_chain_pem)});
  return grpc::SslServerCredentials(options);
}

}  // namespace cascade::coordinator
