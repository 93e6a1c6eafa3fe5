// The loader's model store: a directory of *.gguf files, addressed by model name
// (file name without ".gguf"). Every path it hands out is inside the directory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::loader {

/// Longest accepted model name: "<name>.gguf" must fit a file name (NAME_MAX 255).
inline constexpr size_t kMaxModelNameBytes = 250;

/// Checks that `name` can only ever denote a file directly inside the store:
/// non-empty, at most kMaxModelNameBytes bytes, no '/', '\\', NUL or other control
/// characters, no "..", and no leading '.' (hidden and temporary files are not models).
/// Errors: INVALID_ARGUMENT "model name '<name>' <problem>" (the name C-escaped and cut).
absl::Status ValidateModelName(absl::string_view name);

/// A model file found by ModelStore::List.
struct StoreEntry {
  std::string name;       // file name without ".gguf"
  std::string real_path;  // absolute, symlinks resolved, inside the store
  uint64_t size_bytes = 0;
};

/// A directory of models. Thread-safe (it holds only its resolved root).
class ModelStore {
 public:
  /// Resolves `dir` with realpath. Errors: NOT_FOUND when it does not exist,
  /// INVALID_ARGUMENT when it is not a directory.
  static absl::StatusOr<ModelStore> Open(const std::string& dir);

  /// The store's directory, absolute, symlinks resolved.
  const std::string& root() const { return root_; }

  /// The absolute real path of model `name`. Errors: INVALID_ARGUMENT for a bad name
  /// (ValidateModelName), a file that resolves outside the store (a symlink out), or
  /// one that is not a regular file; NOT_FOUND for an unknown model (or a dangling link).
  absl::StatusOr<std::string> Resolve(absl::string_view name) const;

  /// The path a new model `name` would be written to. Errors: INVALID_ARGUMENT for a
  /// bad name; ALREADY_EXISTS when any directory entry of that name exists (a file,
  /// a directory, or a symlink, dangling or not).
  absl::StatusOr<std::string> PathForNewModel(absl::string_view name) const;

  /// Every "<name>.gguf" entry with a valid name that resolves to a regular file inside
  /// the store, sorted by name. Entries that do not (symlinks out, directories, hidden
  /// files) are skipped. Errors only when the directory itself cannot be read.
  absl::StatusOr<std::vector<StoreEntry>> List() const;

  /// True when `file` (a bare file name) is a temp file of an atomic GGUF write into
  /// this store (gguf::GgufWriter::WriteFile): "<name>.gguf.tmp.<pid>.<n>" with a valid
  /// model name and decimal pid and n. Sets *pid to the writer's pid when given.
  static bool IsTempFileName(absl::string_view file, int64_t* pid = nullptr);

  /// Removes the temp files (IsTempFileName, regular files, symlinks never followed)
  /// that a writer killed mid-write left behind: those whose writer pid is not a live
  /// process, or is this process (a restarted container reuses its pid, and nothing
  /// was written yet). Call at start, before serving. Returns the names removed.
  /// Errors: INTERNAL when the directory cannot be read or a stale file cannot be
  /// removed (naming it; the others are still removed).
  absl::StatusOr<std::vector<std::string>> RemoveStaleTempFiles() const;

 private:
  explicit ModelStore(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace herd::loader
