// CUDA or HIP from the same sources. Every file of libs/backend/cuda (the .cu kernels,
// their headers and cuda_backend.cc) includes this header instead of the CUDA runtime's,
// and spells the runtime the CUDA way (cudaMalloc, cudaStream_t, cudaMemcpyAsync, ...).
//
//   CUDA build (//libs/backend/cuda): nvcc for the .cu files, gcc for cuda_backend.cc;
//     this header includes <cuda_runtime_api.h> (+ <cuda_runtime.h>, <cuda_fp16.h> in
//     nvcc's device compile) and maps nothing.
//   HIP build (//libs/backend/hip): the same .cu files compiled by Debian's hipcc as HIP
//     (`-x hip`, tools/hip.bzl) and cuda_backend.cc by gcc, both with HERD_HIP defined
//     (hipcc alone also selects HIP: __HIPCC__). This header then includes the HIP
//     runtime (__HIP_PLATFORM_AMD__) and #defines each CUDA name used here to its HIP
//     twin, the way hipify or llama.cpp's ggml-cuda/vendors/hip.h do.
//
// Symbols: both builds can be linked into one binary (worker_hip has cuda and hip), so
// the kernels' launchers live in namespace herd::cuda inside an inline namespace
// HERD_GPU_ABI (cuda_rt or hip_rt): sources say cuda::GetRows, the linker sees two.
//
// Warp size. The kernels are written for 32-lane warps (kWarp = 32 in device_common.h:
// lane = threadIdx.x % 32, shared reduction slots per 32 lanes, shuffles over 32 lanes).
// AMD CDNA (gfx90a, gfx940) runs 64-lane wavefronts. We keep 32 on both: on AMD each
// "warp" of the kernels is an aligned half of a wavefront, and every shuffle passes
// width 32 (HERD_SHFL_XOR below; HIP's __shfl_xor(v, mask, 32) stays inside the
// 32-lane sub-group). This is correct because every block size is a multiple of 64 and
// no kernel relies on implicit lock-step beyond the shuffles (shared memory is always
// published with __syncthreads). It also keeps the order of every floating-point sum the
// same as on NVIDIA, so both builds round alike. The cost: reductions take one more
// shuffle step than a 64-wide tree would need on AMD.
//
// What HIP lacks here: cuBLAS. There is no hipBLAS / rocBLAS in Debian 12, so the HIP
// build compiles the cuBLAS path out (HERD_GPU_HAS_BLAS == 0) and batched products run on
// the backend's own tiled kernel (MulMatTiled in kernels_quant.cu).
#pragma once

#if defined(HERD_HIP) || defined(__HIPCC__)
#define HERD_GPU_HIP 1
#else
#define HERD_GPU_HIP 0
#endif

#if HERD_GPU_HIP

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>

#include <hip/hip_fp16.h>
#endif

#define HERD_GPU_ABI hip_rt
#define HERD_GPU_HAS_BLAS 0
#define HERD_GPU_HAS_MMA 0  // no rocWMMA in Debian 12: no tensor-core (matrix core) tiles
#define HERD_GPU_API "HIP"

// Types and constants.
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorInvalidConfiguration hipErrorInvalidConfiguration
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaStream_t hipStream_t
#define cudaStreamDefault hipStreamDefault
#define cudaEvent_t hipEvent_t
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaDeviceProp hipDeviceProp_t
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaHostAllocDefault hipHostMallocDefault

// Errors and devices.
#define cudaGetLastError hipGetLastError
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaSetDevice hipSetDevice
#define cudaMemGetInfo hipMemGetInfo

// Memory.
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyAsync hipMemcpyAsync

// Devices' attributes.
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount

// Graphs (stream capture; beta in HIP 5.2). hipGraphInstantiate and hipGraphExecUpdate
// take other arguments than CUDA 12's: cuda_backend.cc wraps those two.
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy

// Streams and events.
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventDestroy hipEventDestroy

// Device code: __half, __half2float, __float2half_rn, __ushort_as_half, atomicOr,
// __syncthreads, __launch_bounds__ and the math functions have the same names in HIP.
// Shuffles: HIP 5.2 has no *_sync variants (whole-wavefront, no mask).
#define HERD_SHFL_XOR(v, lane_mask, width) __shfl_xor((v), (lane_mask), (width))

#else  // CUDA

#include <cuda_runtime_api.h>
#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <cuda_fp16.h>
#endif

#define HERD_GPU_ABI cuda_rt
#define HERD_GPU_HAS_BLAS 1
#define HERD_GPU_HAS_MMA 1  // nvcuda::wmma tiles (MulMatMma, sm_70 and later; we build sm_90)
#define HERD_GPU_API "CUDA"

#define HERD_SHFL_XOR(v, lane_mask, width) __shfl_xor_sync(0xFFFFFFFFu, (v), (lane_mask), (width))

#endif  // HERD_GPU_HIP
