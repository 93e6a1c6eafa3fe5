// Request parsing of the HTTP server (http_server.h): Boost.Beast's request parser with
// the server's head and body limits, plus the checks Beast leaves to the application
// (CheckHead: header count, control bytes, RFC 9112 section 6 framing).
//
// The server reads asynchronously from a socket and uses CheckHead and FromBeast
// directly; ParseRequest applies the same steps, in the same order, to bytes held in
// memory (for tests and tests/fuzz/http_request_fuzz.cc). Authentication (401) is not
// part of parsing: the server checks it between the head and the body.
#pragma once
#include <cstddef>
#include <string>
#include <utility>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/strings/string_view.h"

#include "libs/serving/http_server.h"

namespace herd::serving::http {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;

/// Checks a parsed head: at most `max_count` fields (431), no control byte other than
/// TAB in a value, at most one Content-Length, at most one Transfer-Encoding and only
/// "chunked", not both (400). Returns {status, message}; status 0 = fine.
std::pair<int, std::string> CheckHead(const BeastRequest& req, int max_count);

/// Fills `out`'s method, target, path (target up to '?'), query (after it), headers
/// (in order received) and body (moved out of `msg`).
void FromBeast(BeastRequest&& msg, Request* out);

struct ParseLimits {
  size_t max_header_bytes = 16 << 10;  // 431 above
  int max_header_count = 100;          // 431 above
  size_t max_body_bytes = 16 << 20;    // 413 above, chunked or not
};

struct ParseResult {
  /// 0 when no error; else the status the server answers before closing the
  /// connection: 400 (malformed or bad framing), 413 (body), 431 (head).
  int status = 0;
  std::string message;
  /// status 0: true when `bytes` held a whole request (then `request` is filled and
  /// `consumed` bytes were used; the rest belongs to the next request on the
  /// connection); false when more bytes are needed (the server would keep reading).
  bool complete = false;
  size_t consumed = 0;
  bool keep_alive = false;
  Request request;
};

/// Parses the first request in `bytes` as the server does (see above).
ParseResult ParseRequest(absl::string_view bytes, const ParseLimits& limits);

}  // namespace herd::serving::http
