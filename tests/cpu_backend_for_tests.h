// Tests create the CPU backend the way the binaries do: by name through the device
// registry (libs/backend/registry.h), so that no code outside libs/backend constructs a
// backend class directly.
#pragma once
#include <memory>

#include "libs/backend/registry.h"

namespace herd {

/// CreateBackend("cpu") with `n_threads` threads (the CPU is always present).
inline std::unique_ptr<Backend> CpuBackendForTests(int n_threads) {
  BackendOptions o;
  o.n_threads = n_threads;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend("cpu", o);
  return b.ok() ? *std::move(b) : nullptr;
}

}  // namespace herd
