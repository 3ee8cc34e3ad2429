// Tests for LoadPublicTls / PublicServerCredentials (coordinator/front/public_tls.h): a
// certificate and its key load; a key that is not the certificate's, a missing file, a
// file that is no PEM and an encrypted key (which must fail, never prompt) are refused
// naming the config key and the file. The PEMs come from the `openssl` command-line tool
// (skipped without it). To add a case: make its files in SetUpTestSuite's commands.

#include <cstdlib>
#include <string>

#include "coordinator/front/public_tls.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::StatusMessage;
using ::cascade::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

class PublicTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // a.pem/a.key: a self-signed certificate and its key; b.key: another key;
    // a_enc.key: a.key encrypted with a password.
    const std::string cmd =
        "cd '" + dir_->path() +
        "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout a.key -out a.pem "
        "-days 2 -subj /CN=public-tls-test -addext subjectAltName=IP:127.0.0.1 "
        "&& openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out b.key "
        "&& openssl pkcs8 -topk8 -in a.key -v2 aes-256-cbc -passout pass:secret -out a_enc.key";
    made_ = std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!made_) GTEST_SKIP() << "the openssl command-line tool is not available";
  }
  static std::string Path(const std::string& name) { return dir_->path() + "/" + name; }

  static TempDir* dir_;
  static bool made_;
};

TempDir* PublicTlsTest::dir_ = nullptr;
bool PublicTlsTest::made_ = false;

TEST_F(PublicTlsTest, CertificateAndItsKeyLoad) {
  absl::StatusOr<PublicTlsPem> pem = LoadPublicTls(Path("a.pem"), Path("a.key"));
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_THAT(pem->cert_chain_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(pem->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  ServerSection server;
  server.tls_cert_file = Path("a.pem");
  server.tls_key_file = Path("a.key");
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = PublicServerCredentials(server);
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
}

TEST_F(PublicTlsTest, UnsetIsPlaintext) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = PublicServerCredentials(ServerSection());
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
}

TEST_F(PublicTlsTest, KeyOfAnotherCertificateIsRefused) {
  absl::StatusOr<PublicTlsPem> pem = LoadPublicTls(Path("a.pem"), Path("b.key"));
  EXPECT_THAT(pem, testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("server.tls_key_file"), HasSubstr(Path("b.key")),
                                           HasSubstr("not the private key"), HasSubstr(Path("a.pem")))));
  ServerSection server;
  server.tls_cert_file = Path("a.pem");
  server.tls_key_file = Path("b.key");
  EXPECT_THAT(PublicServerCredentials(server).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server.tls_key_file")));
}

TEST_F(PublicTlsTest, MissingFilesNameKeyAndPath) {
  EXPECT_THAT(LoadPublicTls(Path("none.pem"), Path("a.key")),
              testing::StatusIs(absl::StatusCode::kNotFound,
                                AllOf(HasSubstr("server.tls_cert_file"), HasSubstr(Path("none.pem")))));
  EXPECT_THAT(LoadPublicTls(Path("a.pem"), Path("none.key")),
              testing::StatusIs(absl::StatusCode::kNotFound,
                                AllOf(HasSubstr("server.tls_key_file"), HasSubstr(Path("none.key")))));
}

TEST_F(PublicTlsTest, FilesThatAreNotPemAreRefused) {
  const std::string garbage = dir_->WriteFile("garbage.pem", "not a certificate\n");
  EXPECT_THAT(
      LoadPublicTls(garbage, Path("a.key")),
      testing::StatusIs(absl::StatusCode::kInvalidArgument,
                        AllOf(HasSubstr("server.tls_cert_file"), HasSubstr(garbage), HasSubstr("no PEM certificate"))));
  EXPECT_THAT(LoadPublicTls(Path("a.pem"), garbage),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("server.tls_key_file"), HasSubstr(garbage))));
  // The key where the certificate should be, and the other way round.
  EXPECT_THAT(LoadPublicTls(Path("a.key"), Path("a.key")),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server.tls_cert_file")));
  EXPECT_THAT(LoadPublicTls(Path("a.pem"), Path("a.pem")),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server.tls_key_file")));
  // A chain whose second certificate is broken.
  const std::string chain = dir_->WriteFile(
      "chain.pem", ::cascade::testing::ReadFileOrDie(Path("a.pem")) +
                       "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
  EXPECT_THAT(LoadPublicTls(chain, Path("a.key")),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("server.tls_cert_file"), HasSubstr("certificate 2"))));
}

TEST_F(PublicTlsTest, EncryptedKeyIsRefusedWithoutPrompting) {
  EXPECT_THAT(LoadPublicTls(Path("a.pem"), Path("a_enc.key")),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("server.tls_key_file"), HasSubstr("unencrypted"))));
}

}  // namespace
}  // namespace cascade::coordinator
