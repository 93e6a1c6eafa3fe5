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
// waits for the stream and reads back the device's error word.
//
// CUDA graphs: a graph without batched products (every mul_mat <= kCudaMatVecMaxCols
// columns: decode) is captured (stream capture, relaxed mode) into a CUDA graph and
// launched as one; the next GraphCompute whose key (every node's op, parameters, types,
// shapes, strides and device addresses, and its sources', and the scratch) is the same
// replays it, and one with another key is captured again and applied with
// cudaGraphExecUpdate, or instantiated anew when the topology changed. Nothing in a graph
// waits for the host (scratch grows before the capture; the error word is read after the
// launch). After 4 instantiations in a row, or when capture fails, the backend launches
// kernels one by one for the rest of its life. HERD_CUDA_GRAPHS=0 turns graphs off; the
// HIP build has them off unless HERD_CUDA_GRAPHS=1 (ROCm 5.2's graph API is beta). Graphs that are not
// Graph::placed() get their intermediate tensors planned (libs/tensor/graph_alloc.h) in
// a scratch buffer the backend owns and grows.
//
// Ops and types (SupportsOp answers false for anything else; shapes in ggml order,
// ne[0] innermost; rows of F32/F16/I32 tensors must be contiguous, nb[0] = element size):
//   get_rows   F32 F16 Q4_0 Q8_0 Q4_K Q6_K rows [K, rows] -> F32 [K, n], I32 ids [n]
//   mul_mat    the same weight types [K, M] x F32 activations [K, n1, n2, n3] -> F32
//              [M, n1, n2, n3]. Up to kCudaMatVecMaxCols columns a mat-vec kernel (a warp
//              per weight row): for Q4_0/Q8_0/Q4_K/Q6_K the activations are quantized once
//              to q8_1 and dotted by dp4a (ggml-cuda's mmvq; HERD_CUDA_MMVQ=0: F32
//              activations, weights dequantized in registers, as for F32/F16). Quantized
//              weights with up to 64 columns: tensor-core tiles (weight tiles dequantized
//              to F16 in shared memory, nvcuda::wmma; CUDA only, HERD_CUDA_MMQ=0 turns them
//              off). Otherwise cuBLAS (weights dequantized to F16, cublasGemmEx F16 x F16 ->
//              F32; cublasSgemm for F32 weights) or the tiled kernel
//   add mul swiglu scale rms_norm norm soft_max silu gelu gelu_erf clamp cont rope
//              F32 (strided sources; add/mul broadcast src1 over rows; rope normal and
//              NeoX with freq factors and YaRN; soft_max with mask and ALiBi)
//   set_rows   F32 rows into an F32 or F16 destination
//   flash_attn_ext  F32 q, F16 or F32 K/V (strided views, head size <= 256), F32 mask,
//              GQA, ALiBi. Decode (<= 8 query tokens) over a long KV, when the n_head x
//              n_tokens blocks would under-fill the device, is split over the KV: ranges
//              of whole 128-cell steps, merged by log-sum-exp (attn_split.h);
//              HERD_CUDA_FA_SPLIT=0 keeps one block per query row
// Numerics follow the CPU backend (libs/kernels/cpu/graph_ops.h): element-wise and row
// ops agree to float rounding (their kernels are built without FMA contraction; gelu
// rounds through F16 as ggml-cpu's table), products to the activation quantization the
// CPU applies (the GPU multiplies with q8_1 activations in the quantized mat-vec, F32
// ones in the other mat-vecs and the tiled kernel, F16 ones on tensor cores and cuBLAS).
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
