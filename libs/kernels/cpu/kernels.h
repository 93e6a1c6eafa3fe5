// CPU numeric kernels matching ggml's CPU backend numerics: dot products and
// matrix tiles for F32/F16/BF16 and every llama.cpp weight format herd quantizes
// (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS; scalar, AVX2,
// AVX-512), activation conversion, and the F32 row / elementwise ops of a
// transformer forward pass.
//
// Numerics contract:
//  * FromFloat is bit-exact with what ggml's CPU backend runs on x86 (for Q8_0 and
//    Q8_1 that is arch/x86/quants.c quantize_row_q8_0/_q8_1: 127/amax multiplier and
//    round-half-even, not the _ref versions; Q8_K is quantize_row_q8_K_ref, which is
//    also what ggml's x86 build runs), identical for every Isa.
//  * The scalar vec_dot is ggml's generic reference (F32/F16/BF16: float products
//    summed in double; block formats: ggml_vec_dot_*_generic, exact int32 block sums
//    with ggml's float accumulation (Q4_0 / Q5_0 / Q8_0 / IQ4_NL: one fused multiply-add
//    per block, what ggml's repacked x86 Q4_0 / IQ4_NL kernels do), e.g. 8 float lanes per super-block for q3_K..q6_K),
//    except Q4_1 / Q5_1: every Isa, scalar and packed included, runs ggml's x86 (AVX2)
//    order for them (8 float lanes of 4-element integer sums, one FMA per lane and block,
//    hsum_float_8, the m*s terms fused into their own sum), which is what llama.cpp runs on
//    every x86 CPU for these types, prompt and decode alike; all Isas agree bit for bit.
//  * F16 rows that llamafile's tinyBLAS refuses take ggml_vec_dot_f16's order in
//    MulMatTile (F16UsesGgmlVecDot / VecDotF16Ggml below).
//  * Q8_0 / Q5_0 rows read as stored (not repacked: BackendOptions::ggml_order, --norepack,
//    a Q8_0 KV cache) take ggml's x86 order on every SIMD Isa, vec_dot and tiles of any
//    shape: 8 float lanes of 4-element integer sums, one FMA per lane and block with
//    dx*dy, hsum_float_8 (ggml_vec_dot_q8_0_q8_0 / _q5_0_q8_0 for decode and
//    tinyBLAS_Q0_AVX for prompts, what llama.cpp runs on x86). The repacked Q8_0 / Q5_0
//    kernels (MulMatPacked, the default for weights) sum each block exactly and add it with
//    one FMA, like the scalar reference: within the SIMD bound below, 4-5x faster prompts.
//  * SIMD variants keep every integer block / super-block sum exact and accumulate in
//    float lanes (measured against the scalar reference within 1e-5 of sum|w*a|; equal
//    to it when all scales are exact); each output is computed with the same lane order
//    whatever the tile shape, so for a given Isa MulMatTile(...)[j][i] ==
//    GetVecDot(w, isa)(W_i, A_j) bit-for-bit (results never depend on how the caller
//    splits the tiles).
//  * One exception, the AVX2 batched path for Q4_0 weights: a MulMatTile call
//    with j1 - j0 >= kGemmMinRows (12) activation rows runs an 8-row interleaved kernel
//    (fewer rows: the per-call repacking would cost more than it saves) whose per-output
//    order is the scalar reference's (exact int32 block sums, sumf = fma(float(sumi),
//    dx*dy, sumf) in block order, as ggml's repacked Q4_0 gemm/gemv), so every output
//    equals GetVecDot(w, Isa::kScalar) bit-for-bit; a call with fewer activation rows
//    equals GetVecDot(w, Isa::kAvx2). Both are within the SIMD bound above, results
//    still never depend on how the weight rows [i0,i1) are split, and splitting the
//    activation rows changes a result only where a piece has fewer than 8 rows (as in
//    ggml, whose repacked gemm and gemv paths also differ). F16 keeps the rule above:
//    its batched AVX2 path has vec_dot's lanes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "libs/base/cpu_features.h"
#include "libs/gguf/ggml_type.h"
#include "libs/kernels/cpu/flash_attn_token.h"

namespace herd::cpu {

/// Fewest activation rows of a MulMatTile call for the AVX2 batched Q4_0/F16 paths
/// (see the numerics contract above). Measured with bench/llama_bench --tests bd on
/// llama-110m Q4_0, 2 threads: 8 rows ran at 215 tok/s batched vs 260 through the
/// single-row tiles, 16 rows at 309 vs 259 (the batched path repacks weights per call).
inline constexpr int64_t kGemmMinRows = 12;

/// Activation format a weight type's dot product consumes (ggml type_traits_cpu[].vec_dot_type):
/// F32->F32, F16->F16, BF16->BF16; Q4_0, Q5_0, Q8_0, IQ4_NL -> Q8_0; Q4_1, Q5_1 -> Q8_1;
/// Q2_K..Q6_K, IQ4_XS -> Q8_K (also ggml's answer for types without kernels here, e.g.
/// IQ2_XXS -> Q8_K); F32 for non-matmul types.
GgmlType VecDotType(GgmlType w);
/// Weight types MulMatTile / GetVecDot handle: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool SupportsMulMat(GgmlType w);
/// Whether `isa` can run on this CPU (kScalar always; see GetCpuFeatures()).
bool IsaSupported(Isa isa);

/// Converts n floats into `vec_dot_type` (or any type CanQuantize accepts, e.g. a KV cache
/// type; n a multiple of its block size), bit-exact with ggml's CPU from_float: F32 copy,
/// F16/BF16 round to nearest even, Q8_0 = QuantizeRowQ8_0X86, Q8_1 = QuantizeRowQ8_1X86,
/// Q8_K = QuantizeRowQ8_K, IQ4_NL = QuantizeRowIQ4_NLRef, other block types their
/// reference quantizer (see libs/tensor/quants.h). Every Isa produces identical bytes.
/// `y` must not overlap `x` (F32 excepted).
void FromFloat(GgmlType vec_dot_type, const float* x, void* y, int64_t n, Isa isa);

/// One dot product of n elements: *s = dot(x (weight type w), y (VecDotType(w))).
/// n must be a multiple of the weight's block size (32 for Q4_0..Q8_0 and IQ4_NL, 256 for
/// the k-quants and IQ4_XS; any n for F32/F16/BF16).
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
/// nullptr if the type is unsupported or `isa` is not supported by this CPU.
VecDotFn GetVecDot(GgmlType w, Isa isa);

/// Matrix tile: for i in [i0,i1) (weight rows) and j in [j0,j1) (activation rows):
///   dst[j * dst_stride + i] = dot_k(W row i, A row j)
/// W row i starts at w_data + i*w_stride bytes (type w); A row j at a_data + j*a_stride
/// bytes (type VecDotType(w)); dst_stride in floats. k as for VecDotFn. Thread-safe;
/// callers split [i0,i1) x [j0,j1) among threads freely. Unsupported isa falls back to
/// the best supported one below it.
void MulMatTile(GgmlType w, Isa isa, int64_t k, const void* w_data, size_t w_stride, const void* a_data,
                size_t a_stride, float* dst, size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

/// Whether ggml's x86 CPU mul_mat takes F16 weights of row length k through its
/// ggml_vec_dot_f16 loop rather than llamafile's tinyBLAS (ggml-cpu/llamafile/sgemm.cpp
/// refuses k % 16 != 0 on AVX-512, k % 8 != 0 on AVX2): e.g. stories260K's ffn_down, k = 172.
/// MulMatTile then computes every F16 output with VecDotF16Ggml. False for kScalar (its F16
/// dot already is ggml's non-SIMD loop).
bool F16UsesGgmlVecDot(int64_t k, Isa isa);
/// ggml_vec_dot_f16 (ggml-cpu/vec.cpp) as ggml's build for `isa` runs it, bit for bit:
/// AVX-512: 4 accumulators of 16 lanes over 64-element steps, AVX2: 4 of 8 over 32, reduced
/// (GGML_F32x16_REDUCE / GGML_F32x8_REDUCE) into a double, the leftover elements' float
/// products added in double; kScalar: all products summed in double. x, y: n F16 values.
float VecDotF16Ggml(int64_t n, const uint16_t* x, const uint16_t* y, Isa isa);

// ---------------------------------------------------------------------------
// Weights repacked once at load (ggml-cpu's "repack" extra buffer type: block_q4_0x8 /
// block_q8_0x8 and ggml_gemm_q4_0_8x8_q8_0 / ggml_gemv_*). The 32-element block types, F16
// and the K matrices below are laid out in panels of kPackRows weight rows: panel p holds rows [8p, 8p+8) (rows
// past ne1 are zero), block b of a panel = 8 F16 scales (row order) followed by the
// quants of the 8 rows interleaved in 4-byte groups:
//   Q4_0 (144 bytes): 4 x 32 bytes, vector h = rows 0..7 of quant bytes [4h, 4h+4), each
//                     byte the two nibbles of elements 4h+i (low) and 4h+i+16 (high);
//   IQ4_NL (144 bytes): as Q4_0 (the nibbles index kvalues_iq4nl);
//   Q5_0 (176 bytes, the size of the 8 blocks): Q4_0's layout of the low 4 bits, then one
//                     vector of the fifth bits (row r's byte 4r + i: bit h = element
//                     4h + i, bit 4 + h = element 4h + 16 + i);
//   Q4_1 / Q5_1 (160 / 192 bytes): as Q4_0 / Q5_0 with the 8 rows' F16 mins after the
//                     scales;
//   Q8_0 (272 bytes): 8 x 32 bytes, vector g = rows 0..7 of quants [4g, 4g+4);
//   F16: no scales; per 8-element step s, the 8 rows' elements [8s, 8s+8) (128 bytes);
//        the AVX-512 build instead 16-row slabs (F16SlabLayout).
//   BF16: no scales; per 16-element step s, the 8 rows' elements [16s, 16s+16) (256 bytes).
//   Q4_K (1184 bytes per 256-element super-block, as block_q4_Kx8): 8 F16 d, 8 F16 dmin,
//                     the unpacked 6-bit scales then mins (byte 8g + r: group g of row r),
//                     then per 32-element group g four vectors as Q4_0's over the group;
//   Q5_K (1440 bytes): Q4_K's layout of the low 4 bits, then per group g one vector of
//                     the fifth bits (row r's byte 4r + i: bit h = element 4h + i, bit
//                     4 + h = element 4h + 16 + i);
//   Q6_K (1680 bytes per super-block, the size of the 8 blocks): 8 F16 d, the int8 scales
//                     (byte 16 + 16g + 2r + i: sub-block 2g + i of row r), per group g the low 4 bits
//                     of the quants as Q4_K's, then two vectors of their high 2 bits.
//   Q2_K (672 bytes per super-block, the size of the 8 blocks): 8 F16 d, 8 F16 dmin, the
//                     scale / min bytes (byte 32 + 16g + 2r + i: sub-block 2g + i of row r),
//                     per group g two vectors of 2-bit quants (bits 2h..2h+1 of row r's byte
//                     4r + i: element 4h + i, then 4h + 16 + i);
//   Q3_K (912 bytes per super-block): 8 F16 d, the sub-block scales sc - 32 as int8 (byte
//                     16 + 16g + 2r + i: sub-block 2g + i of row r), per group g two vectors
//                     of the quants' low 2 bits (bits 2h..2h+1 of row r's byte 4r + i:
//                     element 4h + i, then 4h + 16 + i) and one of their high bits (bit h,
//                     bit 4 + h);
//   IQ4_XS (1104 bytes per super-block): 8 F16 d, the sub-block scales ls - 32 as int8
//                     (byte 16 + 8g + r), per group g four vectors as Q4_0's over the group.
// Same size as the original rows (Q4_K: 2.8% more, the scales unpacked; IQ4_XS 1.5%; Q3_K 3.6%; plus the zero rows
// of a last partial panel), so a model holds its matmul weights once, in this layout, as
// llama.cpp does.

/// Rows per panel of a packed weight.
inline constexpr int64_t kPackRows = 8;
/// Whether MulMatPacked runs for weight type `w` on `isa` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
/// F16, BF16, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS from AVX2 up; k a multiple of 32 for the 32-element block types,
/// of 8 for F16, of 256 for the K types).
bool SupportsPacked(GgmlType w, Isa isa);
/// Whether F16 weights packed for `isa` take the slab layout (the AVX-512 build's
/// outer-product tiles): per 16 rows (a slab; the last one padded with zero rows) and
/// element e of k, the 16 rows' F16 values, 32 bytes. Otherwise (AVX2) F16 takes the
/// panel layout: per 8-row panel and 8-element step, the 8 rows' 8 values, 128 bytes.
bool F16SlabLayout(Isa isa);
/// Bytes of the packed copy of an m x k weight for `isa` (0 for types without a packed
/// layout).
size_t PackedWeightBytes(GgmlType w, int64_t k, int64_t m, Isa isa);
/// Writes panels [p0, p1) (rows [8 p0, 8 p1)) of the packed copy for `isa` of the m rows
/// at w_data (row stride w_stride bytes) into `packed` (PackedWeightBytes, any alignment);
/// callers split the panels among threads freely. The SupportsPacked types only (others:
/// nothing written).
void PackWeights(GgmlType w, int64_t k, int64_t m, const void* w_data, size_t w_stride, void* packed, int64_t p0,
                 int64_t p1, Isa isa);
/// Row format of MulMatPacked's activations for weight type w on `isa`: VecDotType(w),
/// except F16 weights on AVX-512, whose kernels read F32 rows holding F16 values (FromFloat
/// to F16, then F16ToF32: the same products, converted once per batch by the caller instead
/// of once per tile call by every thread).
GgmlType PackedActType(GgmlType w, Isa isa);

/// MulMatTile over a packed weight: dst[j * dst_stride + i] = dot_k(W row i, A row j) for
/// i in [i0, i1) (i0 a multiple of kPackRows; i1 <= m), j in [j0, j1); A rows in
/// PackedActType(w, isa). Every output,
/// whatever the number of activation rows or the split, equals bit-for-bit:
///   Q4_0 / Q8_0 / Q5_0 / IQ4_NL / Q4_1 / Q5_1: GetVecDot(w, Isa::kScalar) on the original
///                row (exact int32 block sums, sumf += float(sumi) * (dx*dy) in block order;
///                Q4_1 / Q5_1 add mx*sy to that product before adding it to sumf);
///   F16: GetVecDot(F16, Isa::kAvx2) (8 lanes, lane l summing elements l, l+8, ... by
///        FMA, then the lanes pairwise); in the slab layout (F16SlabLayout) instead one
///        sum in element order, s = fmaf(w[e], a[e], s) from s = 0 (a[e] the activation
///        rounded to F16, as ggml's vec_dot_f16 takes it);
///   BF16: GetVecDot(BF16, Isa::kAvx2) (8 lanes over 16-element steps, lane l adding
///        element 2l then 2l + 1 by FMA, then the lanes pairwise);
///   Q4_K / Q5_K: per super-block the exact integer sums sumi = sum_g scale_g * sum(q * y) and
///        msum = sum_g min_g * (bsums[2g] + bsums[2g+1]), then sumf = sumf + float(sumi) *
///        (d*dy) and sumf = sumf - float(msum) * (dmin*dy) in super-block order (one
///        rounding order of ggml_vec_dot_q4_K_q8_K's sum; its scalar and AVX2 versions
///        round per lane, within 1e-5 of the magnitude of the products);
///   Q6_K: per super-block the exact sumi = sum_j scale_j * sum(q * y) - 32 * sum_j scale_j *
///        bsums[j] (q = 0..63), sumf = sumf + float(sumi) * (d*dy) in super-block order.
///   Q2_K: per super-block the exact sumi = sum_j sc_j * sum(q * y) and msum = sum_j m_j *
///        bsums[j], sumf = sumf + float(sumi) * (d*dy), then sumf = sumf - float(msum) *
///        (dmin*dy);
///   Q3_K: per super-block the exact sumi = sum_j sc_j * sum(q * y) - 4 * sum_j sc_j * bsums[j]
///        (q = 0..7, sc_j = scale - 32), sumf = sumf + float(sumi) * (d*dy);
///   IQ4_XS: per super-block the exact sumi = sum_g (ls_g - 32) * sum(kvalues_iq4nl[q] * y),
///        sumf = sumf + float(sumi) * (d*dy) in super-block order (ggml's scalar dot rounds per
///        sub-block pair, its AVX2 one per lane: within 1e-5 of the products' magnitude).
/// Requires SupportsPacked(w, isa).
void MulMatPacked(GgmlType w, Isa isa, int64_t k, const void* packed, const void* a_data, size_t a_stride, float* dst,
                  size_t dst_stride, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

// ---------------------------------------------------------------------------
// Row / elementwise ops on F32. All work in place (y == x, or y == a / y == b).

/// ggml_compute_forward_rms_norm_f32: sum of float squares in double,
/// mean = (float)(sum/n), y = x * (1.0f / sqrtf(mean + eps)).
void RmsNorm(const float* x, float* y, int64_t n, float eps);
/// ggml_compute_forward_norm_f32: mean = (float)(sum_double(x)/n), y = x - mean,
/// variance = sum_double((y)^2)/n, y *= 1.0f/sqrtf(variance + eps).
void Norm(const float* x, float* y, int64_t n, float eps);
/// ggml_soft_max_ext on one row: w = x*scale (+ slope*mask[i] if mask != nullptr);
/// y = exp(w - max) / sum, sum accumulated in double, multiplied by (float)(1/sum).
/// -INFINITY mask entries give exactly 0 (slope must be > 0 then, as in ggml).
void SoftMax(const float* x, float* y, int64_t n, float scale, const float* mask, float slope);

/// RoPE (ggml_rope_ext; ggml-cpu rope_f32 with rope_yarn / rope_yarn_corr_dims).
struct RopeParams {
  int n_dims;  // rotated dims (<= head_dim, even)
  bool neox;   // false: pairs (2i, 2i+1); true: pairs (i, i + n_dims/2)
  int n_ctx_orig;
  float freq_base;
  float freq_scale;
  float ext_factor;
  float attn_factor;
  float beta_fast;
  float beta_slow;
};
/// cos_sin: 2*(n_dims/2) floats {cos0, sin0, cos1, sin1, ...} for position pos, as ggml's
/// rope_cache_init: theta = pos, theta *= powf(freq_base, -2.0f/n_dims) per pair (float),
/// theta_extrap = theta / freq_factors[i] (if non-null), YaRN ramp/mscale, times attn_factor.
void RopeCache(const RopeParams& p, float pos, const float* freq_factors, float* cos_sin);
/// Rotates one head vector x (head_dim floats) into y (y == x allowed):
/// y0 = fma(x0, cos, -(x1*sin)), y1 = fma(x0, sin, x1*cos) (ggml's contracted arithmetic);
/// dims >= n_dims copied unchanged.
void RopeApply(const RopeParams& p, const float* cos_sin, const float* x, float* y, int64_t head_dim);
/// The YaRN correction dims ggml computes (ggml_rope_yarn_corr_dims).
void RopeYarnCorrDims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);

void Silu(const float* x, float* y, int64_t n);  // x/(1+expf(-x))
/// 0.5x(1+tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) evaluated in float with tanhf.
void Gelu(const float* x, float* y, int64_t n);
/// What ggml's CPU backend actually computes for GGML_UNARY_OP_GELU (GGML_GELU_FP16 is
/// defined in ggml-cpu/vec.h): x <= -10 -> 0, x >= 10 -> x, otherwise the F16 table
/// fp16(gelu_f32(fp16_to_f32(fp16(x)))). Use this one to match llama.cpp's logits.
void GeluGgmlTable(const float* x, float* y, int64_t n);
void GeluErf(const float* x, float* y, int64_t n);                 // 0.5x(1+erff(x/sqrt2))
void Swiglu(const float* a, const float* b, float* y, int64_t n);  // silu(a)*b
void Add(const float* a, const float* b, float* y, int64_t n);
void Mul(const float* a, const float* b, float* y, int64_t n);
void Scale(const float* x, float s, float* y, int64_t n);

/// C[i][j] += sum_l A[i][l] * B[l][j] for i < m, j < n, l < k: row-major F32 with row
/// strides lda, ldb, ldc in floats (ggml-cpu simd_gemm, the products of its tiled flash
/// attention). Each C element is one fmaf chain in l order, so every ISA gives the scalar
/// reference (isa = Isa::kScalar) bit for bit; other values of isa pick the best kernel.
void GemmF32(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t k,
             int64_t n, Isa isa);
/// y[i] = x[i] * scale + slope * mask[i] for i < n (mask nullptr: x[i] * scale; y == x
/// allowed), each operation rounded to F32 (no fused multiply-add); returns max_i y[i]
/// (-inf for n = 0). The score step of a flash attention tile (ggml-cpu
/// ggml_compute_forward_flash_attn_ext_tiled: KQ * scale + slope * mask, then the row max).
/// Bit-identical on every ISA; isa = Isa::kScalar runs the scalar reference.
float ScaleMaskMax(const float* x, const float* mask, float scale, float slope, float* y, int64_t n, Isa isa);
/// y[i] = f32(f16(x[i])) for i < n (y == x allowed): x rounded to F16 precision (nearest
/// even, ggml_compute_fp32_to_fp16) and kept in F32, in one pass: the activations of ggml's
/// vec_dot_f16 for kernels that read them as F32. Identical on every ISA.
void RoundF16(const float* x, float* y, int64_t n, Isa isa);
/// y[i] = f32(x[i]) for n F16 values (exact; F16C where the CPU has it).
void F16ToF32(const uint16_t* x, float* y, int64_t n);
/// y[i] = exp(x[i] - max) for i < n (y == x allowed); returns the sum of the y in double
/// (ggml_vec_soft_max_f32: ggml_v_expf on SIMD ISAs, expf otherwise).
double ExpSubMax(const float* x, float* y, int64_t n, float max);
/// Appends to `vis` the cells c in [0, n) a flash-attention mask row lets a token see
/// (mask value not -inf), in cell order. In a batch of many sequences over a large KV pool
/// almost every cell is masked, and every layer scans the mask again: runs of 8 -inf
/// cells (compared as bit patterns; only -inf has 0xff800000) are skipped at once.
void AppendVisibleCells(const float* mrow, int64_t n, std::vector<int32_t>* vis);
/// F16 vector ops of ggml's CPU flash attention (ggml_compute_forward_flash_attn_ext_f16
/// keeps its V accumulator in F16 when V is F16): bit-exact with the SIMD paths of
/// ggml_vec_mad_f16 / ggml_vec_scale_f16, identical on every ISA.
///   MadF16:   y[i] = fp16(fmaf(f32(x[i]), v, f32(y[i])))   (one float rounding, then F16)
///   ScaleF16: y[i] = fp16(f32(y[i]) * v)
void MadF16(const uint16_t* x, float v, uint16_t* y, int64_t n);
void ScaleF16(uint16_t* y, float v, int64_t n);

/// The value half of ggml's CPU flash attention for one query row with an F16 V
/// (ggml_compute_forward_flash_attn_ext_f16_one_chunk, the path llama.cpp takes for
/// F16 K/V with fewer than 64 query rows or head sizes that are not a multiple of the
/// SIMD width): an online softmax over `scores` (n_kv KQ values, already scaled and
/// masked; -INFINITY entries are skipped) in KV order, with the accumulator kept in F16:
///   on s > M:  M = s, ms = expf(Mold - M), VKQ16 = ScaleF16(VKQ16, ms), vs = 1
///   else:      vs = expf(s - M)
///   VKQ16 = MadF16(V row c, vs, VKQ16);  S = fmaf(S, ms, vs)
/// then out[d] = f32(VKQ16[d]) * (S == 0 ? 0 : 1/S). V row c is hd F16 values at
/// v + c * v_stride bytes; vkq16 is caller scratch of hd halves. (ggml computes the
/// scores with ggml_vec_dot_f16 of K and Q converted to F16; for hd < 64 that is the
/// double-accumulating scalar loop, i.e. GetVecDot(F16, Isa::kScalar).)
void FlashAttnF16VRow(const float* scores, int64_t n_kv, const uint8_t* v, size_t v_stride, int64_t hd, uint16_t* vkq16,
                      float* out);
/// FlashAttnF16VRow over the cells idx[0..n) only (ascending; the others masked): score
/// i belongs to V row idx[i]. Same result as FlashAttnF16VRow on the full row with -inf
/// elsewhere, bit for bit (masked cells are skipped there too).
void FlashAttnF16VRowIdx(const float* scores, const int32_t* idx, int64_t n, const uint8_t* v, size_t v_stride,
                         int64_t hd, uint16_t* vkq16, float* out);
/// One query token of F16 flash attention for a.nh heads (flash_attn_token.h), llama.cpp's
/// one-chunk numerics: per head, score i = dot(K row idx[i], q) * scale + slope * mask[idx[i]]
/// with dot = `dot` (GetVecDot(F16, isa), or the scalar one for hd < 64 as ggml), then
/// FlashAttnF16VRowIdx over those scores into the head's output. Bit-identical whichever
/// path runs: with dot == GetVecDot(F16, Isa::kAvx2), BestIsa() AVX2 and hd % 8 == 0 a
/// fused AVX2 kernel (several cells' dots at once, no call per cell and head).
void FlashAttnF16Heads(const FlashAttnF16Token& a, VecDotFn dot);
/// One tile step of shared-prefix attention (flash_attn_token.h SharedAttnTile; ggml's
/// tiled flash attention without a mask term) in F32. isa = Isa::kScalar runs the scalar
/// reference; otherwise BestIsa()'s AVX-512 or AVX2 kernel where hd and t.rp are multiples
/// of its vector width (16 / 8 floats), else the reference. The paths differ within F32
/// rounding (sums in another order, ggml_v_expf against expf), not bit for bit.
void SharedAttnTileStep(const SharedAttnTile& t, Isa isa);

}  // namespace herd::cpu
