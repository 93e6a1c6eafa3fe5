// Element-wise and row kernels (launchers declared in libs/backend/cuda/kernels.h).
// Built with --fmad=false (nvcc) / -ffp-contract=off (hipcc): every float expression
// rounds as the CPU backend's
// (libs/kernels/cpu/ops.cc, compiled without FMA contraction).
#include "libs/backend/cuda/device_common.h"
#include "libs/backend/cuda/kernels.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluCoefA = 0.044715f;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kSqrt2Inv = 0.70710678118654752440084436210484f;

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

// 4-D element index -> (i0, row pointer offsets).
struct Idx {
  int64_t i0, i1, i2, i3;
};
__device__ __forceinline__ Idx Split(int64_t i, const DevTensor& t) {
  Idx r;
  r.i0 = i % t.ne[0];
  int64_t q = i / t.ne[0];
  r.i1 = q % t.ne[1];
  q /= t.ne[1];
  r.i2 = q % t.ne[2];
  r.i3 = q / t.ne[2];
  return r;
}
__device__ __forceinline__ float* At(const DevTensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<float*>(t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]) + i0;
}

__global__ void UnaryKernel(int op, DevTensor a, DevTensor d, float f0, float f1) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Idx x = Split(i, d);
    const float v = *At(a, x.i0, x.i1, x.i2, x.i3);
    float y;
    switch (op) {
      case int(UnaryOp::kScale):
        y = v * f0;
        break;
      case int(UnaryOp::kSilu):
        y = Silu(v);
        break;
      case int(UnaryOp::kGelu):
        if (v <= -10.0f) {
          y = 0.0f;
        } else if (v >= 10.0f) {
          y = v;
        } else {  // ggml-cpu's F16 table: fp16(gelu_f32(fp16(x)))
          const float h = RoundToHalf(v);
          y = RoundToHalf(0.5f * h * (1.0f + tanhf(kSqrt2OverPi * h * (1.0f + kGeluCoefA * h * h))));
        }
        break;
      case int(UnaryOp::kGeluErf):
        y = 0.5f * v * (1.0f + erff(v * kSqrt2Inv));
        break;
      case int(UnaryOp::kClamp): {
        const float m = v < f1 ? v : f1;
        y = m > f0 ? m : f0;
        break;
      }
      default:
        y = v;
        break;
    }
    *At(d, x.i0, x.i1, x.i2, x.i3) = y;
  }
}

__global__ void BinaryKernel(int op, DevTensor a, DevTensor b, DevTensor d) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Idx x = Split(i, d);
    const float u = *At(a, x.i0, x.i1, x.i2, x.i3);
    const float v = *At(b, x.i0, x.i1 % b.ne[1], x.i2 % b.ne[2], x.i3 % b.ne[3]);
    float y;
    if (op == int(BinaryOp::kAdd)) {
      y = u + v;
    } else if (op == int(BinaryOp::kMul)) {
      y = u * v;
    } else {
      y = Silu(u) * v;
    }
    *At(d, x.i0, x.i1, x.i2, x.i3) = y;
  }
}

// One block per row (rms_norm / norm), sums in double like ggml-cpu.
__global__ void NormKernel(bool rms, DevTensor a, DevTensor d, float eps) {
  __shared__ double red[32];
  const int64_t row = blockIdx.x;
  const float* x = reinterpret_cast<const float*>(RowPtr(a, row));
  float* y = reinterpret_cast<float*>(RowPtr(d, row));
  const int64_t n = a.ne[0];
  if (rms) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(x[i] * x[i]);
    s = BlockSumD(s, red);
    const float mean = static_cast<float>(s / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * scale;
  } else {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(x[i]);
    s = BlockSumD(s, red);
    const float mean = static_cast<float>(s) / n;
    double s2 = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = x[i] - mean;
      s2 += static_cast<double>(v * v);
    }
    s2 = BlockSumD(s2, red);
    const float variance = static_cast<float>(s2 / n);
    const float scale = 1.0f / sqrtf(variance + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = (x[i] - mean) * scale;
  }
}

// One block per row; the row's scaled, masked values go through d.
__global__ void SoftMaxKernel(DevTensor a, DevTensor m, bool has_mask, DevTensor d, float scale, Alibi al) {
  __shared__ float red[32];
  __shared__ double redd[32];
  const int64_t row = blockIdx.x;
  const int64_t i1 = row % a.ne[1];
  const int64_t i2 = (row / a.ne[1]) % a.ne[2];
  const float* x = reinterpret_cast<const float*>(RowPtr(a, row));
  float* y = reinterpret_cast<float*>(RowPtr(d, row));
  const float* mk = has_mask ? reinterpret_cast<const float*>(m.data + (i1 % m.ne[1]) * m.nb[1]) : nullptr;
  const float slope = AlibiSlope(al, i2);
  const int64_t n = a.ne[0];
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = x[i] * scale;
    if (mk != nullptr) v += slope * mk[i];
    y[i] = v;
    mx = mx > v ? mx : v;
  }
  mx = BlockReduce(mx, MaxOp(), -INFINITY, red);
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(y[i] - mx);
    y[i] = e;
    s += static_cast<double>(e);
  }
  s = BlockSumD(s, redd);
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] *= inv;
}

// One thread per rotated pair or pass-through element. theta_i = pos * theta_scale^i is
// formed by repeated multiplication in the CPU's order (cpu::RopeCache).
__global__ void RopeKernel(DevTensor a, DevTensor pos, DevTensor ff, bool has_ff, DevTensor d, RopeConsts rc) {
  const int64_t half_dims = rc.n_dims / 2;
  const int64_t slots = half_dims + (a.ne[0] - rc.n_dims);
  const int64_t n = slots * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = idx % slots;
    const int64_t r = idx / slots;
    const int64_t i1 = r % a.ne[1];
    const int64_t i2 = (r / a.ne[1]) % a.ne[2];
    const int64_t i3 = r / (a.ne[1] * a.ne[2]);
    const float* x = At(a, 0, i1, i2, i3);
    float* y = At(d, 0, i1, i2, i3);
    if (s >= half_dims) {
      const int64_t i = rc.n_dims + (s - half_dims);
      y[i] = x[i];
      continue;
    }
    float theta = static_cast<float>(*reinterpret_cast<const int32_t*>(pos.data + i2 * pos.nb[0]));
    for (int64_t k = 0; k < s; ++k) theta *= rc.theta_scale;
    const float factor = has_ff ? *reinterpret_cast<const float*>(ff.data + s * ff.nb[0]) : 1.0f;
    const float theta_extrap = theta / factor;
    const float theta_interp = rc.freq_scale * theta_extrap;
    float th = theta_interp;
    if (rc.ext_factor != 0.0f) {
      const float yv = (static_cast<float>(s) - rc.corr0) / fmaxf(0.001f, rc.corr1 - rc.corr0);
      const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, yv))) * rc.ext_factor;
      th = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
    }
    float sn, cs;
    sincosf(th, &sn, &cs);
    cs *= rc.mscale;
    sn *= rc.mscale;
    const int64_t ia = rc.neox ? s : 2 * s;
    const int64_t ib = rc.neox ? s + half_dims : 2 * s + 1;
    const float x0 = x[ia];
    const float x1 = x[ib];
    y[ia] = x0 * cs - x1 * sn;
    y[ib] = x0 * sn + x1 * cs;
  }
}

__global__ void SetRowsKernel(DevTensor dst, bool dst_f16, DevTensor src, DevTensor idx, unsigned* err) {
  const int64_t ne0 = src.ne[0];
  const int64_t n = ne0 * src.ne[1];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / ne0, e = i % ne0;
    const int32_t row = *reinterpret_cast<const int32_t*>(idx.data + r * idx.nb[0]);
    if (row < 0 || row >= dst.ne[1]) {
      if (e == 0) atomicOr(err, kErrSetRowsIndex);
      continue;
    }
    const float v = reinterpret_cast<const float*>(src.data + r * src.nb[1])[e];
    uint8_t* out = dst.data + row * dst.nb[1];
    if (dst_f16) {
      reinterpret_cast<__half*>(out)[e] = __float2half_rn(v);
    } else {
      reinterpret_cast<float*>(out)[e] = v;
    }
  }
}

int64_t Elements(const DevTensor& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }
int64_t Rows(const DevTensor& t) { return t.ne[1] * t.ne[2] * t.ne[3]; }

}  // namespace

cudaError_t Unary(UnaryOp op, const DevTensor& a, const DevTensor& d, float f0, float f1, cudaStream_t stream) {
  const int64_t n = Elements(d);
  if (n <= 0) return cudaSuccess;
  UnaryKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(static_cast<int>(op), a, d, f0, f1);
  return cudaGetLastError();
}

cudaError_t Binary(BinaryOp op, const DevTensor& a, const DevTensor& b, const DevTensor& d, cudaStream_t stream) {
  const int64_t n = Elements(d);
  if (n <= 0) return cudaSuccess;
  BinaryKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(static_cast<int>(op), a, b, d);
  return cudaGetLastError();
}

cudaError_t Norm(bool rms, const DevTensor& a, const DevTensor& d, float eps, cudaStream_t stream) {
  const int64_t rows = Rows(a);
  if (rows <= 0 || a.ne[0] <= 0) return cudaSuccess;
  if (rows > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  NormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(rms, a, d, eps);
  return cudaGetLastError();
}

cudaError_t SoftMax(const DevTensor& a, const DevTensor* mask, const DevTensor& d, float scale, const Alibi& alibi,
                    cudaStream_t stream) {
  const int64_t rows = Rows(a);
  if (rows <= 0 || a.ne[0] <= 0) return cudaSuccess;
  if (rows > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  SoftMaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(a, mask ? *mask : DevTensor{}, mask != nullptr,
                                                                      d, scale, alibi);
  return cudaGetLastError();
}

cudaError_t Rope(const DevTensor& a, const DevTensor& pos, const DevTensor* ff, const DevTensor& d,
                 const RopeConsts& rc, cudaStream_t stream) {
  const int64_t slots = rc.n_dims / 2 + (a.ne[0] - rc.n_dims);
  const int64_t n = slots * Rows(a);
  if (n <= 0) return cudaSuccess;
  RopeKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(a, pos, ff ? *ff : DevTensor{}, ff != nullptr, d, rc);
  return cudaGetLastError();
}

cudaError_t SetRows(const DevTensor& dst, bool dst_f16, const DevTensor& src, const DevTensor& idx, unsigned* err,
                    cudaStream_t stream) {
  const int64_t n = src.ne[0] * src.ne[1];
  if (n <= 0) return cudaSuccess;
  SetRowsKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(dst, dst_f16, src, idx, err);
  return cudaGetLastError();
}

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
