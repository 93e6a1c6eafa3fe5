#include "services/loader/model_store.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"

namespace herd::loader {
namespace {

constexpr absl::string_view kExt = ".gguf";

std::string Quoted(absl::string_view name) {
  constexpr size_t kShow = 64;
  std::string s = absl::CHexEscape(name.substr(0, kShow));
  if (name.size() > kShow) s += "...";
  return absl::StrCat("'", s, "'");
}

absl::Status BadName(absl::string_view name, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("model name ", Quoted(name), " ", problem));
}

bool RealPath(const std::string& path, std::string* out, int* err) {
  std::unique_ptr<char, decltype(&std::free)> p(::realpath(path.c_str(), nullptr), &std::free);
  if (p == nullptr) {
    *err = errno;
    return false;
  }
  *out = p.get();
  return true;
}

}  // namespace

absl::Status ValidateModelName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (name.size() > kMaxModelNameBytes) {
    return BadName(name, absl::StrCat("is ", name.size(), " bytes long (at most ", kMaxModelNameBytes, ")"));
  }
  for (char c : name) {
    if (c == '\0') return BadName(name, "contains a NUL byte");
    if (c == '/') return BadName(name, "contains '/'");
    if (c == '\\') return BadName(name, "contains '\\'");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return BadName(name, "contains a control character");
  }
  if (absl::StrContains(name, "..")) return BadName(name, "contains '..'");
  if (name[0] == '.') return BadName(name, "starts with '.'");
  return absl::OkStatus();
}

absl::StatusOr<ModelStore> ModelStore::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("model directory is not set");
  std::string real;
  int err = 0;
  if (!RealPath(dir, &real, &err)) {
    std::string msg = absl::StrCat("model directory ", dir, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  struct stat st;
  if (::stat(real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("model directory ", dir, " is not a directory"));
  }
  return ModelStore(real);
}

absl::StatusOr<std::string> ModelStore::Resolve(absl::string_view name) const {
  HERD_RETURN_IF_ERROR(ValidateModelName(name));
  const std::string path = absl::StrCat(root_, "/", name, kExt);
  std::string real;
  int err = 0;
  if (!RealPath(path, &real, &err)) {
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("model ", Quoted(name), " not found"));
    }
    if (err == EACCES) return absl::PermissionDeniedError(absl::StrCat("model ", Quoted(name), ": permission denied"));
    return absl::InvalidArgumentError(absl::StrCat("model ", Quoted(name), ": ", std::strerror(err)));
  }
  // Inside means directly or deeper below root_ (symlinks within the store are fine).
  if (real.size() <= root_.size() + 1 || real.compare(0, root_.size(), root_) != 0 ||
      (root_ != "/" && real[root_.size()] != '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", Quoted(name), " resolves outside the model directory (symlink out)"));
  }
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("model ", Quoted(name), " not found"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("model ", Quoted(name), " is not a regular file"));
  }
  return real;
}

absl::StatusOr<std::string> ModelStore::PathForNewModel(absl::string_view name) const {
  HERD_RETURN_IF_ERROR(ValidateModelName(name));
  const std::string path = absl::StrCat(root_, "/", name, kExt);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("model ", Quoted(name), " already exists"));
  }
  return path;
}

absl::StatusOr<std::vector<StoreEntry>> ModelStore::List() const {
  struct CloseDir {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, CloseDir> d(::opendir(root_.c_str()));
  if (d == nullptr) {
    return absl::InternalError(absl::StrCat("cannot read model directory ", root_, ": ", std::strerror(errno)));
  }
  std::vector<StoreEntry> out;
  while (struct dirent* e = ::readdir(d.get())) {
    absl::string_view file = e->d_name;
    if (file.size() <= kExt.size() || !absl::EndsWith(file, kExt)) continue;
    const std::string name(file.substr(0, file.size() - kExt.size()));
    if (!ValidateModelName(name).ok()) continue;
    auto real = Resolve(name);
    if (!real.ok()) continue;
    struct stat st;
    if (::stat(real->c_str(), &st) != 0) continue;
    out.push_back({name, *real, static_cast<uint64_t>(st.st_size)});
  }
  std::sort(out.begin(), out.end(), [](const StoreEntry& a, const StoreEntry& b) { return a.name < b.name; });
  return out;
}

bool ModelStore::IsTempFileName(absl::string_view file, int64_t* pid) {
  // GgufWriter::WriteFile: StrCat(path, ".tmp.", getpid(), ".", counter).
  constexpr absl::string_view kTmp = ".gguf.tmp.";
  const size_t at = file.rfind(kTmp);
  if (at == absl::string_view::npos || at == 0) return false;
  if (!ValidateModelName(file.substr(0, at)).ok()) return false;
  const absl::string_view rest = file.substr(at + kTmp.size());
  const size_t dot = rest.find('.');
  if (dot == absl::string_view::npos) return false;
  const absl::string_view pid_s = rest.substr(0, dot), n_s = rest.substr(dot + 1);
  auto all_digits = [](absl::string_view d) {
    if (d.empty() || d.size() > 19) return false;
    for (char c : d) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  if (!all_digits(pid_s) || !all_digits(n_s)) return false;
  int64_t v = 0;
  if (!absl::SimpleAtoi(pid_s, &v)) return false;
  if (pid != nullptr) *pid = v;
  return true;
}

absl::StatusOr<std::vector<std::string>> ModelStore::RemoveStaleTempFiles() const {
  struct CloseDir {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, CloseDir> d(::opendir(root_.c_str()));
  if (d == nullptr) {
    return absl::InternalError(absl::StrCat("cannot read model directory ", root_, ": ", std::strerror(errno)));
  }
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d.get())) {
    int64_t pid = 0;
    if (!IsTempFileName(e->d_name, &pid)) continue;
    const std::string path = absl::StrCat(root_, "/", e->d_name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // A live writer other than this process may still be writing it (another loader
    // on the same store and host).
    const bool self = pid == static_cast<int64_t>(::getpid());
    const bool alive =
        pid > 0 && pid <= INT32_MAX && !self && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!alive) stale.push_back(e->d_name);
  }
  std::sort(stale.begin(), stale.end());
  std::vector<std::string> removed;
  std::string failed;
  for (const std::string& f : stale) {
    if (::unlink(absl::StrCat(root_, "/", f).c_str()) == 0 || errno == ENOENT) {
      removed.push_back(f);
    } else if (failed.empty()) {
      failed = absl::StrCat("cannot remove stale temp file ", root_, "/", f, ": ", std::strerror(errno));
    }
  }
  if (!failed.empty()) return absl::InternalError(failed);
  return removed;
}

}  // namespace herd::loader
