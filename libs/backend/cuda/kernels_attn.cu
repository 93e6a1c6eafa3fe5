// flash_attn_ext (launcher declared in libs/backend/cuda/kernels.h).
//
// One block of 128 threads (4 warps) per query row (head h, token t). KV cells are
// streamed in chunks of 128: each warp computes the scores of every 4th cell (lanes
// split the head dimension, coalesced K reads, a shuffle reduction), then the block
// updates the online softmax (running max M and sum S; the accumulator is rescaled by
// e^(M_old - M) when M grows, as ggml-cuda fattn-vec and ggml-cpu flash_attn_ext_f16
// keep it) and each thread accumulates its own output dimensions over the chunk's V
// rows (coalesced across threads).
#include "libs/backend/cuda/device_common.h"
#include "libs/backend/cuda/kernels.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kChunk = 128;
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

template <bool F16>
__global__ void __launch_bounds__(kThreads) FlashAttnKernel(DevTensor q, DevTensor k, DevTensor v, DevTensor m,
                                                            bool has_mask, DevTensor o, float scale, Alibi al) {
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
  for (int64_t c0 = 0; c0 < n_kv; c0 += kChunk) {
    const int n = static_cast<int>(n_kv - c0 < kChunk ? n_kv - c0 : kChunk);
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
  const float inv = S == 0.0f ? 0.0f : 1.0f / S;
  float* orow = reinterpret_cast<float*>(o.data + h * o.nb[1] + t * o.nb[2]);
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int64_t i = tid + static_cast<int64_t>(j) * kThreads;
    if (i < hd) orow[i] = acc[j] * inv;
  }
}

}  // namespace

cudaError_t FlashAttn(const DevTensor& q, const DevTensor& k, const DevTensor& v, const DevTensor* mask,
                      const DevTensor& out, bool kv_f16, float scale, const Alibi& alibi, cudaStream_t stream) {
  if (q.ne[0] > kMaxHd || k.ne[1] <= 0 || q.ne[1] % k.ne[1] != 0) return cudaErrorInvalidValue;
  const int64_t blocks = q.ne[1] * q.ne[2];
  if (blocks <= 0) return cudaSuccess;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  const DevTensor m = mask != nullptr ? *mask : DevTensor{};
  if (kv_f16) {
    FlashAttnKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(q, k, v, m, mask != nullptr, out,
                                                                                 scale, alibi);
  } else {
    FlashAttnKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(q, k, v, m, mask != nullptr, out,
                                                                                  scale, alibi);
  }
  return cudaGetLastError();
}

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
