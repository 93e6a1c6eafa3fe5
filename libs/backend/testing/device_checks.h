// Checks every device backend's unit test runs the same way (gtest assertions): tensor
// transfers, errors for bad indices, refusal of ops it lacks. What is specific to one
// backend (its device info, async staging, BLAS paths) stays in its own test; op results
// against the CPU are tests/backend_ops's.
#pragma once
#include "libs/backend/backend.h"

namespace herd::testing {

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
