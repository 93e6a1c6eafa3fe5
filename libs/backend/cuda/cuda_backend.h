// The CUDA compute backend: kernels compiled by nvcc (libs/backend/cuda/*.cu, sm_90
// SASS plus compute_90 PTX; tools/cuda.bzl) on NVIDIA GPUs.
// The same sources are the HIP backend (libs/backend/hip/hip_backend.h; gpu_compat.h maps
// the CUDA runtime names to HIP's): what follows holds for both unless it says cuBLAS.
//
// Running without CUDA: the CUDA runtime is linked statically and loads the driver
// (libcuda.so.1) itself, so binaries start on machines without one; CudaDevices() is
// then empty. cuBLAS is not linked: libcublas.so.13 is opened with dlopen when a
// backend is created, and when it is missing batched mul_mat runs on the backend's
// own tiled kernel.
//
// Memory: a backend's buffers are cudaMalloc allocations. Their base() is an opaque
// non-null address (as in the Vulkan backend); a tensor's place in a buffer is
// (data - base()) and its device address real_base + (data - base()). The host reaches
// them only through SetTensor / GetTensor / CopyTensor and the async variants.
//
// Streams: each backend owns one CUDA stream. SetTensorAsync / GetTensorAsync go
// through pinned host staging on that stream (the caller's memory is read or written
// no later than Synchronize()); SetTensor / GetTensor / CopyTensor wait for completion.
// GraphCompute enqueues one kernel (two or three for cuBLAS products) per node, then
// waits for the stream and reads back the device's error word. Graphs that are not
// Graph::placed() get their intermediate tensors planned (libs/tensor/graph_alloc.h) in
// a scratch buffer the backend owns and grows.
//
// Ops and types (SupportsOp answers false for anything else; shapes in ggml order,
// ne[0] innermost; rows of F32/F16/I32 tensors must be contiguous, nb[0] = element size):
//   get_rows   F32 F16 Q4_0 Q8_0 Q4_K Q6_K rows [K, rows] -> F32 [K, n], I32 ids [n]
//   mul_mat    the same weight types [K, M] x F32 activations [K, n1, n2, n3] -> F32
//              [M, n1, n2, n3]: a mat-vec kernel up to kCudaMatVecMaxCols columns
//              (ggml-cuda mmv/mmvq layout: a warp per weight row, dequantized in
//              registers); above, cuBLAS (weights dequantized to F16, cublasGemmEx
//              F16 x F16 -> F32; cublasSgemm for F32 weights) or the tiled kernel
//   add mul swiglu scale rms_norm norm soft_max silu gelu gelu_erf clamp cont rope
//              F32 (strided sources; add/mul broadcast src1 over rows; rope normal and
//              NeoX with freq factors and YaRN; soft_max with mask and ALiBi)
//   set_rows   F32 rows into an F32 or F16 destination
//   flash_attn_ext  F32 q, F16 or F32 K/V (strided views, head size <= 256), F32 mask,
//              GQA, ALiBi
// Numerics follow the CPU backend (libs/kernels/cpu/graph_ops.h): element-wise and row
// ops agree to float rounding (their kernels are built without FMA contraction; gelu
// rounds through F16 as ggml-cpu's table), products to the activation quantization the
// CPU applies (the GPU multiplies with F32 activations, or F16 ones through cuBLAS).
//
// An index outside its tensor in get_rows or set_rows makes GraphCompute return
// INVALID_ARGUMENT after the graph ran (get_rows writes zeros, set_rows skips the row).
// Every CUDA or cuBLAS failure is a status naming the call (RESOURCE_EXHAUSTED for
// out-of-memory, UNAVAILABLE otherwise); nothing aborts.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd {

/// Mat-vec kernel up to this many activation columns (src1 ne1 * ne2 * ne3).
inline constexpr int kCudaMatVecMaxCols = 8;

/// The CUDA devices present, in CUDA's order: DeviceInfo{backend "cuda", index i, name
/// "CUDA<i>", description "<device name> (sm_<major><minor>)", memory_total =
/// totalGlobalMem, memory_free = 0 (unknown until a backend asks cudaMemGetInfo),
/// host_visible = false}. Empty (not an error) without a driver or a device.
std::vector<DeviceInfo> CudaDevices();

/// Why CudaDevices() is empty ("cudaGetDeviceCount: CUDA driver version is insufficient
/// ..."), or "" when there are devices.
std::string CudaUnavailableReason();

/// Options of CreateCudaBackend.
struct CudaBackendOptions {
  /// Use cuBLAS for batched mul_mat when libcublas.so.13 can be opened (also off when
  /// the environment sets HERD_CUDA_NO_CUBLAS=1); the tiled kernel otherwise.
  bool use_cublas = true;
};

/// A backend on device `device` (an index into CudaDevices()). NOT_FOUND when there is
/// no such device; UNAVAILABLE (RESOURCE_EXHAUSTED for out-of-memory) when a CUDA call
/// fails, naming the call.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, const CudaBackendOptions& opts = {});

/// Whether a backend created by CreateCudaBackend uses cuBLAS for batched products
/// (false for any other backend).
bool CudaBackendUsesCublas(const Backend* backend);

}  // namespace herd
