// ClusterCa, MakeKeyAndCsr, tokens and the cluster directory, checked against the
// `openssl` command-line tool (the independent reference): what the code makes must pass
// `openssl verify` and show the right extensions; what `openssl req` makes must be signed.
// To add a case: write the PEMs into a TempDir and run `openssl` on them with RunIn.
#include "security/cluster_ca.h"

#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/security/openssl_cli.h"
#include "tests/test_support.h"

namespace cascade::security {
namespace {

using ::cascade::testing::ReadFileOrDie;
using ::cascade::testing::RunIn;
using ::cascade::testing::StatusIs;
using ::cascade::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Ok(const std::string& dir, const std::string& command) {
  const auto result = RunIn(dir, command);
  EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  return result.output;
}

int Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

// PEM text for DER bytes.
std::string Pem(const std::string& der, const std::string& label) {
  const std::string b64 = absl::Base64Escape(der);
  std::string out = "-----BEGIN " + label + "-----\n";
  for (size_t i = 0; i < b64.size(); i += 64) out += b64.substr(i, 64) + "\n";
  return out + "-----END " + label + "-----\n";
}

// One DER element at `pos`: its total size (header + content).
size_t DerElementSize(const std::string& der, size_t pos) {
  const unsigned char first = static_cast<unsigned char>(der.at(pos + 1));
  if (first < 0x80) return 2 + first;
  const size_t n_len = first & 0x7f;
  size_t len = 0;
  for (size_t i = 0; i < n_len; ++i) len = (len << 8) | static_cast<unsigned char>(der.at(pos + 2 + i));
  return 2 + n_len + len;
}
// The header length of the DER element at `pos`.
size_t DerHeaderSize(const std::string& der, size_t pos) {
  const unsigned char first = static_cast<unsigned char>(der.at(pos + 1));
  return first < 0x80 ? 2 : 2 + (first & 0x7f);
}
std::string DerSequence(const std::string& content) {
  std::string out = "\x30";
  if (content.size() < 0x80) {
    out += static_cast<char>(content.size());
  } else {
    out += "\x82";
    out += static_cast<char>(content.size() >> 8);
    out += static_cast<char>(content.size() & 0xff);
  }
  return out + content;
}
// A CSR's three parts: CertificationRequestInfo, signature algorithm, signature.
std::vector<std::string> CsrParts(const std::string& der) {
  std::vector<std::string> parts;
  size_t pos = DerHeaderSize(der, 0);
  for (int i = 0; i < 3; ++i) {
    const size_t n = DerElementSize(der, pos);
    parts.push_back(der.substr(pos, n));
    pos += n;
  }
  return parts;
}

class ClusterCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = ClusterCa::Create("test");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_.emplace(*std::move(ca));
    dir_.WriteFile("ca.pem", ca_->cert_pem());
  }
  const std::string& dir() const { return dir_.path(); }

  TempDir dir_;
  std::optional<ClusterCa> ca_;
};

TEST_F(ClusterCaTest, CreateMakesSelfSignedP256Ca) {
  EXPECT_THAT(ca_->cert_pem(), HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(ca_->key_pem(), HasSubstr("-----BEGIN PRIVATE KEY-----"));  // PKCS#8.
  Ok(dir(), "openssl verify -CAfile ca.pem ca.pem");
  const std::string ext = Ok(dir(),
                             "openssl x509 -in ca.pem -noout -subject -ext "
                             "basicConstraints,keyUsage,subjectKeyIdentifier,authorityKeyIdentifier");
  EXPECT_THAT(ext, HasSubstr("subject=CN = Cascade cluster CA test"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Basic Constraints: critical\n    CA:TRUE"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Key Usage: critical\n    Certificate Sign, CRL Sign"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Subject Key Identifier"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Authority Key Identifier"));
  const std::string text = Ok(dir(), "openssl x509 -in ca.pem -noout -text");
  EXPECT_THAT(text, HasSubstr("Signature Algorithm: ecdsa-with-SHA256"));
  EXPECT_THAT(text, HasSubstr("NIST CURVE: P-256"));
  EXPECT_THAT(text, HasSubstr("Version: 3"));
}

TEST_F(ClusterCaTest, IssueMakesLeafThatOpensslVerifiesForServerAndClient) {
  auto leaf = ca_->Issue(kCoordinatorCommonName, {std::string(kCoordinatorName), "localhost"});
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  dir_.WriteFile("leaf.pem", leaf->cert_pem);
  dir_.WriteFile("leaf.key", leaf->key_pem);
  EXPECT_THAT(Ok(dir(), "openssl verify -CAfile ca.pem leaf.pem"), HasSubstr("leaf.pem: OK"));
  Ok(dir(), "openssl verify -purpose sslserver -CAfile ca.pem leaf.pem");
  Ok(dir(), "openssl verify -purpose sslclient -CAfile ca.pem leaf.pem");
  const std::string ext = Ok(dir(),
                             "openssl x509 -in leaf.pem -noout -subject -issuer -ext "
                             "subjectAltName,extendedKeyUsage,basicConstraints,keyUsage,subjectKeyIdentifier,"
                             "authorityKeyIdentifier");
  EXPECT_THAT(ext, HasSubstr("subject=CN = coordinator\n"));
  EXPECT_THAT(ext, HasSubstr("issuer=CN = Cascade cluster CA test\n"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Subject Alternative Name: \n    DNS:coordinator.cascade, DNS:localhost\n"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Extended Key Usage: \n    TLS Web Server Authentication, TLS Web Client "
                             "Authentication\n"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Basic Constraints: critical\n    CA:FALSE\n"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Key Usage: critical\n    Digital Signature\n"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Subject Key Identifier"));
  EXPECT_THAT(ext, HasSubstr("X509v3 Authority Key Identifier"));
  // The AKI is the CA's SKI.
  const std::string ca_ski = Ok(dir(), "openssl x509 -in ca.pem -noout -ext subjectKeyIdentifier | tail -n 1");
  EXPECT_THAT(ext, HasSubstr(ca_ski.substr(ca_ski.find_first_not_of(' '))));
  // The key is the certificate's (PKCS#8 P-256).
  EXPECT_THAT(leaf->key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));
  EXPECT_EQ(Ok(dir(), "openssl x509 -in leaf.pem -noout -pubkey"), Ok(dir(), "openssl pkey -in leaf.key -pubout"));
  EXPECT_THAT(Ok(dir(), "openssl x509 -in leaf.pem -noout -text"), HasSubstr("ecdsa-with-SHA256"));
}

TEST_F(ClusterCaTest, LeafIsValidFromAnHourAgoForItsDays) {
  auto leaf = ca_->Issue("worker@n0", {std::string(kWorkerName)}, /*days=*/2);
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  dir_.WriteFile("leaf.pem", leaf->cert_pem);
  const long now = static_cast<long>(std::time(nullptr));
  auto verify_at = [&](long t) {
    return RunIn(dir(), "openssl verify -attime " + std::to_string(t) + " -CAfile ca.pem leaf.pem");
  };
  EXPECT_EQ(verify_at(now - 1800).exit_code, 0);
  EXPECT_THAT(verify_at(now - 3600 - 120).output, HasSubstr("not yet valid"));
  EXPECT_EQ(verify_at(now - 3600 + 2 * 86400 - 120).exit_code, 0);
  EXPECT_THAT(verify_at(now - 3600 + 2 * 86400 + 120).output, HasSubstr("expired"));
}

TEST_F(ClusterCaTest, SerialsAreRandom128Bit) {
  auto a = ca_->Issue("a", {"a"});
  auto b = ca_->Issue("a", {"a"});
  ASSERT_TRUE(a.ok() && b.ok());
  dir_.WriteFile("a.pem", a->cert_pem);
  dir_.WriteFile("b.pem", b->cert_pem);
  const std::string sa = Ok(dir(), "openssl x509 -in a.pem -noout -serial");
  const std::string sb = Ok(dir(), "openssl x509 -in b.pem -noout -serial");
  EXPECT_NE(sa, sb);
  EXPECT_EQ(sa.size(), std::string("serial=").size() + 32 + 1) << sa;  // 16 bytes, as hex, newline.
}

TEST_F(ClusterCaTest, SignAcceptsOpensslCsrAndIgnoresItsSubject) {
  Ok(dir(),
     "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=x -keyout w.key -out w.csr "
     "-addext subjectAltName=DNS:evil.example");
  auto cert = ca_->Sign(ReadFileOrDie(dir() + "/w.csr"), "worker@n0", {std::string(kWorkerName)});
  ASSERT_TRUE(cert.ok()) << cert.status();
  dir_.WriteFile("w.pem", *cert);
  EXPECT_THAT(Ok(dir(), "openssl verify -CAfile ca.pem w.pem"), HasSubstr("w.pem: OK"));
  const std::string ext = Ok(dir(), "openssl x509 -in w.pem -noout -subject -ext subjectAltName,basicConstraints");
  EXPECT_THAT(ext, HasSubstr("subject=CN = worker@n0\n"));
  EXPECT_THAT(ext, HasSubstr("DNS:worker.cascade\n"));
  EXPECT_THAT(ext, Not(HasSubstr("evil")));
  EXPECT_EQ(Ok(dir(), "openssl x509 -in w.pem -noout -pubkey"), Ok(dir(), "openssl pkey -in w.key -pubout"));
}

TEST_F(ClusterCaTest, SignRefusesCsrWithTamperedSignature) {
  Ok(dir(),
     "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=x -keyout w.key -outform DER "
     "-out w.der");
  std::string der = ReadFileOrDie(dir() + "/w.der");
  der.back() ^= 0x01;  // The last byte of the ECDSA signature's s.
  EXPECT_THAT(ca_->Sign(Pem(der, "CERTIFICATE REQUEST"), "worker@n0", {std::string(kWorkerName)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not verify")));
}

TEST_F(ClusterCaTest, SignRefusesCsrWithTamperedSubject) {
  Ok(dir(),
     "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=tamperme -keyout w.key "
     "-outform DER -out w.der");
  std::string der = ReadFileOrDie(dir() + "/w.der");
  const size_t at = der.find("tamperme");
  ASSERT_NE(at, std::string::npos);
  der[at] = 'd';
  EXPECT_THAT(ca_->Sign(Pem(der, "CERTIFICATE REQUEST"), "worker@n0", {std::string(kWorkerName)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not verify")));
}

TEST_F(ClusterCaTest, SignRefusesCsrSignedByAnotherKey) {
  // Request A's body (its public key) with request B's signature (B's key).
  const std::string req = "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=x ";
  Ok(dir(), req + "-keyout a.key -outform DER -out a.der");
  Ok(dir(), req + "-keyout b.key -outform DER -out b.der");
  const std::vector<std::string> a = CsrParts(ReadFileOrDie(dir() + "/a.der"));
  const std::vector<std::string> b = CsrParts(ReadFileOrDie(dir() + "/b.der"));
  const std::string spliced = DerSequence(a[0] + b[1] + b[2]);
  dir_.WriteFile("s.pem", Pem(spliced, "CERTIFICATE REQUEST"));
  // openssl agrees that it parses and does not verify.
  EXPECT_THAT(RunIn(dir(), "openssl req -in s.pem -noout -verify").output, HasSubstr("verify failure"));
  EXPECT_THAT(ca_->Sign(Pem(spliced, "CERTIFICATE REQUEST"), "worker@n0", {std::string(kWorkerName)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not verify")));
  // The untouched request is fine.
  EXPECT_TRUE(ca_->Sign(Pem(ReadFileOrDie(dir() + "/a.der"), "CERTIFICATE REQUEST"), "w", {"w"}).ok());
}

TEST_F(ClusterCaTest, SignRefusesMalformedCsrAndOtherCurves) {
  EXPECT_THAT(ca_->Sign("not a PEM", "w", {"w"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ca_->Sign("", "w", {"w"}), StatusIs(absl::StatusCode::kInvalidArgument));
  Ok(dir(), "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -subj /CN=x -keyout k -out p384.csr");
  EXPECT_THAT(ca_->Sign(ReadFileOrDie(dir() + "/p384.csr"), "w", {"w"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an EC P-256 key")));
}

TEST_F(ClusterCaTest, IssueRefusesBadNames) {
  EXPECT_THAT(ca_->Issue("", {"a"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ca_->Issue(std::string(65, 'c'), {"a"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ca_->Issue("w", {"a,IP:127.0.0.1"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ca_->Issue("w", {""}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ca_->Issue("w", {"a"}, /*days=*/0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClusterCaTest, LeafOfAnotherCaFailsOpensslVerify) {
  auto other = ClusterCa::Create("other");
  ASSERT_TRUE(other.ok());
  auto leaf = other->Issue("worker@n0", {std::string(kWorkerName)});
  ASSERT_TRUE(leaf.ok());
  dir_.WriteFile("leaf.pem", leaf->cert_pem);
  const auto result = RunIn(dir(), "openssl verify -CAfile ca.pem leaf.pem");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("unable to get local issuer certificate"));
}

TEST(MakeKeyAndCsrTest, OpensslVerifiesTheRequest) {
  TempDir dir;
  auto made = MakeKeyAndCsr("worker@n0");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(made->key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));
  dir.WriteFile("w.csr", made->csr_pem);
  dir.WriteFile("w.key", made->key_pem);
  const std::string out = Ok(dir.path(), "openssl req -in w.csr -noout -verify -subject -text");
  EXPECT_THAT(out, HasSubstr("verify OK"));  // openssl 3.0 prints "Certificate request self-signature verify OK".
  EXPECT_THAT(out, HasSubstr("subject=CN = worker@n0"));
  EXPECT_THAT(out, HasSubstr("NIST CURVE: P-256"));
  EXPECT_THAT(out, HasSubstr("ecdsa-with-SHA256"));
  EXPECT_EQ(Ok(dir.path(), "openssl req -in w.csr -noout -pubkey"), Ok(dir.path(), "openssl pkey -in w.key -pubout"));
  EXPECT_THAT(MakeKeyAndCsr(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(FromPemTest, RoundTripsAndTheLoadedCaSigns) {
  TempDir dir;
  auto ca = ClusterCa::Create("rt");
  ASSERT_TRUE(ca.ok());
  auto loaded = ClusterCa::FromPem(ca->cert_pem(), ca->key_pem());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->cert_pem(), ca->cert_pem());
  EXPECT_EQ(loaded->key_pem(), ca->key_pem());
  auto leaf = loaded->Issue("w", {"w"});
  ASSERT_TRUE(leaf.ok());
  dir.WriteFile("ca.pem", ca->cert_pem());
  dir.WriteFile("leaf.pem", leaf->cert_pem);
  Ok(dir.path(), "openssl verify -CAfile ca.pem leaf.pem");
}

TEST(FromPemTest, LoadsAnOpensslMadeCa) {
  TempDir dir;
  Ok(dir.path(),
     "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=ossl-ca -days 1 "
     "-keyout ca.key -out ca.pem -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign");
  auto ca = ClusterCa::FromPem(ReadFileOrDie(dir.path() + "/ca.pem"), ReadFileOrDie(dir.path() + "/ca.key"));
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto leaf = ca->Issue("w", {"w"});
  ASSERT_TRUE(leaf.ok());
  dir.WriteFile("leaf.pem", leaf->cert_pem);
  Ok(dir.path(), "openssl verify -CAfile ca.pem leaf.pem");
}

TEST(FromPemTest, RefusesLeafMismatchedKeyAndGarbage) {
  auto ca = ClusterCa::Create("a");
  auto other = ClusterCa::Create("b");
  ASSERT_TRUE(ca.ok() && other.ok());
  auto leaf = ca->Issue("w", {"w"});
  ASSERT_TRUE(leaf.ok());
  EXPECT_THAT(ClusterCa::FromPem(leaf->cert_pem, leaf->key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CA")));
  EXPECT_THAT(ClusterCa::FromPem(ca->cert_pem(), other->key_pem()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the certificate's")));
  EXPECT_THAT(ClusterCa::FromPem("garbage", ca->key_pem()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ClusterCa::FromPem(ca->cert_pem(), "garbage"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenTest, RandomTokenIs64HexAndFresh) {
  auto a = RandomToken();
  auto b = RandomToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
}

TEST(TokenTest, TokensEqual) {
  EXPECT_TRUE(TokensEqual("", ""));
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "ab"));
  EXPECT_FALSE(TokensEqual("", "a"));
  EXPECT_FALSE(TokensEqual(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST(ClusterDirTest, CreatesThenReloadsTheSameSecrets) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/nested/cluster";
  auto created = OpenClusterDir(dir);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(Mode(dir), 0700);
  EXPECT_EQ(Mode(dir + "/ca.key"), 0600);
  EXPECT_EQ(Mode(dir + "/join.token"), 0600);
  EXPECT_EQ(created->join_token.size(), 64u);
  EXPECT_EQ(ReadFileOrDie(dir + "/join.token"), created->join_token + "\n");
  EXPECT_EQ(ReadFileOrDie(dir + "/ca.pem"), created->ca.cert_pem());
  // Nothing else (no temporary files) is left behind.
  int n_files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++n_files;
  EXPECT_EQ(n_files, 3);
  Ok(dir, "openssl verify -CAfile ca.pem ca.pem && openssl pkey -in ca.key -noout");

  auto reloaded = OpenClusterDir(dir);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->ca.cert_pem(), created->ca.cert_pem());
  EXPECT_EQ(reloaded->ca.key_pem(), created->ca.key_pem());
  EXPECT_EQ(reloaded->join_token, created->join_token);
}

TEST(ClusterDirTest, RefusesSecretsOthersCanRead) {
  TempDir tmp;
  ASSERT_TRUE(OpenClusterDir(tmp.path()).ok());
  ASSERT_EQ(chmod((tmp.path() + "/ca.key").c_str(), 0644), 0);
  EXPECT_THAT(OpenClusterDir(tmp.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition, AllOf(HasSubstr("ca.key"), HasSubstr("chmod 600"))));
  ASSERT_EQ(chmod((tmp.path() + "/ca.key").c_str(), 0600), 0);
  ASSERT_EQ(chmod((tmp.path() + "/join.token").c_str(), 0640), 0);
  EXPECT_THAT(OpenClusterDir(tmp.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition, AllOf(HasSubstr("join.token"), HasSubstr("chmod 600"))));
  ASSERT_EQ(chmod((tmp.path() + "/join.token").c_str(), 0600), 0);
  EXPECT_TRUE(OpenClusterDir(tmp.path()).ok());
}

TEST(ClusterDirTest, RefusesAPartialSetNamingWhatIsMissing) {
  TempDir tmp;
  ASSERT_TRUE(OpenClusterDir(tmp.path()).ok());
  ASSERT_EQ(unlink((tmp.path() + "/join.token").c_str()), 0);
  EXPECT_THAT(OpenClusterDir(tmp.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition, AllOf(HasSubstr("lacks join.token"))));
  ASSERT_EQ(unlink((tmp.path() + "/ca.pem").c_str()), 0);
  EXPECT_THAT(OpenClusterDir(tmp.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("lacks ca.pem, join.token")));
}

TEST(ClusterDirTest, RefusesAFileAsTheDirectoryAndAMismatchedKey) {
  TempDir tmp;
  const std::string file = tmp.WriteFile("f", "x");
  EXPECT_THAT(OpenClusterDir(file), StatusIs(absl::StatusCode::kFailedPrecondition));
  auto other = ClusterCa::Create("other");
  ASSERT_TRUE(other.ok());
  const std::string dir = tmp.path() + "/c";
  ASSERT_TRUE(OpenClusterDir(dir).ok());
  tmp.WriteFile("c/ca.key", other->key_pem());  // Written 0644 by the helper.
  ASSERT_EQ(chmod((dir + "/ca.key").c_str(), 0600), 0);
  EXPECT_THAT(OpenClusterDir(dir), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ca.key")));
}

TEST(ReadSecretFileTest, DropsTrailingWhitespaceAndNamesMissingFiles) {
  TempDir tmp;
  EXPECT_EQ(*ReadSecretFile(tmp.WriteFile("t", "secret \n\n")), "secret");
  EXPECT_EQ(*ReadSecretFile(tmp.WriteFile("e", "")), "");
  EXPECT_THAT(ReadSecretFile(tmp.path() + "/missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(tmp.path() + "/missing")));
  if (geteuid() != 0) {
    const std::string locked = tmp.WriteFile("locked", "x");
    ASSERT_EQ(chmod(locked.c_str(), 0), 0);
    EXPECT_THAT(ReadSecretFile(locked), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(locked)));
  }
}

}  // namespace
}  // namespace cascade::security
