// Per-ISA kernel tables (internal to //libs/kernels/cpu).
// The SIMD translation units are compiled with -mavx2 / -mavx512*; to keep the
// linker from picking one of their copies of an inline function for scalar code
// (ODR + COMDAT folding), this header holds declarations only and the SIMD files
// include nothing but <immintrin.h>, C headers and this file.
#pragma once
#include <cstddef>
#include <cstdint>

namespace herd::cpu::internal {

enum WType { kWF32 = 0, kWF16 = 1, kWBF16 = 2, kWQ8_0 = 3, kWQ4_0 = 4, kNumWTypes = 5 };

using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
using TileFn = void (*)(int64_t k, const void* w, size_t w_stride, const void* a, size_t a_stride,
                        float* dst, size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1);
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);

struct IsaKernels {
  VecDotFn vec_dot[kNumWTypes];
  TileFn tile[kNumWTypes];
  FromFloatFn to_f16;   // nullptr: use the scalar conversion
  FromFloatFn to_bf16;
  FromFloatFn to_q8_0;
};

// Defined in kernels_avx2.cc / kernels_avx512.cc. Only call them when the CPU
// supports the ISA. `vnni` selects the AVX512-VNNI integer dot product.
const IsaKernels& Avx2Kernels();
const IsaKernels& Avx512Kernels(bool vnni);

}  // namespace herd::cpu::internal
