#include "tests/shared_data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace herd {
namespace {

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Walks up from `start` (absolute) looking for <dir>/shared/models; returns <dir>/shared.
std::string WalkUp(std::string dir) {
  while (!dir.empty()) {
    const std::string base = dir == "/" ? "" : dir;
    if (IsDir(base + "/shared/models")) return base + "/shared";
    if (dir == "/") break;
    const size_t slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  return "";
}

}  // namespace

std::string SharedDir() {
  if (const char* env = std::getenv("HERD_SHARED"); env != nullptr && env[0] != '\0') {
    return env;
  }
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) != nullptr) {
    if (std::string found = WalkUp(buf); !found.empty()) return found;
  }
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"); ws != nullptr && ws[0] == '/') {
    if (std::string found = WalkUp(ws); !found.empty()) return found;
  }
  return "";
}

}  // namespace herd
