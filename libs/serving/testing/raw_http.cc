#include "libs/serving/testing/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace herd::serving::testing {

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadAll(int fd, absl::Duration timeout, bool* reset) {
  std::string out;
  const absl::Time end = absl::Now() + timeout;
  char buf[65536];
  while (absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && reset != nullptr && errno == ECONNRESET) *reset = true;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int StatusOf(const std::string& response) {
  if (!absl::StartsWith(response, "HTTP/1.") || response.size() < 12) return -1;
  return std::atoi(response.substr(9, 3).c_str());
}

std::string Body(const std::string& response) {
  size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

std::string Exchange(int port, const std::string& raw, absl::Duration timeout) {
  int fd = Connect(port);
  if (fd < 0) return "";
  SendAll(fd, raw);
  std::string r = ReadAll(fd, timeout);
  ::close(fd);
  return r;
}

std::string GetRequest(const std::string& path, const std::string& extra) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", extra, "\r\n");
}

std::string PostJsonRequest(const std::string& path, const std::string& json, const std::string& extra) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n",
                      "Content-Length: ", json.size(), "\r\n", extra, "\r\n", json);
}

long RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) return std::atol(line.c_str() + 6);
  }
  return -1;
}

}  // namespace herd::serving::testing
