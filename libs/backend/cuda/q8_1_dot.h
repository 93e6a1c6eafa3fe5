// The integer math of the quantized mat-vec (MMVQ, kernels_quant.cu): activations
// quantized to q8_1 blocks and per-block dp4a (int8 x 4) dot products with the weight
// blocks, written once for nvcc / hipcc device code and for plain g++ host code, so
// that q8_1_dot_test checks on the host exactly the formulas the kernels run.
//
// Formats are ggml's (libs/tensor/quants.h); the scaling of each dot is that of
// ggml-cuda's vec_dot_*_q8_1 (vecdotq.cuh) for one whole 32-element unit:
//   q8_1 block: d = amax / 127 (stored as F16), q = round(x * (1 / d)) (ties away from
//     zero), s = F16(d * sum(q)) with the unrounded d: quantize_row_q8_1_ref bit for bit.
//   Q4_0 x q8_1: d4 * (d8 * sum(nibble * q) - 8 * s8)                (vec_dot_q4_0_q8_1)
//   Q8_0 x q8_1: d0 * d8 * sum(q0 * q)                                 (vec_dot_q8_0_q8_1)
//   Q4_K unit j (32 elements, 6-bit scale sc, min m):
//     d * sc * d8 * sum(nibble * q) - dmin * m * s8                    (vec_dot_q4_K_q8_1)
//   Q6_K unit (two groups of 16 with int8 scales sc0, sc1; q6 in [0, 63]):
//     d * d8 * (sc0 * sum_g0((q6 - 32) * q) + sc1 * sum_g1((q6 - 32) * q))  (vec_dot_q6_K_q8_1)
// A "unit" is 32 weights: one Q4_0 / Q8_0 block or one eighth of a Q4_K / Q6_K super-block
// (the units of device_common.h's DequantUnit), paired with one q8_1 block.
//
// Weight blocks are only 2-byte aligned (18- and 34-byte blocks): weight words are read
// as two 16-bit halves. q8_1 blocks are 36 bytes and start 4-byte aligned.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) && !defined(__HIPCC__)
#include <cuda_fp16.h>
#define HERD_HD __host__ __device__ __forceinline__
#define HERD_Q8_ABI cuda_rt
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>

#include <hip/hip_fp16.h>
#define HERD_HD __host__ __device__ __forceinline__
#define HERD_Q8_ABI hip_rt
#else
#define HERD_HD inline
#define HERD_Q8_ABI host
#endif

// Loop unrolling for the GPU compilers (g++ would warn about the pragma).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define HERD_Q8_UNROLL _Pragma("unroll")
#else
#define HERD_Q8_UNROLL
#endif

// 1 in the device pass of nvcc / hipcc.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define HERD_Q8_DEVICE 1
#else
#define HERD_Q8_DEVICE 0
#endif

namespace herd::q8dot {
inline namespace HERD_Q8_ABI {  // one copy per compiler: CUDA, HIP and host objects link together

/// ggml's block_q8_1 (36 bytes): F16 d, F16 s = d * sum(qs), 32 int8.
struct Q8_1Block {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
static_assert(sizeof(Q8_1Block) == 36, "block_q8_1");

/// IEEE half bits -> float (exact).
HERD_HD float F16ToF32(uint16_t h) {
#if HERD_Q8_DEVICE
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: man * 2^-24
      const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
#endif
}

/// float -> IEEE half bits, round to nearest even (overflow to inf), as __float2half_rn.
HERD_HD uint16_t F32ToF16(float f) {
#if HERD_Q8_DEVICE
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                                               // below 2^-14: subnormal or 0
    if (ax < 0x33000000u) return sign;                                  // below 2^-25: rounds to 0
    const uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 (e in 102..112)
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
#endif
}

/// c + the sum of the four products of the signed bytes of a and b (CUDA's __dp4a; on
/// AMD v_dot4_i32_i8 where the target has it, else the plain expansion).
HERD_HD int Dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#elif defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__))
  return __builtin_amdgcn_sdot4(a, b, c, false);
#else
  const uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>((ua >> (8 * i)) & 0xFF)) *
         static_cast<int>(static_cast<int8_t>((ub >> (8 * i)) & 0xFF));
  }
  return c;
#endif
}

/// 16-bit little-endian word at a 2-byte aligned address.
HERD_HD uint32_t Ld16(const uint8_t* p) {
#if HERD_Q8_DEVICE
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

/// 32-bit little-endian word at a 2-byte aligned address (two 16-bit loads).
HERD_HD uint32_t Ld32(const uint8_t* p) { return Ld16(p) | (Ld16(p + 2) << 16); }

/// Four int8 of a q8_1 block as one int (qs is 4-byte aligned).
HERD_HD int Q8Word(const Q8_1Block& y, int i) {
#if HERD_Q8_DEVICE
  return reinterpret_cast<const int*>(y.qs)[i];
#else
  int v;
  std::memcpy(&v, y.qs + 4 * i, 4);
  return v;
#endif
}

/// The q8_1 scale of a block whose largest magnitude is amax: *d = amax / 127; returns
/// 1 / d, or 0 for an all-zero block (quantize_row_q8_1_ref).
HERD_HD float Q8_1InvScale(float amax, float* d) {
  *d = amax / 127.0f;
  return *d != 0.0f ? 1.0f / *d : 0.0f;
}

/// One element quantized with inverse scale id: round half away from zero.
HERD_HD int Q8_1Round(float x, float id) { return static_cast<int>(roundf(x * id)); }

/// x[0..31] -> *y, bit-exact with quantize_row_q8_1_ref (libs/tensor/quants.h).
HERD_HD void QuantizeQ8_1(const float* x, Q8_1Block* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  float d;
  const float id = Q8_1InvScale(amax, &d);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int q = Q8_1Round(x[j], id);
    y->qs[j] = static_cast<int8_t>(q);
    sum += q;
  }
  y->d = F32ToF16(d);
  y->s = F32ToF16(static_cast<float>(sum) * d);
}

/// Q4_0 block b (18 bytes) . q8_1 block y (vec_dot_q4_0_q8_1 over a whole block).
HERD_HD float DotQ4_0(const uint8_t* b, const Q8_1Block& y) {
  int sumi = 0;
  HERD_Q8_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = Ld32(b + 2 + 4 * i);
    sumi = Dp4a(static_cast<int>(v & 0x0F0F0F0Fu), Q8Word(y, i), sumi);             // elements 4i..4i+3
    sumi = Dp4a(static_cast<int>((v >> 4) & 0x0F0F0F0Fu), Q8Word(y, i + 4), sumi);  // 16+4i..
  }
  return F16ToF32(Ld16(b)) * (F16ToF32(y.d) * static_cast<float>(sumi) - 8.0f * F16ToF32(y.s));
}

/// Q8_0 block b (34 bytes) . q8_1 block y (vec_dot_q8_0_q8_1).
HERD_HD float DotQ8_0(const uint8_t* b, const Q8_1Block& y) {
  int sumi = 0;
  HERD_Q8_UNROLL
  for (int i = 0; i < 8; ++i) sumi = Dp4a(static_cast<int>(Ld32(b + 2 + 4 * i)), Q8Word(y, i), sumi);
  return F16ToF32(Ld16(b)) * F16ToF32(y.d) * static_cast<float>(sumi);
}

/// Q4_K scale and min j (0..7) of the 12 packed bytes at q (get_scale_min_k4).
HERD_HD void Q4KScaleMinInt(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// Unit j (0..7, elements 32j..32j+31) of Q4_K super-block sb (144 bytes) . q8_1 block y
/// (vec_dot_q4_K_q8_1, with the min term from y's s).
HERD_HD float DotQ4_K(const uint8_t* sb, int j, const Q8_1Block& y) {
  int sc, m;
  Q4KScaleMinInt(sb + 4, j, &sc, &m);
  const uint8_t* qs = sb + 16 + (j >> 1) * 32;
  const int shift = (j & 1) * 4;
  int sumi = 0;
  HERD_Q8_UNROLL
  for (int i = 0; i < 8; ++i) {
    sumi = Dp4a(static_cast<int>((Ld32(qs + 4 * i) >> shift) & 0x0F0F0F0Fu), Q8Word(y, i), sumi);
  }
  return F16ToF32(Ld16(sb)) * static_cast<float>(sc) * F16ToF32(y.d) * static_cast<float>(sumi) -
         F16ToF32(Ld16(sb + 2)) * static_cast<float>(m) * F16ToF32(y.s);
}

/// Unit u (0..7, elements 32u..32u+31) of Q6_K super-block sb (210 bytes) . q8_1 block y
/// (vec_dot_q6_K_q8_1; the -32 offset applied as 32 * sum(q) per group of 16).
HERD_HD float DotQ6_K(const uint8_t* sb, int u, const Q8_1Block& y) {
  const int h = u >> 2, g = u & 3;  // half of 128, quarter of it
  const uint8_t* ql = sb + h * 64 + (g & 1) * 32;
  const uint8_t* qh = sb + 128 + h * 32;
  const int lshift = g < 2 ? 0 : 4, hshift = 2 * g;
  int grp[2];
  HERD_Q8_UNROLL
  for (int k = 0; k < 2; ++k) {
    int sumi = 0, sumq = 0;
    HERD_Q8_UNROLL
    for (int i = 4 * k; i < 4 * k + 4; ++i) {
      const uint32_t lo = (Ld32(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = ((Ld32(qh + 4 * i) >> hshift) & 0x03030303u) << 4;
      const int q = Q8Word(y, i);
      sumi = Dp4a(static_cast<int>(lo | hi), q, sumi);
      sumq = Dp4a(0x01010101, q, sumq);
    }
    grp[k] = sumi - 32 * sumq;
  }
  const int sc0 = static_cast<int8_t>(sb[192 + h * 8 + 2 * g]);
  const int sc1 = static_cast<int8_t>(sb[192 + h * 8 + 2 * g + 1]);
  return F16ToF32(Ld16(sb + 208)) * F16ToF32(y.d) * static_cast<float>(sc0 * grp[0] + sc1 * grp[1]);
}

}  // namespace HERD_Q8_ABI
}  // namespace herd::q8dot
