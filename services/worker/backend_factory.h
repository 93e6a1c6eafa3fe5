// The compute backend of a worker binary, chosen at build time: //services/worker:worker
// links backend_cpu.cc; a CUDA/HIP/Vulkan worker links its own implementation of these
// two functions and shares every other line of the service.
#pragma once
#include <memory>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd::worker {

struct BackendOptions {
  int threads = 1;  // CPU threads (the CPU backend's compute threads; host-side work for others)
};

/// The backend this binary was built with. Errors: INVALID_ARGUMENT naming a bad
/// option, UNAVAILABLE when the device is missing.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& opts);

/// Its kind as WorkerInfo.backend reports it: "cpu", "cuda", ...
const char* BackendKind();

}  // namespace herd::worker
