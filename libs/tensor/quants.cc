#include "libs/tensor/quants.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "libs/base/fp16.h"

namespace herd {

namespace {

// Round half to even for |v| < 2^22 (quantizer inputs are within +-128):
// adding 1.5*2^23 pushes the fraction bits out with the FPU's default
// round-to-nearest-even, exactly like _mm256_round_ps(v, _MM_ROUND_NEAREST).
inline float RoundHalfEven(float v) {
  // (IEEE semantics forbid folding (v + m) - m; we never build with -ffast-math.)
  const float m = 12582912.0f;
  return (v + m) - m;
}

}  // namespace

void QuantizeRowQ8_0Ref(const float* x, BlockQ8_0* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float v = std::fabs(xb[j]);
      amax = amax > v ? amax : v;  // ggml MAX(amax, v)
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));  // roundf: half away from zero
    }
  }
}

void QuantizeRowQ8_0X86(const float* x, BlockQ8_0* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float a = std::fabs(xb[j]);
      amax = a > amax ? a : amax;  // maxps(amax, a) returns the second operand on NaN
    }
    const float d = amax / 127.0f;
    y[i].d = Fp32ToFp16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(static_cast<int>(RoundHalfEven(xb[j] * id)));
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k) {
  assert(k % kQK8_0 == 0);
  const int64_t nb = k / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void QuantizeRowQ4_0Ref(const float* x, BlockQ4_0* y, int64_t k) {
  assert(k % kQK4_0 == 0);
  const int64_t nb = k / kQK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK4_0;
    float amax = 0.0f;  // absolute max
    float max = 0.0f;   // the element with that magnitude, signed
    for (int j = 0; j < kQK4_0; ++j) {
      const float v = xb[j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK4_0 / 2 + j] * id;
      int xi0 = static_cast<int8_t>(x0 + 8.5f);  // truncation toward zero, as ggml's (int8_t) cast
      int xi1 = static_cast<int8_t>(x1 + 8.5f);
      if (xi0 > 15) xi0 = 15;
      if (xi1 > 15) xi1 = 15;
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
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
      y[i * kQK4_0 + j] = x0 * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = x1 * d;
    }
  }
}

bool CanDequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
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
    case GgmlType::Q8_0:
      DequantizeRowQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case GgmlType::Q4_0:
      DequantizeRowQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
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
    case GgmlType::Q8_0:
      QuantizeRowQ8_0Ref(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case GgmlType::Q4_0:
      QuantizeRowQ4_0Ref(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    default:
      assert(false && "QuantizeRow: unsupported type");
  }
}

}  // namespace herd
