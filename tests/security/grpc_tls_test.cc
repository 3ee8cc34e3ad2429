// Mutual TLS over real gRPC on 127.0.0.1 (port 0): a coordinator-like server with
// ClusterServerCredentials, called through ClusterChannel / ServerAuthChannel with
// certificates from the cluster CA, another CA, or none. The server records the caller's
// PeerCommonName. To add a case: start a PeerServer with the server's identity and call
// PutKey through the channel under test.
#include "security/grpc_tls.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/cluster.grpc.pb.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "security/cluster_ca.h"

namespace cascade::security {
namespace {

// Coordinator::PutKey answers OK and records who called.
class PeerRecorder final : public v1::Coordinator::Service {
 public:
  grpc::Status PutKey(grpc::ServerContext* ctx, const v1::PutKeyRequest*, v1::PutKeyResponse*) override {
    absl::MutexLock lock(&mu_);
    peer_ = PeerCommonName(*ctx);
    ++n_calls_;
    return grpc::Status::OK;
  }
  std::optional<std::string> peer() const {
    absl::MutexLock lock(&mu_);
    return peer_;
  }
  int n_calls() const {
    absl::MutexLock lock(&mu_);
    return n_calls_;
  }

 private:
  mutable absl::Mutex mu_;
  std::optional<std::string> peer_ ABSL_GUARDED_BY(mu_);
  int n_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// A server on 127.0.0.1 with an ephemeral port.
class PeerServer {
 public:
  explicit PeerServer(const TlsIdentity* tls) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", ClusterServerCredentials(tls), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~PeerServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  bool started() const { return server_ != nullptr; }
  const std::string& address() const { return address_; }
  const PeerRecorder& service() const { return service_; }

 private:
  PeerRecorder service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

grpc::Status CallPutKey(const std::shared_ptr<grpc::Channel>& channel, const std::string& value = "v") {
  auto stub = v1::Coordinator::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::PutKeyRequest req;
  req.set_key("k");
  req.set_value(value);
  v1::PutKeyResponse resp;
  return stub->PutKey(&ctx, req, &resp);
}

TlsIdentity IssueIdentity(const ClusterCa& ca, std::string_view common_name, std::string_view dns_name) {
  auto issued = ca.Issue(common_name, {std::string(dns_name)});
  EXPECT_TRUE(issued.ok()) << issued.status();
  return TlsIdentity{ca.cert_pem(), issued->cert_pem, issued->key_pem};
}

class GrpcTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = ClusterCa::Create("grpc");
    auto other = ClusterCa::Create("other");
    ASSERT_TRUE(ca.ok() && other.ok());
    ca_.emplace(*std::move(ca));
    other_ca_.emplace(*std::move(other));
    coordinator_ = IssueIdentity(*ca_, kCoordinatorCommonName, kCoordinatorName);
    worker_ = IssueIdentity(*ca_, "worker@n0", kWorkerName);
    // Trusts the cluster CA (so the server verifies) but holds another CA's certificate.
    foreign_worker_ = IssueIdentity(*other_ca_, "worker@evil", kWorkerName);
    foreign_worker_.ca_pem = ca_->cert_pem();
  }

  std::optional<ClusterCa> ca_, other_ca_;
  TlsIdentity coordinator_, worker_, foreign_worker_;
};

TEST_F(GrpcTlsTest, WorkerCertificateIsVerifiedAndNamed) {
  PeerServer server(&coordinator_);
  ASSERT_TRUE(server.started());
  const grpc::Status status = CallPutKey(ClusterChannel(server.address(), &worker_, kCoordinatorName));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(server.service().peer(), "worker@n0");
}

TEST_F(GrpcTlsTest, CallerWithoutCertificateCompletesHandshakeAndIsAnonymous) {
  PeerServer server(&coordinator_);
  ASSERT_TRUE(server.started());
  const grpc::Status status = CallPutKey(ServerAuthChannel(server.address(), ca_->cert_pem(), kCoordinatorName));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(server.service().peer(), "");
}

TEST_F(GrpcTlsTest, ClientCertificateOfAnotherCaFailsTheHandshake) {
  PeerServer server(&coordinator_);
  ASSERT_TRUE(server.started());
  const grpc::Status status = CallPutKey(ClusterChannel(server.address(), &foreign_worker_, kCoordinatorName));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(server.service().n_calls(), 0);
}

TEST_F(GrpcTlsTest, ServerOfAnotherCaIsRefused) {
  TlsIdentity foreign_coordinator = IssueIdentity(*other_ca_, kCoordinatorCommonName, kCoordinatorName);
  PeerServer server(&foreign_coordinator);
  ASSERT_TRUE(server.started());
  EXPECT_EQ(CallPutKey(ClusterChannel(server.address(), &worker_, kCoordinatorName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CallPutKey(ServerAuthChannel(server.address(), ca_->cert_pem(), kCoordinatorName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.service().n_calls(), 0);
}

TEST_F(GrpcTlsTest, WrongRoleNameFails) {
  // The coordinator's certificate names kCoordinatorName only.
  PeerServer server(&coordinator_);
  ASSERT_TRUE(server.started());
  EXPECT_EQ(CallPutKey(ClusterChannel(server.address(), &worker_, kWorkerName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CallPutKey(ServerAuthChannel(server.address(), ca_->cert_pem(), kWorkerName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.service().n_calls(), 0);
}

TEST_F(GrpcTlsTest, WorkerCannotPoseAsCoordinator) {
  PeerServer server(&worker_);  // A worker's certificate serving where the coordinator is expected.
  ASSERT_TRUE(server.started());
  EXPECT_EQ(CallPutKey(ServerAuthChannel(server.address(), ca_->cert_pem(), kCoordinatorName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.service().n_calls(), 0);
  // The same server, dialed as a worker, is fine.
  EXPECT_TRUE(CallPutKey(ClusterChannel(server.address(), &coordinator_, kWorkerName)).ok());
  EXPECT_EQ(server.service().peer(), "coordinator");
}

TEST_F(GrpcTlsTest, PlaintextAndTlsDoNotMix) {
  PeerServer tls_server(&coordinator_);
  ASSERT_TRUE(tls_server.started());
  EXPECT_EQ(CallPutKey(ClusterChannel(tls_server.address(), nullptr, kCoordinatorName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(tls_server.service().n_calls(), 0);
  PeerServer plain_server(nullptr);
  ASSERT_TRUE(plain_server.started());
  EXPECT_EQ(CallPutKey(ClusterChannel(plain_server.address(), &worker_, kCoordinatorName)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(plain_server.service().n_calls(), 0);
}

TEST_F(GrpcTlsTest, InsecureServerAndChannelWorkAndCallerIsAnonymous) {
  PeerServer server(nullptr);
  ASSERT_TRUE(server.started());
  const grpc::Status status = CallPutKey(ClusterChannel(server.address(), nullptr, kCoordinatorName));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(server.service().peer(), "");
}

TEST_F(GrpcTlsTest, ChannelArgumentsReachTheChannel) {
  PeerServer server(&coordinator_);
  ASSERT_TRUE(server.started());
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64);
  auto channel = ClusterChannel(server.address(), &worker_, kCoordinatorName, args);
  EXPECT_TRUE(CallPutKey(channel, "small").ok());
  EXPECT_EQ(CallPutKey(channel, std::string(1024, 'x')).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace cascade::security
