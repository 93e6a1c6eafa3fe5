// Checks every device backend's unit test runs the same way (gtest assertions): tensor
// transfers, errors for bad indices, refusal of ops it lacks. What is specific to one
// backend (its device info, async staging, BLAS paths) stays in its own test; op results
// against the CPU are tests/backend_ops's.
#pragma once
#include <string>

#include "libs/backend/backend.h"

namespace herd::testing {

/// `d` is device 0 of kind `kind` named `name` ("Vulkan0"), with a description and
/// memory, not host-visible, and `device` (a backend on it) reports it: its default
/// buffer type is not host memory, and it takes its own buffers but not `host`'s.
void ExpectDevice0(const DeviceInfo& d, const std::string& kind, const std::string& name, Backend* device,
                   Backend* host);

/// SetTensor / CopyTensor / GetTensor on `device`'s own buffers round-trip exactly, at
/// byte offsets too; a write past a tensor is OUT_OF_RANGE; Buffer::Clear zeroes; a
/// tensor in `host`'s (the CPU backend's) memory is INVALID_ARGUMENT.
void ExpectTransfersRoundTrip(Backend* device, Backend* host);

/// get_rows with a row id past its table and set_rows with a negative row make
/// GraphCompute INVALID_ARGUMENT; the backend then still computes get_rows as `reference`.
void ExpectBadIndexIsAnError(Backend* device, Backend* reference);

/// A Q5_K mul_mat and a Q8_0 set_rows destination (no device backend has kernels for
/// them) are refused by SupportsOp, and GraphCompute on them is UNIMPLEMENTED.
void ExpectUnsupportedOpsAreRefused(Backend* device);

}  // namespace herd::testing
