// Registers backend kind "remote" for tests (tests/backend_ops:backend_ops_remote_test):
// device 0 is a compute server on loopback in this process (LoopbackServer) over a CPU
// backend, reached through the real client (RemoteBackend) and wire checks.
#include <memory>
#include <mutex>
#include <vector>

#include "libs/backend/registry.h"
#include "libs/backend/remote/testing/loopback.h"

namespace herd::remote::testing {
namespace {

LoopbackServer* Server() {
  static LoopbackServer* s = [] {
    absl::StatusOr<std::unique_ptr<LoopbackServer>> l = LoopbackServer::Start(2);
    return l.ok() ? l->release() : nullptr;
  }();
  return s;
}

const bool kRegistered = RegisterBackendKind(BackendKind{
    "remote",
    []() -> std::vector<DeviceInfo> {
      if (Server() == nullptr) return {};
      DeviceInfo d;
      d.backend = "remote";
      d.index = 0;
      d.name = "Remote(" + Server()->address() + ")";
      d.description = "compute server on loopback over the CPU";
      return {d};
    },
    [](const BackendOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> {
      if (Server() == nullptr) return absl::UnavailableError("no loopback compute server");
      absl::StatusOr<std::unique_ptr<RemoteBackend>> b = Server()->Connect();
      if (!b.ok()) return b.status();
      return std::unique_ptr<Backend>(std::move(*b));
    },
    nullptr,
});

}  // namespace
}  // namespace herd::remote::testing
