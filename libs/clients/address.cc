#include "libs/clients/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace herd::clients {
namespace {

// The port after the last ':' of `a` (1..65535), or -1 when there is none, it is not a
// number, or nothing precedes the ':'.
int PortOf(const std::string& a) {
  const size_t colon = a.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(a.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return -1;
  }
  return port;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseAddressList(const std::string& list, const std::string& flag) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::string a(absl::StripAsciiWhitespace(item));
    if (a.empty()) continue;
    if (PortOf(a) < 0) return absl::InvalidArgumentError(absl::StrCat(flag, ": '", a, "' is not HOST:PORT"));
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveAddresses(const std::string& target, const std::string& flag) {
  const int port = PortOf(target);
  if (port < 0) return absl::InvalidArgumentError(absl::StrCat(flag, ": '", target, "' is not NAME:PORT"));
  std::string name = target.substr(0, target.rfind(':'));
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot resolve '", name, "': ", ::gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (struct addrinfo* p = res; p != nullptr; p = p->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (p->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<struct sockaddr_in*>(p->ai_addr)->sin_addr, buf, sizeof(buf));
      out.push_back(absl::StrCat(buf, ":", port));
    } else if (p->ai_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<struct sockaddr_in6*>(p->ai_addr)->sin6_addr, buf, sizeof(buf));
      out.push_back(absl::StrCat("[", buf, "]:", port));
    }
  }
  ::freeaddrinfo(res);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace herd::clients
