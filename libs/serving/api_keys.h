// API keys: who may call a herd service. One concept for every service and both
// transports: the gateway's public API (HTTP `Authorization: Bearer KEY`, gRPC metadata
// `authorization: Bearer KEY`), the cluster key internal services (loader, worker,
// draft) require of their callers, and the loader's admin key for Quantize.
// Sources as llama-server (--api-key-file) and vLLM (--api-key / VLLM_API_KEY) take them:
// a file, or an environment variable; never the command line alone (argv is visible to
// every user of the machine through /proc).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::serving {

/// A set of accepted keys. An empty set means authentication is off.
class ApiKeys {
 public:
  ApiKeys() = default;

  /// Keys from a file: one per line; surrounding whitespace trimmed; blank lines and lines
  /// starting with '#' skipped. Errors: NOT_FOUND / PERMISSION_DENIED naming the file;
  /// INVALID_ARGUMENT when it holds no key or a key shorter than 8 bytes or with
  /// whitespace or control characters inside.
  static absl::StatusOr<ApiKeys> FromFile(const std::string& path);

  /// Keys separated by commas (an environment variable's value); `source` names it in
  /// errors. Errors: INVALID_ARGUMENT as FromFile.
  static absl::StatusOr<ApiKeys> FromList(absl::string_view list, absl::string_view source);

  /// The conventional lookup: `file` when non-empty, else the environment variable
  /// `env_name` when set and non-empty, else an empty set (authentication off).
  /// Errors: those of FromFile / FromList.
  static absl::StatusOr<ApiKeys> Load(const std::string& file, const char* env_name);

  /// True when at least one key is configured.
  bool enabled() const { return !digests_.empty(); }
  size_t size() const { return digests_.size(); }

  /// True when `presented` equals one of the keys. Time does not depend on where the
  /// bytes differ or on which key matched: SHA-256 digests are compared in full against
  /// every key (no early exit).
  bool Accepts(absl::string_view presented) const { return Find(presented) >= 0; }

  /// Index of the key `presented` equals (0-based, in the order loaded; for per-key
  /// limits), -1 when none does or `presented` is empty. Constant time as Accepts.
  int Find(absl::string_view presented) const;

  /// The token of an `Authorization` header value "Bearer TOKEN" (scheme case-insensitive,
  /// RFC 6750); empty when the value is not a bearer credential.
  static absl::string_view BearerToken(absl::string_view authorization);

 private:
  absl::Status Add(absl::string_view key, absl::string_view source);
  std::vector<std::array<uint8_t, 32>> digests_;
};

}  // namespace herd::serving
