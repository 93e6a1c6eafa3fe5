// SHA-256 (FIPS 180-4): incremental hashing of bytes and whole files.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd {

/// Incremental SHA-256. Feed bytes with Update(), then call Digest() once.
class Sha256 {
 public:
  Sha256();
  /// Appends `n` bytes (any n, any alignment).
  void Update(const void* data, size_t n);
  void Update(absl::string_view s) { Update(s.data(), s.size()); }
  /// The 32-byte digest of everything fed so far. Finalizes: call once.
  std::array<uint8_t, 32> Digest();
  /// Lower-case hex of Digest() (64 characters). Finalizes: call once.
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

/// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

/// Lower-case hex SHA-256 of the file at `path`, read in 1 MiB pieces. When `cancelled` is
/// given and returns true (checked before each piece), stops with CANCELLED. Errors: NOT_FOUND / PERMISSION_DENIED /
/// INTERNAL naming the path and the errno text.
absl::StatusOr<std::string> Sha256File(const std::string& path, const std::function<bool()>& cancelled = nullptr);

}  // namespace herd
