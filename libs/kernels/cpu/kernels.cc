// Scalar reference kernels and run-time ISA dispatch. Compiled without -mavx*.
#include "libs/kernels/cpu/kernels.h"

#include <cassert>
#include <cstring>

#include "libs/base/fp16.h"
#include "libs/kernels/cpu/internal.h"
#include "libs/tensor/quants.h"

namespace herd::cpu {

using internal::IsaKernels;
using internal::kNumWTypes;

namespace {

int WIndex(GgmlType w) {
  switch (w) {
    case GgmlType::F32: return internal::kWF32;
    case GgmlType::F16: return internal::kWF16;
    case GgmlType::BF16: return internal::kWBF16;
    case GgmlType::Q8_0: return internal::kWQ8_0;
    case GgmlType::Q4_0: return internal::kWQ4_0;
    default: return -1;
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

void VecDotQ8_0Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  assert(n % kQK8_0 == 0);
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK8_0;
  float sumf = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[b].qs[j] * y[b].qs[j];
    sumf += static_cast<float>(sumi) * (Fp16ToFp32(x[b].d) * Fp16ToFp32(y[b].d));
  }
  *s = sumf;
}

void VecDotQ4_0Scalar(int64_t n, float* s, const void* vx, const void* vy) {
  assert(n % kQK4_0 == 0);
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK4_0;
  float sumf = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int v0 = (x[b].qs[j] & 0x0F) - 8;
      const int v1 = (x[b].qs[j] >> 4) - 8;
      sumi0 += v0 * y[b].qs[j];
      sumi1 += v1 * y[b].qs[j + kQK4_0 / 2];
    }
    const int32_t sumi = sumi0 + sumi1;
    sumf += static_cast<float>(sumi) * (Fp16ToFp32(x[b].d) * Fp16ToFp32(y[b].d));
  }
  *s = sumf;
}

template <internal::VecDotFn kDot>
void TileScalar(int64_t k, const void* w, size_t ws, const void* a, size_t as, float* dst, size_t ds,
                int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const char* wb = static_cast<const char*>(w);
  const char* ab = static_cast<const char*>(a);
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t i = i0; i < i1; ++i) {
      kDot(k, &dst[j * ds + i], wb + i * ws, ab + j * as);
    }
  }
}

const IsaKernels kScalarKernels = {
    {VecDotF32Scalar, VecDotF16Scalar, VecDotBf16Scalar, VecDotQ8_0Scalar, VecDotQ4_0Scalar},
    {TileScalar<VecDotF32Scalar>, TileScalar<VecDotF16Scalar>, TileScalar<VecDotBf16Scalar>,
     TileScalar<VecDotQ8_0Scalar>, TileScalar<VecDotQ4_0Scalar>},
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};

// Highest supported Isa <= `isa`.
Isa ClampIsa(Isa isa) {
  while (isa != Isa::kScalar && !IsaSupported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

const IsaKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return internal::Avx512Kernels(GetCpuFeatures().avx512vnni);
    case Isa::kAvx2: return internal::Avx2Kernels();
    default: return kScalarKernels;
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
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q8_1: return GgmlType::Q8_1;
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
    case GgmlType::TQ2_0: return GgmlType::Q8_K;
    default: return GgmlType::F32;
  }
}

bool SupportsMulMat(GgmlType w) { return WIndex(w) >= 0; }

bool IsaSupported(Isa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
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
    case GgmlType::Q4_0:
      QuantizeRowQ4_0Ref(x, static_cast<BlockQ4_0*>(y), n);
      return;
    default:
      assert(false && "FromFloat: unsupported vec_dot_type");
  }
}

VecDotFn GetVecDot(GgmlType w, Isa isa) {
  const int t = WIndex(w);
  if (t < 0 || !IsaSupported(isa)) return nullptr;
  VecDotFn f = KernelsFor(isa).vec_dot[t];
  return f != nullptr ? f : kScalarKernels.vec_dot[t];
}

void MulMatTile(GgmlType w, Isa isa, int64_t k, const void* w_data, size_t w_stride, const void* a_data,
                size_t a_stride, float* dst, size_t dst_stride, int64_t i0, int64_t i1, int64_t j0,
                int64_t j1) {
  const int t = WIndex(w);
  assert(t >= 0);
  if (t < 0 || i0 >= i1 || j0 >= j1) return;
  internal::TileFn f = KernelsFor(ClampIsa(isa)).tile[t];
  if (f == nullptr) f = kScalarKernels.tile[t];
  f(k, w_data, w_stride, a_data, a_stride, dst, dst_stride, i0, i1, j0, j1);
}

}  // namespace herd::cpu
