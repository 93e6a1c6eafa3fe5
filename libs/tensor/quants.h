// ggml quantization block formats and reference (de)quantization of rows.
// Bit-exact with ggml-quants.c: quantize_row_q8_0_ref, quantize_row_q4_0_ref,
// dequantize_row_q8_0, dequantize_row_q4_0 (scales stored as IEEE half).
#pragma once
#include <cstddef>
#include <cstdint>

#include "libs/gguf/ggml_type.h"

namespace herd {

constexpr int64_t kQK8_0 = 32;
constexpr int64_t kQK4_0 = 32;

/// ggml block_q8_0: 32 int8 quants, value = qs[j] * fp16(d).
struct BlockQ8_0 {
  uint16_t d;      // F16 scale bits
  int8_t qs[32];
};
/// ggml block_q4_0: 32 4-bit quants, value = (nibble - 8) * fp16(d).
/// qs[j] low nibble = element j, high nibble = element j + 16.
struct BlockQ4_0 {
  uint16_t d;      // F16 scale bits
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes");
static_assert(alignof(BlockQ8_0) == 2 && alignof(BlockQ4_0) == 2, "ggml blocks are 2-byte aligned");

/// k % 32 == 0 for all four. Reference rounding: d = amax/127, q = roundf(x * (1/d)).
void QuantizeRowQ8_0Ref(const float* x, BlockQ8_0* y, int64_t k);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k);
/// d = max/-8 (max = the element of largest magnitude, signed), q = min(15, (int8)(x/d + 8.5)).
void QuantizeRowQ4_0Ref(const float* x, BlockQ4_0* y, int64_t k);
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t k);

/// Q8_0 as ggml's CPU backend quantizes activations on x86 with AVX/AVX2/AVX-512
/// (arch/x86/quants.c quantize_row_q8_0): d = amax/127 stored as F16,
/// q = round-half-to-even(x * (127/amax)). Differs from the Ref in the multiplier
/// (127/amax vs 1/(amax/127)) and in tie rounding. Portable scalar code.
void QuantizeRowQ8_0X86(const float* x, BlockQ8_0* y, int64_t k);

/// Types DequantizeRow / QuantizeRow accept: F32, F16, BF16, Q8_0, Q4_0.
bool CanDequantize(GgmlType t);
/// `n` elements of type `t` at `src` -> `n` floats (n a multiple of the block size).
void DequantizeRow(GgmlType t, const void* src, float* dst, int64_t n);
bool CanQuantize(GgmlType t);
/// `n` floats -> type `t` with ggml's reference rounding (from_float_ref):
/// F16/BF16 round to nearest even, Q8_0/Q4_0 the *Ref functions above.
void QuantizeRow(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace herd
