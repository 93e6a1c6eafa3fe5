// Reference (de)quantization, transcribed from llama.cpp's ggml-quants.c so that
// results are bit-identical. Compiled with -ffp-contract=off (see BUILD): every
// float expression rounds exactly as the C original, operation by operation,
// with the same association (a*b*c is (a*b)*c, ints convert to float first).
#include "libs/tensor/quants.h"

#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "libs/base/fp16.h"

namespace herd {

const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// The value of largest magnitude among x[0..n) (the first one of equal magnitudes, 0 when
// all are 0 or NaN) in *max; returns its magnitude.
inline float SignedAbsMax(int n, const float* x, float* max) {
  float amax = 0;
  *max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      *max = x[i];
    }
  }
  return amax;
}

// max(|x[j]|) over one block as ggml's reference quantizers take it: MAX(amax, v), which
// keeps amax on NaN.
inline float AbsMaxRef(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float v = std::fabs(x[j]);
    amax = amax > v ? amax : v;
  }
  return amax;
}

// The same as the AVX2 quantizers take it: maxps(amax, a) returns the second operand on NaN.
inline float AbsMaxX86(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

// Round half to even for |v| < 2^22, exactly like _mm256_round_ps(v, _MM_ROUND_NEAREST).
inline float RoundHalfEven(float v) {
  const float m = 12582912.0f;
  return (v + m) - m;
}

// ggml's nearest_int: the magic-number rounding (half to even for |f| <= 2^22 - 1;
// outside that range the same well-defined bit pattern ggml computes).
inline int NearestInt(float fval) {
  const float val = fval + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &val, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// C's (int)float truncation as x86 cvttss2si performs it: NaN and values outside
// int32 give INT32_MIN (no undefined behaviour here for such inputs).
inline int32_t TruncToInt32(float v) {
  if (!(v > -2147483904.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}
// (int8_t)float / (uint8_t)float in ggml compile to cvttss2si + taking the low byte.
inline int8_t TruncToInt8(float v) { return static_cast<int8_t>(static_cast<uint8_t>(TruncToInt32(v) & 0xff)); }
inline uint8_t TruncToUint8(float v) { return static_cast<uint8_t>(TruncToInt32(v) & 0xff); }

template <class T>
inline T Min(T a, T b) {
  return a < b ? a : b;
}
template <class T>
inline T Max(T a, T b) {
  return a > b ? a : b;
}

// ggml best_index_int8 over the sorted kIq4nlValues.
inline int BestIndexInt8(int n, const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav])
      mu = mav;
    else
      ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// make_qx_quants without quant weights (rmse_type 1: w = x^2).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, int rmse_type, const float* qw) {
  float max = 0;
  if (SignedAbsMax(n, x, &max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = NearestInt(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + Max(-nmax, Min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  bool return_early = false;
  if (rmse_type < 0) {
    rmse_type = -rmse_type;
    return_early = true;
  }
  auto weight = [&](int i) -> float {
    if (qw) return qw[i];
    if (rmse_type == 1) return x[i] * x[i];
    if (rmse_type == 2) return 1;
    if (rmse_type == 3) return std::fabs(x[i]);
    return std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = Max(-nmax, Min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = Max(-nmax, Min(nmax - 1, l));
      const float w = weight(i);
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + Max(-nmax, Min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L, bool do_rmse) {
  float max = 0;
  if (SignedAbsMax(n, x, &max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  if (do_rmse) {
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = Max(-nmax, Min(nmax - 1, l));
      L[i] = static_cast<int8_t>(l);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    for (int itry = 0; itry < 5; ++itry) {
      int n_changed = 0;
      for (int i = 0; i < n; ++i) {
        const float w = x[i] * x[i];
        const float li = static_cast<float>(L[i]);
        float slx = sumlx - w * x[i] * li;
        if (slx > 0) {
          float sl2 = suml2 - w * li * li;
          int new_l = NearestInt(x[i] * sl2 / slx);
          new_l = Max(-nmax, Min(nmax - 1, new_l));
          if (new_l != L[i]) {
            const float fl = static_cast<float>(new_l);
            slx += w * x[i] * fl;
            sl2 += w * fl * fl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
              L[i] = static_cast<int8_t>(new_l);
              sumlx = slx;
              suml2 = sl2;
              ++n_changed;
            }
          }
        }
      }
      if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
  }
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = Max(-nmax, Min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
  }
  return 1 / iscale;
}

// make_qkx2_quants.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                     float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(Max(0, Min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    const float w = weights[i];
    best_error += w * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = Max(0, Min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        const float w = weights[i];
        cur_error += w * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// quantize_row_iq4_nl_impl without quant weights (weight = x^2).
void QuantizeRowIQ4NlImpl(int super_block_size, int block_size, const float* x, uint16_t* dh, uint8_t* q4,
                          uint16_t* scales_h, uint8_t* scales_l, float* scales, float* weight, uint8_t* L,
                          const int8_t* values, int ntry) {
  float sigma2 = 0;
  for (int j = 0; j < super_block_size; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / static_cast<float>(super_block_size);
  (void)sigma2;  // only used with quant weights

  std::memset(q4, 0, static_cast<size_t>(super_block_size / 2));
  dh[0] = Fp32ToFp16(0.f);

  float max_scale = 0;
  for (int ib = 0; ib < super_block_size / block_size; ++ib) {
    const float* xb = x + ib * block_size;
    uint8_t* Lb = L + ib * block_size;
    for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
    float max = 0;
    if (SignedAbsMax(block_size, xb, &max) < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = ntry > 0 ? -max / static_cast<float>(values[0]) : max / static_cast<float>(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < block_size; ++j) {
      const float al = id * xb[j];
      const int l = BestIndexInt8(16, values, al);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = (static_cast<float>(itry) + static_cast<float>(values[0])) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < block_size; ++j) {
        const float al = id * xb[j];
        const int l = BestIndexInt8(16, values, al);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
  }
  SignedAbsMax(super_block_size / block_size, scales, &max_scale);

  if (super_block_size / block_size > 1) {
    const int nb = super_block_size / block_size;
    std::memset(scales_h, 0, static_cast<size_t>((nb + 7) / 8) * sizeof(uint16_t));
    const float d = -max_scale / 32;
    dh[0] = Fp32ToFp16(d);
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int ib = 0; ib < super_block_size / block_size; ++ib) {
      int l = NearestInt(id * scales[ib]);
      l = Max(-32, Min(31, l));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.f;
      uint8_t* Lb = L + ib * block_size;
      const float* xb = x + ib * block_size;
      for (int j = 0; j < block_size; ++j) Lb[j] = static_cast<uint8_t>(BestIndexInt8(16, values, idl * xb[j]));
      l += 32;
      const uint8_t l_l = static_cast<uint8_t>(l & 0xf);
      const uint8_t l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      scales_h[ib / 8] |= static_cast<uint16_t>(l_h << 2 * (ib % 8));
    }
  } else {
    dh[0] = Fp32ToFp16(scales[0]);
    if (ntry > 0) {
      const float id = scales[0] != 0.0f ? 1 / scales[0] : 0;
      for (int j = 0; j < super_block_size; ++j) L[j] = static_cast<uint8_t>(BestIndexInt8(16, values, id * x[j]));
    }
  }

  for (int i = 0; i < super_block_size / 32; ++i) {
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

}  // namespace

// ------------------------------------------------------------------ Q8_0 / Q8_1 / Q8_K

void QuantizeRowQ8_0Ref(const float* x, BlockQ8_0* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    const float amax = AbsMaxRef(xb, kQK8_0);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(TruncToInt32(std::round(xb[j] * id)));  // roundf: half away from zero
    }
  }
}

void QuantizeRowQ8_0X86(const float* x, BlockQ8_0* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    const float amax = AbsMaxX86(xb, kQK8_0);
    const float d = amax / 127.0f;
    y[i].d = Fp32ToFp16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(TruncToInt32(RoundHalfEven(xb[j] * id)));
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void QuantizeRowQ8_1Ref(const float* x, BlockQ8_1* y, int64_t k) {
  assert(k % kQK8_1 == 0);
  const int64_t nb = k / kQK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_1;
    const float amax = AbsMaxRef(xb, kQK8_1);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1 / 2; ++j) {
      const float v0 = xb[j] * id;
      const float v1 = xb[kQK8_1 / 2 + j] * id;
      y[i].qs[j] = static_cast<int8_t>(TruncToInt32(std::round(v0)));
      y[i].qs[kQK8_1 / 2 + j] = static_cast<int8_t>(TruncToInt32(std::round(v1)));
      sum += y[i].qs[j];
      sum += y[i].qs[kQK8_1 / 2 + j];
    }
    y[i].s = Fp32ToFp16(static_cast<float>(sum) * d);
  }
}

void QuantizeRowQ8_1X86(const float* x, BlockQ8_1* y, int64_t k) {
  assert(k % kQK8_1 == 0);
  const int64_t nb = k / kQK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_1;
    const float amax = AbsMaxX86(xb, kQK8_1);
    const float d = amax / 127.0f;
    y[i].d = Fp32ToFp16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    uint32_t sum = 0;  // wraps like _mm256_add_epi32
    for (int j = 0; j < kQK8_1; ++j) {
      // Rounded values are within +-127 for finite inputs (NaN/Inf: the low byte, as QuantizeRowQ8_0X86).
      const int32_t q = TruncToInt32(RoundHalfEven(xb[j] * id));
      sum += static_cast<uint32_t>(q);
      y[i].qs[j] = static_cast<int8_t>(q);
    }
    y[i].s = Fp32ToFp16(d * static_cast<float>(static_cast<int32_t>(sum)));
  }
}

void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t k) {
  assert(k % kQK8_1 == 0);
  const int64_t nb = k / kQK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[i * kQK8_1 + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    float max = 0;
    if (SignedAbsMax(kQK_K, x, &max) == 0.0f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, kQK_K);
      // ggml leaves bsums untouched here; zero them so the block is deterministic
      // (they are sums of the zero quants either way).
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      x += kQK_K;
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestInt(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(Min(127, v));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
    x += kQK_K;
  }
}

void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ------------------------------------------------------------------ Q4_0 Q4_1 Q5_0 Q5_1

void QuantizeRowQ4_0Ref(const float* x, BlockQ4_0* y, int64_t k) {
  assert(k % kQK4_0 == 0);
  const int64_t nb = k / kQK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK4_0;
    float max = 0.0f;  // the element of largest magnitude, signed
    SignedAbsMax(kQK4_0, xb, &max);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK4_0 / 2 + j] * id;
      const int xi0 = Min(15, static_cast<int>(TruncToInt8(x0 + 8.5f)));
      const int xi1 = Min(15, static_cast<int>(TruncToInt8(x1 + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(xi0) | static_cast<uint8_t>(xi1 << 4));
    }
  }
}

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t k) {
  assert(k % kQK4_0 == 0);
  const int64_t nb = k / kQK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * kQK4_0 + j] = static_cast<float>(x0) * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void QuantizeRowQ4_1Ref(const float* x, BlockQ4_1* y, int64_t k) {
  assert(k % kQK4_1 == 0);
  const int64_t nb = k / kQK4_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK4_1;
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < kQK4_1; ++j) {
      const float v = xb[j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK4_1 / 2 + j] - min) * id;
      const uint8_t xi0 = static_cast<uint8_t>(Min(15, static_cast<int>(TruncToInt8(x0 + 0.5f))));
      const uint8_t xi1 = static_cast<uint8_t>(Min(15, static_cast<int>(TruncToInt8(x1 + 0.5f))));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t k) {
  assert(k % kQK4_1 == 0);
  const int64_t nb = k / kQK4_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[i * kQK4_1 + j] = static_cast<float>(x0) * d + m;
      y[i * kQK4_1 + j + kQK4_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void QuantizeRowQ5_0Ref(const float* x, BlockQ5_0* y, int64_t k) {
  assert(k % kQK5_0 == 0);
  const int64_t nb = k / kQK5_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK5_0;
    float max = 0.0f;
    SignedAbsMax(kQK5_0, xb, &max);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK5_0 / 2 + j] * id;
      const uint8_t xi0 = static_cast<uint8_t>(Min(31, static_cast<int>(TruncToInt8(x0 + 16.5f))));
      const uint8_t xi1 = static_cast<uint8_t>(Min(31, static_cast<int>(TruncToInt8(x1 + 16.5f))));
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t k) {
  assert(k % kQK5_0 == 0);
  const int64_t nb = k / kQK5_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
      const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
      y[i * kQK5_0 + j] = static_cast<float>(x0) * d;
      y[i * kQK5_0 + j + kQK5_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void QuantizeRowQ5_1Ref(const float* x, BlockQ5_1* y, int64_t k) {
  assert(k % kQK5_1 == 0);
  const int64_t nb = k / kQK5_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK5_1;
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < kQK5_1; ++j) {
      const float v = xb[j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK5_1 / 2 + j] - min) * id;
      const uint8_t xi0 = TruncToUint8(x0 + 0.5f);
      const uint8_t xi1 = TruncToUint8(x1 + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t k) {
  assert(k % kQK5_1 == 0);
  const int64_t nb = k / kQK5_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const uint8_t xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh_1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
      const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
      const int x1 = (x[i].qs[j] >> 4) | xh_1;
      y[i * kQK5_1 + j] = static_cast<float>(x0) * d + m;
      y[i * kQK5_1 + j + kQK5_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

// ------------------------------------------------------------------ Q2_K

void QuantizeRowQ2_KRef(const float* x, BlockQ2_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i) {
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      const float scale = scales[j];
      if (scale > max_scale) max_scale = scale;
      const float min = mins[j];
      if (min > max_min) max_min = min;
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = NearestInt(iscale * scales[j]);
        y[i].scales[j] = static_cast<uint8_t>(l);
      }
      y[i].d = Fp32ToFp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = Fp32ToFp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = NearestInt(iscale * mins[j]);
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (l << 4));
      }
      y[i].dmin = Fp32ToFp16(max_min / q4scale);
    } else {
      y[i].dmin = Fp32ToFp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = Fp16ToFp32(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        int l = NearestInt((x[16 * j + ii] + dm) / d);
        l = Max(0, Min(3, l));
        L[16 * j + ii] = static_cast<uint8_t>(l);
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
    x += kQK_K;
  }
}

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
        sc = x[i].scales[is++];
        dl = d * static_cast<float>(sc & 0xF);
        ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

// ------------------------------------------------------------------ Q3_K

void QuantizeRowQ3_KRef(const float* x, BlockQ3_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < kQK_K / 16; ++j) scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j, true);
    float max_scale = 0;
    SignedAbsMax(kQK_K / 16, scales, &max_scale);
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
        l = static_cast<int8_t>(Max<int>(-32, Min<int>(31, l)) + 32);
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l = static_cast<int8_t>(l >> 4);
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = Fp32ToFp16(1 / iscale);
    } else {
      y[i].d = Fp32ToFp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int8_t sc = static_cast<int8_t>(j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4);
      sc = static_cast<int8_t>((sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
      const float d = Fp16ToFp32(y[i].d) * static_cast<float>(sc);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = NearestInt(x[16 * j + ii] / d);
        l = Max(-4, Min(3, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 4);
      }
    }
    std::memset(y[i].hmask, 0, kQK_K / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] |= hm;
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
      if (++m == kQK_K / 8) {
        m = 0;
        hm = static_cast<uint8_t>(hm << 1);
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
    x += kQK_K;
  }
}

namespace {
// The 16 6-bit Q3_K scales, unpacked (kmask trick of dequantize_row_q3_K), minus nothing.
inline void UnpackQ3Scales(const uint8_t* packed, int8_t* scales) {
  const uint32_t kmask1 = 0x03030303;
  const uint32_t kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(scales, aux, 16);
}
}  // namespace

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  int8_t scales[16];
  for (int64_t i = 0; i < nb; ++i) {
    const float d_all = Fp16ToFp32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    UnpackQ3Scales(x[i].scales, scales);
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        }
        dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        }
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

// ------------------------------------------------------------------ Q4_K / Q5_K

namespace {
// The shared scale/min packing of quantize_row_q4_K_ref / q5_K_ref.
void PackScalesMinsK(const float* scales, const float* mins, float max_scale, float max_min, uint8_t* out, uint16_t* d,
                     uint16_t* dmin) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = Min<uint8_t>(63, ls);
    lm = Min<uint8_t>(63, lm);
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      out[j - 4] = static_cast<uint8_t>(out[j - 4] | ((ls >> 4) << 6));
      out[j - 0] = static_cast<uint8_t>(out[j - 0] | ((lm >> 4) << 6));
    }
  }
  *d = Fp32ToFp16(max_scale / 63.f);
  *dmin = Fp32ToFp16(max_min / 63.f);
}

// Scales/mins of one 32-group via make_qkx2_quants with weights av_x + |x|.
void QkxScalesK(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L, float* scales, float* mins,
                float* max_scale, float* max_min) {
  uint8_t Laux[32];
  float weights[32];
  *max_scale = 0;
  *max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    const float scale = scales[j];
    if (scale > *max_scale) *max_scale = scale;
    const float min = mins[j];
    if (min > *max_min) *max_min = min;
  }
}

// One super-block of quantize_row_q4_K_ref / q5_K_ref up to the bit packing: scales and
// mins (make_qkx2_quants with nmax, rmin, nstep), packed into `packed_scales`, d and dmin,
// then every value requantized against the packed scales into L[kQK_K] (0..nmax).
// Scale and min of sub-block j of a Q4_K / Q5_K block: d * sc and dmin * m.
struct ScaleMinK {
  float d, m;
};
inline ScaleMinK ScaleMinK4(int j, const uint8_t* packed_scales, float d, float dmin) {
  uint8_t sc, m;
  GetScaleMinK4(j, packed_scales, &sc, &m);
  return {d * static_cast<float>(sc), dmin * static_cast<float>(m)};
}

void QuantizeLevelsK(const float* x, int nmax, float rmin, int nstep, uint8_t* packed_scales, uint16_t* d16,
                     uint16_t* dmin16, uint8_t* L) {
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale, max_min;
  QkxScalesK(x, nmax, rmin, 0.1f, nstep, L, scales, mins, &max_scale, &max_min);
  PackScalesMinsK(scales, mins, max_scale, max_min, packed_scales, d16, dmin16);
  uint8_t sc, m;
  for (int j = 0; j < kQK_K / 32; ++j) {
    GetScaleMinK4(j, packed_scales, &sc, &m);
    const float d = Fp16ToFp32(*d16) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = Fp16ToFp32(*dmin16) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      int l = NearestInt((x[32 * j + ii] + dm) / d);
      l = Max(0, Min(nmax, l));
      L[32 * j + ii] = static_cast<uint8_t>(l);
    }
  }
}
}  // namespace

void QuantizeRowQ4_KRef(const float* x, BlockQ4_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    QuantizeLevelsK(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
    x += kQK_K;
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      const ScaleMinK s1 = ScaleMinK4(is + 0, x[i].scales, d, min), s2 = ScaleMinK4(is + 1, x[i].scales, d, min);
      for (int l = 0; l < 32; ++l) *y++ = s1.d * static_cast<float>(q[l] & 0xF) - s1.m;
      for (int l = 0; l < 32; ++l) *y++ = s2.d * static_cast<float>(q[l] >> 4) - s2.m;
      q += 32;
      is += 2;
    }
  }
}

void QuantizeRowQ5_KRef(const float* x, BlockQ5_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i) {
    QuantizeLevelsK(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
      ql += 32;
    }
    x += kQK_K;
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      const ScaleMinK s1 = ScaleMinK4(is + 0, x[i].scales, d, min), s2 = ScaleMinK4(is + 1, x[i].scales, d, min);
      for (int l = 0; l < 32; ++l) *y++ = s1.d * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - s1.m;
      for (int l = 0; l < 32; ++l) *y++ = s2.d * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - s2.m;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// ------------------------------------------------------------------ Q6_K

void QuantizeRowQ6_KRef(const float* x, BlockQ6_K* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i) {
    for (int ib = 0; ib < kQK_K / 16; ++ib) scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib, 1, nullptr);
    float max_scale = 0;
    if (SignedAbsMax(kQK_K / 16, scales, &max_scale) < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = Fp32ToFp16(0.f);
      x += kQK_K;
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = Fp32ToFp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(Min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = NearestInt(x[16 * j + ii] / d);
        l = Max(-32, Min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
    x += kQK_K;
  }
}

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        const int8_t q2 = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        const int8_t q3 = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        const int8_t q4 = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// ------------------------------------------------------------------ IQ4_NL / IQ4_XS

namespace {

// IQ4_NL blocks of x[0..k), each with QuantizeRowIQ4NlImpl's `ntry`.
void QuantizeIQ4NlBlocks(const float* x, BlockIQ4_NL* y, int64_t k, int ntry) {
  assert(k % kQK4_NL == 0);
  const int64_t nblock = k / kQK4_NL;
  uint8_t L[kQK4_NL];
  float weight[kQK4_NL];
  uint16_t unused_h;
  float scale;
  for (int64_t ib = 0; ib < nblock; ++ib) {
    QuantizeRowIQ4NlImpl(kQK4_NL, 32, x + kQK4_NL * ib, &y[ib].d, y[ib].qs, &unused_h, nullptr, &scale, weight, L,
                         kIq4nlValues, ntry);
  }
}

}  // namespace

void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t k) { QuantizeIQ4NlBlocks(x, y, k, 7); }

void QuantizeRowIQ4_NLRef(const float* x, BlockIQ4_NL* y, int64_t k) { QuantizeIQ4NlBlocks(x, y, k, -1); }

void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t k) {
  assert(k % kQK4_NL == 0);
  const int64_t nb = k / kQK4_NL;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j + 0] = d * static_cast<float>(kIq4nlValues[qs[j] & 0xf]);
      y[j + kQK4_NL / 2] = d * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
    }
    y += kQK4_NL;
  }
}

void QuantizeIQ4_XS(const float* x, BlockIQ4_XS* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nblock = k / kQK_K;
  uint8_t L[kQK_K];
  float weight[32];
  float scales[kQK_K / 32];
  for (int64_t ibl = 0; ibl < nblock; ++ibl) {
    QuantizeRowIQ4NlImpl(kQK_K, 32, x + kQK_K * ibl, &y[ibl].d, y[ibl].qs, &y[ibl].scales_h, y[ibl].scales_l, scales,
                         weight, L, kIq4nlValues, 7);
  }
}

void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t k) {
  assert(k % kQK_K == 0);
  const int64_t nb = k / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xf]);
        y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
      y += 32;
      qs += 16;
    }
  }
}

// ------------------------------------------------------------------ generic

bool CanDequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

bool CanQuantize(GgmlType t) { return CanDequantize(t); }

void DequantizeRow(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32:
      std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(s[i]);
      return;
    }
    case GgmlType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(s[i]);
      return;
    }
    case GgmlType::Q4_0:
      return DequantizeRowQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case GgmlType::Q4_1:
      return DequantizeRowQ4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case GgmlType::Q5_0:
      return DequantizeRowQ5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case GgmlType::Q5_1:
      return DequantizeRowQ5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case GgmlType::Q8_0:
      return DequantizeRowQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case GgmlType::Q8_1:
      return DequantizeRowQ8_1(static_cast<const BlockQ8_1*>(src), dst, n);
    case GgmlType::Q2_K:
      return DequantizeRowQ2_K(static_cast<const BlockQ2_K*>(src), dst, n);
    case GgmlType::Q3_K:
      return DequantizeRowQ3_K(static_cast<const BlockQ3_K*>(src), dst, n);
    case GgmlType::Q4_K:
      return DequantizeRowQ4_K(static_cast<const BlockQ4_K*>(src), dst, n);
    case GgmlType::Q5_K:
      return DequantizeRowQ5_K(static_cast<const BlockQ5_K*>(src), dst, n);
    case GgmlType::Q6_K:
      return DequantizeRowQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
    case GgmlType::Q8_K:
      return DequantizeRowQ8_K(static_cast<const BlockQ8_K*>(src), dst, n);
    case GgmlType::IQ4_NL:
      return DequantizeRowIQ4_NL(static_cast<const BlockIQ4_NL*>(src), dst, n);
    case GgmlType::IQ4_XS:
      return DequantizeRowIQ4_XS(static_cast<const BlockIQ4_XS*>(src), dst, n);
    default:
      assert(false && "DequantizeRow: unsupported type");
  }
}

void QuantizeRow(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32:
      std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToFp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToBf16(src[i]);
      return;
    }
    case GgmlType::Q4_0:
      return QuantizeRowQ4_0Ref(src, static_cast<BlockQ4_0*>(dst), n);
    case GgmlType::Q4_1:
      return QuantizeRowQ4_1Ref(src, static_cast<BlockQ4_1*>(dst), n);
    case GgmlType::Q5_0:
      return QuantizeRowQ5_0Ref(src, static_cast<BlockQ5_0*>(dst), n);
    case GgmlType::Q5_1:
      return QuantizeRowQ5_1Ref(src, static_cast<BlockQ5_1*>(dst), n);
    case GgmlType::Q8_0:
      return QuantizeRowQ8_0Ref(src, static_cast<BlockQ8_0*>(dst), n);
    case GgmlType::Q8_1:
      return QuantizeRowQ8_1Ref(src, static_cast<BlockQ8_1*>(dst), n);
    case GgmlType::Q2_K:
      return QuantizeRowQ2_KRef(src, static_cast<BlockQ2_K*>(dst), n);
    case GgmlType::Q3_K:
      return QuantizeRowQ3_KRef(src, static_cast<BlockQ3_K*>(dst), n);
    case GgmlType::Q4_K:
      return QuantizeRowQ4_KRef(src, static_cast<BlockQ4_K*>(dst), n);
    case GgmlType::Q5_K:
      return QuantizeRowQ5_KRef(src, static_cast<BlockQ5_K*>(dst), n);
    case GgmlType::Q6_K:
      return QuantizeRowQ6_KRef(src, static_cast<BlockQ6_K*>(dst), n);
    case GgmlType::Q8_K:
      return QuantizeRowQ8_K(src, static_cast<BlockQ8_K*>(dst), n);
    case GgmlType::IQ4_NL:
      return QuantizeIQ4_NL(src, static_cast<BlockIQ4_NL*>(dst), n);
    case GgmlType::IQ4_XS:
      return QuantizeIQ4_XS(src, static_cast<BlockIQ4_XS*>(dst), n);
    default:
      assert(false && "QuantizeRow: unsupported type");
  }
}

// ------------------------------------------------------------------ validation

namespace {
inline bool HalfFinite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }
inline uint16_t LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
}  // namespace

bool ValidateRowData(GgmlType t, const void* data, size_t nbytes, int64_t* bad_index) {
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(t);
  if (tr == nullptr || nbytes % tr->type_size != 0) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const int64_t n = static_cast<int64_t>(nbytes / tr->type_size);
  auto fail = [&](int64_t i) {
    if (bad_index != nullptr) *bad_index = i;
    return false;
  };
  // Byte offsets (within a block) of the F16 fields that must be finite.
  int half_offs[2] = {-1, -1};
  switch (t) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return fail(i);
      }
      return true;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        if (!HalfFinite(LoadHalf(p + 2 * i))) return fail(i);
      }
      return true;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        if ((LoadHalf(p + 2 * i) & 0x7f80) == 0x7f80) return fail(i);
      }
      return true;
    case GgmlType::Q8_K:
      for (int64_t i = 0; i < n; ++i) {
        float d;
        std::memcpy(&d, p + i * tr->type_size, 4);
        if (!std::isfinite(d)) return fail(i);
      }
      return true;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      half_offs[0] = 0;
      break;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q8_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      half_offs[0] = 0;
      half_offs[1] = 2;
      break;
    case GgmlType::Q2_K:
      half_offs[0] = static_cast<int>(offsetof(BlockQ2_K, d));
      half_offs[1] = static_cast<int>(offsetof(BlockQ2_K, dmin));
      break;
    case GgmlType::Q3_K:
      half_offs[0] = static_cast<int>(offsetof(BlockQ3_K, d));
      break;
    case GgmlType::Q6_K:
      half_offs[0] = static_cast<int>(offsetof(BlockQ6_K, d));
      break;
    default:
      return false;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* b = p + i * tr->type_size;
    for (int o : half_offs) {
      if (o >= 0 && !HalfFinite(LoadHalf(b + o))) return fail(i);
    }
  }
  return true;
}

}  // namespace herd
