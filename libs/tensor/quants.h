// ggml quantization block formats and row (de)quantization, bit-exact with
// llama.cpp's ggml-quants.c (no importance matrix).
//
// Weight formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS. Activation formats the CPU dot products consume: Q8_0, Q8_1,
// Q8_K. Every block struct has ggml's exact byte layout (scales stored as IEEE
// half unless noted), so rows can be read from / written to GGUF files as is.
//
// Element order inside a block is ggml's: e.g. for Q4_0 byte qs[j] holds element
// j in its low nibble and element j+16 in its high nibble.
#pragma once
#include <cstddef>
#include <cstdint>

#include "libs/gguf/ggml_type.h"

namespace herd {

constexpr int64_t kQK8_0 = 32;
constexpr int64_t kQK8_1 = 32;
constexpr int64_t kQK4_0 = 32;
constexpr int64_t kQK4_1 = 32;
constexpr int64_t kQK5_0 = 32;
constexpr int64_t kQK5_1 = 32;
constexpr int64_t kQK4_NL = 32;
/// Super-block size of the k-quants, IQ4_XS and Q8_K (ggml QK_K).
constexpr int64_t kQK_K = 256;

/// ggml's 16 non-linear IQ4 levels (kvalues_iq4nl).
extern const int8_t kIq4nlValues[16];

/// block_q4_0: value = (nibble - 8) * d.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
/// block_q4_1: value = nibble * d + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
/// block_q5_0: value = (nibble | bit << 4) - 16) * d; bit j of qh is element j's 5th bit.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
/// block_q5_1: value = (nibble | bit << 4) * d + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
/// block_q8_0: value = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
/// block_q8_1 (activations of Q4_1/Q5_1 dot products): value = qs[j] * d; s = d * sum(qs).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
/// block_q2_K: 16 groups of 16; scales[g] = 4-bit scale | 4-bit min << 4;
/// value = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
/// block_q3_K: 16 groups of 16, 6-bit signed scales packed in 12 bytes; q 2 bits + hmask bit.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
/// block_q4_K: 8 groups of 32, 6-bit scales and mins packed in 12 bytes.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
/// block_q5_K: as Q4_K plus one high bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
/// block_q6_K: 16 groups of 16, int8 scales; q = 4 low bits (ql) + 2 high bits (qh), minus 32.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
/// block_q8_K (activations of k-quant / IQ4_XS dot products): d is a float;
/// bsums[g] = sum of qs[16g .. 16g+15].
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
/// block_iq4_nl: value = kIq4nlValues[nibble] * d.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
/// block_iq4_xs: 8 groups of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in scales_h);
/// value = d * (ls - 32) * kIq4nlValues[nibble].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};

static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0");
static_assert(sizeof(BlockQ4_1) == 20, "block_q4_1");
static_assert(sizeof(BlockQ5_0) == 22, "block_q5_0");
static_assert(sizeof(BlockQ5_1) == 24, "block_q5_1");
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0");
static_assert(sizeof(BlockQ8_1) == 36, "block_q8_1");
static_assert(sizeof(BlockQ2_K) == 84, "block_q2_K");
static_assert(sizeof(BlockQ3_K) == 110, "block_q3_K");
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K");
static_assert(sizeof(BlockQ5_K) == 176, "block_q5_K");
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K");
static_assert(sizeof(BlockQ8_K) == 292, "block_q8_K");
static_assert(sizeof(BlockIQ4_NL) == 18, "block_iq4_nl");
static_assert(sizeof(BlockIQ4_XS) == 136, "block_iq4_xs");
static_assert(alignof(BlockQ8_0) == 2 && alignof(BlockQ4_0) == 2, "ggml blocks are 2-byte aligned");

// ---------------------------------------------------------------------------
// Per-type functions. `k` is the element count, a multiple of the block size
// (precondition). Quantizers are ggml-quants.c's, named after them.

/// quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)) (ties away from zero).
void QuantizeRowQ8_0Ref(const float* x, BlockQ8_0* y, int64_t k);
/// Q8_0 as ggml's CPU backend quantizes activations on x86 with AVX/AVX2/AVX-512
/// (arch/x86/quants.c quantize_row_q8_0): d = amax/127 stored as F16,
/// q = round-half-to-even(x * (127/amax)). Portable scalar code.
void QuantizeRowQ8_0X86(const float* x, BlockQ8_0* y, int64_t k);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k);

/// quantize_row_q8_1_ref: as Q8_0 ref, plus s = fp16(sum(q) * d).
void QuantizeRowQ8_1Ref(const float* x, BlockQ8_1* y, int64_t k);
/// arch/x86 quantize_row_q8_1 (AVX2 branch, which ggml also runs on AVX-512):
/// q as QuantizeRowQ8_0X86, s = fp16(d * sum(q)) with d the unrounded float amax/127.
void QuantizeRowQ8_1X86(const float* x, BlockQ8_1* y, int64_t k);
void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t k);

/// quantize_row_q8_K_ref, which is also what ggml's x86 CPU backend runs
/// (quantize_row_q8_K): iscale = -127/max (max = signed element of largest
/// magnitude, first one wins), q = min(127, nearest_int(iscale*x)), d = 1/iscale.
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t k);
void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t k);

/// quantize_row_q4_0_ref: d = max/-8 (max = signed element of largest magnitude),
/// q = min(15, (int8)(x/d + 8.5)).
void QuantizeRowQ4_0Ref(const float* x, BlockQ4_0* y, int64_t k);
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t k);
/// quantize_row_q4_1_ref: d = (max-min)/15, m = min, q = min(15, (int8)((x-min)/d + 0.5)).
void QuantizeRowQ4_1Ref(const float* x, BlockQ4_1* y, int64_t k);
void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t k);
/// quantize_row_q5_0_ref: d = max/-16, q = min(31, (int8)(x/d + 16.5)).
void QuantizeRowQ5_0Ref(const float* x, BlockQ5_0* y, int64_t k);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t k);
/// quantize_row_q5_1_ref: d = (max-min)/31, m = min, q = (uint8)((x-min)/d + 0.5).
void QuantizeRowQ5_1Ref(const float* x, BlockQ5_1* y, int64_t k);
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t k);

/// quantize_row_q2_K_ref (make_qkx2_quants per 16, 4-bit scales/mins).
void QuantizeRowQ2_KRef(const float* x, BlockQ2_K* y, int64_t k);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t k);
/// quantize_row_q3_K_ref (make_q3_quants per 16, 6-bit signed scales).
void QuantizeRowQ3_KRef(const float* x, BlockQ3_K* y, int64_t k);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t k);
/// quantize_row_q4_K_ref (make_qkx2_quants per 32, 6-bit scales/mins).
void QuantizeRowQ4_KRef(const float* x, BlockQ4_K* y, int64_t k);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t k);
/// quantize_row_q5_K_ref.
void QuantizeRowQ5_KRef(const float* x, BlockQ5_K* y, int64_t k);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t k);
/// quantize_row_q6_K_ref (make_qx_quants per 16, int8 scales).
void QuantizeRowQ6_KRef(const float* x, BlockQ6_K* y, int64_t k);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t k);

/// quantize_iq4_nl without importance matrix (quantize_row_iq4_nl_impl, ntry = 7):
/// what ggml_quantize_chunk and so llama-quantize write.
void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t k);
/// quantize_row_iq4_nl_ref (ntry = -1: no scale search): ggml's CPU from_float for IQ4_NL.
void QuantizeRowIQ4_NLRef(const float* x, BlockIQ4_NL* y, int64_t k);
void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t k);
/// quantize_iq4_xs without importance matrix (ntry = 7); also quantize_row_iq4_xs_ref.
void QuantizeIQ4_XS(const float* x, BlockIQ4_XS* y, int64_t k);
void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t k);

// ---------------------------------------------------------------------------
// Type-generic entry points.

/// Types DequantizeRow accepts: F32, F16, BF16 and every block type above
/// (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ4_NL IQ4_XS).
bool CanDequantize(GgmlType t);
/// `n` elements of type `t` at `src` -> `n` floats (n a multiple of the block size).
/// Bit-exact with ggml's to_float (dequantize_row_*).
void DequantizeRow(GgmlType t, const void* src, float* dst, int64_t n);
/// Same set as CanDequantize.
bool CanQuantize(GgmlType t);
/// `n` floats -> type `t` exactly as ggml_quantize_chunk writes one row without an
/// importance matrix, i.e. what llama-quantize produces: F16/BF16 round to nearest
/// even, block types the *Ref functions above, IQ4_NL/IQ4_XS QuantizeIQ4_NL/XS,
/// Q8_K QuantizeRowQ8_K. n must be a multiple of the block size.
void QuantizeRow(GgmlType t, const float* src, void* dst, int64_t n);

/// ggml_validate_row_data: `nbytes` of type `t` contain no NaN/Inf values (F32/F16/
/// BF16 elements; for block types the block scales d / m / dmin / s). False also when
/// nbytes is not a multiple of the block byte size or the type is not handled here.
/// `bad_index` (optional) receives the index of the first bad element or block.
bool ValidateRowData(GgmlType t, const void* data, size_t nbytes, int64_t* bad_index = nullptr);

}  // namespace herd
