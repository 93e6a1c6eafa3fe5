// Registers the "hip" backend kind (libs/backend/registry.h) in every binary that links
// this file (//libs/backend/hip:register, alwayslink): //services/worker:worker_hip, the
// HIP tests. Other binaries do not depend on ROCm's libamdhip64.
#include "libs/backend/hip/hip_backend.h"
#include "libs/backend/registry.h"

namespace herd {
namespace {

[[maybe_unused]] const bool kRegistered = RegisterBackendKind(BackendKind{
    "hip", [] { return HipDevices(); },
    [](const BackendOptions& o) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateHipBackend(o.device); },
    [] { return HipUnavailableReason(); }});

}  // namespace
}  // namespace herd
