// libFuzzer target: HTTP/1.1 request parsing of the HTTP server (libs/serving/http_parse.h:
// Boost.Beast's parser with the server's limits plus its own framing checks). Byte 0
// picks the limits (small ones, so the 431/413 paths are reached), the rest is the bytes
// a client sent. A request that is accepted must satisfy the checks the server relies
// on, and its canonical re-serialization (Content-Length framing) must parse back to the
// same request. Its body then goes where the gateway sends a JSON body: the nesting
// bound (libs/base/json_nesting.h, byte 0 bit 3 picks a limit of 8 or 256) must agree
// with the depth of the parsed value, and a body within it must survive the recursive
// walks the gateway's handlers make (copy, dump, compare).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

#include "libs/base/json_nesting.h"
#include "libs/serving/http_parse.h"

namespace {

namespace http = herd::serving::http;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "http_request_fuzz: invariant failed: %s\n", what);
    abort();
  }
}

bool IsFraming(const std::string& name) {
  return absl::EqualsIgnoreCase(name, "content-length") || absl::EqualsIgnoreCase(name, "transfer-encoding");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  http::ParseLimits limits;
  const uint8_t sel = data[0];
  limits.max_header_bytes = (sel & 1) ? 256 : 4096;
  limits.max_header_count = (sel & 2) ? 4 : 100;
  limits.max_body_bytes = (sel & 4) ? 16 : 4096;
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  const http::ParseResult r = http::ParseRequest(bytes, limits);
  Check(r.status == 0 || r.status == 400 || r.status == 413 || r.status == 431, "status is 0, 400, 413 or 431");
  Check(r.status == 0 || !r.message.empty(), "an error has a message");
  if (r.status != 0 || !r.complete) return 0;

  const http::Request& req = r.request;
  Check(r.consumed > 0 && r.consumed <= bytes.size(), "consumed within the input");
  Check(!req.method.empty(), "method");
  Check(req.path.find('?') == std::string::npos, "path has no '?'");
  Check(absl::StartsWith(req.target, req.path), "path is a prefix of the target");
  Check(req.target.size() == req.path.size() || req.target == req.path + "?" + req.query, "target = path?query");
  Check(static_cast<int>(req.headers.size()) <= limits.max_header_count, "header count within the limit");
  Check(req.body.size() <= limits.max_body_bytes, "body within the limit");
  int content_length = 0, transfer_encoding = 0;
  for (const auto& [name, value] : req.headers) {
    for (char c : value) {
      const auto u = static_cast<unsigned char>(c);
      Check(!((u < 0x20 && u != '\t') || u == 0x7f), "no control byte in a header value");
    }
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      ++content_length;
      // Beast accepts a list of identical values ("3, 3", RFC 9110 section 8.6).
      for (absl::string_view v : absl::StrSplit(value, ',')) {
        uint64_t n = 0;
        Check(absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &n) && n == req.body.size(),
              "Content-Length equals the body size");
      }
    }
    if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      ++transfer_encoding;
      Check(absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(value), "chunked"), "Transfer-Encoding is chunked");
    }
  }
  Check(content_length <= 1 && transfer_encoding <= 1 && content_length + transfer_encoding <= 1,
        "one framing field at most");

  // The canonical form: same method, target, fields (framing replaced by Content-Length)
  // and body; it must parse, whole, to the same request.
  std::string canon = req.method + " " + req.target + " HTTP/1.1\r\n";
  std::vector<std::pair<std::string, std::string>> fields;
  for (const auto& [name, value] : req.headers) {
    if (IsFraming(name)) continue;
    fields.emplace_back(name, value);
    canon += name + ": " + value + "\r\n";
  }
  canon += "Content-Length: " + std::to_string(req.body.size()) + "\r\n\r\n" + req.body;
  http::ParseLimits loose = limits;
  loose.max_header_bytes = canon.size() + 1;
  loose.max_header_count = limits.max_header_count + 1;
  const http::ParseResult again = http::ParseRequest(canon, loose);
  Check(again.status == 0 && again.complete, "the canonical form parses");
  Check(again.consumed == canon.size(), "the canonical form is one request");
  Check(again.request.method == req.method && again.request.target == req.target, "same method and target");
  Check(again.request.body == req.body, "same body");
  Check(again.request.headers.size() == fields.size() + 1, "same fields");
  for (size_t i = 0; i < fields.size(); ++i) Check(again.request.headers[i] == fields[i], "same field");

  // The body as JSON (services/gateway/http_util.cc ParseJsonObject): checked on the text,
  // then parsed (nlohmann parses iteratively; copies and dumps recurse per level).
  const int max_depth = (sel & 8) ? 8 : herd::kMaxJsonNesting;
  const bool within = herd::CheckJsonNesting(req.body, "request body", max_depth).ok();
  const nlohmann::json j = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  // nlohmann's parser ends its input at a NUL byte and accepts the prefix ("11" of
  // "11\0[[[..."): the text check refuses every body with one, before any parse.
  const bool has_nul = req.body.find('\0') != std::string::npos;
  if (has_nul) Check(!within, "a body with a NUL byte is refused");
  if (!j.is_discarded() && !has_nul) {
    Check(within == herd::CheckJsonValueNesting(j, "request body", max_depth).ok(),
          "the text's nesting bound agrees with the parsed value's depth");
    if (within) {
      const nlohmann::json copy = j;
      Check(copy == j, "a copy of a body within the bound equals it");
      Check(nlohmann::json::parse(copy.dump()) == j, "its dump parses back to it");
    }
  }
  return 0;
}
