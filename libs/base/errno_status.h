// absl::Status from an errno value.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace herd {

/// "WHAT: strerror(err)" as NOT_FOUND (ENOENT), PERMISSION_DENIED (EACCES, EPERM) or
/// INTERNAL (any other errno).
absl::Status ErrnoStatus(int err, const std::string& what);

}  // namespace herd
