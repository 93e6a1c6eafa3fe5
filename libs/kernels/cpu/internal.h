// Per-ISA kernel tables (internal to //libs/kernels/cpu).
// The SIMD translation units are compiled with -mavx2 / -mavx512*; to keep the
// linker from picking one of their copies of an inline function for scalar code
// (ODR + COMDAT folding), this header holds declarations only and the SIMD files
// include nothing but <immintrin.h>, C headers and this file.
#pragma once
#include <cstddef>
#include <cstdint>

#include "libs/kernels/cpu/flash_attn_token.h"

namespace herd::cpu::internal {

/// = cpu::kGemmMinRows (kernels.h; kernels.cc checks they agree), for the SIMD units.
inline constexpr int64_t kGemmMinRows = 12;

// Weight types with dot-product kernels (index into IsaKernels tables).
enum WType {
  kWF32 = 0,
  kWF16,
  kWBF16,
  kWQ8_0,
  kWQ4_0,  // activations F32/F16/BF16/Q8_0
  kWQ4_1,
  kWQ5_0,
  kWQ5_1,
  kWIQ4_NL,  // Q8_1 / Q8_0 / Q8_1 / Q8_0
  kWQ2_K,
  kWQ3_K,
  kWQ4_K,
  kWQ5_K,
  kWQ6_K,
  kWIQ4_XS,  // Q8_K
  kNumWTypes
};

using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
using TileFn = void (*)(int64_t k, const void* w, size_t w_stride, const void* a, size_t a_stride, float* dst,
                        size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1);
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);

struct IsaKernels {
  VecDotFn vec_dot[kNumWTypes];
  TileFn tile[kNumWTypes];
  FromFloatFn to_f16;  // nullptr: use the scalar conversion
  FromFloatFn to_bf16;
  FromFloatFn to_q8_0;
  FromFloatFn to_q8_1;  // nullptr: QuantizeRowQ8_1X86
  // Row ops following ggml's SIMD code paths for this ISA (ggml_v_expf / ggml_v_silu,
  // per-vector float reductions added into a double). nullptr: scalar reference.
  void (*silu)(const float* x, float* y, int64_t n);
  void (*swiglu)(const float* a, const float* b, float* y, int64_t n);
  double (*softmax_exp)(const float* x, float* y, int64_t n, float max);  // y = exp(x - max), returns sum
  double (*cvar)(const float* x, float* y, int64_t n, float mean);        // y = x - mean, returns sum(y^2)/n
  void (*mad_f16)(const uint16_t* x, float v, uint16_t* y, int64_t n);
  void (*scale_f16)(uint16_t* y, float v, int64_t n);
  // C[m][n] += A[m][k] * B[k][n] (kernels.h GemmF32). nullptr: scalar reference.
  void (*gemm_f32)(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                   int64_t k, int64_t n);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // kernels.h ScaleMaskMax. nullptr: scalar reference.
  float (*scale_mask_max)(const float* x, const float* mask, float scale, float slope, float* y, int64_t n);
  void (*round_f16)(const float* x, float* y, int64_t n);  // kernels.h RoundF16. nullptr: scalar.
  // ggml_vec_dot_f16 as ggml's build for this ISA runs it (kernels.h VecDotF16Ggml).
  // nullptr: ggml's non-SIMD loop (products summed in double).
  float (*dot_f16_ggml)(int64_t n, const uint16_t* x, const uint16_t* y);
};

// Packed-weight tiles (kernels.h MulMatPacked; kernels_avx2.cc) for Q4_0, Q8_0, F16, Q4_K, Q5_K and Q6_K.
using PackedTileFn = void (*)(int64_t k, const void* packed, const void* a, size_t a_stride, float* dst,
                              size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1);
enum class PackedKind {
  kQ4_0,
  kQ8_0,
  kF16,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ5_0,
  kIQ4_NL,
  kQ4_1,
  kQ5_1,
  kBF16,
  kIQ4_XS,
  kQ3_K,
  kQ2_K
};
PackedTileFn Avx2PackedTile(PackedKind w);
// The same tiles built for AVX512-VNNI (kernels_avx512_vnni.cc): vpdpbusd int8 dot
// products, the same packed layout and results. Only call it when the CPU has AVX512-VNNI.
PackedTileFn Avx512VnniPackedTile(PackedKind w);

// Defined in kernels_avx2.cc / kernels_avx512.cc. Only call them when the CPU
// supports the ISA. `vnni` selects the AVX512-VNNI integer dot product.
const IsaKernels& Avx2Kernels();
const IsaKernels& Avx512Kernels(bool vnni);

// cpu::FlashAttnF16Heads with GetVecDot(F16, kAvx2) and Avx2Kernels()' MadF16 / ScaleF16,
// bit for bit, for hd a multiple of 8 (kernels_avx2.cc): dots of four cells at once, the
// V accumulator kept in registers (rounded to F16 after every step, as stored there).
void FlashAttnF16HeadsAvx2(const FlashAttnF16Token& a);
// The same with GetVecDot(F16, kAvx512) and Avx512Kernels()' row ops, for hd a multiple of
// 16 (kernels_avx512.cc; both from flash_attn_token.inc).
void FlashAttnF16HeadsAvx512(const FlashAttnF16Token& a);
// cpu::SharedAttnTileStep for hd and rp multiples of 8 (kernels_avx2.cc) / 16 (kernels_avx512.cc),
// both from shared_attn_tile.inc; SharedAttnTileRef is the scalar reference (ops.cc).
void SharedAttnTileAvx2(const SharedAttnTile& t);
void SharedAttnTileAvx512(const SharedAttnTile& t);
void SharedAttnTileRef(const SharedAttnTile& t);
// The reference loop of cpu::FlashAttnF16Heads (ops.cc), for tests.
void FlashAttnF16HeadsGeneric(const FlashAttnF16Token& a, VecDotFn dot);

// Kernel table of BestIsa() (kernels.cc); the row ops in ops.cc dispatch through it.
const IsaKernels& BestKernels();
// Scalar reference table (kernels.cc).
const IsaKernels& ScalarKernels();

}  // namespace herd::cpu::internal
