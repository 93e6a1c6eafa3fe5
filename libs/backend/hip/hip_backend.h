// The HIP compute backend (AMD GPUs through ROCm's HIP runtime): the CUDA backend's
// sources built a second time (libs/backend/cuda: kernels_*.cu compiled as HIP by
// Debian's hipcc for gfx90a and gfx940, cuda_backend.cc with HERD_HIP defined;
// libs/backend/cuda/gpu_compat.h maps the CUDA runtime names to HIP's). Ops, types,
// numerics, memory and stream behaviour are those documented in
// libs/backend/cuda/cuda_backend.h, with these differences:
//   - backend kind "hip", devices HIP0, HIP1, ... described as "<name> (<gcnArchName>)";
//   - no BLAS library: Debian 12 has no hipBLAS / rocBLAS, so every batched mul_mat
//     (more than kHipMatVecMaxCols columns) runs on the backend's own tiled kernel;
//   - warps: the kernels use 32-lane warps; on AMD's 64-lane wavefronts each is half a
//     wavefront and shuffles are 32 wide (gpu_compat.h explains why this is correct);
//   - libamdhip64.so is a shared library: only binaries that link //libs/backend/hip
//     (through :register) need ROCm's runtime installed; the generic binaries do not.
//
// Without an AMD GPU (or without the amdgpu kernel driver, /dev/kfd) HipDevices() is
// empty and CreateHipBackend returns NOT_FOUND with HipUnavailableReason(); nothing
// aborts.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd {

/// Mat-vec kernel up to this many activation columns (src1 ne1 * ne2 * ne3); the tiled
/// kernel above.
inline constexpr int kHipMatVecMaxCols = 8;

/// The HIP devices present, in HIP's order: DeviceInfo{backend "hip", index i, name
/// "HIP<i>", description "<device name> (<gcnArchName>)", memory_total = totalGlobalMem,
/// memory_free = 0 (unknown until a backend asks hipMemGetInfo), host_visible = false}.
/// Empty (not an error) without a driver or a device.
std::vector<DeviceInfo> HipDevices();

/// Why HipDevices() is empty ("hipGetDeviceCount: hipErrorNoDevice (no ROCm-capable
/// device is detected)"), or "" when there are devices.
std::string HipUnavailableReason();

/// A backend on device `device` (an index into HipDevices()). NOT_FOUND when there is no
/// such device; UNAVAILABLE (RESOURCE_EXHAUSTED for out-of-memory) when a HIP call fails,
/// naming the call.
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(int device);

}  // namespace herd
