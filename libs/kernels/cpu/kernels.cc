// Scalar reference kernels and run-time ISA dispatch. Compiled without -mavx*.
#include "libs/kernels/cpu/kernels.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "libs/base/fp16.h"
#include "libs/kernels/cpu/internal.h"
#include "libs/tensor/quants.h"

namespace herd::cpu {

static_assert(kGemmMinRows == internal::kGemmMinRows, "kernels.h and internal.h disagree");

using internal::IsaKernels;
using internal::kNumWTypes;

namespace {

int WIndex(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
      return internal::kWF32;
    case GgmlType::F16:
      return internal::kWF16;
    case GgmlType::BF16:
      return internal::kWBF16;
    case GgmlType::Q8_0:
      return internal::kWQ8_0;
    case GgmlType::Q4_0:
      return internal::kWQ4_0;
    case GgmlType::Q4_1:
      return internal::kWQ4_1;
    case GgmlType::Q5_0:
      return internal::kWQ5_0;
    case GgmlType::Q5_1:
      return internal::kWQ5_1;
    case GgmlType::IQ4_NL:
      return internal::kWIQ4_NL;
    case GgmlType::Q2_K:
      return internal::kWQ2_K;
    case GgmlType::Q3_K:
      return internal::kWQ3_K;
    case GgmlType::Q4_K:
      return internal::kWQ4_K;
    case GgmlType::Q5_K:
      return internal::kWQ5_K;
    case GgmlType::Q6_K:
      return internal::kWQ6_K;
    case GgmlType::IQ4_XS:
      return internal::kWIQ4_XS;
    default:
      return -1;
  }
}

// ---- scalar vec_dot: ggml's generic C (ggml_vec_dot_f32 / _f16 / _bf16 without
// GGML_SIMD, ggml_vec_dot_q8_0_q8_0_generic, ggml_vec_dot_q4_0_q8_0_generic).

void VecDotF32Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  const float* x = static_cast<const float*>(vx);
  const float* y = static_cast<const float*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  *s = static_cast<float>(sum);
}

void VecDotF16Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  *s = static_cast<float>(sum);
}

void VecDotBf16Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Bf16ToFp32(x[i]) * Bf16ToFp32(y[i]));
  *s = static_cast<float>(sum);
}

// The 32-element block types against Q8_0 (ggml_vec_dot_q8_0_q8_0_generic, _q4_0_q8_0_,
// _q5_0_q8_0_, _iq4_nl_q8_0_generic): per block the exact integer sum of the products of
// its 32 values (Decode: the block's signed values in element order) with Q8_0's, then
// sumf = fmaf(float(sumi), dx*dy, sumf) in block order.
template <typename Block, void (*Decode)(const Block&, int (&)[32])>
void VecDotQ0Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / 32;
  float sumf = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int q[32];
    Decode(x[b], q);
    int32_t sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += q[j] * y[b].qs[j];
    sumf = std::fma(static_cast<float>(sumi), Fp16ToFp32(x[b].d) * Fp16ToFp32(y[b].d), sumf);
  }
  *s = sumf;
}

void DecodeQ8_0(const BlockQ8_0& x, int (&q)[32]) {
  for (int j = 0; j < 32; ++j) q[j] = x.qs[j];
}

void DecodeQ4_0(const BlockQ4_0& x, int (&q)[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = (x.qs[j] & 0x0F) - 8;
    q[j + 16] = (x.qs[j] >> 4) - 8;
  }
}

void DecodeQ5_0(const BlockQ5_0& x, int (&q)[32]) {
  uint32_t qh;
  std::memcpy(&qh, x.qh, sizeof qh);
  for (int j = 0; j < 16; ++j) {
    q[j] = ((x.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
    q[j + 16] = ((x.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
  }
}

void DecodeIQ4_NL(const BlockIQ4_NL& x, int (&q)[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4nlValues[x.qs[j] & 0xf];
    q[j + 16] = kIq4nlValues[x.qs[j] >> 4];
  }
}

// Q4_1 / Q5_1 against Q8_1 in the arithmetic of ggml's x86 build (arch/x86/quants.c
// ggml_vec_dot_q4_1_q8_1 / ggml_vec_dot_q5_1_q8_1, AVX2 path, which AVX-512 machines run
// too): 8 float lanes, lane l accumulates per block the exact int sum of the products of
// elements 4l..4l+3 times dx*dy (one fused multiply-add), the lanes are summed as
// hsum_float_8 does ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), and the min terms m*s go to a
// separate float sum in block order (fused: compilers contract ggml's `summs += m*s`).
// q[32] holds the block's unsigned quants (0..15 / 0..31) in element order.
struct Q1Lanes {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float summs = 0;
  void Add(const int (&q)[32], const int8_t* yq, float dxdy, float m, float s) {
    summs = std::fma(m, s, summs);
    for (int l = 0; l < 8; ++l) {
      int isum = 0;
      for (int i = 0; i < 4; ++i) isum += q[4 * l + i] * yq[4 * l + i];
      lane[l] = std::fma(static_cast<float>(isum), dxdy, lane[l]);
    }
  }
  float Result() const {
    const float a0 = (lane[0] + lane[4]) + (lane[2] + lane[6]);
    const float a1 = (lane[1] + lane[5]) + (lane[3] + lane[7]);
    return (a0 + a1) + summs;
  }
};

// Q4_1 / Q5_1 against Q8_1 (see Q1Lanes); Decode: the block's unsigned values in element
// order.
template <typename Block, void (*Decode)(const Block&, int (&)[32])>
void VecDotQ1Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(vy);
  const int64_t nb = n / 32;
  Q1Lanes acc;
  for (int64_t b = 0; b < nb; ++b) {
    int q[32];
    Decode(x[b], q);
    acc.Add(q, y[b].qs, Fp16ToFp32(x[b].d) * Fp16ToFp32(y[b].d), Fp16ToFp32(x[b].m), Fp16ToFp32(y[b].s));
  }
  *s = acc.Result();
}

void DecodeQ4_1(const BlockQ4_1& x, int (&q)[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = x.qs[j] & 0x0F;
    q[j + 16] = x.qs[j] >> 4;
  }
}

void DecodeQ5_1(const BlockQ5_1& x, int (&q)[32]) {
  uint32_t qh;
  std::memcpy(&qh, x.qh, sizeof qh);
  for (int j = 0; j < 16; ++j) {
    q[j] = (x.qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10);
    q[j + 16] = (x.qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
  }
}

constexpr auto VecDotQ8_0Scalar = VecDotQ0Scalar<BlockQ8_0, DecodeQ8_0>;
constexpr auto VecDotQ4_0Scalar = VecDotQ0Scalar<BlockQ4_0, DecodeQ4_0>;
constexpr auto VecDotQ5_0Scalar = VecDotQ0Scalar<BlockQ5_0, DecodeQ5_0>;
constexpr auto VecDotIQ4_NLScalar = VecDotQ0Scalar<BlockIQ4_NL, DecodeIQ4_NL>;
constexpr auto VecDotQ4_1Scalar = VecDotQ1Scalar<BlockQ4_1, DecodeQ4_1>;
constexpr auto VecDotQ5_1Scalar = VecDotQ1Scalar<BlockQ5_1, DecodeQ5_1>;

// ggml_vec_dot_q2_K_q8_K_generic.
void VecDotQ2_KScalar(int64_t n, float* s, const void* vx, const void* vy) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * Fp16ToFp32(x[i].d);
    const float dmin = y[i].d * Fp16ToFp32(x[i].dmin);
    int isum = 0;
    int is = 0;
    for (int k = 0; k < kQK_K / 128; ++k) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        int d = sc[is++] & 0xF;
        int isuml = 0;
        for (int l = 0; l < 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        d = sc[is++] & 0xF;
        isuml = 0;
        for (int l = 16; l < 32; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        shift += 2;
        q8 += 32;
      }
      q2 += 32;
    }
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  *s = sumf;
}

// The 8-lane integer accumulation shared by ggml's generic q3_K/q4_K/q5_K/q6_K dot
// products: aux32[l] += scale * (q8 * a) over 8-element steps, then
// sums[l] += d * aux32[l] per super-block and the 8 lane sums added at the end.
inline void AccumulateScaled8(const int8_t* q8, const int8_t* a, int scale, int32_t* aux32) {
  int16_t aux16[8];
  for (int l = 0; l < 8; ++l) aux16[l] = static_cast<int16_t>(q8[l] * a[l]);
  for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
}

// ggml_vec_dot_q3_K_q8_K_generic.
void VecDotQ3_KScalar(int64_t n, float* s, const void* vx, const void* vy) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  const uint32_t kmask1 = 0x03030303;
  const uint32_t kmask2 = 0x0f0f0f0f;
  int8_t aux8[kQK_K];
  float sums[8] = {};
  int32_t aux32[8];
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    const int8_t* q8 = y[i].qs;
    std::memset(aux32, 0, sizeof aux32);
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>((q3[l] >> shift) & 3);
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(a[l] - ((hm[l] & m) ? 0 : 4));
        a += 32;
        m = static_cast<uint8_t>(m << 1);
      }
      q3 += 32;
    }
    a = aux8;
    uint32_t auxs[4];
    std::memcpy(auxs, x[i].scales, 12);
    const uint32_t tmp = auxs[2];
    auxs[2] = ((auxs[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    auxs[3] = ((auxs[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    auxs[0] = (auxs[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    auxs[1] = (auxs[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, auxs, 16);
    for (int j = 0; j < kQK_K / 16; ++j) {
      AccumulateScaled8(q8, a, scales[j] - 32, aux32);
      q8 += 8;
      a += 8;
      AccumulateScaled8(q8, a, scales[j] - 32, aux32);
      q8 += 8;
      a += 8;
    }
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  *s = sumf;
}

// Q4_K/Q5_K 6-bit scales and mins (the kmask unpacking of the generic dot products).
inline void UnpackScalesMinsK(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  const uint32_t kmask1 = 0x3f3f3f3f;
  const uint32_t kmask2 = 0x0f0f0f0f;
  const uint32_t kmask3 = 0x03030303;
  uint32_t utmp[4];
  std::memcpy(utmp, packed, 12);
  utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = utmp[1] & kmask1;
  utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
  utmp[2] = uaux;
  utmp[0] &= kmask1;
  std::memcpy(scales, utmp, 8);
  std::memcpy(mins, utmp + 2, 8);
}

// ggml_vec_dot_q4_K_q8_K_generic (kHigh = false) / ggml_vec_dot_q5_K_q8_K_generic.
template <bool kHigh>
void VecDotQ45_KScalar(int64_t n, float* s, const void* vx, const void* vy) {
  using Block = typename std::conditional<kHigh, BlockQ5_K, BlockQ4_K>::type;
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  int8_t aux8[kQK_K];
  float sums[8] = {};
  int32_t aux32[8];
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    std::memset(aux32, 0, sizeof aux32);
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] & 0xF);
      if constexpr (kHigh) {
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(a[l] + (x[i].qh[l] & m ? 16 : 0));
      }
      a += 32;
      m = static_cast<uint8_t>(m << 1);
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] >> 4);
      if constexpr (kHigh) {
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(a[l] + (x[i].qh[l] & m ? 16 : 0));
      }
      a += 32;
      m = static_cast<uint8_t>(m << 1);
      q4 += 32;
    }
    uint8_t scales[8], mins[8];
    UnpackScalesMinsK(x[i].scales, scales, mins);
    int sumi = 0;
    for (int j = 0; j < kQK_K / 16; ++j) sumi += y[i].bsums[j] * mins[j / 2];
    a = aux8;
    for (int j = 0; j < kQK_K / 32; ++j) {
      const int scale = scales[j];
      for (int t = 0; t < 4; ++t) {
        AccumulateScaled8(q8, a, scale, aux32);
        q8 += 8;
        a += 8;
      }
    }
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
    const float dmin = Fp16ToFp32(x[i].dmin) * y[i].d;
    sumf -= dmin * static_cast<float>(sumi);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  *s = sumf;
}

// ggml_vec_dot_q6_K_q8_K_generic.
void VecDotQ6_KScalar(int64_t n, float* s, const void* vx, const void* vy) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  int8_t aux8[kQK_K];
  float sums[8] = {};
  int32_t aux32[8];
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    std::memset(aux32, 0, sizeof aux32);
    int8_t* a = aux8;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        a[l + 0] = static_cast<int8_t>(((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        a[l + 32] = static_cast<int8_t>(((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        a[l + 64] = static_cast<int8_t>(((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        a[l + 96] = static_cast<int8_t>(((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
      a += 128;
      q4 += 64;
      qh += 32;
    }
    a = aux8;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const int scale = x[i].scales[j];
      AccumulateScaled8(q8, a, scale, aux32);
      q8 += 8;
      a += 8;
      AccumulateScaled8(q8, a, scale, aux32);
      q8 += 8;
      a += 8;
    }
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  *s = sumf;
}

// ggml_vec_dot_iq4_xs_q8_K_generic.
void VecDotIQ4_XSScalar(int64_t n, float* s, const void* vx, const void* vy) {
  const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  float sumf = 0;
  for (int64_t ibl = 0; ibl < nb; ++ibl) {
    const float d4d8 = Fp16ToFp32(x[ibl].d) * y[ibl].d;
    uint16_t h = x[ibl].scales_h;
    const uint8_t* qs = x[ibl].qs;
    const int8_t* q8 = y[ibl].qs;
    for (int ib = 0; ib < kQK_K / 32; ib += 2) {
      const uint8_t ls1 = static_cast<uint8_t>((x[ibl].scales_l[ib / 2] & 0xf) | ((h << 4) & 0x30));
      const uint8_t ls2 = static_cast<uint8_t>((x[ibl].scales_l[ib / 2] >> 4) | ((h << 2) & 0x30));
      h = static_cast<uint16_t>(h >> 4);
      const float d1 = d4d8 * static_cast<float>(ls1 - 32);
      const float d2 = d4d8 * static_cast<float>(ls2 - 32);
      int sumi1 = 0, sumi2 = 0;
      for (int j = 0; j < 16; ++j) {
        sumi1 += q8[j + 0] * kIq4nlValues[qs[j] & 0xf];
        sumi2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sumf += d1 * static_cast<float>(sumi1 + sumi2);
      qs += 16;
      q8 += 32;
      sumi1 = sumi2 = 0;
      for (int j = 0; j < 16; ++j) {
        sumi1 += q8[j + 0] * kIq4nlValues[qs[j] & 0xf];
        sumi2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sumf += d2 * static_cast<float>(sumi1 + sumi2);
      qs += 16;
      q8 += 32;
    }
  }
  *s = sumf;
}

template <internal::VecDotFn kDot>
void TileScalar(int64_t k, const void* w, size_t ws, const void* a, size_t as, float* dst, size_t ds, int64_t i0,
                int64_t i1, int64_t j0, int64_t j1) {
  const char* wb = static_cast<const char*>(w);
  const char* ab = static_cast<const char*>(a);
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t i = i0; i < i1; ++i) {
      kDot(k, &dst[j * ds + i], wb + i * ws, ab + j * as);
    }
  }
}

const IsaKernels kScalarKernels = {
    {VecDotF32Scalar, VecDotF16Scalar, VecDotBf16Scalar, VecDotQ8_0Scalar, VecDotQ4_0Scalar, VecDotQ4_1Scalar,
     VecDotQ5_0Scalar, VecDotQ5_1Scalar, VecDotIQ4_NLScalar, VecDotQ2_KScalar, VecDotQ3_KScalar,
     VecDotQ45_KScalar<false>, VecDotQ45_KScalar<true>, VecDotQ6_KScalar, VecDotIQ4_XSScalar},
    {TileScalar<VecDotF32Scalar>, TileScalar<VecDotF16Scalar>, TileScalar<VecDotBf16Scalar>,
     TileScalar<VecDotQ8_0Scalar>, TileScalar<VecDotQ4_0Scalar>, TileScalar<VecDotQ4_1Scalar>,
     TileScalar<VecDotQ5_0Scalar>, TileScalar<VecDotQ5_1Scalar>, TileScalar<VecDotIQ4_NLScalar>,
     TileScalar<VecDotQ2_KScalar>, TileScalar<VecDotQ3_KScalar>, TileScalar<VecDotQ45_KScalar<false>>,
     TileScalar<VecDotQ45_KScalar<true>>, TileScalar<VecDotQ6_KScalar>, TileScalar<VecDotIQ4_XSScalar>},
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

// Highest supported Isa <= `isa`.
Isa ClampIsa(Isa isa) {
  while (isa != Isa::kScalar && !IsaSupported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

const IsaKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::Avx512Kernels(GetCpuFeatures().avx512vnni);
    case Isa::kAvx2:
      return internal::Avx2Kernels();
    default:
      return kScalarKernels;
  }
}

}  // namespace

namespace internal {
const IsaKernels& BestKernels() {
  static const IsaKernels& k = KernelsFor(ClampIsa(BestIsa()));
  return k;
}
const IsaKernels& ScalarKernels() { return kScalarKernels; }
}  // namespace internal

GgmlType VecDotType(GgmlType w) {
  switch (w) {  // ggml-cpu type_traits_cpu[].vec_dot_type, also for types without kernels here yet
    case GgmlType::F16:
      return GgmlType::F16;
    case GgmlType::BF16:
      return GgmlType::BF16;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q8_1:
      return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ3_S:
    case GgmlType::IQ2_S:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ1_M:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
      return GgmlType::Q8_K;
    default:
      return GgmlType::F32;
  }
}

bool SupportsMulMat(GgmlType w) { return WIndex(w) >= 0; }

bool IsaSupported(Isa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

void FromFloat(GgmlType vec_dot_type, const float* x, void* y, int64_t n, Isa isa) {
  const IsaKernels& k = KernelsFor(ClampIsa(isa));
  switch (vec_dot_type) {
    case GgmlType::F32:
      std::memmove(y, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      if (k.to_f16 != nullptr) return k.to_f16(x, y, n);
      QuantizeRow(GgmlType::F16, x, y, n);
      return;
    case GgmlType::BF16:
      if (k.to_bf16 != nullptr) return k.to_bf16(x, y, n);
      QuantizeRow(GgmlType::BF16, x, y, n);
      return;
    case GgmlType::Q8_0:
      if (k.to_q8_0 != nullptr) return k.to_q8_0(x, y, n);
      QuantizeRowQ8_0X86(x, static_cast<BlockQ8_0*>(y), n);
      return;
    case GgmlType::Q8_1:
      if (k.to_q8_1 != nullptr) return k.to_q8_1(x, y, n);
      QuantizeRowQ8_1X86(x, static_cast<BlockQ8_1*>(y), n);
      return;
    case GgmlType::Q8_K:
      QuantizeRowQ8_K(x, static_cast<BlockQ8_K*>(y), n);
      return;
    case GgmlType::IQ4_NL:  // ggml's from_float for IQ4_NL is the ntry = -1 reference
      QuantizeRowIQ4_NLRef(x, static_cast<BlockIQ4_NL*>(y), n);
      return;
    default:  // every other weight type: ggml's from_float is the reference quantizer
      assert(CanQuantize(vec_dot_type) && "FromFloat: unsupported type");
      QuantizeRow(vec_dot_type, x, y, n);
      return;
  }
}

VecDotFn GetVecDot(GgmlType w, Isa isa) {
  const int t = WIndex(w);
  if (t < 0 || !IsaSupported(isa)) return nullptr;
  VecDotFn f = KernelsFor(isa).vec_dot[t];
  return f != nullptr ? f : kScalarKernels.vec_dot[t];
}

bool F16UsesGgmlVecDot(int64_t k, Isa isa) {
  switch (ClampIsa(isa)) {
    case Isa::kAvx512:
      return k % 16 != 0;
    case Isa::kAvx2:
      return k % 8 != 0;
    default:
      return false;
  }
}

float VecDotF16Ggml(int64_t n, const uint16_t* x, const uint16_t* y, Isa isa) {
  const auto f = KernelsFor(ClampIsa(isa)).dot_f16_ggml;
  if (f != nullptr) return f(n, x, y);
  float s;
  VecDotF16Scalar(n, &s, x, y);
  return s;
}

void MulMatTile(GgmlType w, Isa isa, int64_t k, const void* w_data, size_t w_stride, const void* a_data,
                size_t a_stride, float* dst, size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int t = WIndex(w);
  assert(t >= 0);
  if (t < 0 || i0 >= i1 || j0 >= j1) return;
  if (w == GgmlType::F16 && F16UsesGgmlVecDot(k, isa)) {
    const auto* wb = static_cast<const uint8_t*>(w_data);
    const auto* ab = static_cast<const uint8_t*>(a_data);
    for (int64_t j = j0; j < j1; ++j) {
      const auto* y = reinterpret_cast<const uint16_t*>(ab + static_cast<size_t>(j) * a_stride);
      for (int64_t i = i0; i < i1; ++i) {
        dst[static_cast<size_t>(j) * dst_stride + static_cast<size_t>(i)] =
            VecDotF16Ggml(k, reinterpret_cast<const uint16_t*>(wb + static_cast<size_t>(i) * w_stride), y, isa);
      }
    }
    return;
  }
  internal::TileFn f = KernelsFor(ClampIsa(isa)).tile[t];
  if (f == nullptr) f = kScalarKernels.tile[t];
  f(k, w_data, w_stride, a_data, a_stride, dst, dst_stride, i0, i1, j0, j1);
}

}  // namespace herd::cpu

// ---------------------------------------------------------------- packed weights

namespace herd::cpu {
namespace {
// Bytes of one packed block (8 rows): 8 F16 scales + the rows' quants.
int64_t PackedBlockBytes(GgmlType w) {
  switch (w) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
      return 16 + 8 * 16;
    case GgmlType::Q5_0:
      return 16 + 8 * 16 + 32;
    case GgmlType::Q4_1:
      return 32 + 8 * 16;
    case GgmlType::Q5_1:
      return 32 + 8 * 16 + 32;
    case GgmlType::Q8_0:
      return 16 + 8 * 32;
    default:
      return 0;
  }
}
}  // namespace

// Bytes of one packed Q4_K super-block of 8 rows: 8 F16 d, 8 F16 dmin, 8 x 8 scales and
// mins (one byte each), 8 x 128 quant bytes.
constexpr int64_t kPackedQ4KBlockBytes = 32 + 128 + 1024;
// Q5_K: the Q4_K layout of its low 4 bits, then per group one vector of the fifth bits.
constexpr int64_t kPackedQ5KBlockBytes = kPackedQ4KBlockBytes + 8 * 32;
// Packed Q6_K super-block of 8 rows: 8 F16 d, 16 x 8 int8 scales (per group, row-major
// pairs of the group's two sub-blocks), per 32-element group 4
// nibble vectors and 2 vectors of high bits (192 bytes); the size of the 8 original blocks.
constexpr int64_t kPackedQ6KBlockBytes = 16 + 128 + 8 * 192;

// Packed IQ4_XS super-block of 8 rows: 8 F16 d, 8 x 8 int8 sub-block scales (ls - 32),
// 8 x 128 nibble bytes.
constexpr int64_t kPackedIQ4XSBlockBytes = 16 + 64 + 1024;
// Packed Q3_K super-block of 8 rows: 8 F16 d, 8 x 16 int8 sub-block scales (sc - 32) in
// pairs, per 32-element group 2 vectors of low 2 bits and one of high bits (96 bytes).
constexpr int64_t kPackedQ3KBlockBytes = 16 + 128 + 8 * 96;
// Packed Q2_K super-block of 8 rows: 8 F16 d, 8 F16 dmin, 8 x 16 scale/min bytes in pairs,
// per 32-element group 2 vectors of 2-bit quants (64 bytes): the size of the 8 blocks.
constexpr int64_t kPackedQ2KBlockBytes = 32 + 128 + 8 * 64;

bool SupportsPacked(GgmlType w, Isa isa) {
  return (w == GgmlType::Q4_0 || w == GgmlType::Q8_0 || w == GgmlType::Q5_0 || w == GgmlType::IQ4_NL ||
          w == GgmlType::Q4_1 || w == GgmlType::Q5_1 || w == GgmlType::BF16 || w == GgmlType::IQ4_XS ||
          w == GgmlType::Q2_K || w == GgmlType::Q3_K || w == GgmlType::F16 || w == GgmlType::Q4_K ||
          w == GgmlType::Q5_K || w == GgmlType::Q6_K) &&
         isa != Isa::kScalar && ClampIsa(isa) != Isa::kScalar;
}

// Whether MulMatPacked runs the AVX-512 build of the packed tiles (kernels_avx512_vnni.cc,
// compiled for AVX512-VNNI): VNNI dot products, F16 panels over F32 activations.
namespace {
bool PackedAvx512(Isa isa) { return ClampIsa(isa) == Isa::kAvx512 && GetCpuFeatures().avx512vnni; }
}  // namespace

GgmlType PackedActType(GgmlType w, Isa isa) {
  return w == GgmlType::F16 && PackedAvx512(isa) ? GgmlType::F32 : VecDotType(w);
}

bool F16SlabLayout(Isa isa) { return PackedAvx512(isa); }

size_t PackedWeightBytes(GgmlType w, int64_t k, int64_t m, Isa isa) {
  const int64_t panels = (m + kPackRows - 1) / kPackRows;
  if (w == GgmlType::F16 && F16SlabLayout(isa)) return static_cast<size_t>((m + 15) / 16 * 16 * k * 2);
  if (w == GgmlType::F16) return static_cast<size_t>(panels * kPackRows * (k / 8) * 16);
  if (w == GgmlType::BF16) return static_cast<size_t>(panels * kPackRows * (k / 16) * 32);
  if (w == GgmlType::Q4_K) return static_cast<size_t>(panels * (k / kQK_K) * kPackedQ4KBlockBytes);
  if (w == GgmlType::Q5_K) return static_cast<size_t>(panels * (k / kQK_K) * kPackedQ5KBlockBytes);
  if (w == GgmlType::Q6_K) return static_cast<size_t>(panels * (k / kQK_K) * kPackedQ6KBlockBytes);
  if (w == GgmlType::IQ4_XS) return static_cast<size_t>(panels * (k / kQK_K) * kPackedIQ4XSBlockBytes);
  if (w == GgmlType::Q3_K) return static_cast<size_t>(panels * (k / kQK_K) * kPackedQ3KBlockBytes);
  if (w == GgmlType::Q2_K) return static_cast<size_t>(panels * (k / kQK_K) * kPackedQ2KBlockBytes);
  if (PackedBlockBytes(w) == 0) return 0;
  return static_cast<size_t>(panels * (k / 32) * PackedBlockBytes(w));
}

namespace {

// PackWeights of one type family: panels p0..p1 of `m` rows of `k` elements at `src`
// (rows `w_stride` bytes apart) into `out` (PackedWeightBytes layout).

// F16 in the AVX-512 slab layout: 16 rows per slab, 2 panels per slab.
void PackF16Slabs(GgmlType /*w*/, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
                  int64_t p1) {
  // Panel p is half h = p % 2 of slab p / 2: lanes 8h..8h+7 of each element's 16. The
  // last panel also zeroes the other half of its slab when it is the first half.
  const int64_t panels = (m + kPackRows - 1) / kPackRows;
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* slab = out + static_cast<size_t>(p / 2) * static_cast<size_t>(k) * 32;
    const int64_t lanes = p == panels - 1 && p % 2 == 0 ? 16 : 8;
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t lane = 8 * (p % 2) + l;
      const int64_t row = p * kPackRows + l;
      if (row < m && l < 8) {
        const uint8_t* r = src + static_cast<size_t>(row) * w_stride;
        for (int64_t e = 0; e < k; ++e) std::memcpy(slab + e * 32 + lane * 2, r + e * 2, 2);
      } else {
        for (int64_t e = 0; e < k; ++e) std::memset(slab + e * 32 + lane * 2, 0, 2);
      }
    }
  }
}

// F16 / BF16 in panels of 8 rows, interleaved per step.
void PackF16Rows(GgmlType w, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
                 int64_t p1) {
  // Per step (8 F16 / 16 BF16 elements, 16 / 32 bytes) the 8 rows' values.
  const int64_t step_bytes = w == GgmlType::F16 ? 16 : 32;
  const int64_t steps = k * 2 / step_bytes;
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t s = 0; s < steps; ++s) {
      uint8_t* o = out + (p * steps + s) * kPackRows * step_bytes;
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row < m) {
          std::memcpy(o + step_bytes * r, src + static_cast<size_t>(row) * w_stride + s * step_bytes,
                      static_cast<size_t>(step_bytes));
        } else {
          std::memset(o + step_bytes * r, 0, static_cast<size_t>(step_bytes));
        }
      }
    }
  }
}

// Q4_K / Q5_K super-blocks of 8 rows (kPackedQ4KBlockBytes / kPackedQ5KBlockBytes).
void PackQ4KQ5K(GgmlType w, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
                int64_t p1) {
  const bool q5 = w == GgmlType::Q5_K;
  const int64_t nb = k / kQK_K;
  // block_q4_K: F16 d, F16 dmin, 12 scale bytes, 128 quant bytes; block_q5_K: 32 bytes of
  // fifth bits (qh) before the quants.
  const int64_t src_block = q5 ? 176 : 144;
  const int64_t bb = q5 ? kPackedQ5KBlockBytes : kPackedQ4KBlockBytes;
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * bb;
      std::memset(o, 0, static_cast<size_t>(bb));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * src_block;
        std::memcpy(o + 2 * r, blk, 2);
        std::memcpy(o + 16 + 2 * r, blk + 2, 2);
        uint8_t scales[8], mins[8];
        UnpackScalesMinsK(blk + 4, scales, mins);
        const uint8_t* qh = blk + 16;  // Q5_K: bit g of qh[e] is element e of group g's fifth bit
        const uint8_t* qs = blk + (q5 ? 48 : 16);
        for (int64_t g = 0; g < 8; ++g) {
          o[32 + 8 * g + r] = scales[g];
          o[96 + 8 * g + r] = mins[g];
          // Group g: the low (g even) or high (g odd) nibbles of qs[32 * (g / 2) ...].
          const auto q = [&](int64_t e) {
            const uint8_t byte = qs[32 * (g / 2) + e];
            return static_cast<uint8_t>(g % 2 == 0 ? byte & 0x0F : byte >> 4);
          };
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 4; ++i) {
              o[160 + 128 * g + 32 * h + 4 * r + i] = static_cast<uint8_t>(q(4 * h + i) | (q(4 * h + 16 + i) << 4));
              if (q5) {
                uint8_t& hb = o[kPackedQ4KBlockBytes + 32 * g + 4 * r + i];
                hb = static_cast<uint8_t>(hb | (((qh[4 * h + i] >> g) & 1) << h) |
                                          (((qh[4 * h + 16 + i] >> g) & 1) << (4 + h)));
              }
            }
          }
        }
      }
    }
  }
}

// Q2_K super-blocks of 8 rows (kPackedQ2KBlockBytes).
void PackQ2K(GgmlType /*w*/, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
             int64_t p1) {
  const int64_t nb = k / kQK_K;
  constexpr int64_t kSrcBlock = 84;  // block_q2_K: scales[16], qs[64], F16 d, F16 dmin
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * kPackedQ2KBlockBytes;
      std::memset(o, 0, static_cast<size_t>(kPackedQ2KBlockBytes));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * kSrcBlock;
        std::memcpy(o + 2 * r, blk + 80, 2);
        std::memcpy(o + 16 + 2 * r, blk + 82, 2);
        for (int64_t j = 0; j < 16; ++j) o[32 + 16 * (j / 2) + 2 * r + j % 2] = blk[j];
        // Element e: half n = e / 128, shift j = e % 128 / 32, l = e % 32 (dequantize_row_q2_K).
        const auto q = [&](int64_t e) { return (blk[16 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; };
        for (int64_t g = 0; g < 8; ++g) {
          uint8_t* og = o + 160 + 64 * g;
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 4; ++i) {
              const int64_t ea = 32 * g + 4 * h + i;
              og[4 * r + i] = static_cast<uint8_t>(og[4 * r + i] | (q(ea) << (2 * h)));
              og[32 + 4 * r + i] = static_cast<uint8_t>(og[32 + 4 * r + i] | (q(ea + 16) << (2 * h)));
            }
          }
        }
      }
    }
  }
}

// Q3_K super-blocks of 8 rows (kPackedQ3KBlockBytes).
void PackQ3K(GgmlType /*w*/, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
             int64_t p1) {
  const int64_t nb = k / kQK_K;
  constexpr int64_t kSrcBlock = 110;  // block_q3_K: hmask[32], qs[64], scales[12], F16 d
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * kPackedQ3KBlockBytes;
      std::memset(o, 0, static_cast<size_t>(kPackedQ3KBlockBytes));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * kSrcBlock;
        std::memcpy(o + 2 * r, blk + 108, 2);
        // The 16 6-bit scales as dequantize_row_q3_K unpacks them.
        uint32_t aux[4];
        std::memcpy(aux, blk + 96, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
        aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
        aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
        aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
        uint8_t sc[16];
        std::memcpy(sc, aux, 16);
        for (int64_t j = 0; j < 16; ++j) o[16 + 16 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(sc[j] - 32);
        // Element e: half n = e / 128, shift j = e % 128 / 32, l = e % 32.
        const auto low = [&](int64_t e) { return (blk[32 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; };
        const auto high = [&](int64_t e) { return (blk[e % 32] >> (4 * (e / 128) + e % 128 / 32)) & 1; };
        for (int64_t g = 0; g < 8; ++g) {
          uint8_t* og = o + 144 + 96 * g;
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 4; ++i) {
              const int64_t ea = 32 * g + 4 * h + i, eb = ea + 16;
              og[4 * r + i] = static_cast<uint8_t>(og[4 * r + i] | (low(ea) << (2 * h)));
              og[32 + 4 * r + i] = static_cast<uint8_t>(og[32 + 4 * r + i] | (low(eb) << (2 * h)));
              og[64 + 4 * r + i] = static_cast<uint8_t>(og[64 + 4 * r + i] | (high(ea) << h) | (high(eb) << (4 + h)));
            }
          }
        }
      }
    }
  }
}

// IQ4_XS super-blocks of 8 rows (kPackedIQ4XSBlockBytes).
void PackIQ4XS(GgmlType /*w*/, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
               int64_t p1) {
  const int64_t nb = k / kQK_K;
  constexpr int64_t kSrcBlock = 136;  // block_iq4_xs: F16 d, u16 scales_h, scales_l[4], qs[128]
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * kPackedIQ4XSBlockBytes;
      std::memset(o, 0, static_cast<size_t>(kPackedIQ4XSBlockBytes));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * kSrcBlock;
        std::memcpy(o + 2 * r, blk, 2);
        uint16_t scales_h;
        std::memcpy(&scales_h, blk + 2, 2);
        for (int64_t g = 0; g < 8; ++g) {
          const int ls = ((blk[4 + g / 2] >> (4 * (g % 2))) & 0x0F) | (((scales_h >> (2 * g)) & 3) << 4);
          o[16 + 8 * g + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
          // Sub-block g: qs[16g + j] holds elements j (low nibble) and 16 + j (high), as Q4_0.
          for (int64_t h = 0; h < 4; ++h) std::memcpy(o + 80 + 128 * g + 32 * h + 4 * r, blk + 8 + 16 * g + 4 * h, 4);
        }
      }
    }
  }
}

// Q6_K super-blocks of 8 rows (kPackedQ6KBlockBytes).
void PackQ6K(GgmlType /*w*/, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
             int64_t p1) {
  const int64_t nb = k / kQK_K;
  constexpr int64_t kSrcBlock = 210;  // block_q6_K: ql[128], qh[64], int8 scales[16], F16 d
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * kPackedQ6KBlockBytes;
      std::memset(o, 0, static_cast<size_t>(kPackedQ6KBlockBytes));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * kSrcBlock;
        std::memcpy(o + 2 * r, blk + 208, 2);
        for (int64_t j = 0; j < 16; ++j) o[16 + 16 * (j / 2) + 2 * r + j % 2] = blk[192 + j];
        // Quant e (0..63) as dequantize_row_q6_K reads it: half n, l = e % 32, t = e / 32 % 4.
        const auto q = [&](int64_t e) {
          const int64_t n = e / 128, l = e % 32, t = e % 128 / 32;
          const uint8_t lq = blk[64 * n + l + 32 * (t % 2)];
          const int lo = t < 2 ? lq & 0x0F : lq >> 4;
          return static_cast<uint8_t>(lo | (((blk[128 + 32 * n + l] >> (2 * t)) & 3) << 4));
        };
        for (int64_t g = 0; g < 8; ++g) {
          uint8_t* og = o + 144 + 192 * g;
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 4; ++i) {
              const uint8_t a = q(32 * g + 4 * h + i), c = q(32 * g + 4 * h + 16 + i);
              og[32 * h + 4 * r + i] = static_cast<uint8_t>((a & 0x0F) | ((c & 0x0F) << 4));
              og[128 + 4 * r + i] = static_cast<uint8_t>(og[128 + 4 * r + i] | ((a >> 4) << (2 * h)));
              og[160 + 4 * r + i] = static_cast<uint8_t>(og[160 + 4 * r + i] | ((c >> 4) << (2 * h)));
            }
          }
        }
      }
    }
  }
}

// The 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): PackedBlockBytes(w) per 8 rows.
void PackBlocks32(GgmlType w, int64_t k, int64_t m, const uint8_t* src, size_t w_stride, uint8_t* out, int64_t p0,
                  int64_t p1) {
  const int64_t bb = PackedBlockBytes(w);
  if (bb == 0) return;
  const bool q8 = w == GgmlType::Q8_0;
  const bool fifth = w == GgmlType::Q5_0 || w == GgmlType::Q5_1;
  const bool with_min = w == GgmlType::Q4_1 || w == GgmlType::Q5_1;
  const int64_t nb = k / 32;
  // block_q4_0 / block_iq4_nl: F16 d, 16 nibble bytes; block_q4_1: F16 d, F16 m, 16 nibble
  // bytes; block_q5_0 / block_q5_1: F16 d (F16 m), 4 bytes of fifth bits (qh), 16 nibble
  // bytes; block_q8_0: F16 d, 32 quants.
  const int64_t head = (with_min ? 4 : 2) + (fifth ? 4 : 0);
  const int64_t src_block = head + (q8 ? 32 : 16);
  const int64_t qs_out = with_min ? 32 : 16;  // packed: 8 d (8 m), then the quant vectors
  const int64_t groups = q8 ? 8 : 4;          // 4-byte groups per row in a block
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * bb;
      std::memset(o, 0, static_cast<size_t>(bb));
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = p * kPackRows + r;
        if (row >= m) break;
        const uint8_t* blk = src + static_cast<size_t>(row) * w_stride + b * src_block;
        std::memcpy(o + 2 * r, blk, 2);
        if (with_min) std::memcpy(o + 16 + 2 * r, blk + 2, 2);
        for (int64_t g = 0; g < groups; ++g) std::memcpy(o + qs_out + 32 * g + 4 * r, blk + head + 4 * g, 4);
        if (fifth) {
          uint32_t qh;
          std::memcpy(&qh, blk + head - 4, 4);  // bit e: element e's fifth bit
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 4; ++i) {
              uint8_t& hb = o[qs_out + 128 + 4 * r + i];
              hb = static_cast<uint8_t>(hb | (((qh >> (4 * h + i)) & 1) << h) |
                                        (((qh >> (4 * h + 16 + i)) & 1) << (4 + h)));
            }
          }
        }
      }
    }
  }
}

}  // namespace

void PackWeights(GgmlType w, int64_t k, int64_t m, const void* w_data, size_t w_stride, void* packed, int64_t p0,
                 int64_t p1, Isa isa) {
  const uint8_t* src = static_cast<const uint8_t*>(w_data);
  uint8_t* out = static_cast<uint8_t*>(packed);
  using PackFn = void (*)(GgmlType, int64_t, int64_t, const uint8_t*, size_t, uint8_t*, int64_t, int64_t);
  PackFn pack = PackBlocks32;
  switch (w) {
    case GgmlType::F16:
      pack = F16SlabLayout(isa) ? PackF16Slabs : PackF16Rows;
      break;
    case GgmlType::BF16:
      pack = PackF16Rows;
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      pack = PackQ4KQ5K;
      break;
    case GgmlType::Q2_K:
      pack = PackQ2K;
      break;
    case GgmlType::Q3_K:
      pack = PackQ3K;
      break;
    case GgmlType::IQ4_XS:
      pack = PackIQ4XS;
      break;
    case GgmlType::Q6_K:
      pack = PackQ6K;
      break;
    default:
      break;
  }
  pack(w, k, m, src, w_stride, out, p0, p1);
}

void MulMatPacked(GgmlType w, Isa isa, int64_t k, const void* packed, const void* a_data, size_t a_stride, float* dst,
                  size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  assert(SupportsPacked(w, isa) && i0 % kPackRows == 0);
  if (i0 >= i1 || j0 >= j1 || !SupportsPacked(w, isa)) return;
  const internal::PackedKind kind = w == GgmlType::Q4_0     ? internal::PackedKind::kQ4_0
                                    : w == GgmlType::Q8_0   ? internal::PackedKind::kQ8_0
                                    : w == GgmlType::Q5_0   ? internal::PackedKind::kQ5_0
                                    : w == GgmlType::IQ4_NL ? internal::PackedKind::kIQ4_NL
                                    : w == GgmlType::Q4_1   ? internal::PackedKind::kQ4_1
                                    : w == GgmlType::Q5_1   ? internal::PackedKind::kQ5_1
                                    : w == GgmlType::Q4_K   ? internal::PackedKind::kQ4_K
                                    : w == GgmlType::Q5_K   ? internal::PackedKind::kQ5_K
                                    : w == GgmlType::Q6_K   ? internal::PackedKind::kQ6_K
                                    : w == GgmlType::BF16   ? internal::PackedKind::kBF16
                                    : w == GgmlType::IQ4_XS ? internal::PackedKind::kIQ4_XS
                                    : w == GgmlType::Q3_K   ? internal::PackedKind::kQ3_K
                                    : w == GgmlType::Q2_K   ? internal::PackedKind::kQ2_K
                                                            : internal::PackedKind::kF16;
  (PackedAvx512(isa) ? internal::Avx512VnniPackedTile(kind) : internal::Avx2PackedTile(kind))(
      k, packed, a_data, a_stride, dst, dst_stride, i0, i1, j0, j1);
}

}  // namespace herd::cpu
