// A service binary run as a child process with its stdout on a pipe, for the tests and
// benchmarks that start real servers and read the addresses they announce.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd {

/// One child process; killed with `kill_signal` and reaped when the object goes.
class ChildProcess {
 public:
  explicit ChildProcess(int kill_signal = SIGKILL) : kill_signal_(kill_signal) {}
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Forks and execs argv[0] (a path) with `argv`, the child's stdout on a pipe that out()
  /// reads (stdin and stderr inherited; exit code 127 when exec fails). INTERNAL when the
  /// pipe or the fork fails; FAILED_PRECONDITION when already started.
  absl::Status Start(const std::vector<std::string>& argv);

  /// Reads out() line by line until one contains `tag`; returns the rest of that line
  /// after `tag`, without trailing white space. NOT_FOUND at end of output (the child
  /// exited or closed stdout first).
  absl::StatusOr<std::string> ReadAfter(const std::string& tag);

  pid_t pid() const { return pid_; }
  FILE* out() const { return out_; }

 private:
  int kill_signal_;
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

}  // namespace herd
