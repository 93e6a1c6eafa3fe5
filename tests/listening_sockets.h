// The TCP sockets a process listens on, read from /proc (for tests that check a
// service opens only the ports it announces).
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::testing {

/// One listening TCP socket.
struct ListeningSocket {
  std::string address;  // "127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::1"
  int port = 0;
  bool operator<(const ListeningSocket& o) const { return port != o.port ? port < o.port : address < o.address; }
  bool operator==(const ListeningSocket& o) const { return port == o.port && address == o.address; }
};

/// Every TCP socket in state LISTEN that process `pid` holds (by its open file
/// descriptors' socket inodes, matched against /proc/PID/net/tcp and tcp6), sorted by
/// port. Errors: NOT_FOUND when the process is gone; INTERNAL when /proc cannot be read.
absl::StatusOr<std::vector<ListeningSocket>> ListeningSockets(pid_t pid);

/// True for 127.0.0.0/8, ::1 and ::ffff:127.x.y.z.
bool IsLoopback(const std::string& address);

}  // namespace herd::testing
