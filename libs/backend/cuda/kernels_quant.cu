// get_rows and mul_mat kernels for F32 / F16 / Q4_0 / Q8_0 / Q4_K / Q6_K sources
// (launchers declared in libs/backend/cuda/kernels.h).
#include "libs/backend/cuda/device_common.h"
#include "libs/backend/cuda/kernels.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {
namespace {

// ---------------------------------------------------------------------------
// get_rows: one thread per (output row, 32-element unit) for block types, per
// (output row, element) for plain ones; a grid-stride loop over all of them.
template <int T>
__global__ void GetRowsKernel(DevTensor src, DevTensor ids, DevTensor dst, unsigned* err) {
  const int64_t K = src.ne[0];
  const int64_t per_row = kIsQuant<T> ? K / 32 : K;
  const int64_t n_ids = ids.ne[0];
  const int64_t total = per_row * n_ids;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row;
    const int64_t j = i % per_row;
    const int32_t id = *reinterpret_cast<const int32_t*>(ids.data + r * ids.nb[0]);
    float* out = reinterpret_cast<float*>(dst.data + r * dst.nb[1]);
    const bool bad = id < 0 || id >= src.ne[1];
    if (bad && j == 0) atomicOr(err, kErrGetRowsIndex);
    if constexpr (kIsQuant<T>) {
      float w[32];
      if (bad) {
#pragma unroll
        for (int l = 0; l < 32; ++l) w[l] = 0.0f;
      } else {
        DequantUnit<T>(src.data + id * src.nb[1], j, w);
      }
#pragma unroll
      for (int l = 0; l < 32; ++l) out[j * 32 + l] = w[l];
    } else {
      out[j] = bad ? 0.0f : PlainAt<T>(src.data + id * src.nb[1], j);
    }
  }
}

// ---------------------------------------------------------------------------
// mat-vec: a block of 4 warps, one weight row per warp (ggml-cuda mmv / mmvq layout).
// Lane l takes units l, l + 32, ... of the row (for plain types elements), dequantizes
// each once into registers and multiplies it into every activation column.
constexpr int kVecWarps = 4;

template <int T>
__global__ void __launch_bounds__(kVecWarps* kWarp) MulMatVecKernel(DevTensor w, DevTensor x, DevTensor d, int ncols,
                                                                    bool x_aligned16) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t m = static_cast<int64_t>(blockIdx.x) * kVecWarps + warp;
  if (m >= w.ne[1]) return;  // uniform across the warp
  const int64_t K = w.ne[0];
  const uint8_t* row = w.data + m * w.nb[1];
  const float* xc[kMatVecMaxCols];
#pragma unroll
  for (int c = 0; c < kMatVecMaxCols; ++c) {
    xc[c] = c < ncols ? reinterpret_cast<const float*>(RowPtr(x, c)) : nullptr;
  }
  float acc[kMatVecMaxCols];
#pragma unroll
  for (int c = 0; c < kMatVecMaxCols; ++c) acc[c] = 0.0f;
  if constexpr (kIsQuant<T>) {
    const int64_t units = K / 32;
    for (int64_t u = lane; u < units; u += kWarp) {
      float wv[32];
      DequantUnit<T>(row, u, wv);
#pragma unroll
      for (int c = 0; c < kMatVecMaxCols; ++c) {
        if (c < ncols) {
          const float* xp = xc[c] + u * 32;
          float s = 0.0f;
          if (x_aligned16) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const float4 v = reinterpret_cast<const float4*>(xp)[j];
              s += wv[4 * j] * v.x + wv[4 * j + 1] * v.y + wv[4 * j + 2] * v.z + wv[4 * j + 3] * v.w;
            }
          } else {
#pragma unroll
            for (int j = 0; j < 32; ++j) s += wv[j] * xp[j];
          }
          acc[c] += s;
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += kWarp) {
      const float wv = PlainAt<T>(row, k);
#pragma unroll
      for (int c = 0; c < kMatVecMaxCols; ++c) {
        if (c < ncols) acc[c] += wv * xc[c][k];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kMatVecMaxCols; ++c) {
    if (c < ncols) {
      const float v = WarpReduce(acc[c], SumOp());
      if (lane == 0) reinterpret_cast<float*>(RowPtr(d, c))[m] = v;
    }
  }
}

// ---------------------------------------------------------------------------
// Tiled product: a block of 256 threads computes a 64 (weight rows) x 64 (columns) tile,
// 4x4 per thread, K in steps of 32 staged in shared memory. blockIdx.x: column tile,
// blockIdx.y: row tile (neighbouring blocks share weight rows in L2).
constexpr int kTile = 64, kTileK = 32, kTileThreads = 256;

template <int T>
__global__ void __launch_bounds__(kTileThreads) MulMatTiledKernel(DevTensor w, DevTensor x, DevTensor d,
                                                                  int64_t ncols) {
  __shared__ float ws[kTile][kTileK + 1];
  __shared__ float xs[kTile][kTileK + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t M = w.ne[1], K = w.ne[0];
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    if constexpr (kIsQuant<T>) {
      if (tid < kTile) {
        const int64_t m = m0 + tid;
        if (m < M) {
          DequantUnit<T>(w.data + m * w.nb[1], k0 / 32, &ws[tid][0]);
        } else {
#pragma unroll
          for (int l = 0; l < kTileK; ++l) ws[tid][l] = 0.0f;
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < kTile * kTileK / kTileThreads; ++r) {
        const int idx = tid + kTileThreads * r;
        const int mm = idx / kTileK, kk = idx % kTileK;
        const int64_t m = m0 + mm, k = k0 + kk;
        ws[mm][kk] = (m < M && k < K) ? PlainAt<T>(w.data + m * w.nb[1], k) : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < kTile * kTileK / kTileThreads; ++r) {
      const int idx = tid + kTileThreads * r;
      const int nn = idx / kTileK, kk = idx % kTileK;
      const int64_t n = n0 + nn, k = k0 + kk;
      xs[nn][kk] = (n < ncols && k < K) ? reinterpret_cast<const float*>(RowPtr(x, n))[k] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ws[tx + 16 * i][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = xs[ty + 16 * j][kk];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t n = n0 + ty + 16 * j;
    if (n >= ncols) continue;
    float* out = reinterpret_cast<float*>(RowPtr(d, n));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + tx + 16 * i;
      if (m < M) out[m] = acc[i][j];
    }
  }
}

// ---------------------------------------------------------------------------
// Dequantization to contiguous F16 rows (cuBLAS's operand), and activation packing.
template <int T>
__global__ void DequantF16Kernel(DevTensor w, __half* out) {
  const int64_t K = w.ne[0], M = w.ne[1];
  const int64_t per_row = kIsQuant<T> ? K / 32 : K;
  const int64_t total = per_row * M;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / per_row, j = i % per_row;
    const uint8_t* row = w.data + m * w.nb[1];
    if constexpr (kIsQuant<T>) {
      float v[32];
      DequantUnit<T>(row, j, v);
      __half* o = out + m * K + j * 32;
#pragma unroll
      for (int l = 0; l < 32; ++l) o[l] = __float2half_rn(v[l]);
    } else {
      out[m * K + j] = __float2half_rn(PlainAt<T>(row, j));
    }
  }
}

__global__ void PackRowsKernel(DevTensor x, bool to_f16, void* out) {
  const int64_t K = x.ne[0];
  const int64_t total = K * x.ne[1] * x.ne[2] * x.ne[3];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / K, k = i % K;
    const float v = reinterpret_cast<const float*>(RowPtr(x, c))[k];
    if (to_f16) {
      static_cast<__half*>(out)[i] = __float2half_rn(v);
    } else {
      static_cast<float*>(out)[i] = v;
    }
  }
}

// Calls F<T>::Run(args...) for the runtime type t.
template <template <int> class F, typename... Args>
cudaError_t Dispatch(WType t, Args&&... args) {
  switch (t) {
    case WType::kF32:
      return F<int(WType::kF32)>::Run(args...);
    case WType::kF16:
      return F<int(WType::kF16)>::Run(args...);
    case WType::kQ4_0:
      return F<int(WType::kQ4_0)>::Run(args...);
    case WType::kQ8_0:
      return F<int(WType::kQ8_0)>::Run(args...);
    case WType::kQ4_K:
      return F<int(WType::kQ4_K)>::Run(args...);
    case WType::kQ6_K:
      return F<int(WType::kQ6_K)>::Run(args...);
  }
  return cudaErrorInvalidValue;
}

template <int T>
struct GetRowsRun {
  static cudaError_t Run(const DevTensor& src, const DevTensor& ids, const DevTensor& dst, unsigned* err,
                         cudaStream_t s) {
    const int64_t total = (kIsQuant<T> ? src.ne[0] / 32 : src.ne[0]) * ids.ne[0];
    if (total <= 0) return cudaSuccess;
    GetRowsKernel<T><<<GridFor(total, 256), 256, 0, s>>>(src, ids, dst, err);
    return cudaGetLastError();
  }
};

template <int T>
struct MulMatVecRun {
  static cudaError_t Run(const DevTensor& w, const DevTensor& x, const DevTensor& d, cudaStream_t s) {
    const int64_t ncols = x.ne[1] * x.ne[2] * x.ne[3];
    if (ncols < 1 || ncols > kMatVecMaxCols) return cudaErrorInvalidValue;
    const int64_t blocks = (w.ne[1] + kVecWarps - 1) / kVecWarps;
    if (blocks <= 0) return cudaSuccess;
    if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
    const uintptr_t base = reinterpret_cast<uintptr_t>(x.data);
    bool aligned16 = base % 16 == 0;
    for (int i = 1; i < 4; ++i) aligned16 = aligned16 && (x.ne[i] == 1 || x.nb[i] % 16 == 0);
    MulMatVecKernel<T><<<static_cast<unsigned>(blocks), kVecWarps * kWarp, 0, s>>>(w, x, d, static_cast<int>(ncols),
                                                                                  aligned16);
    return cudaGetLastError();
  }
};

template <int T>
struct MulMatTiledRun {
  static cudaError_t Run(const DevTensor& w, const DevTensor& x, const DevTensor& d, cudaStream_t s) {
    const int64_t ncols = x.ne[1] * x.ne[2] * x.ne[3];
    const int64_t bx = (ncols + kTile - 1) / kTile, by = (w.ne[1] + kTile - 1) / kTile;
    if (bx <= 0 || by <= 0) return cudaSuccess;
    if (bx > 0x7FFFFFFF || by > 65535) return cudaErrorInvalidConfiguration;
    MulMatTiledKernel<T><<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), kTileThreads, 0, s>>>(
        w, x, d, ncols);
    return cudaGetLastError();
  }
};

template <int T>
struct DequantRun {
  static cudaError_t Run(const DevTensor& w, void* out, cudaStream_t s) {
    const int64_t total = (kIsQuant<T> ? w.ne[0] / 32 : w.ne[0]) * w.ne[1];
    if (total <= 0) return cudaSuccess;
    DequantF16Kernel<T><<<GridFor(total, 256), 256, 0, s>>>(w, static_cast<__half*>(out));
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t GetRows(WType t, const DevTensor& src, const DevTensor& ids, const DevTensor& dst, unsigned* err,
                    cudaStream_t stream) {
  return Dispatch<GetRowsRun>(t, src, ids, dst, err, stream);
}

cudaError_t MulMatVec(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, cudaStream_t stream) {
  return Dispatch<MulMatVecRun>(t, w, x, dst, stream);
}

cudaError_t MulMatTiled(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, cudaStream_t stream) {
  return Dispatch<MulMatTiledRun>(t, w, x, dst, stream);
}

cudaError_t DequantizeToF16(WType t, const DevTensor& w, void* out, cudaStream_t stream) {
  return Dispatch<DequantRun>(t, w, out, stream);
}

cudaError_t PackRows(const DevTensor& x, bool to_f16, void* out, cudaStream_t stream) {
  const int64_t total = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3];
  if (total <= 0) return cudaSuccess;
  PackRowsKernel<<<GridFor(total, 256), 256, 0, stream>>>(x, to_f16, out);
  return cudaGetLastError();
}

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
