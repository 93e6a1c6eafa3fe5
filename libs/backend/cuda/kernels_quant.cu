// get_rows and mul_mat kernels for F32 / F16 / Q4_0 / Q8_0 / Q4_K / Q6_K sources
// (launchers declared in libs/backend/cuda/kernels.h): mat-vec with F32 activations
// (MulMatVec) or q8_1 ones and dp4a (QuantizeQ8_1 + MulMatVecQ8, math in q8_1_dot.h),
// tensor-core tiles for a few columns (MulMatMma, CUDA only), the SIMT tiled product and
// the F16 dequantization / packing that feed cuBLAS.
#include "libs/backend/cuda/device_common.h"
#include "libs/backend/cuda/kernels.h"
#include "libs/backend/cuda/q8_1_dot.h"

#if HERD_GPU_HAS_MMA
#include <mma.h>
#endif

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
// Quantized mat-vec (MMVQ): activations quantized once to q8_1 (QuantizeQ8_1Kernel), then
// one warp per weight row as MulMatVecKernel, each lane taking units l, l + 32, ... and
// dotting the unit's integer levels with the q8_1 block by dp4a (q8_1_dot.h).
using q8dot::Q8_1Block;

// One thread per element, a warp per q8_1 block (K is a multiple of 32, so every warp's
// 32 consecutive indices are one block of one column). Same formula as
// q8dot::QuantizeQ8_1 (quantize_row_q8_1_ref): amax by a max reduction, the sum of the
// integer levels (exact in float: |sum| <= 32 * 127) by a sum reduction.
__global__ void QuantizeQ8_1Kernel(DevTensor x, Q8_1Block* out) {
  const int64_t K = x.ne[0];
  const int64_t total = K * x.ne[1] * x.ne[2] * x.ne[3];
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / K, k = i % K;
    const float v = reinterpret_cast<const float*>(RowPtr(x, c))[k];
    const float amax = WarpReduce(fabsf(v), MaxOp());
    float d;
    const float id = q8dot::Q8_1InvScale(amax, &d);
    const int q = q8dot::Q8_1Round(v, id);
    const float sum = WarpReduce(static_cast<float>(q), SumOp());
    Q8_1Block* b = out + c * (K / 32) + k / 32;
    b->qs[lane] = static_cast<int8_t>(q);
    if (lane == 0) {
      b->d = q8dot::F32ToF16(d);
      b->s = q8dot::F32ToF16(sum * d);
    }
  }
}

// Unit u (32 weights) of a quantized row . q8_1 block y.
template <int T>
__device__ __forceinline__ float DotUnitQ8_1(const uint8_t* row, int64_t u, const Q8_1Block& y) {
  if constexpr (T == int(WType::kQ4_0)) {
    return q8dot::DotQ4_0(row + u * 18, y);
  } else if constexpr (T == int(WType::kQ8_0)) {
    return q8dot::DotQ8_0(row + u * 34, y);
  } else if constexpr (T == int(WType::kQ4_K)) {
    return q8dot::DotQ4_K(row + (u >> 3) * 144, static_cast<int>(u & 7), y);
  } else {
    static_assert(T == int(WType::kQ6_K), "MMVQ types");
    return q8dot::DotQ6_K(row + (u >> 3) * 210, static_cast<int>(u & 7), y);
  }
}

template <int T>
__global__ void __launch_bounds__(kVecWarps* kWarp)
    MulMatVecQ8Kernel(DevTensor w, const Q8_1Block* __restrict__ xq, DevTensor d, int ncols) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t m = static_cast<int64_t>(blockIdx.x) * kVecWarps + warp;
  if (m >= w.ne[1]) return;  // uniform across the warp
  const int64_t units = w.ne[0] / 32;
  const uint8_t* row = w.data + m * w.nb[1];
  float acc[kMatVecMaxCols];
#pragma unroll
  for (int c = 0; c < kMatVecMaxCols; ++c) acc[c] = 0.0f;
  for (int64_t u = lane; u < units; u += kWarp) {  // K = 11008: 344 units, 11 passes
#pragma unroll
    for (int c = 0; c < kMatVecMaxCols; ++c) {
      if (c < ncols) acc[c] += DotUnitQ8_1<T>(row, u, xq[c * units + u]);
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

#if HERD_GPU_HAS_MMA
// ---------------------------------------------------------------------------
// Tensor-core tiles for a few columns (MMQ-like): a block of 4 warps computes 64 weight
// rows x NT columns (NT = 16, 32 or 64). K in steps of 64: the block dequantizes its 64
// rows' two 32-element units to F16 in shared memory (each weight read once per column
// tile) and converts the activation tile to F16 (round to nearest even); each warp
// multiplies its 16 rows by all NT columns with wmma 16x16x16 F16 -> F32 fragments.
// Split K (MmaSplitK > 1, for outputs of few tiles): blockIdx.z takes units
// [z * ups, (z + 1) * ups) and writes its partial sums to part[(z * ncols + c) * M + m];
// SumSlicesKernel then adds the slices in order (deterministic).
constexpr int kMmaRows = 64, kMmaK = 64, kMmaThreads = 128;
static_assert(kMmaRows == kMmaTileRows, "kernels.h's MmaSplitK counts tiles of kMmaTileRows");
constexpr int kMmaLd = kMmaK + 8;  // halves per shared row: 144 bytes, 16-byte multiple, staggers banks

template <int T, int NT>
__global__ void __launch_bounds__(kMmaThreads)
    MulMatMmaKernel(DevTensor w, DevTensor x, DevTensor d, int64_t ncols, int64_t ups, float* __restrict__ part) {
  using namespace nvcuda;
  __shared__ __align__(32) __half ws[kMmaRows * kMmaLd];
  __shared__ __align__(32) __half xs[NT * kMmaLd];
  __shared__ __align__(32) float os[NT * kMmaRows];  // column-major output tile
  __shared__ const float* xcol[NT];
  __shared__ float* dcol[NT];
  const int tid = threadIdx.x, warp = tid / kWarp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * NT;
  const int64_t M = w.ne[1];
  const int64_t u_begin = static_cast<int64_t>(blockIdx.z) * ups;
  const int64_t u_end = u_begin + ups < w.ne[0] / 32 ? u_begin + ups : w.ne[0] / 32;
  if (tid < NT) {
    const bool in = n0 + tid < ncols;
    xcol[tid] = in ? reinterpret_cast<const float*>(RowPtr(x, n0 + tid)) : nullptr;
    dcol[tid] = in ? reinterpret_cast<float*>(RowPtr(d, n0 + tid)) : nullptr;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NT / 16];
#pragma unroll
  for (int j = 0; j < NT / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
  __syncthreads();
  for (int64_t u0 = u_begin; u0 < u_end; u0 += kMmaK / 32) {
    {  // weights: thread t dequantizes unit t % 2 of row t / 2 of the tile
      const int r = tid / 2, j = tid % 2;
      const int64_t m = m0 + r, u = u0 + j;
      __half2* dst = reinterpret_cast<__half2*>(ws + r * kMmaLd + j * 32);
      if (m < M && u < u_end) {
        float v[32];
        DequantUnit<T>(w.data + m * w.nb[1], u, v);
#pragma unroll
        for (int l = 0; l < 16; ++l) dst[l] = __floats2half2_rn(v[2 * l], v[2 * l + 1]);
      } else {
#pragma unroll
        for (int l = 0; l < 16; ++l) dst[l] = __floats2half2_rn(0.0f, 0.0f);
      }
    }
    // activations: consecutive threads take consecutive k of one column
#pragma unroll 4
    for (int i = 0; i < NT * kMmaK / kMmaThreads; ++i) {
      const int idx = tid + kMmaThreads * i;
      const int c = idx / kMmaK, kk = idx % kMmaK;
      const int64_t k = u0 * 32 + kk;
      const float* xp = xcol[c];
      xs[c * kMmaLd + kk] = __float2half_rn(xp != nullptr && k < u_end * 32 ? xp[k] : 0.0f);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kMmaK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, ws + warp * 16 * kMmaLd + kk, kMmaLd);
#pragma unroll
      for (int j = 0; j < NT / 16; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::load_matrix_sync(b, xs + j * 16 * kMmaLd + kk, kMmaLd);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < NT / 16; ++j) {
    wmma::store_matrix_sync(os + j * 16 * kMmaRows + warp * 16, acc[j], kMmaRows, wmma::mem_col_major);
  }
  __syncthreads();
  for (int idx = tid; idx < NT * kMmaRows; idx += kMmaThreads) {
    const int c = idx / kMmaRows, r = idx % kMmaRows;
    if (dcol[c] == nullptr || m0 + r >= M) continue;
    if (part == nullptr) {
      dcol[c][m0 + r] = os[idx];
    } else {
      part[(static_cast<int64_t>(blockIdx.z) * ncols + n0 + c) * M + m0 + r] = os[idx];
    }
  }
}

// d[:, c][m] = sum over z = 0, 1, ... of part[(z * ncols + c) * M + m].
__global__ void SumSlicesKernel(const float* __restrict__ part, int slices, int64_t M, int64_t ncols, DevTensor d) {
  const int64_t total = M * ncols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / M, m = i % M;
    float v = 0.0f;
    for (int z = 0; z < slices; ++z) v += part[(z * ncols + c) * M + m];
    reinterpret_cast<float*>(RowPtr(d, c))[m] = v;
  }
}
#endif  // HERD_GPU_HAS_MMA

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
struct MulMatVecQ8Run {
  static cudaError_t Run(const DevTensor& w, const DevTensor& x, const void* xq, const DevTensor& d, cudaStream_t s) {
    if constexpr (!kIsQuant<T>) {
      return cudaErrorInvalidValue;
    } else {
      const int64_t ncols = x.ne[1] * x.ne[2] * x.ne[3];
      if (ncols < 1 || ncols > kMatVecMaxCols || w.ne[0] % 32 != 0 || x.ne[0] != w.ne[0]) return cudaErrorInvalidValue;
      const int64_t blocks = (w.ne[1] + kVecWarps - 1) / kVecWarps;
      if (blocks <= 0) return cudaSuccess;
      if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
      MulMatVecQ8Kernel<T><<<static_cast<unsigned>(blocks), kVecWarps * kWarp, 0, s>>>(
          w, static_cast<const Q8_1Block*>(xq), d, static_cast<int>(ncols));
      return cudaGetLastError();
    }
  }
};

template <int T>
struct MulMatMmaRun {
  static cudaError_t Run(const DevTensor& w, const DevTensor& x, const DevTensor& d, void* partial, cudaStream_t s) {
#if HERD_GPU_HAS_MMA
    if constexpr (!kIsQuant<T>) {
      return cudaErrorInvalidValue;
    } else {
      const int64_t M = w.ne[1], K = w.ne[0];
      const int64_t ncols = x.ne[1] * x.ne[2] * x.ne[3];
      if (ncols < 1 || ncols > kMmaMaxCols || K % 32 != 0) return cudaErrorInvalidValue;
      const int64_t bx = (M + kMmaRows - 1) / kMmaRows;
      if (bx <= 0) return cudaSuccess;
      if (bx > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
      const int slices = MmaSplitK(M, K, ncols);
      if (slices > 1 && partial == nullptr) return cudaErrorInvalidValue;
      const int64_t steps = (K / 32 + kMmaK / 32 - 1) / (kMmaK / 32);
      const int64_t ups = (steps + slices - 1) / slices * (kMmaK / 32);  // units per slice, whole k-steps
      float* part = slices > 1 ? static_cast<float*>(partial) : nullptr;
      const dim3 grid(static_cast<unsigned>(bx), 1, static_cast<unsigned>(slices));
      if (ncols <= 16) {
        MulMatMmaKernel<T, 16><<<grid, kMmaThreads, 0, s>>>(w, x, d, ncols, ups, part);
      } else if (ncols <= 32) {
        MulMatMmaKernel<T, 32><<<grid, kMmaThreads, 0, s>>>(w, x, d, ncols, ups, part);
      } else {
        MulMatMmaKernel<T, 64><<<grid, kMmaThreads, 0, s>>>(w, x, d, ncols, ups, part);
      }
      if (slices > 1) {
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        SumSlicesKernel<<<GridFor(M * ncols, 256), 256, 0, s>>>(part, slices, M, ncols, d);
      }
      return cudaGetLastError();
    }
#else
    (void)w, (void)x, (void)d, (void)partial, (void)s;
    return cudaErrorInvalidValue;  // no tensor-core path in this build (kHasMma)
#endif
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

cudaError_t QuantizeQ8_1(const DevTensor& x, void* out, cudaStream_t stream) {
  if (x.ne[0] % 32 != 0) return cudaErrorInvalidValue;
  const int64_t total = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3];
  if (total <= 0) return cudaSuccess;
  QuantizeQ8_1Kernel<<<GridFor(total, 256), 256, 0, stream>>>(x, static_cast<Q8_1Block*>(out));
  return cudaGetLastError();
}

cudaError_t MulMatVecQ8(WType t, const DevTensor& w, const DevTensor& x, const void* xq, const DevTensor& dst,
                        cudaStream_t stream) {
  return Dispatch<MulMatVecQ8Run>(t, w, x, xq, dst, stream);
}

cudaError_t MulMatMma(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, void* partial,
                      cudaStream_t stream) {
  return Dispatch<MulMatMmaRun>(t, w, x, dst, partial, stream);
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
