// backend_factory.h for the CPU worker.
#include "absl/strings/str_cat.h"

#include "libs/backend/cpu_backend.h"
#include "services/worker/backend_factory.h"

namespace herd::worker {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& opts) {
  if (opts.threads < 1 || opts.threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("threads: ", opts.threads, " is outside 1..1024"));
  }
  return std::unique_ptr<Backend>(new CpuBackend(opts.threads));
}

const char* BackendKind() { return "cpu"; }

}  // namespace herd::worker
