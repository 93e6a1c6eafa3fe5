#include "libs/serving/api_keys.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "libs/base/sha256.h"
#include "libs/base/status_macros.h"

namespace herd::serving {

absl::Status ApiKeys::Add(absl::string_view key, absl::string_view source) {
  if (key.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": an API key must be at least 8 bytes"));
  }
  for (unsigned char c : key) {
    if (c <= 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": an API key must not contain whitespace or control characters"));
    }
  }
  Sha256 h;
  h.Update(key);
  digests_.push_back(h.Digest());
  return absl::OkStatus();
}

absl::StatusOr<ApiKeys> ApiKeys::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot read key file ", path, ": ", std::strerror(err));
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::NotFoundError(msg);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  ApiKeys keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(ss.str(), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    HERD_RETURN_IF_ERROR(keys.Add(line, absl::StrCat(path, ":", line_no)));
  }
  if (!keys.enabled()) return absl::InvalidArgumentError(absl::StrCat("key file ", path, " holds no key"));
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::FromList(absl::string_view list, absl::string_view source) {
  ApiKeys keys;
  for (absl::string_view k : absl::StrSplit(list, ',')) {
    k = absl::StripAsciiWhitespace(k);
    if (k.empty()) continue;
    HERD_RETURN_IF_ERROR(keys.Add(k, source));
  }
  if (!keys.enabled()) return absl::InvalidArgumentError(absl::StrCat(source, " holds no key"));
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& file, const char* env_name) {
  if (!file.empty()) return FromFile(file);
  const char* v = env_name != nullptr ? std::getenv(env_name) : nullptr;
  if (v != nullptr && *v != '\0') return FromList(v, absl::StrCat("environment variable ", env_name));
  return ApiKeys();
}

int ApiKeys::Find(absl::string_view presented) const {
  Sha256 h;
  h.Update(presented);
  const std::array<uint8_t, 32> d = h.Digest();
  int found = -1;
  for (size_t j = 0; j < digests_.size(); ++j) {
    unsigned diff = 0;
    for (size_t i = 0; i < d.size(); ++i) diff |= static_cast<unsigned>(digests_[j][i] ^ d[i]);
    // Branch-free select: every key is compared in full whatever matched.
    const int mask = -static_cast<int>(diff == 0);
    found = (found & ~mask) | (static_cast<int>(j) & mask);
  }
  return presented.empty() ? -1 : found;
}

absl::string_view ApiKeys::BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.size() < 7 || !absl::StartsWithIgnoreCase(authorization, "bearer ")) return {};
  return absl::StripAsciiWhitespace(authorization.substr(7));
}

}  // namespace herd::serving
