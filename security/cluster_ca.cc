// The cluster CA with OpenSSL 3: EC P-256 keys, X.509 v3 certificates signed with
// ECDSA-SHA256, PKCS#10 requests, and the secrets directory. Every OpenSSL object is owned
// by a unique_ptr with its free function; every failure becomes an absl::Status carrying
// what was being done and OpenSSL's error queue.
#include "security/cluster_ca.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::security {
namespace {

template <auto kFree>
struct Free {
  template <typename T>
  void operator()(T* p) const {
    kFree(p);
  }
};
using BioPtr = std::unique_ptr<BIO, Free<BIO_free_all>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Free<X509_free>>;
using ReqPtr = std::unique_ptr<X509_REQ, Free<X509_REQ_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Free<X509_EXTENSION_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Free<BN_free>>;
using Asn1IntPtr = std::unique_ptr<ASN1_INTEGER, Free<ASN1_INTEGER_free>>;
using GeneralNamePtr = std::unique_ptr<GENERAL_NAME, Free<GENERAL_NAME_free>>;
using Ia5Ptr = std::unique_ptr<ASN1_IA5STRING, Free<ASN1_IA5STRING_free>>;
struct FreeGeneralNames {
  void operator()(GENERAL_NAMES* p) const { sk_GENERAL_NAME_pop_free(p, GENERAL_NAME_free); }
};
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, FreeGeneralNames>;

// RFC 5280's upper bound on a common name (ub-common-name).
constexpr size_t kMaxCommonNameBytes = 64;
// Longest validity accepted, in days (100 years).
constexpr int kMaxDays = 36500;
// Largest file ReadSecretFile reads.
constexpr off_t kMaxSecretFileBytes = 1 << 20;

// `code` with "`what`: " and OpenSSL's queued errors (which it clears).
absl::Status OpenSslError(absl::StatusCode code, std::string_view what) {
  std::string detail;
  while (unsigned long err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    StrAppend(&detail, detail.empty() ? "" : "; ", buf);
  }
  if (detail.empty()) detail = "no OpenSSL error reported";
  return absl::Status(code, StrCat(what, ": ", detail));
}
absl::Status InternalError(std::string_view what) { return OpenSslError(absl::StatusCode::kInternal, what); }

absl::StatusOr<BioPtr> ReadBio(std::string_view bytes, std::string_view what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(StrCat(what, ": too large (", bytes.size(), " bytes)"));
  }
  BioPtr bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
  if (!bio) return InternalError(StrCat(what, ": BIO_new_mem_buf"));
  return bio;
}

// The PEM text written by `write` into a memory BIO.
template <typename Write>
absl::StatusOr<std::string> ToPem(Write write, std::string_view what) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio) return InternalError(StrCat(what, ": BIO_new"));
  if (write(bio.get()) != 1) return InternalError(what);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  if (n <= 0 || data == nullptr) return InternalError(StrCat(what, ": empty output"));
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::string> KeyToPem(EVP_PKEY* key) {
  // PEM_write_bio_PrivateKey writes PKCS#8 ("BEGIN PRIVATE KEY"), unencrypted.
  return ToPem([key](BIO* b) { return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); },
               "writing the private key");
}
absl::StatusOr<std::string> CertToPem(X509* cert) {
  return ToPem([cert](BIO* b) { return PEM_write_bio_X509(b, cert); }, "writing the certificate");
}

// A passphrase callback that refuses: an encrypted key fails to parse instead of
// prompting on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<X509Ptr> ParseCert(std::string_view pem) {
  CASCADE_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, "reading the certificate"));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!cert) return OpenSslError(absl::StatusCode::kInvalidArgument, "parsing the certificate PEM");
  return cert;
}
absl::StatusOr<PkeyPtr> ParseKey(std::string_view pem) {
  CASCADE_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, "reading the private key"));
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) return OpenSslError(absl::StatusCode::kInvalidArgument, "parsing the private key PEM");
  return key;
}
absl::StatusOr<ReqPtr> ParseCsr(std::string_view pem) {
  CASCADE_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, "reading the certificate request"));
  ReqPtr req(PEM_read_bio_X509_REQ(bio.get(), nullptr, NoPassphrase, nullptr));
  if (!req) return OpenSslError(absl::StatusCode::kInvalidArgument, "parsing the certificate request PEM");
  return req;
}

absl::StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return InternalError("generating an EC P-256 key");
  return key;
}

// InvalidArgument unless `key` is an EC key on P-256.
absl::Status CheckP256(const EVP_PKEY* key, std::string_view what) {
  char group[64] = {};
  size_t group_len = 0;
  if (EVP_PKEY_is_a(key, "EC") != 1 || EVP_PKEY_get_group_name(key, group, sizeof(group), &group_len) != 1 ||
      std::string_view(group, group_len) != "prime256v1") {
    ERR_clear_error();
    return absl::InvalidArgumentError(StrCat(what, ": the key is not an EC P-256 key (", EVP_PKEY_get0_type_name(key),
                                             group_len > 0 ? StrCat(" ", std::string_view(group, group_len)) : "",
                                             ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckCommonName(std::string_view common_name) {
  if (common_name.empty() || common_name.size() > kMaxCommonNameBytes) {
    return absl::InvalidArgumentError(
        StrCat("common name \"", common_name, "\": must be 1 to ", kMaxCommonNameBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckDays(int days) {
  if (days < 1 || days > kMaxDays) {
    return absl::InvalidArgumentError(StrCat("validity of ", days, " days: must be 1 to ", kMaxDays));
  }
  return absl::OkStatus();
}

// A DNS name of letters, digits, '-', '_', '.' and a leading "*." at most: nothing that
// could read as another kind of name.
absl::Status CheckDnsName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 253;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || (c == '*' && i == 0 && name.size() > 1 && name[1] == '.');
  }
  if (!ok) return absl::InvalidArgumentError(StrCat("DNS name \"", name, "\": not a valid host name"));
  return absl::OkStatus();
}

// A name with one CN entry.
absl::Status SetCommonName(X509_NAME* name, std::string_view common_name) {
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.data()),
                                 static_cast<int>(common_name.size()), -1, 0) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, StrCat("setting the common name \"", common_name, "\""));
  }
  return absl::OkStatus();
}

// A random positive 128-bit serial number.
absl::Status SetRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return InternalError("drawing a random serial number");
  // A nonzero leading byte: never zero and always 16 bytes (RFC 5280: positive, at most
  // 20 octets).
  bytes[0] |= 0x01;
  BnPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn) return InternalError("BN_bin2bn for the serial number");
  Asn1IntPtr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!serial || X509_set_serialNumber(cert, serial.get()) != 1) return InternalError("setting the serial number");
  return absl::OkStatus();
}

// Version 3, a random serial, and validity [now - 1 h, now - 1 h + days].
absl::Status SetVersionSerialValidity(X509* cert, int days) {
  if (X509_set_version(cert, X509_VERSION_3) != 1) return InternalError("setting the certificate version");
  CASCADE_RETURN_IF_ERROR(SetRandomSerial(cert));
  if (X509_gmtime_adj(X509_getm_notBefore(cert), -3600) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert), days, -3600, nullptr) == nullptr) {
    return InternalError("setting the validity period");
  }
  return absl::OkStatus();
}

// Adds the extension `nid` = `value` (OpenSSL's config syntax) to `cert`, issued by
// `issuer` (the certificate itself when self-signed).
absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return InternalError(StrCat("adding the extension ", OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

// subjectAltName with one dNSName per entry, built as values (no config-string parsing).
absl::Status AddDnsNames(X509* cert, const std::vector<std::string>& dns_names) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  if (!names) return InternalError("allocating the subjectAltName");
  for (const std::string& dns : dns_names) {
    Ia5Ptr ia5(ASN1_IA5STRING_new());
    GeneralNamePtr gn(GENERAL_NAME_new());
    if (!ia5 || !gn || ASN1_STRING_set(ia5.get(), dns.data(), static_cast<int>(dns.size())) != 1) {
      return InternalError(StrCat("encoding the DNS name \"", dns, "\""));
    }
    GENERAL_NAME_set0_value(gn.get(), GEN_DNS, ia5.release());
    if (sk_GENERAL_NAME_push(names.get(), gn.get()) <= 0) return InternalError("building the subjectAltName");
    gn.release();  // Owned by `names` now.
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return InternalError("adding the subjectAltName");
  }
  return absl::OkStatus();
}

absl::Status SignCert(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return InternalError("signing the certificate (ECDSA-SHA256)");
  return absl::OkStatus();
}

// A leaf certificate for `subject_key` (its public half), signed by `ca_cert`/`ca_key`.
absl::StatusOr<std::string> IssueLeaf(X509* ca_cert, EVP_PKEY* ca_key, EVP_PKEY* subject_key,
                                      std::string_view common_name, const std::vector<std::string>& dns_names,
                                      int days) {
  CASCADE_RETURN_IF_ERROR(CheckCommonName(common_name));
  CASCADE_RETURN_IF_ERROR(CheckDays(days));
  for (const std::string& dns : dns_names) CASCADE_RETURN_IF_ERROR(CheckDnsName(dns));
  X509Ptr cert(X509_new());
  if (!cert) return InternalError("X509_new");
  CASCADE_RETURN_IF_ERROR(SetVersionSerialValidity(cert.get(), days));
  CASCADE_RETURN_IF_ERROR(SetCommonName(X509_get_subject_name(cert.get()), common_name));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert)) != 1 ||
      X509_set_pubkey(cert.get(), subject_key) != 1) {
    return InternalError("setting the issuer and public key");
  }
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert, NID_basic_constraints, "critical,CA:FALSE"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert, NID_key_usage, "critical,digitalSignature"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert, NID_ext_key_usage, "serverAuth,clientAuth"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert, NID_subject_key_identifier, "hash"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert, NID_authority_key_identifier, "keyid:always"));
  if (!dns_names.empty()) CASCADE_RETURN_IF_ERROR(AddDnsNames(cert.get(), dns_names));
  CASCADE_RETURN_IF_ERROR(SignCert(cert.get(), ca_key));
  return CertToPem(cert.get());
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

absl::Status ErrnoStatus(int err, std::string_view what) {
  const std::string message = StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR: return absl::NotFoundError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    default: return absl::InternalError(message);
  }
}

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; false (errno set) when close fails.
  bool Close() {
    const int fd = std::exchange(fd_, -1);
    return close(fd) == 0;
  }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(errno, StrCat("writing ", path));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Writes `bytes` to `path` with `mode`: a temporary file beside it, fsync, rename.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes, mode_t mode) {
  std::string tmp = path + ".tmp.XXXXXX";
  Fd fd(mkstemp(tmp.data()));  // Created 0600.
  if (fd.get() < 0) return ErrnoStatus(errno, StrCat("creating a temporary file for ", path));
  absl::Status status = WriteAll(fd.get(), bytes, tmp);
  if (status.ok() && fchmod(fd.get(), mode) != 0) status = ErrnoStatus(errno, StrCat("chmod ", tmp));
  if (status.ok() && fsync(fd.get()) != 0) status = ErrnoStatus(errno, StrCat("fsync ", tmp));
  if (status.ok() && !fd.Close()) status = ErrnoStatus(errno, StrCat("closing ", tmp));
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) status = ErrnoStatus(errno, StrCat("renaming to ", path));
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

absl::Status SyncDir(const std::string& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || fsync(fd.get()) != 0) return ErrnoStatus(errno, StrCat("fsync ", dir));
  return absl::OkStatus();
}

// The directory `dir`, created 0700 (with its parents) when missing.
absl::Status EnsureDir(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(StrCat("cluster directory ", dir, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  if (errno != ENOENT) return ErrnoStatus(errno, StrCat("stat ", dir));
  const std::filesystem::path parent = std::filesystem::path(dir).lexically_normal().parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::InternalError(StrCat("creating ", parent.string(), ": ", ec.message()));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus(errno, StrCat("creating ", dir));
  return absl::OkStatus();
}

// FailedPrecondition when `path` (a secret) lets its group or others in.
absl::Status CheckPrivateMode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has mode %04o, open to its group or others: run chmod 600 %s", path, st.st_mode & 07777, path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterCa> ClusterCa::Create(std::string_view name, int days) {
  ERR_clear_error();  // Errors reported below are this call's own.
  const std::string common_name = StrCat("Cascade cluster CA ", name);
  CASCADE_RETURN_IF_ERROR(CheckCommonName(common_name));
  CASCADE_RETURN_IF_ERROR(CheckDays(days));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  X509Ptr cert(X509_new());
  if (!cert) return InternalError("X509_new");
  CASCADE_RETURN_IF_ERROR(SetVersionSerialValidity(cert.get(), days));
  CASCADE_RETURN_IF_ERROR(SetCommonName(X509_get_subject_name(cert.get()), common_name));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return InternalError("setting the CA's issuer and public key");
  }
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  CASCADE_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always"));
  CASCADE_RETURN_IF_ERROR(SignCert(cert.get(), key.get()));
  CASCADE_ASSIGN_OR_RETURN(std::string cert_pem, CertToPem(cert.get()));
  CASCADE_ASSIGN_OR_RETURN(std::string key_pem, KeyToPem(key.get()));
  return ClusterCa(std::move(cert_pem), std::move(key_pem));
}

absl::StatusOr<ClusterCa> ClusterCa::FromPem(std::string_view cert_pem, std::string_view key_pem) {
  ERR_clear_error();
  CASCADE_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(cert_pem));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(key_pem));
  if (X509_check_ca(cert.get()) == 0) {
    return absl::InvalidArgumentError("loading the cluster CA: the certificate is not a CA certificate");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "loading the cluster CA: the private key is not the certificate's");
  }
  // Re-encoded, so that a loaded CA holds the same text as a created one.
  CASCADE_ASSIGN_OR_RETURN(std::string canonical_cert, CertToPem(cert.get()));
  CASCADE_ASSIGN_OR_RETURN(std::string canonical_key, KeyToPem(key.get()));
  return ClusterCa(std::move(canonical_cert), std::move(canonical_key));
}

absl::StatusOr<std::string> ClusterCa::Sign(std::string_view csr_pem, std::string_view common_name,
                                            const std::vector<std::string>& dns_names, int days) const {
  ERR_clear_error();
  CASCADE_ASSIGN_OR_RETURN(ReqPtr req, ParseCsr(csr_pem));
  EVP_PKEY* subject_key = X509_REQ_get0_pubkey(req.get());  // Owned by `req`.
  if (subject_key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "the certificate request has no usable public key");
  }
  if (X509_REQ_verify(req.get(), subject_key) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "the certificate request's signature does not verify");
  }
  CASCADE_RETURN_IF_ERROR(CheckP256(subject_key, "the certificate request"));
  CASCADE_ASSIGN_OR_RETURN(X509Ptr ca_cert, ParseCert(cert_pem_));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(key_pem_));
  return IssueLeaf(ca_cert.get(), ca_key.get(), subject_key, common_name, dns_names, days);
}

absl::StatusOr<KeyAndCert> ClusterCa::Issue(std::string_view common_name, const std::vector<std::string>& dns_names,
                                            int days) const {
  ERR_clear_error();
  CASCADE_ASSIGN_OR_RETURN(X509Ptr ca_cert, ParseCert(cert_pem_));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(key_pem_));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  KeyAndCert out;
  CASCADE_ASSIGN_OR_RETURN(out.cert_pem,
                           IssueLeaf(ca_cert.get(), ca_key.get(), key.get(), common_name, dns_names, days));
  CASCADE_ASSIGN_OR_RETURN(out.key_pem, KeyToPem(key.get()));
  return out;
}

absl::StatusOr<KeyAndCsr> MakeKeyAndCsr(std::string_view common_name) {
  ERR_clear_error();
  CASCADE_RETURN_IF_ERROR(CheckCommonName(common_name));
  CASCADE_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  ReqPtr req(X509_REQ_new());
  if (!req) return InternalError("X509_REQ_new");
  if (X509_REQ_set_version(req.get(), X509_REQ_VERSION_1) != 1) return InternalError("setting the request version");
  X509_NAME* subject = X509_REQ_get_subject_name(req.get());  // Owned by `req`.
  CASCADE_RETURN_IF_ERROR(SetCommonName(subject, common_name));
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1) return InternalError("setting the request's public key");
  if (X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) return InternalError("signing the certificate request");
  KeyAndCsr out;
  CASCADE_ASSIGN_OR_RETURN(out.key_pem, KeyToPem(key.get()));
  CASCADE_ASSIGN_OR_RETURN(out.csr_pem, ToPem([&req](BIO* b) { return PEM_write_bio_X509_REQ(b, req.get()); },
                                              "writing the certificate request"));
  return out;
}

absl::StatusOr<std::string> RandomToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return InternalError("drawing a random token");
  std::string token = Hex(bytes, sizeof(bytes));
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return token;
}

bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, StrCat("opening ", path));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(StrCat(path, " is not a regular file"));
  if (st.st_size > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        StrCat(path, " is ", st.st_size, " bytes; a secret file is at most ", kMaxSecretFileBytes));
  }
  std::string bytes;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, StrCat("reading ", path));
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > static_cast<size_t>(kMaxSecretFileBytes)) {
      return absl::InvalidArgumentError(StrCat(path, " grew past ", kMaxSecretFileBytes, " bytes while being read"));
    }
  }
  const size_t end = bytes.find_last_not_of(" \t\r\n");
  bytes.resize(end == std::string::npos ? 0 : end + 1);
  return bytes;
}

absl::StatusOr<ClusterSecrets> OpenClusterDir(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("the cluster directory is empty (no path)");
  CASCADE_RETURN_IF_ERROR(EnsureDir(dir));
  const std::string ca_pem_path = StrCat(dir, "/ca.pem");
  const std::string ca_key_path = StrCat(dir, "/ca.key");
  const std::string token_path = StrCat(dir, "/join.token");
  std::vector<std::string> present;
  std::vector<std::string> missing;
  for (const std::string* path : {&ca_pem_path, &ca_key_path, &token_path}) {
    struct stat st;
    if (stat(path->c_str(), &st) == 0) {
      present.push_back(std::filesystem::path(*path).filename().string());
    } else if (errno == ENOENT) {
      missing.push_back(std::filesystem::path(*path).filename().string());
    } else {
      return ErrnoStatus(errno, StrCat("stat ", *path));
    }
  }

  if (present.empty()) {
    // A new cluster: the CA's name is a random tag, so that two clusters' CAs differ by name.
    CASCADE_ASSIGN_OR_RETURN(std::string tag, RandomToken());
    CASCADE_ASSIGN_OR_RETURN(ClusterCa ca, ClusterCa::Create(tag.substr(0, 12)));
    CASCADE_ASSIGN_OR_RETURN(std::string token, RandomToken());
    // Secrets first: a crash in between leaves a partial set, which is refused by name.
    CASCADE_RETURN_IF_ERROR(WriteFileAtomically(ca_key_path, ca.key_pem(), 0600));
    CASCADE_RETURN_IF_ERROR(WriteFileAtomically(token_path, StrCat(token, "\n"), 0600));
    CASCADE_RETURN_IF_ERROR(WriteFileAtomically(ca_pem_path, ca.cert_pem(), 0644));
    CASCADE_RETURN_IF_ERROR(SyncDir(dir));
    return ClusterSecrets{std::move(ca), std::move(token)};
  }
  if (!missing.empty()) {
    std::string has, lacks;
    for (const std::string& f : present) StrAppend(&has, has.empty() ? "" : ", ", f);
    for (const std::string& f : missing) StrAppend(&lacks, lacks.empty() ? "" : ", ", f);
    return absl::FailedPreconditionError(
        StrCat("cluster directory ", dir, " has ", has, " but lacks ", lacks,
               ": restore the missing file(s), or empty the directory to create a new cluster CA and join token "
               "(every worker must then join again)"));
  }
  CASCADE_RETURN_IF_ERROR(CheckPrivateMode(ca_key_path));
  CASCADE_RETURN_IF_ERROR(CheckPrivateMode(token_path));
  CASCADE_ASSIGN_OR_RETURN(std::string cert_pem, ReadSecretFile(ca_pem_path));
  CASCADE_ASSIGN_OR_RETURN(std::string key_pem, ReadSecretFile(ca_key_path));
  CASCADE_ASSIGN_OR_RETURN(std::string token, ReadSecretFile(token_path));
  if (token.empty()) {
    return absl::FailedPreconditionError(StrCat(token_path, " is empty: write a join token into it, or remove ",
                                                "ca.pem, ca.key and join.token to create new ones"));
  }
  absl::StatusOr<ClusterCa> ca = ClusterCa::FromPem(cert_pem, key_pem);
  if (!ca.ok()) return Annotate(ca.status(), StrCat("loading ", ca_pem_path, " and ", ca_key_path));
  return ClusterSecrets{*std::move(ca), std::move(token)};
}

}  // namespace cascade::security
