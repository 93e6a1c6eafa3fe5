#include "tests/listening_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace herd::testing {
namespace {

// The socket inodes among /proc/PID/fd.
absl::StatusOr<std::set<uint64_t>> SocketInodes(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no process ", pid));
    return absl::InternalError(absl::StrCat("cannot read ", dir, ": ", std::strerror(errno)));
  }
  std::set<uint64_t> out;
  while (dirent* e = ::readdir(d)) {
    char target[256];
    const std::string link = dir + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = 0;
    absl::string_view t(target);
    if (!absl::ConsumePrefix(&t, "socket:[") || !absl::ConsumeSuffix(&t, "]")) continue;
    uint64_t inode = 0;
    if (absl::SimpleAtoi(t, &inode)) out.insert(inode);
  }
  ::closedir(d);
  return out;
}

// "0100007F:1F90" (tcp) or 32 hex digits + ":PORT" (tcp6) -> address text and port.
bool ParseAddress(const std::string& field, bool v6, ListeningSocket* out) {
  const size_t colon = field.find(':');
  if (colon == std::string::npos) return false;
  const std::string hex = field.substr(0, colon);
  unsigned port = 0;
  if (!absl::SimpleHexAtoi(field.substr(colon + 1), &port)) return false;
  out->port = static_cast<int>(port);
  // The kernel prints each 32-bit word in host byte order.
  unsigned char bytes[16];
  const size_t words = v6 ? 4 : 1;
  if (hex.size() != words * 8) return false;
  for (size_t w = 0; w < words; ++w) {
    uint32_t v = 0;
    if (!absl::SimpleHexAtoi(hex.substr(w * 8, 8), &v)) return false;
    std::memcpy(bytes + 4 * w, &v, 4);
  }
  char text[INET6_ADDRSTRLEN];
  if (::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof(text)) == nullptr) return false;
  out->address = text;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ListeningSocket>> ListeningSockets(pid_t pid) {
  auto inodes = SocketInodes(pid);
  if (!inodes.ok()) return inodes.status();
  std::vector<ListeningSocket> out;
  for (const bool v6 : {false, true}) {
    const std::string path = absl::StrCat("/proc/", pid, "/net/", v6 ? "tcp6" : "tcp");
    std::ifstream in(path);
    if (!in) {
      if (v6) continue;  // a kernel without IPv6
      return absl::InternalError(absl::StrCat("cannot read ", path));
    }
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout;
      uint64_t inode = 0;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      if (state != "0A" || inodes->count(inode) == 0) continue;  // 0A = TCP_LISTEN
      ListeningSocket s;
      if (ParseAddress(local, v6, &s)) out.push_back(s);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") || address == "::1" || absl::StartsWith(address, "::ffff:127.");
}

}  // namespace herd::testing
