#include "libs/serving/http_server.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/serving/http_parse.h"

namespace herd::serving::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

std::string Request::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

bool Request::HasHeader(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return true;
  }
  return false;
}

bool Request::ClientGone() const {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  const int r = ::poll(&p, 1, 0);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

namespace {

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

// A fixed set of threads running handlers. Submit never queues beyond the thread count
// because callers hold a slot (Impl::slots_) per task.
class HandlerPool {
 public:
  void Start(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  void Submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  void Shutdown() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

struct FileStamp {
  bool exists = false;
  int64_t mtime_ns = 0;
  int64_t size = 0;
  bool operator==(const FileStamp& o) const { return exists == o.exists && mtime_ns == o.mtime_ns && size == o.size; }
};

FileStamp Stamp(const std::string& path) {
  FileStamp s;
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.size = static_cast<int64_t>(st.st_size);
  return s;
}

// The TLS context for new connections, rebuilt when the certificate, key or CA file
// changes (a failed rebuild keeps the previous context and logs why).
class TlsContext {
 public:
  absl::Status Init(const ServerOptions& o) {
    cert_ = o.tls_cert_file;
    key_ = o.tls_key_file;
    ca_ = o.tls_client_ca_file;
    HERD_ASSIGN_OR_RETURN(ctx_, Build());
    stamps_ = Stamps();
    return absl::OkStatus();
  }
  std::shared_ptr<ssl::context> Current() {
    std::lock_guard<std::mutex> l(mu_);
    auto now = Stamps();
    if (now != stamps_) {
      stamps_ = now;
      auto ctx = Build();
      if (ctx.ok()) {
        ctx_ = *ctx;
        HERD_LOG(Info) << "https: reloaded certificate " << cert_;
      } else {
        HERD_LOG(Warning) << "https: keeping the previous certificate: " << ctx.status().message();
      }
    }
    return ctx_;
  }

 private:
  std::vector<FileStamp> Stamps() const { return {Stamp(cert_), Stamp(key_), Stamp(ca_)}; }
  absl::StatusOr<std::shared_ptr<ssl::context>> Build() const {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    ctx->use_certificate_chain_file(cert_, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("TLS certificate file ", cert_, ": ", ec.message()));
    ctx->use_private_key_file(key_, ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("TLS key file ", key_, ": ", ec.message()));
    if (!ca_.empty()) {
      ctx->load_verify_file(ca_, ec);
      if (ec) return absl::InvalidArgumentError(absl::StrCat("TLS client CA file ", ca_, ": ", ec.message()));
      ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
      if (ec) return absl::InvalidArgumentError(absl::StrCat("TLS client verification: ", ec.message()));
    }
    return ctx;
  }
  std::string cert_, key_, ca_;
  std::mutex mu_;
  std::shared_ptr<ssl::context> ctx_;
  std::vector<FileStamp> stamps_;
};

struct RouteEntry {
  std::string method;
  std::regex pattern;
  Handler handler;
  AsyncHandler async_handler;  // set for RouteAsync routes (then handler is empty)
  bool run_inline = false;
};

// What Server::Stop needs of a Responder still held by someone: drop its connection.
class DetachableResponder : public Responder {
 public:
  virtual void Detach() = 0;
};

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o) : opts(std::move(o)) {
    if (!opts.error_body) {
      opts.error_body = [](int, const std::string& m) { return std::make_pair(std::string("text/plain"), m + "\n"); };
    }
    if (opts.metrics != nullptr) {
      connections_gauge = opts.metrics->Gauge(opts.metrics_prefix + "_connections", "HTTP connections open");
      rejected = opts.metrics->Counter(opts.metrics_prefix + "_rejected_total",
                                       "HTTP requests refused by the server itself, by reason", {"reason"});
    }
  }

  void Reject(const char* reason) {
    if (rejected != nullptr) rejected->Add(1, {reason});
  }
  void ConnectionDelta(int d) {
    const int n = open.fetch_add(d) + d;
    if (connections_gauge != nullptr) connections_gauge->Set(n);
  }

  bool TryAcquireSlot() {
    int c = busy.load();
    while (c < opts.max_concurrent_requests) {
      if (busy.compare_exchange_weak(c, c + 1)) return true;
    }
    return false;
  }
  void ReleaseSlot() { busy.fetch_sub(1); }

  // Per-key limits. Returns "" when admitted (and counts the request), else the reason.
  // Admits a request of API key `key` or says why not; for "key_rate", *retry_after_s
  // is the whole seconds until the key's bucket holds a request again.
  const char* AdmitKey(int key, int* retry_after_s) {
    if (key < 0 || (opts.per_key_max_concurrent <= 0 && opts.per_key_requests_per_minute <= 0)) return nullptr;
    std::lock_guard<std::mutex> l(keys_mu);
    KeyState& k = key_state[key];
    if (opts.per_key_max_concurrent > 0 && k.active >= opts.per_key_max_concurrent) return "key_concurrency";
    if (opts.per_key_requests_per_minute > 0) {
      const double cap = opts.per_key_requests_per_minute;
      const absl::Time now = absl::Now();
      if (k.last == absl::InfinitePast()) {
        k.tokens = cap;
      } else {
        k.tokens = std::min(cap, k.tokens + absl::ToDoubleSeconds(now - k.last) * cap / 60.0);
      }
      k.last = now;
      if (k.tokens < 1.0) {
        *retry_after_s = std::max(1, static_cast<int>(std::ceil((1.0 - k.tokens) * 60.0 / cap)));
        return "key_rate";
      }
      k.tokens -= 1.0;
    }
    ++k.active;
    return nullptr;
  }
  void ReleaseKey(int key) {
    if (key < 0 || (opts.per_key_max_concurrent <= 0 && opts.per_key_requests_per_minute <= 0)) return;
    std::lock_guard<std::mutex> l(keys_mu);
    --key_state[key].active;
  }

  bool PathIsOpen(const std::string& path) const {
    for (const auto& p : opts.open_paths) {
      if (p == path) return true;
    }
    return false;
  }

  void DoAccept();
  void WaitForRoom();
  void OnAccept(beast::error_code ec, tcp::socket sock);

  ServerOptions opts;
  std::vector<RouteEntry> routes;
  std::unique_ptr<net::io_context> ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<net::steady_timer> accept_timer;
  std::vector<std::thread> io_threads;
  HandlerPool pool;
  std::optional<TlsContext> tls;
  std::atomic<int> open{0};
  std::atomic<int> busy{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> abort_writes{false};
  bool started = false;
  struct KeyState {
    int active = 0;
    double tokens = 0;
    absl::Time last = absl::InfinitePast();
  };
  std::mutex keys_mu;
  std::map<int, KeyState> key_state;
  // Asynchronous responders alive (Stop detaches them before the I/O context goes).
  std::mutex responders_mu;
  std::set<DetachableResponder*> responders;
  MetricFamily* connections_gauge = nullptr;
  MetricFamily* rejected = nullptr;
};

namespace {

using Impl = Server::Impl;

template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

 public:
  Session(Impl* srv, tcp::socket sock) : srv_(srv), stream_(std::move(sock)) { Init(); }
  Session(Impl* srv, tcp::socket sock, std::shared_ptr<ssl::context> ctx)
      : srv_(srv), ctx_(std::move(ctx)), stream_(std::move(sock), *ctx_) {
    Init();
  }
  ~Session() { srv_->ConnectionDelta(-1); }

 private:
  void Init() {
    beast::error_code ec;
    auto ep = Lowest().socket().remote_endpoint(ec);
    if (!ec) remote_ = absl::StrCat(ep.address().to_string(), ":", ep.port());
    fd_ = Lowest().socket().native_handle();
  }

 public:
  void Start() {
    if constexpr (kTls) {
      Lowest().expires_after(Chrono(srv_->opts.header_timeout));
      stream_.async_handshake(ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
        if (ec) return self->Close();
        self->DoRead();
      });
    } else {
      DoRead();
    }
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void DoRead() {
    if (srv_->stopping) return Close();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_->opts.max_header_bytes));
    // The body limit is set once the head is read and the client authenticated (an
    // unauthenticated client gets 401 whatever length it announces).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Lowest().expires_after(Chrono(first_ ? srv_->opts.header_timeout : srv_->opts.idle_timeout));
    first_ = false;
    bhttp::async_read_header(stream_, buf_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    auto [status, msg] = CheckHead(req, srv_->opts.max_header_count);
    if (status != 0) {
      srv_->Reject(status == 431 ? "header_too_large" : "bad_request");
      return SendError(status, msg, /*close=*/true);
    }
    // Authentication before the body is read: an unauthenticated client cannot make the
    // server buffer a body.
    key_ = -1;
    const std::string path(req.target().substr(0, req.target().find('?')));
    if (srv_->opts.api_keys != nullptr && srv_->opts.api_keys->enabled() && !srv_->PathIsOpen(path)) {
      std::string presented;
      auto auth = req.find(bhttp::field::authorization);
      if (auth != req.end()) {
        presented = std::string(ApiKeys::BearerToken(absl::string_view(auth->value().data(), auth->value().size())));
      } else if (auto x = req.find("x-api-key"); x != req.end()) {
        presented = std::string(absl::StripAsciiWhitespace(absl::string_view(x->value().data(), x->value().size())));
      }
      key_ = srv_->opts.api_keys->Find(presented);
      if (key_ < 0) {
        srv_->Reject("unauthenticated");
        return SendError(401, presented.empty() ? "missing API key (Authorization: Bearer KEY)" : "invalid API key",
                         /*close=*/parser_->content_length().value_or(0) > 0 || parser_->chunked(),
                         {{"WWW-Authenticate", "Bearer"}});
      }
    }
    if (parser_->content_length().value_or(0) > srv_->opts.max_body_bytes) {
      return OnReadError(bhttp::error::body_limit);
    }
    parser_->body_limit(srv_->opts.max_body_bytes);  // chunked bodies: counted as they arrive
    Lowest().expires_after(Chrono(srv_->opts.body_timeout));
    auto expect = req.find(bhttp::field::expect);
    if (expect != req.end() && beast::iequals(expect->value(), "100-continue") && !parser_->is_done()) {
      auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, req.version());
      bhttp::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buf_, *parser_,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      srv_->Reject("header_too_large");
      return SendError(431, absl::StrCat("request head: larger than ", srv_->opts.max_header_bytes, " bytes"), true);
    }
    if (ec == bhttp::error::body_limit) {
      srv_->Reject("body_too_large");
      return SendError(413, absl::StrCat("request body: larger than ", srv_->opts.max_body_bytes, " bytes"), true);
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      srv_->Reject("bad_request");
      return SendError(400, absl::StrCat("malformed request: ", ec.message()), true);
    }
    if (ec == beast::error::timeout && parser_.has_value() && parser_->got_some()) srv_->Reject("timeout");
    Close();
  }

  void OnBody(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    // A chunked body's trailer fields join the head: the same rules again (count,
    // control bytes, framing fields).
    if (auto [status, msg] = CheckHead(parser_->get(), srv_->opts.max_header_count); status != 0) {
      srv_->Reject(status == 431 ? "header_too_large" : "bad_request");
      return SendError(status, absl::StrCat(msg, " (chunked trailer)"), /*close=*/true);
    }
    bhttp::request<bhttp::string_body> msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    auto req = std::make_shared<Request>();
    FromBeast(std::move(msg), req.get());
    req->remote = remote_;
    req->fd = fd_;

    const RouteEntry* route = nullptr;
    bool path_known = false;
    for (const RouteEntry& r : srv_->routes) {
      std::smatch m;
      if (!std::regex_match(req->path, m, r.pattern)) continue;
      path_known = true;
      if (r.method != req->method) continue;
      route = &r;
      for (const auto& g : m) req->matches.push_back(g.str());
      break;
    }
    if (route == nullptr) {
      if (path_known) return SendError(405, absl::StrCat("method not allowed: ", req->method, " ", req->path), false);
      return SendError(404, absl::StrCat("no such endpoint: ", req->method, " ", req->path), false);
    }
    if (route->run_inline) {
      Response res;
      route->handler(*req, res);
      if (res.stream) res = Response{500, "text/plain", "inline handlers cannot stream\n", {}, nullptr};
      return WriteFull(std::move(res));
    }
    if (srv_->stopping) return SendError(503, "server is shutting down", true);
    if (!srv_->TryAcquireSlot()) {
      srv_->Reject("busy");
      return SendError(429, "too many requests in flight; retry later", false,
                       {{"Retry-After", std::to_string(srv_->opts.retry_after_s)}});
    }
    int retry_after_s = srv_->opts.retry_after_s;
    if (const char* why = srv_->AdmitKey(key_, &retry_after_s); why != nullptr) {
      srv_->ReleaseSlot();
      srv_->Reject(why);
      return SendError(429,
                       std::string(why) == "key_rate"
                           ? absl::StrCat("rate limit of this API key reached; retry in ", retry_after_s, " s")
                           : "too many requests in flight for this API key; retry later",
                       false, {{"Retry-After", std::to_string(retry_after_s)}});
    }
    const int key = key_;
    if (route->async_handler) {
      srv_->pool.Submit([self = this->shared_from_this(), req, route, key] {
        auto responder = std::make_shared<AsyncResponder>(self, req, key);
        try {
          route->async_handler(req, responder);
        } catch (const std::exception& e) {
          Response res;
          auto [type, body] = self->srv_->opts.error_body(500, absl::StrCat("internal error: ", e.what()));
          res.status = 500;
          res.SetContent(body, type);
          responder->Send(std::move(res));
        }
      });
      return;
    }
    srv_->pool.Submit([self = this->shared_from_this(), req, route, key] {
      Response res;
      try {
        route->handler(*req, res);
      } catch (const std::exception& e) {
        res = Response{};
        auto [type, body] = self->srv_->opts.error_body(500, absl::StrCat("internal error: ", e.what()));
        res.status = 500;
        res.SetContent(body, type);
      }
      if (res.stream) {
        self->StreamBody(res);
      } else {
        net::post(self->stream_.get_executor(),
                  [self, r = std::move(res)]() mutable { self->WriteFull(std::move(r)); });
      }
      self->srv_->ReleaseKey(key);
      self->srv_->ReleaseSlot();
    });
  }

  void SendError(int status, const std::string& message, bool close,
                 std::vector<std::pair<std::string, std::string>> headers = {}) {
    auto [type, body] = srv_->opts.error_body(status, message);
    Response res;
    res.status = status;
    res.SetContent(std::move(body), std::move(type));
    res.headers = std::move(headers);
    if (close) keep_alive_ = false, force_close_ = true;
    if (!parser_.has_value() || !parser_->is_header_done()) version_ = 11;
    WriteFull(std::move(res));
  }

  template <class Body>
  void SetHead(bhttp::response<Body>& m, const Response& res) {
    m.result(static_cast<unsigned>(res.status));
    m.version(version_);
    m.set(bhttp::field::server, "herd");
    m.set(bhttp::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) m.set(k, v);
    m.keep_alive(keep_alive_ && !force_close_ && !srv_->stopping);
  }

  // On the strand.
  void WriteFull(Response res) {
    auto m = std::make_shared<bhttp::response<bhttp::string_body>>();
    SetHead(*m, res);
    m->body() = std::move(res.body);
    m->prepare_payload();
    const bool keep = m->keep_alive();
    Lowest().expires_after(Chrono(srv_->opts.write_timeout));
    bhttp::async_write(stream_, *m, [self = this->shared_from_this(), m, keep](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      if (self->force_close_) return self->LingeringClose();
      if (!keep) return self->Close();
      self->DoRead();
    });
  }

  // Runs `start(done)` on the strand and waits for done(ok). On a handler thread.
  bool OnStrand(std::function<void(std::function<void(bool)>)> start) {
    auto p = std::make_shared<std::promise<bool>>();
    auto f = p->get_future();
    net::post(stream_.get_executor(), [start = std::move(start), p]() { start([p](bool ok) { p->set_value(ok); }); });
    return f.get();
  }

  bool WriteRaw(std::shared_ptr<std::string> data) {
    if (gone_ || srv_->abort_writes) return false;
    const bool ok = OnStrand([self = this->shared_from_this(), data](std::function<void(bool)> done) {
      self->Lowest().expires_after(Chrono(self->srv_->opts.write_timeout));
      net::async_write(self->stream_, net::buffer(*data), [data, done](beast::error_code ec, size_t) { done(!ec); });
    });
    if (!ok) gone_ = true;
    return ok;
  }

  class ChunkWriter : public ResponseWriter {
   public:
    explicit ChunkWriter(Session* s) : s_(s) {}
    bool Write(absl::string_view data) override {
      if (data.empty()) return !s_->gone_;
      auto chunk = std::make_shared<std::string>();
      absl::StrAppend(chunk.get(), absl::Hex(data.size()), "\r\n", data, "\r\n");
      return s_->WriteRaw(std::move(chunk));
    }

   private:
    Session* s_;
  };

  // On a handler thread: head, res.stream's chunks, the last chunk; then the next request.
  void StreamBody(Response& res) {
    auto head = std::make_shared<bhttp::response<bhttp::empty_body>>();
    SetHead(*head, res);
    head->chunked(true);
    const bool keep = head->keep_alive();
    auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*head);
    bool ok = OnStrand([self = this->shared_from_this(), head, sr](std::function<void(bool)> done) {
      self->Lowest().expires_after(Chrono(self->srv_->opts.write_timeout));
      bhttp::async_write_header(self->stream_, *sr, [head, sr, done](beast::error_code ec, size_t) { done(!ec); });
    });
    if (!ok) gone_ = true;
    ChunkWriter w(this);
    res.stream(w);
    ok = !gone_ && WriteRaw(std::make_shared<std::string>("0\r\n\r\n"));
    net::post(stream_.get_executor(), [self = this->shared_from_this(), ok, keep] {
      if (!ok || !keep) return self->Close();
      self->DoRead();
    });
  }

  // The Responder of an asynchronous route. Its calls post to the connection's strand;
  // the slot (and API-key count) is released at Send/End.
  class AsyncResponder : public DetachableResponder {
   public:
    AsyncResponder(std::shared_ptr<Session> s, std::shared_ptr<const Request> req, int key)
        : s_(std::move(s)), req_(std::move(req)), srv_(s_->srv_), key_(key) {
      std::lock_guard<std::mutex> l(srv_->responders_mu);
      srv_->responders.insert(this);
    }
    ~AsyncResponder() override {
      // Registered until the last word is posted, so that Server::Stop never destroys the
      // I/O context under it (lock order: responders_mu, then mu_).
      std::lock_guard<std::mutex> reg(srv_->responders_mu);
      State state;
      {
        std::lock_guard<std::mutex> l(mu_);
        state = state_;
      }
      if (state == kNew) {
        Response res;
        auto [type, body] = srv_->opts.error_body(500, "the handler gave no response");
        res.status = 500;
        res.SetContent(body, type);
        Send(std::move(res));
      } else if (state == kStreaming) {
        End();
      }
      srv_->responders.erase(this);
    }
    void Send(Response res) override {
      std::lock_guard<std::mutex> l(mu_);
      if (state_ != kNew) return;
      state_ = kDone;
      if (s_ == nullptr) return;
      if (res.stream) {
        res = Response{500, "text/plain", "asynchronous responses stream with StartStream\n", {}, nullptr};
      }
      net::post(s_->stream_.get_executor(), [s = s_, r = std::move(res)]() mutable { s->WriteFull(std::move(r)); });
      ReleaseLocked();
    }
    void StartStream(const Response& head) override {
      std::lock_guard<std::mutex> l(mu_);
      if (state_ != kNew) return;
      state_ = kStreaming;
      if (s_ == nullptr) return;
      net::post(s_->stream_.get_executor(), [s = s_, h = head]() {
        bhttp::response<bhttp::empty_body> m;
        s->SetHead(m, h);
        m.chunked(true);
        s->stream_keep_ = m.keep_alive();
        std::ostringstream os;
        os << m.base();
        s->QueueWrite(std::make_shared<std::string>(os.str()), false);
      });
    }
    bool Write(absl::string_view data) override {
      std::lock_guard<std::mutex> l(mu_);
      if (state_ != kStreaming || s_ == nullptr || s_->gone_ || s_->srv_->abort_writes) return false;
      if (data.empty()) return true;
      auto chunk = std::make_shared<std::string>();
      absl::StrAppend(chunk.get(), absl::Hex(data.size()), "\r\n", data, "\r\n");
      net::post(s_->stream_.get_executor(), [s = s_, chunk]() { s->QueueWrite(chunk, false); });
      return true;
    }
    void End() override {
      std::lock_guard<std::mutex> l(mu_);
      if (state_ != kStreaming) return;
      state_ = kDone;
      if (s_ == nullptr) return;
      net::post(s_->stream_.get_executor(),
                [s = s_]() { s->QueueWrite(std::make_shared<std::string>("0\r\n\r\n"), true); });
      ReleaseLocked();
    }
    bool ClientGone() const override {
      std::lock_guard<std::mutex> l(mu_);
      return s_ == nullptr || s_->gone_ || req_->ClientGone();
    }
    void Detach() override {
      std::lock_guard<std::mutex> l(mu_);
      ReleaseLocked();
    }

   private:
    // Gives the slot back and lets go of the connection (once).
    void ReleaseLocked() {
      if (s_ == nullptr) return;
      srv_->ReleaseKey(key_);
      srv_->ReleaseSlot();
      s_.reset();
    }
    enum State { kNew, kStreaming, kDone };
    mutable std::mutex mu_;
    std::shared_ptr<Session> s_;  // null once released or detached
    std::shared_ptr<const Request> req_;
    Impl* srv_ = nullptr;
    int key_;
    State state_ = kNew;
  };

  // On the strand: queues bytes of an asynchronous stream (`last`: its end) and writes
  // them in order.
  void QueueWrite(std::shared_ptr<std::string> data, bool last) {
    queued_bytes_ += data->size();
    out_.push_back(std::move(data));
    if (last) end_queued_ = true;
    if (queued_bytes_ > srv_->opts.max_queued_write_bytes) gone_ = true;  // not reading: give up on it
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    if (gone_ || srv_->abort_writes) {
      gone_ = true;
      out_.clear();
      queued_bytes_ = 0;
      if (end_queued_) Close();
      return;
    }
    if (out_.empty()) {
      if (!end_queued_) return;
      end_queued_ = false;
      if (!stream_keep_) return Close();
      return DoRead();
    }
    writing_ = true;
    Lowest().expires_after(Chrono(srv_->opts.write_timeout));
    std::shared_ptr<std::string> data = out_.front();
    net::async_write(stream_, net::buffer(*data),
                     [self = this->shared_from_this(), data](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) {
                         self->gone_ = true;
                       } else {
                         self->queued_bytes_ -= data->size();
                         self->out_.pop_front();
                       }
                       self->WriteNext();
                     });
  }

  // After an error answered before the request's body was read (413, 401, framing):
  // stop sending, then read and discard what the client is still sending for a while
  // (bounded in bytes and time) so that it reads our answer instead of a reset. The bound
  // is 16 MiB past the body limit: a body just over the limit (rejected from its
  // Content-Length before any of it was read) is drained whole, as long as it keeps coming.
  void LingeringClose() {
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    linger_left_ = srv_->opts.max_body_bytes + (size_t{16} << 20);
    Lowest().expires_after(std::chrono::seconds(3));
    DrainSome();
  }
  void DrainSome() {
    if (discard_.empty()) discard_.resize(64 << 10);
    Lowest().async_read_some(net::buffer(discard_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      if (ec || n >= self->linger_left_) return self->Lowest().close();
      self->linger_left_ -= n;
      self->DrainSome();
    });
  }

  void Close() {
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    Lowest().close();
  }

  Impl* srv_;
  std::shared_ptr<ssl::context> ctx_;  // TLS: outlives stream_ (a reload replaces the server's)
  Stream stream_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string remote_;
  int fd_ = -1;
  bool first_ = true;
  bool keep_alive_ = true;
  bool force_close_ = false;
  size_t linger_left_ = 0;
  std::vector<char> discard_;
  unsigned version_ = 11;
  int key_ = -1;
  std::atomic<bool> gone_{false};
  // An asynchronous stream's unsent bytes (on the strand).
  std::deque<std::shared_ptr<std::string>> out_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool end_queued_ = false;
  bool stream_keep_ = true;
};

}  // namespace

void Impl::DoAccept() {
  acceptor->async_accept(net::make_strand(*ioc),
                         [this](beast::error_code ec, tcp::socket sock) { OnAccept(ec, std::move(sock)); });
}

void Impl::OnAccept(beast::error_code ec, tcp::socket sock) {
  if (stopping || ec == net::error::operation_aborted) return;
  if (ec) {
    // EMFILE/ENFILE and the like: back off instead of spinning.
    accept_timer->expires_after(std::chrono::milliseconds(50));
    accept_timer->async_wait([this](beast::error_code e) {
      if (!e) DoAccept();
    });
    return;
  }
  ConnectionDelta(1);
  beast::error_code nec;
  sock.set_option(tcp::no_delay(true), nec);
  if (tls.has_value()) {
    std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(this, std::move(sock), tls->Current())->Start();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(this, std::move(sock))->Start();
  }
  if (open.load() < opts.max_connections) return DoAccept();
  WaitForRoom();
}

void Impl::WaitForRoom() {
  // Full: leave new connections in the listen backlog until one closes.
  if (stopping) return;
  if (open.load() < opts.max_connections) return DoAccept();
  accept_timer->expires_after(std::chrono::milliseconds(10));
  accept_timer->async_wait([this](beast::error_code e) {
    if (!e) WaitForRoom();
  });
}

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Server::~Server() { Stop(absl::ZeroDuration()); }

void Server::Route(const std::string& method, const std::string& pattern, Handler handler, bool run_inline) {
  impl_->routes.push_back(RouteEntry{method, std::regex(pattern), std::move(handler), nullptr, run_inline});
}

void Server::RouteAsync(const std::string& method, const std::string& pattern, AsyncHandler handler) {
  impl_->routes.push_back(RouteEntry{method, std::regex(pattern), nullptr, std::move(handler), false});
}

int Server::open_connections() const { return impl_->open.load(); }

absl::StatusOr<int> Server::Start(const std::string& host, int port) {
  Impl& s = *impl_;
  if (s.started) return absl::FailedPreconditionError("http: already started");
  if (s.opts.tls_cert_file.empty() != s.opts.tls_key_file.empty()) {
    return absl::InvalidArgumentError("https needs both a certificate file and a key file");
  }
  if (!s.opts.tls_client_ca_file.empty() && s.opts.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("a client CA file (mTLS) needs a certificate and key file (https)");
  }
  if (!s.opts.tls_cert_file.empty()) {
    s.tls.emplace();
    HERD_RETURN_IF_ERROR(s.tls->Init(s.opts));
  }
  // Idle connections cost a descriptor each: raise the soft limit to the hard one.
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  s.ioc = std::make_unique<net::io_context>(std::max(1, s.opts.io_threads));
  beast::error_code ec;
  const auto addr = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("http: bad address ", host, ": ", ec.message()));
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  s.acceptor = std::make_unique<tcp::acceptor>(*s.ioc);
  s.acceptor->open(ep.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(ep, ec);
  if (!ec) s.acceptor->listen(4096, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("http: cannot bind ", host, ":", port, ": ", ec.message()));
  const int bound = s.acceptor->local_endpoint().port();
  s.accept_timer = std::make_unique<net::steady_timer>(*s.ioc);
  s.work.emplace(s.ioc->get_executor());
  s.pool.Start(std::max(1, s.opts.handler_threads > 0 ? s.opts.handler_threads : s.opts.max_concurrent_requests));
  s.DoAccept();
  for (int i = 0; i < std::max(1, s.opts.io_threads); ++i) {
    s.io_threads.emplace_back([&s] { s.ioc->run(); });
  }
  s.started = true;
  return bound;
}

void Server::Stop(absl::Duration grace) {
  Impl& s = *impl_;
  if (!s.started) return;
  s.started = false;
  s.stopping = true;
  net::post(*s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor->close(ec);
    s.accept_timer->cancel();
  });
  // Handlers in flight finish; after `grace` their streamed writes fail.
  const absl::Time end = absl::Now() + grace;
  while (s.busy.load() > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(2));
  s.abort_writes = true;
  s.pool.Shutdown();
  {
    // Responders still held (by generations that outlive the server) let go of their
    // connections before the I/O context that owns the sockets is destroyed.
    std::lock_guard<std::mutex> l(s.responders_mu);
    for (DetachableResponder* r : s.responders) r->Detach();
  }
  s.work.reset();
  s.ioc->stop();
  for (auto& t : s.io_threads) t.join();
  s.io_threads.clear();
  s.acceptor.reset();
  s.accept_timer.reset();
  s.ioc.reset();  // destroys the sessions still waiting on I/O (closing their sockets)
}

}  // namespace herd::serving::http
