// Raw-socket HTTP/1.1 for tests that play a hostile or careless client (half-sent heads,
// bodies that never end, hang-ups): what a well-behaved client library cannot do.
#pragma once
#include <string>

#include "absl/time/time.h"

namespace herd::serving::testing {

/// Connects to 127.0.0.1:port. Returns the socket, or -1.
int Connect(int port);
/// Sends all of `s` (MSG_NOSIGNAL). False when the connection broke.
bool SendAll(int fd, const std::string& s);
/// Reads until EOF, an error or `timeout`; *reset is set when it ended in ECONNRESET.
std::string ReadAll(int fd, absl::Duration timeout = absl::Seconds(10), bool* reset = nullptr);
/// The status code of a raw response ("HTTP/1.1 200 OK..." -> 200); -1 when none.
int StatusOf(const std::string& response);
/// The bytes after the head of a raw response.
std::string Body(const std::string& response);
/// Sends `raw` on a fresh connection and reads the response until EOF (send
/// "Connection: close").
std::string Exchange(int port, const std::string& raw, absl::Duration timeout = absl::Seconds(10));
/// "GET path HTTP/1.1" with Host and Connection: close, plus `extra` header lines.
std::string GetRequest(const std::string& path, const std::string& extra = "");
/// "POST path" with a JSON body, Content-Length and Connection: close.
std::string PostJsonRequest(const std::string& path, const std::string& json, const std::string& extra = "");
/// VmRSS of this process in KiB (-1 when unknown).
long RssKb();

}  // namespace herd::serving::testing
