#include "tests/child_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace herd {

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, kill_signal_);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (out_ != nullptr) std::fclose(out_);
}

absl::Status ChildProcess::Start(const std::vector<std::string>& argv) {
  if (pid_ > 0) return absl::FailedPreconditionError("child process already started");
  std::vector<std::string> copy = argv;  // execv wants char*
  std::vector<char*> args;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) return absl::InternalError("pipe failed");
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  ::close(fds[1]);
  out_ = ::fdopen(fds[0], "r");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChildProcess::ReadAfter(const std::string& tag) {
  if (out_ == nullptr) return absl::FailedPreconditionError("child process not started");
  char line[512];
  while (std::fgets(line, sizeof(line), out_) != nullptr) {
    std::string s(line);
    const size_t at = s.find(tag);
    if (at == std::string::npos) continue;
    s = s.substr(at + tag.size());
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
  }
  return absl::NotFoundError(absl::StrCat("no '", tag, "' line before the end of the child's output"));
}

}  // namespace herd
