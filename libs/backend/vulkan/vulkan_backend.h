// The Vulkan compute backend: GLSL compute shaders (libs/backend/vulkan/shaders,
// compiled to SPIR-V at build time) on any Vulkan 1.1 device, tested on lavapipe
// (Mesa's CPU driver).
//
// Memory: a backend's buffers are device-local VkBuffers (any memory type when the
// device has no device-local one). Their base() is an opaque non-null address (as in
// ggml-vulkan); a tensor's place in a buffer is (data - base()). The host reaches them
// only through SetTensor / GetTensor / CopyTensor, which go through a host-visible
// staging buffer and vkCmdCopyBuffer.
//
// Compute: pipelines are created with the backend; GraphCompute records one command
// buffer per graph (a dispatch per node, a compute-to-compute barrier where a dispatch
// reads or overwrites what an earlier one since the last barrier wrote), submits it
// once and waits on a fence. Graphs that are not Graph::placed() get their
// intermediate tensors planned (libs/tensor/graph_alloc.h) in a scratch buffer the
// backend owns and grows.
//
// Ops and types (SupportsOp answers false for anything else, and for tensors whose
// byte span exceeds the device's maxStorageBufferRange):
//   get_rows   F32 F16 Q4_0 Q8_0 Q4_K Q6_K rows -> F32, I32 ids
//   mul_mat    the same weight types x F32 activations -> F32 (a mat-vec kernel for up
//              to kMatVecMaxCols activation columns, a tiled one for more)
//   add mul swiglu scale rms_norm norm soft_max silu gelu gelu_erf clamp cont rope
//              F32 (strided sources; add/mul broadcast src1 over rows)
//   set_rows   F32 rows into an F32 or F16 destination
//   flash_attn_ext  F32 q, F16 or F32 K/V (head size <= 256), F32 mask, GQA, ALiBi
// Numerics follow the CPU backend (libs/kernels/cpu/graph_ops.h); results agree with it
// to float rounding (F32 ops) or to the activation quantization the CPU's quantized
// dot products apply (mul_mat: the GPU multiplies with F32 activations).
//
// An index outside its tensor in get_rows or set_rows makes GraphCompute return
// INVALID_ARGUMENT after the graph ran (the shaders write zeros / skip that row).
#pragma once
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd {

/// Mat-vec kernel up to this many activation columns (src1 ne1 * ne2 * ne3), tiled above.
inline constexpr int kVulkanMatVecMaxCols = 4;

/// The Vulkan devices that can run the backend (Vulkan 1.1 with a compute queue), in
/// enumeration order: DeviceInfo{backend "vulkan", index i, name "Vulkan<i>",
/// description = deviceName, memory_total = the largest device-local heap,
/// host_visible = false}. Empty (not an error) when there is no Vulkan loader, no
/// driver (vkCreateInstance fails) or no device.
std::vector<DeviceInfo> VulkanDevices();

/// A backend on device `device` (an index into VulkanDevices()). NOT_FOUND when there
/// is no such device; UNAVAILABLE (RESOURCE_EXHAUSTED for out-of-memory results) when a
/// Vulkan call fails, naming the call and its VkResult.
absl::StatusOr<std::unique_ptr<Backend>> CreateVulkanBackend(int device);

}  // namespace herd
