// The HTTP server under hostile clients: slowloris, idle floods, chunked bombs, framing
// tricks, overload (429, never a reset), API keys, abandoned requests, HTTPS with
// certificates made at test time by the openssl CLI.
#include "libs/serving/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <openssl/x509.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "libs/serving/testing/raw_http.h"
#include "libs/serving/testing/test_certs.h"

namespace herd::serving::http {
namespace {

using testing::Body;
using testing::Connect;
using testing::Exchange;
using testing::ReadAll;
using testing::RssKb;
using testing::SendAll;
using testing::StatusOf;
using namespace std::string_literals;  // "...\0..."s: literals with NUL bytes, exact length

// A reply the server owes at once even with 1,040 connections open; ThreadSanitizer
// slows the I/O thread several times over.
#if defined(__SANITIZE_THREAD__)
constexpr absl::Duration kFastReply = absl::Seconds(5);
#else
constexpr absl::Duration kFastReply = absl::Seconds(1);
#endif

std::string Get(const std::string& path, const std::string& extra = "") { return testing::GetRequest(path, extra); }

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions o) {
    server_ = std::make_unique<Server>(std::move(o));
    server_->Get(
        "/healthz", [](const Request&, Response& r) { r.SetContent("ok\n", "text/plain"); }, true);
    server_->Get("/items/([0-9]+)",
                 [](const Request& q, Response& r) { r.SetContent("item " + q.matches[1], "text/plain"); });
    server_->Post("/echo", [](const Request& q, Response& r) { r.SetContent(q.body, "application/octet-stream"); });
    server_->Get("/slow", [this](const Request& q, Response& r) {
      ++in_slow_;
      absl::SleepFor(absl::Milliseconds(300));
      r.SetContent("done", "text/plain");
      (void)q;
    });
    server_->Get("/wait_gone", [this](const Request& q, Response& r) {
      const absl::Time end = absl::Now() + absl::Seconds(5);
      while (!q.ClientGone() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
      saw_gone_ = q.ClientGone();
      r.SetContent("x", "text/plain");
    });
    server_->Get("/stream", [this](const Request&, Response& r) {
      r.content_type = "text/event-stream";
      r.stream = [this](ResponseWriter& w) {
        for (int i = 0; i < 200; ++i) {
          if (!w.Write(absl::StrCat("data: ", i, "\n\n"))) {
            stream_write_failed_at_ = i;
            return;
          }
          absl::SleepFor(absl::Milliseconds(10));
        }
      };
    });
    auto p = server_->Start("127.0.0.1", 0);
    ASSERT_TRUE(p.ok()) << p.status();
    port_ = *p;
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::atomic<int> in_slow_{0};
  std::atomic<bool> saw_gone_{false};
  std::atomic<int> stream_write_failed_at_{-1};
};

TEST_F(HttpServerTest, RoutesKeepAliveAndErrors) {
  StartServer({});
  EXPECT_EQ(Body(Exchange(port_, Get("/healthz"))), "ok\n");
  EXPECT_EQ(Body(Exchange(port_, Get("/items/42"))), "item 42");
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/nope"))), 404);
  EXPECT_EQ(
      StatusOf(Exchange(port_, "POST /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")),
      405);
  // Two requests on one keep-alive connection, the second with a body.
  int fd = Connect(port_);
  ASSERT_TRUE(SendAll(fd,
                      "GET /items/1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\n"
                      "Content-Length: 5\r\nConnection: close\r\n\r\nhello"));
  const std::string both = ReadAll(fd);
  ::close(fd);
  EXPECT_TRUE(absl::StrContains(both, "item 1")) << both;
  EXPECT_TRUE(absl::EndsWith(both, "hello")) << both;
  // Chunked request bodies are decoded; Expect: 100-continue is answered.
  const std::string chunked = Exchange(port_,
                                       "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                       "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(Body(chunked), "abcde");
  fd = Connect(port_);
  SendAll(fd,
          "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  char buf[256];
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  EXPECT_TRUE(absl::StartsWith(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 100 Continue"));
  SendAll(fd, "xyz");
  EXPECT_TRUE(absl::EndsWith(ReadAll(fd), "xyz"));
  ::close(fd);
}

TEST_F(HttpServerTest, FramingTricksGet4xx) {
  ServerOptions o;
  o.max_header_bytes = 8192;
  o.max_header_count = 50;
  StartServer(o);
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\n";
  std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100000; ++i) many += "A: b\r\n";
  many += "\r\n";
  std::string sixty = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 60; ++i) sixty += absl::StrCat("X-H", i, ": v\r\n");
  sixty += "\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"negative Content-Length", head + "Content-Length: -1\r\n\r\n"},
      {"Content-Length 2^64+1", head + "Content-Length: 18446744073709551617\r\n\r\n"},
      {"two different Content-Lengths", head + "Content-Length: 3\r\nContent-Length: 5\r\n\r\nabcde"},
      {"two equal Content-Lengths", head + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc"},
      {"Content-Length with chunked",
       head + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
      {"chunked then Content-Length",
       head + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
      {"gzip transfer coding", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
      {"NUL in a header value", head + "X-A: a\0b\r\nContent-Length: 0\r\n\r\n"s},
      {"NUL in a header name", head + "X\0A: ab\r\nContent-Length: 0\r\n\r\n"s},
      {"100,000 header fields", many},
      {"more fields than allowed", sixty},
      {"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
      {"not HTTP", "HELLO\r\n\r\n"},
  };
  for (const auto& [name, raw] : cases) {
    const absl::Time t0 = absl::Now();
    const int status = StatusOf(Exchange(port_, raw, absl::Seconds(5)));
    EXPECT_GE(status, 400) << name;
    EXPECT_LT(status, 500) << name;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2)) << name << ": answered late";
  }
}

TEST_F(HttpServerTest, ChunkedBombIsRefusedWithoutBufferingIt) {
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  StartServer(o);
  const long rss0 = RssKb();
  int fd = Connect(port_);
  ASSERT_TRUE(SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = absl::StrCat("10000\r\n", std::string(0x10000, 'a'), "\r\n");
  size_t sent = 0;
  // Up to 200 MiB; the server answers 413 after 1 MiB and stops reading.
  while (sent < (200u << 20) && SendAll(fd, chunk)) {
    sent += 0x10000;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;
  }
  const std::string r = ReadAll(fd, absl::Seconds(5));
  ::close(fd);
  EXPECT_EQ(StatusOf(r), 413) << r.substr(0, 200);
  EXPECT_LT(sent, 32u << 20) << "the server kept reading a body over its limit";
  EXPECT_LT(RssKb() - rss0, 50 * 1024) << "RSS grew by " << (RssKb() - rss0) << " KiB";
  // The same with a plain Content-Length over the limit: refused before the body.
  EXPECT_EQ(StatusOf(Exchange(port_, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 209715200\r\n\r\n")), 413);
}

TEST_F(HttpServerTest, IdleAndHalfSentConnectionsDoNotStarveOthers) {
  ServerOptions o;
  o.header_timeout = absl::Seconds(30);
  o.idle_timeout = absl::Seconds(30);
  StartServer(o);
  std::vector<int> fds;
  for (int i = 0; i < 1000; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  for (int i = 0; i < 40; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n");  // and never the rest
    fds.push_back(fd);
  }
  for (int i = 0; i < 5; ++i) {
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(Body(Exchange(port_, Get("/healthz"))), "ok\n");
    EXPECT_EQ(Body(Exchange(port_, Get("/items/7"))), "item 7");
    EXPECT_LT(absl::Now() - t0, kFastReply);
  }
  EXPECT_GE(server_->open_connections(), 1040);
  for (int fd : fds) ::close(fd);
}

TEST_F(HttpServerTest, SlowHeadersAreCutOffAtTheHeaderTimeout) {
  ServerOptions o;
  o.header_timeout = absl::Milliseconds(300);
  StartServer(o);
  int fd = Connect(port_);
  SendAll(fd, "GET /healthz HTTP/1.1\r\n");
  const absl::Time t0 = absl::Now();
  ReadAll(fd, absl::Seconds(5));  // returns at EOF
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  ::close(fd);
}

TEST_F(HttpServerTest, OverloadGets429NeverAReset) {
  ServerOptions o;
  o.max_concurrent_requests = 2;
  o.retry_after_s = 3;
  StartServer(o);
  std::atomic<int> ok{0}, busy{0}, other{0}, resets{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 40; ++i) {
    ts.emplace_back([&] {
      int fd = Connect(port_);
      SendAll(fd, Get("/slow"));
      bool reset = false;
      const std::string r = ReadAll(fd, absl::Seconds(20), &reset);
      ::close(fd);
      if (reset) ++resets;
      const int s = StatusOf(r);
      if (s == 200) {
        ++ok;
      } else if (s == 429) {
        ++busy;
        EXPECT_TRUE(absl::StrContains(r, "Retry-After: 3")) << r;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(resets.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 2);
  EXPECT_GE(busy.load(), 1);
  EXPECT_EQ(ok + busy, 40);
  // Quick routes run inline: they answer while every slot is busy.
  std::thread a([&] { Exchange(port_, Get("/slow")); }), b([&] { Exchange(port_, Get("/slow")); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Body(Exchange(port_, Get("/healthz"))), "ok\n");
  a.join();
  b.join();
}

TEST_F(HttpServerTest, ApiKeys) {
  auto keys = ApiKeys::FromList("secret-key-one,secret-key-two", "test");
  ASSERT_TRUE(keys.ok());
  ServerOptions o;
  o.api_keys = &*keys;
  o.open_paths = {"/healthz"};
  o.per_key_requests_per_minute = 3;
  StartServer(o);
  const std::string missing = Exchange(port_, Get("/items/1"));
  EXPECT_EQ(StatusOf(missing), 401);
  EXPECT_TRUE(absl::StrContains(missing, "WWW-Authenticate: Bearer"));
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-oneX\r\n"))), 401);
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Basic c2VjcmV0\r\n"))), 401);
  // An unauthenticated body is never read.
  EXPECT_EQ(StatusOf(Exchange(port_, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")), 401);
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/healthz"))), 200);
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-one\r\n"))), 200);
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "X-Api-Key: secret-key-two\r\n"))), 200);
  // Per-key rate: 3 per minute; the fourth request of key one is 429, key two is not affected.
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-one\r\n"))), 200);
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-one\r\n"))), 200);
  const std::string limited = Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-one\r\n"));
  EXPECT_EQ(StatusOf(limited), 429);
  // Retry-After is the real wait: the bucket refills one request per 20 s, and it was
  // empty a moment ago (the bound allows the test 18 s to get here).
  const size_t at = limited.find("Retry-After: ");
  ASSERT_NE(at, std::string::npos) << limited;
  const int wait_s = std::atoi(limited.c_str() + at + 13);
  EXPECT_GE(wait_s, 2) << limited;
  EXPECT_LE(wait_s, 20) << limited;
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/1", "Authorization: Bearer secret-key-two\r\n"))), 200);
}

TEST_F(HttpServerTest, HandlerSeesTheClientHangUp) {
  StartServer({});
  int fd = Connect(port_);
  SendAll(fd, Get("/wait_gone"));
  absl::SleepFor(absl::Milliseconds(100));
  ::close(fd);
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (!saw_gone_ && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(saw_gone_.load());
}

TEST_F(HttpServerTest, StreamsChunksAndStopsWhenTheClientLeaves) {
  StartServer({});
  int fd = Connect(port_);
  SendAll(fd, Get("/stream"));
  std::string got;
  char buf[4096];
  while (!absl::StrContains(got, "data: 3\n")) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_TRUE(absl::StrContains(got, "Transfer-Encoding: chunked"));
  ::close(fd);
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (stream_write_failed_at_ < 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(stream_write_failed_at_.load(), 3);
  EXPECT_LT(stream_write_failed_at_.load(), 150);
  // A whole stream ends with the last chunk.
  const std::string whole = Exchange(port_, Get("/stream"));
  EXPECT_TRUE(absl::StrContains(whole, "data: 199\n")) << whole.size();
  EXPECT_TRUE(absl::EndsWith(whole, "0\r\n\r\n"));
}

// ---- HTTPS ----

struct TlsResult {
  bool handshake_ok = false;
  std::string peer_cn;
  std::string response;
};

TlsResult TlsExchange(int port, const std::string& ca, const std::string& raw, const std::string& cert = "",
                      const std::string& key = "") {
  TlsResult out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!cert.empty()) {
    SSL_CTX_use_certificate_file(ctx, cert.c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM);
  }
  int fd = Connect(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) == 1) {
    X509* peer = SSL_get_peer_certificate(ssl);
    if (peer != nullptr) {
      char buf[256] = {};
      X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, buf, sizeof buf);
      out.peer_cn = buf;
      X509_free(peer);
    }
    if (SSL_write(ssl, raw.data(), static_cast<int>(raw.size())) > 0) {
      out.handshake_ok = true;  // TLS 1.3: a refused client certificate shows up on the first read
      char rb[4096];
      int n;
      while ((n = SSL_read(ssl, rb, sizeof rb)) > 0) out.response.append(rb, static_cast<size_t>(n));
      if (out.response.empty()) out.handshake_ok = false;
    }
  }
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return out;
}

TEST_F(HttpServerTest, HttpsWithReloadAndMutualTls) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto certs = testing::MakeTestCerts(std::string(tmp != nullptr ? tmp : "/tmp") + "/tls");
  if (!certs.ok()) GTEST_SKIP() << "no test certificates: " << certs.status();
  // Served from copies, so that the test can replace them.
  const std::string cert = certs->dir + "/https.pem", key = certs->dir + "/https.key";
  ASSERT_TRUE(testing::ReplaceFile(certs->server_cert, cert).ok());
  ASSERT_TRUE(testing::ReplaceFile(certs->server_key, key).ok());
  ServerOptions o;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  StartServer(o);
  TlsResult r = TlsExchange(port_, certs->ca, Get("/items/5"));
  ASSERT_TRUE(r.handshake_ok);
  const std::string first_cn = r.peer_cn;
  EXPECT_FALSE(first_cn.empty());
  EXPECT_EQ(Body(r.response), "item 5");
  // Plaintext to the TLS port fails cleanly and quickly.
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(StatusOf(Exchange(port_, Get("/items/5"), absl::Seconds(5))), -1);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  // A new certificate on disk (another CA's) is used for new connections.
  ASSERT_TRUE(testing::ReplaceFile(certs->server2_key, key).ok());
  ASSERT_TRUE(testing::ReplaceFile(certs->server2_cert, cert).ok());
  r = TlsExchange(port_, certs->ca2, Get("/items/6"));
  ASSERT_TRUE(r.handshake_ok);
  EXPECT_NE(r.peer_cn, first_cn);
  EXPECT_EQ(Body(r.response), "item 6");
  server_->Stop();

  // mTLS: a client without a certificate, or with one from another CA, is refused.
  ServerOptions m;
  m.tls_cert_file = certs->server_cert;
  m.tls_key_file = certs->server_key;
  m.tls_client_ca_file = certs->ca;
  StartServer(m);
  EXPECT_FALSE(TlsExchange(port_, certs->ca, Get("/items/7")).handshake_ok);
  r = TlsExchange(port_, certs->ca, Get("/items/7"), certs->client_cert, certs->client_key);
  EXPECT_TRUE(r.handshake_ok);
  EXPECT_EQ(Body(r.response), "item 7");
  EXPECT_FALSE(TlsExchange(port_, certs->ca, Get("/items/7"), certs->client2_cert, certs->client2_key).handshake_ok);
}

TEST(HttpServer, BadTlsFilesAreNamed) {
  ServerOptions o;
  o.tls_cert_file = "/nonexistent/cert.pem";
  o.tls_key_file = "/nonexistent/key.pem";
  Server s(o);
  auto p = s.Start("127.0.0.1", 0);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "/nonexistent/cert.pem")) << p.status();
  ServerOptions half;
  half.tls_cert_file = "/x.pem";
  EXPECT_EQ(Server(half).Start("127.0.0.1", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Asynchronous routes: 200 requests held open at once by one handler thread, answered
// later from another thread (whole and streamed), every one complete; a keep-alive
// connection serves its next request after an asynchronous stream; a dropped Responder
// answers 500; a client that goes away is seen; Stop with Responders still held is safe.
TEST(HttpServerAsync, ManyRequestsInFlightOnOneHandlerThread) {
  ServerOptions o;
  o.max_concurrent_requests = 256;
  o.handler_threads = 1;
  Server server(o);
  std::mutex mu;
  std::vector<std::shared_ptr<Responder>> held;
  std::vector<std::shared_ptr<const Request>> reqs;
  server.RouteAsync("GET", "/later", [&](std::shared_ptr<const Request> q, std::shared_ptr<Responder> r) {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(std::move(r));
    reqs.push_back(std::move(q));
  });
  server.RouteAsync("GET", "/drop", [](std::shared_ptr<const Request>, std::shared_ptr<Responder>) {});
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();

  constexpr int kClients = 200;
  std::vector<int> fds;
  for (int i = 0; i < kClients; ++i) {
    fds.push_back(Connect(*port));
    ASSERT_GE(fds.back(), 0);
    const bool stream = i % 2 == 1;
    // Odd clients keep the connection open for a second request after the stream.
    ASSERT_TRUE(SendAll(fds.back(), absl::StrCat("GET /later?i=", i, stream ? "&s=1" : "", " HTTP/1.1\r\nHost: x\r\n",
                                                 stream ? "" : "Connection: close\r\n", "\r\n")));
  }
  const absl::Time end = absl::Now() + absl::Seconds(30);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (static_cast<int>(held.size()) == kClients || absl::Now() > end) break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::vector<std::shared_ptr<Responder>> rs;
  std::vector<std::shared_ptr<const Request>> qs;
  {
    std::lock_guard<std::mutex> l(mu);
    rs = held;
    qs = reqs;
  }
  ASSERT_EQ(static_cast<int>(rs.size()), kClients) << "every request reached the single handler thread";
  // A 201st request finds every slot... not taken: 256 slots. Answer from another thread.
  std::thread answer([&] {
    for (size_t k = 0; k < rs.size(); ++k) {
      const std::string q = qs[k]->query;
      if (absl::StrContains(q, "s=1")) {
        Response head;
        head.content_type = "text/event-stream";
        rs[k]->StartStream(head);
        for (int c = 0; c < 3; ++c) EXPECT_TRUE(rs[k]->Write(absl::StrCat("data: ", q, " ", c, "\n\n")));
        rs[k]->End();
        EXPECT_FALSE(rs[k]->Write("late")) << "no writes after End";
      } else {
        Response res;
        res.SetContent("whole " + q, "text/plain");
        rs[k]->Send(std::move(res));
      }
    }
  });
  answer.join();
  for (int i = 0; i < kClients; ++i) {
    const bool stream = i % 2 == 1;
    if (!stream) {
      const std::string r = ReadAll(fds[static_cast<size_t>(i)]);
      EXPECT_EQ(StatusOf(r), 200) << r;
      EXPECT_EQ(Body(r), absl::StrCat("whole i=", i)) << r;
      continue;
    }
    // Read the stream to its last chunk, then use the same connection again.
    std::string r;
    char buf[4096];
    const absl::Time stop = absl::Now() + absl::Seconds(10);
    while (!absl::StrContains(r, "\r\n0\r\n\r\n") && absl::Now() < stop) {
      pollfd p{fds[static_cast<size_t>(i)], POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fds[static_cast<size_t>(i)], buf, sizeof buf, 0);
      if (n <= 0) break;
      r.append(buf, static_cast<size_t>(n));
    }
    EXPECT_EQ(StatusOf(r), 200) << r;
    EXPECT_TRUE(absl::StrContains(r, "Transfer-Encoding: chunked")) << r;
    for (int c = 0; c < 3; ++c) {
      EXPECT_TRUE(absl::StrContains(r, absl::StrCat("data: i=", i, "&s=1 ", c, "\n\n"))) << r;
    }
    EXPECT_TRUE(absl::EndsWith(r, "\r\n0\r\n\r\n")) << r;
    ASSERT_TRUE(SendAll(fds[static_cast<size_t>(i)], "GET /drop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const std::string second = ReadAll(fds[static_cast<size_t>(i)]);
    EXPECT_EQ(StatusOf(second), 500) << "a dropped Responder answers 500: " << second;
  }
  for (int fd : fds) ::close(fd);
  rs.clear();
  qs.clear();
  {
    std::lock_guard<std::mutex> l(mu);
    held.clear();
    reqs.clear();
  }

  // A client that hangs up is seen by ClientGone, and writes to it then fail.
  int fd = Connect(*port);
  ASSERT_TRUE(SendAll(fd, "GET /later?gone HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::shared_ptr<Responder> r;
  for (const absl::Time e = absl::Now() + absl::Seconds(10); r == nullptr && absl::Now() < e;) {
    absl::SleepFor(absl::Milliseconds(5));
    std::lock_guard<std::mutex> l(mu);
    if (!held.empty()) r = held.back();
  }
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->ClientGone());
  Response head;
  r->StartStream(head);
  ::close(fd);
  bool gone = false;
  for (const absl::Time e = absl::Now() + absl::Seconds(10); !gone && absl::Now() < e;) {
    gone = r->ClientGone() || !r->Write("data: x\n\n");
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(gone);

  // Stop while a Responder of an unanswered request is held; calls on it afterwards do
  // nothing (and do not crash).
  fd = Connect(*port);
  ASSERT_TRUE(SendAll(fd, "GET /later?held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::shared_ptr<Responder> last;
  for (const absl::Time e = absl::Now() + absl::Seconds(10); last == nullptr && absl::Now() < e;) {
    absl::SleepFor(absl::Milliseconds(5));
    std::lock_guard<std::mutex> l(mu);
    if (held.back() != r) last = held.back();
  }
  ASSERT_NE(last, nullptr);
  server.Stop(absl::Milliseconds(50));
  last->StartStream(Response{});
  EXPECT_FALSE(last->Write("data: after stop\n\n"));
  last->End();
  ::close(fd);
}

}  // namespace
}  // namespace herd::serving::http
