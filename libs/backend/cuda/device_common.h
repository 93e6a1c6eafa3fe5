// Device helpers shared by herd's CUDA kernels (included by the .cu files only).
//
// Block layouts are ggml's (libs/tensor/quants.h); a 32-element "unit" is one Q4_0 /
// Q8_0 block or one eighth of a Q4_K / Q6_K super-block:
//   Q4_0 (18 bytes / 32): f16 d, 16 bytes of nibbles; element j < 16 is the low nibble of
//        byte j, element j + 16 its high nibble; value (q - 8) * d.
//   Q8_0 (34 bytes / 32): f16 d, 32 int8; value q * d.
//   Q4_K (144 bytes / 256): f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
//        nibbles: 64-element chunk c uses bytes 32c..32c+31, low nibbles with scale 2c,
//        high nibbles with scale 2c+1; value (d * sc) * q - dmin * m
//        (dequantize_row_q4_K).
//   Q6_K (210 bytes / 256): 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d; two halves
//        of 128, four quarters of 32 each; value (d * sc) * (q - 32) (dequantize_row_q6_K).
// Quantized rows must start at even addresses (the backend checks): every f16 and
// every pair of quant bytes read here is then 2-byte aligned.
#pragma once
#include <cstdint>

#include "libs/backend/cuda/gpu_compat.h"
#include "libs/backend/cuda/kernels.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {

// Lanes of a warp as the kernels use them: 32 on NVIDIA and on AMD, where it is half a
// 64-lane wavefront (gpu_compat.h, "Warp size"); every shuffle is 32 wide.
constexpr int kWarp = 32;

__device__ __forceinline__ uint32_t LdU16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float LdF16(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ float RoundToHalf(float x) { return __half2float(__float2half_rn(x)); }

template <int T>
struct TypeInfo;
template <>
struct TypeInfo<int(WType::kF32)> {
  static constexpr int kBlock = 1, kBytes = 4;
};
template <>
struct TypeInfo<int(WType::kF16)> {
  static constexpr int kBlock = 1, kBytes = 2;
};
template <>
struct TypeInfo<int(WType::kQ4_0)> {
  static constexpr int kBlock = 32, kBytes = 18;
};
template <>
struct TypeInfo<int(WType::kQ8_0)> {
  static constexpr int kBlock = 32, kBytes = 34;
};
template <>
struct TypeInfo<int(WType::kQ4_K)> {
  static constexpr int kBlock = 256, kBytes = 144;
};
template <>
struct TypeInfo<int(WType::kQ6_K)> {
  static constexpr int kBlock = 256, kBytes = 210;
};

template <int T>
constexpr bool kIsQuant = TypeInfo<T>::kBlock > 1;

/// Element k of a plain (F32 / F16) row.
template <int T>
__device__ __forceinline__ float PlainAt(const uint8_t* row, int64_t k) {
  if constexpr (T == int(WType::kF32)) {
    return reinterpret_cast<const float*>(row)[k];
  } else {
    return __half2float(reinterpret_cast<const __half*>(row)[k]);
  }
}

/// Q4_K scale and min j (0..7) from the 12 packed bytes at q (get_scale_min_k4).
__device__ __forceinline__ void Q4KScaleMin(const uint8_t* q, int j, float* sc, float* mn) {
  if (j < 4) {
    *sc = static_cast<float>(q[j] & 63);
    *mn = static_cast<float>(q[j + 4] & 63);
  } else {
    *sc = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// The 32 values of unit u of a quantized row into w[0..31].
template <int T>
__device__ __forceinline__ void DequantUnit(const uint8_t* row, int64_t u, float* w) {
  if constexpr (T == int(WType::kQ4_0)) {
    const uint8_t* b = row + u * 18;
    const float d = LdF16(b);
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
      const uint32_t v = LdU16(b + 2 + j);
      const int q0 = v & 0xFF, q1 = v >> 8;
      w[j] = static_cast<float>((q0 & 0xF) - 8) * d;
      w[j + 1] = static_cast<float>((q1 & 0xF) - 8) * d;
      w[j + 16] = static_cast<float>((q0 >> 4) - 8) * d;
      w[j + 17] = static_cast<float>((q1 >> 4) - 8) * d;
    }
  } else if constexpr (T == int(WType::kQ8_0)) {
    const uint8_t* b = row + u * 34;
    const float d = LdF16(b);
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const uint32_t v = LdU16(b + 2 + j);
      w[j] = static_cast<float>(static_cast<int8_t>(v & 0xFF)) * d;
      w[j + 1] = static_cast<float>(static_cast<int8_t>(v >> 8)) * d;
    }
  } else if constexpr (T == int(WType::kQ4_K)) {
    const uint8_t* b = row + (u >> 3) * 144;
    const int sub = static_cast<int>(u & 7);
    float sc, mn;
    Q4KScaleMin(b + 4, sub, &sc, &mn);
    const float d1 = LdF16(b) * sc;
    const float m1 = LdF16(b + 2) * mn;
    const uint8_t* qs = b + 16 + (sub >> 1) * 32;
    const int shift = (sub & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l += 2) {
      const uint32_t v = LdU16(qs + l);
      w[l] = d1 * static_cast<float>((v >> shift) & 0xF) - m1;
      w[l + 1] = d1 * static_cast<float>((v >> (8 + shift)) & 0xF) - m1;
    }
  } else if constexpr (T == int(WType::kQ6_K)) {
    const uint8_t* b = row + (u >> 3) * 210;
    const int h = static_cast<int>((u & 7) >> 2);  // half
    const int g = static_cast<int>(u & 3);         // quarter
    const uint8_t* ql = b + h * 64 + (g & 1) * 32;
    const uint8_t* qh = b + 128 + h * 32;
    const int lshift = g < 2 ? 0 : 4;
    const int hshift = 2 * g;
    const float d = LdF16(b + 208);
    const float d0 = d * static_cast<float>(static_cast<int8_t>(b[192 + h * 8 + 2 * g]));
    const float d1 = d * static_cast<float>(static_cast<int8_t>(b[192 + h * 8 + 2 * g + 1]));
#pragma unroll
    for (int l = 0; l < 32; l += 2) {
      const uint32_t vl = LdU16(ql + l);
      const uint32_t vh = LdU16(qh + l);
      const int q0 = static_cast<int>(((vl >> lshift) & 0xF) | (((vh >> hshift) & 3) << 4)) - 32;
      const int q1 = static_cast<int>(((vl >> (8 + lshift)) & 0xF) | (((vh >> (8 + hshift)) & 3) << 4)) - 32;
      const float dd = l < 16 ? d0 : d1;
      w[l] = dd * static_cast<float>(q0);
      w[l + 1] = dd * static_cast<float>(q1);
    }
  }
}

/// Address of flat row r (over dims 1..3) of t.
__device__ __forceinline__ uint8_t* RowPtr(const DevTensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1];
  const int64_t i2 = (r / t.ne[1]) % t.ne[2];
  const int64_t i3 = r / (t.ne[1] * t.ne[2]);
  return t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

template <typename F>
__device__ __forceinline__ float WarpReduce(float v, F op) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = op(v, HERD_SHFL_XOR(v, o, kWarp));
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += HERD_SHFL_XOR(v, o, kWarp);
  return v;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

/// Reduction over a block of blockDim.x (a multiple of 32, <= 1024) threads; every
/// thread gets the result. `red` holds 32 floats of shared memory; safe to call again
/// right after it returns.
template <typename F>
__device__ float BlockReduce(float v, F op, float identity, float* red) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = WarpReduce(v, op);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? red[lane] : identity;
  r = WarpReduce(r, op);
  __syncthreads();
  return r;
}
__device__ inline double BlockSumD(double v, double* red) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = WarpSumD(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double r = lane < nwarps ? red[lane] : 0.0;
  r = WarpSumD(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float AlibiSlope(const Alibi& a, int64_t h) {
  if (a.use == 0) return 1.0f;
  return h < a.n_head_log2 ? powf(a.m0, static_cast<float>(h + 1))
                           : powf(a.m1, static_cast<float>(2 * (h - a.n_head_log2) + 1));
}

/// Blocks for a grid-stride loop over n items with `threads` per block.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
