// flash_attn_ext (launcher declared in libs/backend/cuda/kernels.h).
//
// One block of 128 threads (4 warps) per query row (head h, token t). KV cells are
// streamed in chunks of 128: each warp computes the scores of every 4th cell (lanes
// split the head dimension, coalesced K reads, a shuffle reduction), then the block
// updates the online softmax (running max M and sum S; the accumulator is rescaled by
// e^(M_old - M) when M grows, as ggml-cuda fattn-vec and ggml-cpu flash_attn_ext_f16
// keep it) and each thread accumulates its own output dimensions over the chunk's V
// rows (coalesced across threads).
//
// Split over the KV (decode, attn_split.h): the grid's y dimension cuts the KV range into
// n_split ranges of `cells` cells; each block keeps its range's running max, sum and
// unnormalized accumulator in the partials buffer, and FlashAttnCombineKernel merges a
// row's ranges (attn::CombineElement, the log-sum-exp merge of ggml-cuda's
// flash_attn_combine_results).
#include "libs/backend/cuda/attn_split.h"
#include "libs/backend/cuda/device_common.h"
#include "libs/backend/cuda/kernels.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kChunk = 128;
static_assert(kChunk == attn::kKvStep, "a split's range is whole chunks");
constexpr int kMaxHd = 256;
constexpr int kDimsPerThread = kMaxHd / kThreads;

template <bool F16>
__device__ __forceinline__ float KvAt(const uint8_t* row, int64_t i) {
  if constexpr (F16) {
    return __half2float(reinterpret_cast<const __half*>(row)[i]);
  } else {
    return reinterpret_cast<const float*>(row)[i];
  }
}

// Rows (h, t) as blockIdx.x = t * n_head + h; KV cells [blockIdx.y * cells, + cells).
// part == nullptr: the whole range (cells >= n_kv), normalized into o. Else row r's
// split s leaves its accumulator at part[(r * n_split + s) * hd + i] and (M, S) at
// part[rows * n_split * hd + (r * n_split + s) * 2 + {0, 1}].
template <bool F16>
__global__ void __launch_bounds__(kThreads)
    FlashAttnKernel(DevTensor q, DevTensor k, DevTensor v, DevTensor m, bool has_mask, DevTensor o, float scale,
                    Alibi al, int64_t cells, float* part) {
  __shared__ float qs[kMaxHd];
  __shared__ float sc[kChunk];
  __shared__ float red[32];
  const int64_t hd = q.ne[0], n_head = q.ne[1], n_kv = k.ne[2];
  const int64_t g = blockIdx.x;
  const int64_t h = g % n_head;
  const int64_t t = g / n_head;
  const int64_t gqa = n_head / k.ne[1];
  const int64_t hk = h / gqa;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const float slope = AlibiSlope(al, h);
  const float* qrow = reinterpret_cast<const float*>(q.data + h * q.nb[1] + t * q.nb[2]);
  for (int64_t i = tid; i < hd; i += kThreads) qs[i] = F16 ? RoundToHalf(qrow[i]) : qrow[i];
  float acc[kDimsPerThread];
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) acc[j] = 0.0f;
  __syncthreads();
  const uint8_t* kbase = k.data + hk * k.nb[1];
  const uint8_t* vbase = v.data + hk * v.nb[1];
  const float* mrow = has_mask ? reinterpret_cast<const float*>(m.data + t * m.nb[1]) : nullptr;
  float M = -INFINITY, S = 0.0f;
  const int64_t kv0 = static_cast<int64_t>(blockIdx.y) * cells;
  const int64_t kv1 = kv0 + cells < n_kv ? kv0 + cells : n_kv;
  for (int64_t c0 = kv0; c0 < kv1; c0 += kChunk) {
    const int n = static_cast<int>(kv1 - c0 < kChunk ? kv1 - c0 : kChunk);
    for (int c = warp; c < n; c += kWarps) {
      const float mv = mrow != nullptr ? slope * mrow[c0 + c] : 0.0f;
      float s = -INFINITY;
      if (mv != -INFINITY) {  // uniform across the warp
        const uint8_t* krow = kbase + (c0 + c) * k.nb[2];
        float dot = 0.0f;
        for (int64_t i = lane; i < hd; i += kWarp) dot += qs[i] * KvAt<F16>(krow, i);
        dot = WarpReduce(dot, SumOp());
        s = dot * scale + mv;
      }
      if (lane == 0) sc[c] = s;
    }
    __syncthreads();
    const float cm = BlockReduce(tid < n ? sc[tid] : -INFINITY, MaxOp(), -INFINITY, red);
    if (cm == -INFINITY) continue;  // every cell of the chunk masked (uniform)
    const float new_m = fmaxf(M, cm);
    const float ms = M == -INFINITY ? 0.0f : expf(M - new_m);
    float e = 0.0f;
    if (tid < n) {
      e = sc[tid] == -INFINITY ? 0.0f : expf(sc[tid] - new_m);
      sc[tid] = e;
    }
    const float cs = BlockReduce(e, SumOp(), 0.0f, red);  // its barriers also publish sc[]
    S = S * ms + cs;
    M = new_m;
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) {
      const int64_t i = tid + static_cast<int64_t>(j) * kThreads;
      if (i < hd) {
        float a = acc[j] * ms;
        for (int c = 0; c < n; ++c) {
          const float p = sc[c];
          if (p != 0.0f) a += p * KvAt<F16>(vbase + (c0 + c) * v.nb[2], i);
        }
        acc[j] = a;
      }
    }
    __syncthreads();  // sc[] is rewritten by the next chunk
  }
  if (part != nullptr) {
    const int64_t n_split = gridDim.y, rows = gridDim.x;
    const int64_t slot = g * n_split + blockIdx.y;
    float* prow = part + slot * hd;
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) {
      const int64_t i = tid + static_cast<int64_t>(j) * kThreads;
      if (i < hd) prow[i] = acc[j];
    }
    if (tid == 0) {
      float* ml = part + rows * n_split * hd + slot * 2;
      ml[0] = M;
      ml[1] = S;
    }
    return;
  }
  const float inv = S == 0.0f ? 0.0f : 1.0f / S;
  float* orow = reinterpret_cast<float*>(o.data + h * o.nb[1] + t * o.nb[2]);
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int64_t i = tid + static_cast<int64_t>(j) * kThreads;
    if (i < hd) orow[i] = acc[j] * inv;
  }
}

// One block per row (h, t) = blockIdx.x = t * n_head + h: merges the row's n_split
// partials (layout of FlashAttnKernel) into o.
__global__ void __launch_bounds__(kThreads) FlashAttnCombineKernel(const float* part, int64_t n_split, DevTensor o) {
  const int64_t hd = o.ne[0], n_head = o.ne[1];
  const int64_t g = blockIdx.x, rows = gridDim.x;
  const int64_t h = g % n_head, t = g / n_head;
  const float* acc = part + g * n_split * hd;
  const float* ml = part + rows * n_split * hd + g * n_split * 2;
  float* orow = reinterpret_cast<float*>(o.data + h * o.nb[1] + t * o.nb[2]);
  for (int64_t i = threadIdx.x; i < hd; i += kThreads) orow[i] = attn::CombineElement(ml, 2, acc, hd, n_split, i);
}

}  // namespace

cudaError_t FlashAttn(const DevTensor& q, const DevTensor& k, const DevTensor& v, const DevTensor* mask,
                      const DevTensor& out, bool kv_f16, float scale, const Alibi& alibi, const FlashAttnSplit& split,
                      cudaStream_t stream) {
  if (q.ne[0] > kMaxHd || k.ne[1] <= 0 || q.ne[1] % k.ne[1] != 0) return cudaErrorInvalidValue;
  const int64_t blocks = q.ne[1] * q.ne[2];
  if (blocks <= 0) return cudaSuccess;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  const int64_t n_kv = k.ne[2];
  const bool use_split = split.n_split > 1 && split.partials != nullptr;
  if (use_split && (split.n_split > attn::kSplitMax || split.cells % kChunk != 0 || split.cells <= 0 ||
                    (split.n_split - 1) * split.cells >= n_kv || split.n_split * split.cells < n_kv)) {
    return cudaErrorInvalidValue;
  }
  const int64_t n_split = use_split ? split.n_split : 1;
  const int64_t cells = use_split ? split.cells : n_kv;
  float* part = use_split ? static_cast<float*>(split.partials) : nullptr;
  const DevTensor m = mask != nullptr ? *mask : DevTensor{};
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n_split));
  if (kv_f16) {
    FlashAttnKernel<true><<<grid, kThreads, 0, stream>>>(q, k, v, m, mask != nullptr, out, scale, alibi, cells, part);
  } else {
    FlashAttnKernel<false><<<grid, kThreads, 0, stream>>>(q, k, v, m, mask != nullptr, out, scale, alibi, cells, part);
  }
  if (!use_split) return cudaGetLastError();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  FlashAttnCombineKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(part, n_split, out);
  return cudaGetLastError();
}

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
