// A secured local cluster end to end: loader, worker, draft worker and gateway (real
// processes started by LocalCluster, as `herd up --tls-*` does) with mTLS between all
// of them (certificates made by openssl at test time), the cluster key required by the
// internal services, API keys on the gateway's gRPC API and an admin key on Quantize.
#include <stdlib.h>

#include <chrono>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "libs/serving/security.h"
#include "libs/serving/testing/test_certs.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "proto/herd/v1/loader.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

constexpr char kClusterKey[] = "cluster-key-e2e-0123456789";
constexpr char kApiKey[] = "api-key-e2e-0123456789";
constexpr char kAdminKey[] = "admin-key-e2e-0123456789";

// A unary call with an empty request message, 10 s deadline.
grpc::Status Call(const std::shared_ptr<grpc::Channel>& ch, const std::string& method) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      ch.get(), grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &ctx, req, &resp);
}

class SecureClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = SharedDir();
    if (shared_.empty()) return;
    const char* tmp = std::getenv("TEST_TMPDIR");
    auto certs = serving::testing::MakeTestCerts(std::string(tmp ? tmp : "/tmp") + "/e2e_certs");
    if (!certs.ok()) {
      start_status_ = certs.status();
      return;
    }
    certs_ = *certs;
    // The services inherit these.
    ::setenv("HERD_CLUSTER_KEY", kClusterKey, 1);
    ::setenv("HERD_API_KEYS", absl::StrCat("other-api-key-123456,", kApiKey).c_str(), 1);
    ::setenv("HERD_ADMIN_KEY", kAdminKey, 1);
    cluster_ = new cli::LocalCluster();
    cli::ClusterOptions o = e2e::TinyClusterOptions(shared_);
    o.max_sequences = 4;
    o.n_ctx = 2048;
    o.draft_workers = 1;
    // draft-model: the target worker asks the draft worker (worker-run speculation), so
    // that call crosses mTLS with the cluster key too.
    o.spec_type = "draft-model";
    o.model_draft = shared_ + "/models/stories260K.gguf";
    o.draft_target_model = "stories260K";
    o.extra_flags = {"--tls_cert_file=" + certs_.server_cert, "--tls_key_file=" + certs_.server_key,
                     "--tls_ca_file=" + certs_.ca};
    o.gateway_security = Client(kApiKey);
    // Drafts must arrive over mTLS (no draft failures below), not within the default
    // 50 ms: a loaded CI machine may take longer for the first handshake.
    o.extra_gateway_flags = {"--draft_timeout_ms=5000"};
    o.extra_worker_flags = {"--draft_timeout_ms=5000"};
    start_status_ = cluster_->Start(o, std::chrono::seconds(120));
  }
  static void TearDownTestSuite() {
    if (cluster_ != nullptr) cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    ASSERT_TRUE(start_status_.ok()) << start_status_;
  }
  // mTLS with the client certificate, sending `key` ("" = none).
  static serving::ClientSecurity Client(const std::string& key) {
    serving::ClientSecurity c;
    c.tls_ca_file = certs_.ca;
    c.tls_cert_file = certs_.client_cert;
    c.tls_key_file = certs_.client_key;
    c.key = key;
    return c;
  }
  static std::string shared_;
  static serving::testing::TestCerts certs_;
  static cli::LocalCluster* cluster_;
  static absl::Status start_status_;
};
std::string SecureClusterTest::shared_;
serving::testing::TestCerts SecureClusterTest::certs_;
cli::LocalCluster* SecureClusterTest::cluster_ = nullptr;
absl::Status SecureClusterTest::start_status_;

grpc::Status Generate(const std::shared_ptr<grpc::Channel>& ch, int* n_tokens) {
  auto stub = v1::Gateway::NewStub(ch);
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text("Once upon a time, there was a little girl. Once upon a time, there was a little");
  req.set_n_predict(16);
  req.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  *n_tokens = 0;
  while (reader->Read(&r)) *n_tokens += r.token_ids_size();
  return reader->Finish();
}

TEST_F(SecureClusterTest, GatewayNeedsAnApiKeyAndReachesEveryServiceOverMtls) {
  const std::string gw = cluster_->gateway_addr();
  int n = 0;
  EXPECT_EQ(Generate(serving::MakeChannel(gw, Client("")), &n).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Generate(serving::MakeChannel(gw, Client("wrong-key-0123456789")), &n).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Generate(serving::MakeChannel(gw, Client(kClusterKey)), &n).error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << "the cluster key is not a public API key";
  grpc::Status ok = Generate(serving::MakeChannel(gw, Client(kApiKey)), &n);
  ASSERT_TRUE(ok.ok()) << ok.error_message();  // gateway -> loader (vocab) and -> worker (session)
  EXPECT_EQ(n, 16);
  // worker -> draft worker: the draft worker served proposals (a refused call would not
  // reach its handler), and neither the worker nor the gateway saw a failed draft call.
  ASSERT_EQ(cluster_->draft_workers().size(), 1u);
  EXPECT_GT(e2e::MetricSum(cluster_->draft_workers()[0]->metrics_addr, "herd_draft_calls_total"), 0);
  EXPECT_EQ(e2e::MetricSum(cluster_->workers()[0]->metrics_addr, "herd_worker_spec_draft_errors_total"), 0);
  EXPECT_EQ(e2e::MetricSum(cluster_->gateway_metrics_addr(), "herd_gateway_spec_draft_failures_total"), 0);
}

TEST_F(SecureClusterTest, InternalServicesNeedTheClusterKey) {
  struct Target {
    std::string addr, method;
  };
  const Target targets[] = {
      {cluster_->loader_addr(), "/herd.v1.Loader/ListModels"},
      {cluster_->workers()[0]->grpc_addr, "/herd.v1.Worker/Info"},
      {cluster_->draft_workers()[0]->grpc_addr, "/herd.v1.Draft/EndSession"},
  };
  for (const Target& t : targets) {
    SCOPED_TRACE(t.method);
    EXPECT_EQ(Call(serving::MakeChannel(t.addr, Client("")), t.method).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::Status wrong = Call(serving::MakeChannel(t.addr, Client(kApiKey)), t.method);
    EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(wrong.error_message(), "missing or invalid API key");
    grpc::Status right = Call(serving::MakeChannel(t.addr, Client(kClusterKey)), t.method);
    EXPECT_NE(right.error_code(), grpc::StatusCode::UNAUTHENTICATED) << right.error_message();
    EXPECT_NE(right.error_code(), grpc::StatusCode::UNAVAILABLE) << right.error_message();
    // Health stays open (Kubernetes probes), over mTLS.
    EXPECT_TRUE(Call(serving::MakeChannel(t.addr, Client("")), "/grpc.health.v1.Health/Check").ok());
  }
  EXPECT_TRUE(
      Call(serving::MakeChannel(cluster_->loader_addr(), Client(kClusterKey)), "/herd.v1.Loader/ListModels").ok());
  EXPECT_TRUE(
      Call(serving::MakeChannel(cluster_->workers()[0]->grpc_addr, Client(kClusterKey)), "/herd.v1.Worker/Info").ok());
}

TEST_F(SecureClusterTest, QuantizeNeedsTheAdminKey) {
  auto run = [&](const std::string& key) {
    auto stub = v1::Loader::NewStub(serving::MakeChannel(cluster_->loader_addr(), Client(key)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::QuantizeRequest req;
    req.set_source("no-such-model");
    req.set_target("never-written");
    req.set_type("Q8_0");
    auto reader = stub->Quantize(&ctx, req);
    v1::QuantizeProgress p;
    while (reader->Read(&p)) {
    }
    return reader->Finish();
  };
  grpc::Status cluster = run(kClusterKey);
  EXPECT_EQ(cluster.error_code(), grpc::StatusCode::PERMISSION_DENIED) << cluster.error_message();
  EXPECT_EQ(run("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status admin = run(kAdminKey);
  EXPECT_EQ(admin.error_code(), grpc::StatusCode::NOT_FOUND) << "past the key check: " << admin.error_message();
}

TEST_F(SecureClusterTest, PlaintextAndCertlessClientsAreRefusedQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  serving::ClientSecurity plain;
  plain.key = kClusterKey;
  grpc::Status p = Call(serving::MakeChannel(cluster_->loader_addr(), plain), "/herd.v1.Loader/ListModels");
  EXPECT_EQ(p.error_code(), grpc::StatusCode::UNAVAILABLE) << p.error_message();
  serving::ClientSecurity no_cert;
  no_cert.tls_ca_file = certs_.ca;
  no_cert.key = kClusterKey;
  grpc::Status nc = Call(serving::MakeChannel(cluster_->loader_addr(), no_cert), "/herd.v1.Loader/ListModels");
  EXPECT_EQ(nc.error_code(), grpc::StatusCode::UNAVAILABLE) << nc.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8)) << "refusals must not wait for deadlines";
}

}  // namespace
}  // namespace herd
