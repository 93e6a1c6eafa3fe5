// Tests create the CPU backend the way the binaries do: by name through the device
// registry (libs/backend/registry.h), so that no code outside libs/backend constructs a
// backend class directly.
#pragma once
#include <memory>

#include "libs/backend/registry.h"

namespace herd {

/// CreateBackend("cpu") with `n_threads` threads (the CPU is always present); ggml_order as
/// BackendOptions::ggml_order.
inline std::unique_ptr<Backend> CpuBackendForTests(int n_threads, bool ggml_order = false) {
  BackendOptions o;
  o.n_threads = n_threads;
  o.ggml_order = ggml_order;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend("cpu", o);
  return b.ok() ? *std::move(b) : nullptr;
}

}  // namespace herd
