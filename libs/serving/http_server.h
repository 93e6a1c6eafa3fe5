// The HTTP/1.1 server every herd service uses for its HTTP ports (the gateway's
// OpenAI-compatible API, each service's /metrics): Boost.Beast over Asio, built to be
// put on a network.
//
// - Connections are served by a small I/O thread pool with asynchronous reads: an idle
//   or half-sent connection costs a socket and a buffer, never a thread (slowloris).
//   The request head must arrive within `header_timeout`, the body within
//   `body_timeout`; a keep-alive connection may idle `idle_timeout` between requests.
// - Strict framing (RFC 9112 section 6): a request with two Content-Length fields, with
//   both Content-Length and Transfer-Encoding, with a Transfer-Encoding other than
//   "chunked", a negative/overflowing length, a NUL or other control byte in a header, or
//   more than `max_header_count` fields gets a 4xx and the connection is closed.
//   `max_header_bytes` bounds the head (431), `max_body_bytes` the body, chunked or not
//   (413, answered as soon as the limit is crossed: the body is never buffered whole).
// - At most `max_concurrent_requests` requests are handled at once; when every slot is
//   busy a request gets 429 with Retry-After (TGI's --max-concurrent-requests), never a
//   reset; at `max_connections` open connections new ones wait in the listen backlog.
//   Handlers run on a pool of `handler_threads` threads. A synchronous handler (Route)
//   holds its thread until its response is written; an asynchronous one (RouteAsync)
//   returns at once and answers later through a Responder from any thread, so requests
//   in flight cost no thread (a streamed body is queued and written by the I/O threads).
// - API keys (`Authorization: Bearer KEY`, or `X-Api-Key: KEY`) when `api_keys` holds
//   any: 401 with `WWW-Authenticate: Bearer` otherwise; per-key concurrency and rate
//   limits (429).
// - HTTPS when `tls_cert_file`/`tls_key_file` are set (OpenSSL through asio::ssl); the
//   files are re-read for new connections when they change on disk.
// - A handler learns that its client hung up through Request::ClientGone() (non-streamed
//   responses: the gateway cancels the generation) or a false return from
//   ResponseWriter::Write (streamed responses).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "libs/serving/api_keys.h"
#include "libs/serving/metrics.h"

namespace herd::serving::http {

/// A request whose head and body have been read in full.
struct Request {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // as sent: path and query
  std::string path;                                          // target up to '?'
  std::string query;                                         // after '?', without it ("" when absent)
  std::vector<std::pair<std::string, std::string>> headers;  // in order received
  std::string body;
  std::string remote;  // peer "ip:port"
  /// Groups of the route pattern's match: [0] the whole path, [1..] the capture groups.
  std::vector<std::string> matches;

  /// Value of the first header named `name` (case-insensitive), "" when absent.
  std::string Header(absl::string_view name) const;
  bool HasHeader(absl::string_view name) const;
  /// True once the client has closed its connection (poll(2) POLLRDHUP on the socket).
  /// Thread-safe; cheap enough to poll every few milliseconds.
  bool ClientGone() const;

  int fd = -1;  // the connection's socket (set by the server)
};

/// The body of a streamed response (chunked transfer encoding).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  /// Sends `data` as one chunk and waits until it is written (or `write_timeout`).
  /// Returns false once the client is gone; later calls return false at once.
  virtual bool Write(absl::string_view data) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  /// When set, the body is produced by this function on the handler's thread after the
  /// head is sent (chunked); `body` is ignored.
  std::function<void(ResponseWriter&)> stream;

  void SetContent(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void SetHeader(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
};

using Handler = std::function<void(const Request&, Response&)>;

/// The answer to a request of an asynchronous route (Server::RouteAsync), given after
/// the handler returned, from any thread. Thread-safe; never blocks. Either Send once,
/// or StartStream, Write any number of times, End. A Responder dropped without an
/// answer sends 500 (or ends its stream). The request's concurrency slot is held until
/// Send or End.
class Responder {
 public:
  virtual ~Responder() = default;
  /// Sends a whole response (`res.stream` must be empty) and ends the request.
  virtual void Send(Response res) = 0;
  /// Sends the head of a chunked response (status, content type, headers; the body is
  /// ignored). Ignored after Send or a StartStream.
  virtual void StartStream(const Response& head) = 0;
  /// Queues `data` as one chunk of the stream; the I/O thread writes it. Returns false
  /// once the client is gone, the stream ended, the server stopped, or more than
  /// `max_queued_write_bytes` wait unsent (a client too slow to read: the connection is
  /// then closed).
  virtual bool Write(absl::string_view data) = 0;
  /// Sends the last chunk and ends the request (the connection then serves the next
  /// request or closes).
  virtual void End() = 0;
  /// True once the client closed its connection or a write failed. Cheap (one poll(2)).
  virtual bool ClientGone() const = 0;
};

/// An asynchronous route's handler: runs on a handler thread, should not block, and
/// answers through `responder` (now or later).
using AsyncHandler = std::function<void(std::shared_ptr<const Request>, std::shared_ptr<Responder> responder)>;

/// Body of the server's own error responses (404, 413, 429, ...): the content type and
/// text for `status` and a one-line `message`. Default: text/plain "message\n".
using ErrorBodyFn = std::function<std::pair<std::string, std::string>(int status, const std::string& message)>;

struct ServerOptions {
  /// Open connections at most; more wait in the kernel's listen backlog.
  int max_connections = 4096;
  /// Requests handled at once (synchronous and asynchronous ones); more get 429.
  int max_concurrent_requests = 64;
  /// Threads running handlers; 0 = max_concurrent_requests. Fewer than that: synchronous
  /// handlers wait for a free thread (their slot is already held).
  int handler_threads = 0;
  /// Bytes of a streamed response waiting to be written, at most, before the client is
  /// taken as gone (asynchronous responses only; a synchronous Write waits instead).
  size_t max_queued_write_bytes = 8 << 20;
  /// Largest request head (request line + fields), bytes; larger: 431.
  size_t max_header_bytes = 16 << 10;
  /// Most header fields; more: 431.
  int max_header_count = 100;
  /// Largest request body, bytes, also when chunked; larger: 413.
  size_t max_body_bytes = 16 << 20;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(60);
  absl::Duration idle_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(60);
  /// Threads running the asynchronous I/O.
  int io_threads = 1;
  /// HTTPS: PEM certificate chain and private key files (both or neither).
  std::string tls_cert_file;
  std::string tls_key_file;
  /// When set with TLS: clients must present a certificate signed by this CA (mTLS).
  std::string tls_client_ca_file;
  /// Keys accepted; none = no authentication. Not owned; must outlive the server.
  const ApiKeys* api_keys = nullptr;
  /// Paths served without a key (e.g. "/health", "/healthz", "/metrics").
  std::vector<std::string> open_paths;
  /// Per key: requests handled at once (0 = no limit beyond max_concurrent_requests).
  int per_key_max_concurrent = 0;
  /// Per key: requests per minute, a token bucket with a burst of the same size (0 = off).
  int per_key_requests_per_minute = 0;
  /// Seconds a 429 for "too busy" tells the client to wait (Retry-After); a 429 of the
  /// per-key rate limit says the real wait until the key's bucket holds a request.
  int retry_after_s = 1;
  ErrorBodyFn error_body;
  /// Optional: herd_http_* metrics (connections, requests rejected by reason).
  Registry* metrics = nullptr;
  /// Prefix of the metric names, e.g. "herd_gateway_http".
  std::string metrics_prefix = "herd_http";
};

class Server {
 public:
  explicit Server(ServerOptions opts = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Registers a handler for `method` and `pattern`: an ECMAScript regular expression the
  /// whole path must match (a plain path matches itself). Routes are tried in order.
  /// `run_inline`: the handler is quick and never blocks (health, metrics): it runs on
  /// the I/O thread and needs no handler slot, so it answers even when all are busy.
  /// Register before Start.
  void Route(const std::string& method, const std::string& pattern, Handler handler, bool run_inline = false);
  void Get(const std::string& pattern, Handler h, bool run_inline = false) {
    Route("GET", pattern, std::move(h), run_inline);
  }
  void Post(const std::string& pattern, Handler h) { Route("POST", pattern, std::move(h)); }
  /// Registers an asynchronous handler (see AsyncHandler, Responder). Register before Start.
  void RouteAsync(const std::string& method, const std::string& pattern, AsyncHandler handler);

  /// Binds host:port (port 0 = any free port; one socket only) and serves in
  /// background threads. Returns the bound port. Errors: UNAVAILABLE naming the address;
  /// INVALID_ARGUMENT / NOT_FOUND for bad TLS files (naming the file).
  absl::StatusOr<int> Start(const std::string& host, int port);

  /// Stops accepting, lets handlers and asynchronous responses in flight finish
  /// (streamed writes fail after `grace`; Responders still held then are detached: their
  /// calls do nothing), closes every connection. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

  /// Connections open now.
  int open_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace herd::serving::http
