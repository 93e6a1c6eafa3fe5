// StartGrpcServer's security options and MakeChannel, end to end on loopback:
// API keys (plaintext and TLS), per-method keys, TLS, mTLS, certificate reload.
// The protected service is grpc.health.v1.Health itself (made non-open where needed).
#include "libs/serving/security.h"

#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"

#include "libs/serving/server.h"
#include "libs/serving/testing/test_certs.h"

namespace herd::serving {
namespace {

constexpr char kCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kKey[] = "cluster-key-0123456789";
constexpr char kAdmin[] = "admin-key-0123456789";

const testing::TestCerts& Certs() {
  static const testing::TestCerts* certs = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    auto c = testing::MakeTestCerts(std::string(tmp ? tmp : "/tmp") + "/certs");
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      return new testing::TestCerts();
    }
    return new testing::TestCerts(*c);
  }();
  return *certs;
}

ApiKeys Keys(const std::string& k) {
  auto keys = ApiKeys::FromList(k, "test");
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.ok() ? *keys : ApiKeys();
}

struct Server {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string addr() const { return absl::StrCat("127.0.0.1:", port); }
  std::string local() const { return absl::StrCat("localhost:", port); }
  ~Server() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<Server> Start(const ServerSecurity& sec) {
  auto s = std::make_unique<Server>();
  GrpcServerOptions o;
  o.address = "127.0.0.1:0";
  o.security = sec;
  auto srv = StartGrpcServer(o, {}, &s->port);
  EXPECT_TRUE(srv.ok()) << srv.status();
  if (srv.ok()) s->server = *std::move(srv);
  return s;
}

// Health.Check (empty request = the whole server) with a 5 s deadline; optional extra
// metadata.
grpc::Status Check(const std::shared_ptr<grpc::Channel>& ch, const std::string& header = "",
                   const std::string& value = "", const char* method = kCheck) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!header.empty()) ctx.AddMetadata(header, value);
  grpc::ByteBuffer req, resp;
  grpc::Slice empty("");
  req = grpc::ByteBuffer(&empty, 1);
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      ch.get(), grpc::internal::RpcMethod(method, grpc::internal::RpcMethod::NORMAL_RPC), &ctx, req, &resp);
}

ClientSecurity Tls(const std::string& ca) {
  ClientSecurity c;
  c.tls_ca_file = ca;
  return c;
}

// Server security with the test server certificate and key (TLS, no client certificate).
ServerSecurity ServerTls(const testing::TestCerts& c) {
  ServerSecurity sec;
  sec.tls_cert_file = c.server_cert;
  sec.tls_key_file = c.server_key;
  return sec;
}

TEST(ApiKeyTest, PlaintextRequiresTheKey) {
  ServerSecurity sec;
  sec.keys = Keys(kKey);
  sec.health_open = false;
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  auto plain = MakeChannel(s->addr(), ClientSecurity());

  grpc::Status none = Check(plain);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(none.error_message(), "missing or invalid API key");
  EXPECT_EQ(Check(plain, "authorization", "Bearer wrong-key-123456").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Check(plain, "authorization", kKey).error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << "the key without the Bearer scheme is not a credential";
  EXPECT_TRUE(Check(plain, "authorization", absl::StrCat("Bearer ", kKey)).ok());
  EXPECT_TRUE(Check(plain, "x-api-key", kKey).ok());

  ClientSecurity with_key;
  with_key.key = kKey;
  EXPECT_TRUE(Check(MakeChannel(s->addr(), with_key)).ok()) << "MakeChannel sends the key";
  with_key.key = "another-key-12345678";
  EXPECT_EQ(Check(MakeChannel(s->addr(), with_key)).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(ApiKeyTest, HealthIsOpenByDefault) {
  ServerSecurity sec;
  sec.keys = Keys(kKey);
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  auto plain = MakeChannel(s->addr(), ClientSecurity());
  EXPECT_TRUE(Check(plain).ok());
  // Reflection is not open by default.
  grpc::Status r = Check(plain, "", "", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  EXPECT_EQ(r.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(ApiKeyTest, MethodKeysAreStricter) {
  ServerSecurity sec;
  sec.keys = Keys(kKey);
  sec.method_keys[kCheck] = Keys(kAdmin);
  sec.health_open = false;
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  auto plain = MakeChannel(s->addr(), ClientSecurity());
  EXPECT_EQ(Check(plain, "authorization", absl::StrCat("Bearer ", kKey)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Check(plain).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Check(plain, "authorization", absl::StrCat("Bearer ", kAdmin)).ok());
  // Other methods still take the general key only.
  grpc::Status w = Check(plain, "authorization", absl::StrCat("Bearer ", kAdmin), "/grpc.health.v1.Health/Other");
  EXPECT_EQ(w.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(ApiKeyTest, NoKeysConfiguredMeansOpen) {
  auto s = Start(ServerSecurity());
  ASSERT_NE(s->server, nullptr);
  EXPECT_TRUE(Check(MakeChannel(s->addr(), ClientSecurity()), "authorization", "Bearer anything-at-all").ok());
}

TEST(TlsTest, EndToEndWithKey) {
  const auto& c = Certs();
  ServerSecurity sec = ServerTls(c);
  sec.keys = Keys(kKey);
  sec.health_open = false;
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);

  ClientSecurity cs = Tls(c.ca);
  EXPECT_EQ(Check(MakeChannel(s->addr(), cs)).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  cs.key = kKey;
  grpc::Status ok = Check(MakeChannel(s->addr(), cs));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_TRUE(Check(MakeChannel(s->local(), cs)).ok()) << "DNS SAN localhost";
}

TEST(TlsTest, PlaintextClientFailsCleanly) {
  const auto& c = Certs();
  ServerSecurity sec = ServerTls(c);
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = Check(MakeChannel(s->addr(), ClientSecurity()));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "no hang until the deadline";
}

TEST(TlsTest, UntrustedServerAndWrongNameAreRefused) {
  const auto& c = Certs();
  ServerSecurity sec = ServerTls(c);
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  EXPECT_EQ(Check(MakeChannel(s->addr(), Tls(c.ca2))).error_code(), grpc::StatusCode::UNAVAILABLE);
  ClientSecurity wrong = Tls(c.ca);
  wrong.tls_server_name = "not-the-server.example";
  EXPECT_EQ(Check(MakeChannel(s->addr(), wrong)).error_code(), grpc::StatusCode::UNAVAILABLE);
  ClientSecurity right = Tls(c.ca);
  right.tls_server_name = "localhost";
  EXPECT_TRUE(Check(MakeChannel(s->addr(), right)).ok());
}

TEST(TlsTest, MutualTlsRequiresAClientCertificate) {
  const auto& c = Certs();
  ServerSecurity sec = ServerTls(c);
  sec.tls_ca_file = c.ca;
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  EXPECT_EQ(Check(MakeChannel(s->addr(), Tls(c.ca))).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  ClientSecurity other = Tls(c.ca);
  other.tls_cert_file = c.client2_cert;  // signed by a CA the server does not trust
  other.tls_key_file = c.client2_key;
  EXPECT_EQ(Check(MakeChannel(s->addr(), other)).error_code(), grpc::StatusCode::UNAVAILABLE);
  ClientSecurity good = Tls(c.ca);
  good.tls_cert_file = c.client_cert;
  good.tls_key_file = c.client_key;
  grpc::Status st = Check(MakeChannel(s->addr(), good));
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST(TlsTest, ReplacedCertificateIsServedToNewConnections) {
  const auto& c = Certs();
  const std::string cert = c.dir + "/live.pem", key = c.dir + "/live.key";
  ASSERT_TRUE(testing::ReplaceFile(c.server_cert, cert).ok());
  ASSERT_TRUE(testing::ReplaceFile(c.server_key, key).ok());
  ServerSecurity sec;
  sec.tls_cert_file = cert;
  sec.tls_key_file = key;
  sec.tls_refresh_seconds = 1;
  auto s = Start(sec);
  ASSERT_NE(s->server, nullptr);
  ASSERT_TRUE(Check(MakeChannel(s->addr(), Tls(c.ca))).ok());
  EXPECT_EQ(Check(MakeChannel(s->addr(), Tls(c.ca2))).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(testing::ReplaceFile(c.server2_key, key).ok());
  ASSERT_TRUE(testing::ReplaceFile(c.server2_cert, cert).ok());
  bool switched = false;
  for (int i = 0; i < 40 && !switched; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    switched = Check(MakeChannel(s->addr(), Tls(c.ca2))).ok();
  }
  EXPECT_TRUE(switched) << "the new certificate (CA 2) was not served within 10 s";
  EXPECT_EQ(Check(MakeChannel(s->addr(), Tls(c.ca))).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(SecurityOptionsTest, Validation) {
  const auto& c = Certs();
  ServerSecurity half;
  half.tls_cert_file = c.server_cert;
  EXPECT_EQ(ValidateServerSecurity(half).code(), absl::StatusCode::kInvalidArgument);
  ServerSecurity missing;
  missing.tls_cert_file = c.dir + "/nope.pem";
  missing.tls_key_file = c.server_key;
  EXPECT_EQ(ValidateServerSecurity(missing).code(), absl::StatusCode::kNotFound);
  GrpcServerOptions o;
  o.address = "127.0.0.1:0";
  o.security = missing;
  int port = 0;
  EXPECT_EQ(StartGrpcServer(o, {}, &port).status().code(), absl::StatusCode::kNotFound);
  ClientSecurity cert_no_ca;
  cert_no_ca.tls_cert_file = c.client_cert;
  cert_no_ca.tls_key_file = c.client_key;
  EXPECT_EQ(ValidateClientSecurity(cert_no_ca).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateClientSecurity(Tls(c.ca)).ok());
}

TEST(SecurityOptionsTest, LoadClientKey) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file = std::string(tmp ? tmp : "/tmp") + "/client.key.txt";
  {
    std::ofstream f(file);
    f << "# comment\n\n  first-key-12345678  \nsecond-key-1234567\n";
  }
  auto k = LoadClientKey(file, "HERD_TEST_KEY_UNSET");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, "first-key-12345678");
  ::setenv("HERD_TEST_KEY", " env-key-12345678 ,other-key-1234", 1);
  k = LoadClientKey("", "HERD_TEST_KEY");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, "env-key-12345678");
  ::setenv("HERD_TEST_KEY", "short", 1);
  EXPECT_EQ(LoadClientKey("", "HERD_TEST_KEY").status().code(), absl::StatusCode::kInvalidArgument);
  k = LoadClientKey("", "HERD_TEST_KEY_UNSET");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, "");
}

}  // namespace
}  // namespace herd::serving
