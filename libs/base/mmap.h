// Read-only memory mapping of a whole file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace herd {

/// A read-only, private mmap of a file. Movable, not copyable; unmaps on destruction.
/// An empty file maps to data()==nullptr, size()==0.
class MappedFile {
 public:
  /// Maps `path`. Errors: NOT_FOUND / PERMISSION_DENIED / INTERNAL naming the path and errno text.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename.
/// On any error the temp file is removed and `path` is untouched.
absl::Status WriteFileAtomic(const std::string& path, const void* bytes, size_t size);

/// Reads a whole file into a string. Errors name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace herd
