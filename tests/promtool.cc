#include "tests/promtool.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace herd::testing {

absl::Status PromtoolCheckMetrics(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    return absl::NotFoundError("promtool is not installed (tools/setup.sh installs Debian's prometheus package)");
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/metrics_", ::getpid(), ".txt");
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  const std::string cmd = absl::StrCat("promtool check metrics < '", path, "' 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen promtool failed");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  std::remove(path.c_str());
  if (rc != 0) return absl::FailedPreconditionError(absl::StrCat("promtool check metrics: ", out));
  return absl::OkStatus();
}

}  // namespace herd::testing
