#include "libs/serving/http_parse.h"

#include <cstdint>
#include <limits>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace herd::serving::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::pair<int, std::string> CheckHead(const BeastRequest& req, int max_count) {
  int count = 0, content_length = 0, transfer_encoding = 0;
  for (const auto& f : req) {
    if (++count > max_count) return {431, absl::StrCat("more than ", max_count, " header fields")};
    const auto name = f.name_string();
    const auto value = f.value();
    for (char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && u != '\t') || u == 0x7f) {
        return {400,
                absl::StrCat("header ", std::string(name.data(), name.size()), ": control character in the value")};
      }
    }
    if (f.name() == bhttp::field::content_length) ++content_length;
    if (f.name() == bhttp::field::transfer_encoding) {
      ++transfer_encoding;
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(absl::string_view(value.data(), value.size())),
                                  "chunked")) {
        return {400, "Transfer-Encoding: only \"chunked\" is supported"};
      }
    }
  }
  if (content_length > 1) return {400, "more than one Content-Length field"};
  if (transfer_encoding > 1) return {400, "more than one Transfer-Encoding field"};
  if (content_length > 0 && transfer_encoding > 0) return {400, "both Content-Length and Transfer-Encoding"};
  return {0, ""};
}

void FromBeast(BeastRequest&& msg, Request* out) {
  out->method = std::string(msg.method_string());
  out->target = std::string(msg.target());
  const size_t q = out->target.find('?');
  out->path = out->target.substr(0, q);
  if (q != std::string::npos) out->query = out->target.substr(q + 1);
  for (const auto& f : msg) out->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  out->body = std::move(msg.body());
}

namespace {

// The server's answer to a read error (Session::OnReadError): 431, 413, 400, or 0 when
// it closes the connection without one.
std::pair<int, std::string> ReadErrorStatus(const beast::error_code& ec, const ParseLimits& limits) {
  if (ec == bhttp::error::header_limit) {
    return {431, absl::StrCat("request head: larger than ", limits.max_header_bytes, " bytes")};
  }
  if (ec == bhttp::error::body_limit) {
    return {413, absl::StrCat("request body: larger than ", limits.max_body_bytes, " bytes")};
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return {400, absl::StrCat("malformed request: ", ec.message())};
  }
  return {0, ""};
}

}  // namespace

ParseResult ParseRequest(absl::string_view bytes, const ParseLimits& limits) {
  ParseResult r;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  // As the server: no body limit until the head has been checked.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  size_t used = 0;
  // Feeds bytes until `done()`; false on an error (r.status set) or when more bytes
  // are needed (r.status 0).
  auto feed = [&](auto done) {
    while (!done()) {
      if (used == bytes.size()) return false;
      beast::error_code ec;
      const size_t n = parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
      used += n;
      if (ec == bhttp::error::need_more) {
        if (n == 0) return false;
        continue;
      }
      if (ec) {
        std::tie(r.status, r.message) = ReadErrorStatus(ec, limits);
        return false;
      }
    }
    return true;
  };
  if (!feed([&] { return parser.is_header_done(); })) return r;
  std::tie(r.status, r.message) = CheckHead(parser.get(), limits.max_header_count);
  if (r.status != 0) return r;
  if (parser.content_length().value_or(0) > limits.max_body_bytes) {
    std::tie(r.status, r.message) = ReadErrorStatus(bhttp::error::body_limit, limits);
    return r;
  }
  parser.body_limit(limits.max_body_bytes);
  if (!feed([&] { return parser.is_done(); })) return r;
  // A chunked body's trailer fields join the head: the same rules again.
  std::tie(r.status, r.message) = CheckHead(parser.get(), limits.max_header_count);
  if (r.status != 0) {
    r.message += " (chunked trailer)";
    return r;
  }
  r.complete = true;
  r.consumed = used;
  BeastRequest msg = parser.release();
  r.keep_alive = msg.keep_alive();
  FromBeast(std::move(msg), &r.request);
  return r;
}

}  // namespace herd::serving::http
