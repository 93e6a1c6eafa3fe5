// Host-side launchers of herd's GPU kernels (libs/backend/cuda/*.cu, compiled by nvcc
// through tools/cuda.bzl, or as HIP by hipcc through tools/hip.bzl for
// //libs/backend/hip), called by cuda_backend.cc. This header is plain C++: it is
// included by nvcc- / hipcc-compiled and by gcc-compiled code. CUDA names map to HIP's
// in the HIP build (gpu_compat.h).
//
// Conventions (ggml's): a tensor is ne[0..3] elements, ne[0] innermost, with byte
// strides nb[0..3]; rows (ne[0] elements) are contiguous for F32/F16/I32 (nb[0] is the
// element size; the backend's SupportsOp refuses anything else). Every index is 64-bit.
// Each launcher enqueues on `stream` and returns cudaGetLastError() of its launch(es)
// (cudaSuccess when there was nothing to do); it never synchronizes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "libs/backend/cuda/gpu_compat.h"

namespace herd::cuda {
inline namespace HERD_GPU_ABI {  // cuda_rt or hip_rt: both builds link into one binary

/// One tensor as the kernels see it: the device address of element (0, 0, 0, 0), the
/// shape in ggml order and the byte strides.
struct DevTensor {
  uint8_t* data = nullptr;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};
};

/// Source / weight types of get_rows and mul_mat (block layouts of libs/tensor/quants.h).
enum class WType : int { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 3, kQ4_K = 4, kQ6_K = 5 };

/// Bits of the device error word (read back after each graph).
inline constexpr unsigned kErrGetRowsIndex = 1u;  // get_rows: an id outside [0, rows): zeros written
inline constexpr unsigned kErrSetRowsIndex = 2u;  // set_rows: an index outside [0, rows): row skipped

/// mul_mat uses the mat-vec kernel up to this many activation columns (src1 ne1*ne2*ne3).
inline constexpr int kMatVecMaxCols = 8;

/// Bytes of one q8_1 block (32 activations; q8_1_dot.h's Q8_1Block, ggml's block_q8_1).
inline constexpr int64_t kQ8_1BlockBytes = 36;

/// Whether this build has the tensor-core tile product (MulMatMma): CUDA yes, HIP no.
inline constexpr bool kHasMma = HERD_GPU_HAS_MMA != 0;
/// MulMatMma takes up to this many activation columns.
inline constexpr int kMmaMaxCols = 64;
/// Weight rows per MulMatMma block.
inline constexpr int kMmaTileRows = 64;

/// Into how many K slices MulMatMma splits a product of a [K, M] weight and ncols columns:
/// enough for about 512 blocks of 128 threads (a few per SM: one 64-row tile per block
/// leaves most SMs idle at M = 4096), at most 16, each slice at least 4 k-steps of 64. The
/// slices' partial sums take MmaSplitK * ncols * M floats of scratch when above 1.
inline int MmaSplitK(int64_t M, int64_t K, int64_t ncols) {
  (void)ncols;  // every column count up to kMmaMaxCols is one column tile
  const int64_t tiles = (M + kMmaTileRows - 1) / kMmaTileRows;
  const int64_t steps = (K / 32 + 1) / 2;
  int64_t s = (512 + tiles - 1) / tiles;
  if (s > steps / 4) s = steps / 4;
  if (s > 16) s = 16;
  return s < 1 ? 1 : static_cast<int>(s);
}

/// Whether MulMatVecQ8 / MulMatMma take weights of type t (the quantized ones).
inline constexpr bool IsQuantWType(WType t) {
  return t == WType::kQ4_0 || t == WType::kQ8_0 || t == WType::kQ4_K || t == WType::kQ6_K;
}

/// ALiBi constants (AlibiSlope in libs/backend/cpu_backend.h): slope(h) = m0^(h+1) for
/// h < n_head_log2, else m1^(2(h - n_head_log2) + 1); use == 0 means slope 1.
struct Alibi {
  int use = 0;
  uint32_t n_head_log2 = 1;
  float m0 = 1.0f, m1 = 1.0f;
};

/// RoPE constants computed on the host exactly as the CPU backend does (cpu::RopeCache).
struct RopeConsts {
  int n_dims = 0;
  int neox = 0;
  float theta_scale = 1.0f;  // powf(freq_base, -2 / n_dims)
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float mscale = 1.0f;               // attn_factor, times 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0
  float corr0 = 0.0f, corr1 = 0.0f;  // ggml_rope_yarn_corr_dims
};

// ---------------------------------------------------------------------------
// kernels_quant.cu (get_rows, mul_mat)

/// dst[:, r] = float(src[:, ids[r]]): src `t` [K, rows], ids I32 [n_ids], dst F32
/// [K, n_ids]. An id outside [0, rows) sets kErrGetRowsIndex in *err and writes zeros.
cudaError_t GetRows(WType t, const DevTensor& src, const DevTensor& ids, const DevTensor& dst, unsigned* err,
                    cudaStream_t stream);

/// dst[m, c] = dot(w row m, x column c) for ncols = x.ne1*ne2*ne3 <= kMatVecMaxCols:
/// one warp per weight row reads the row once, dequantizing 32-element units in
/// registers, and accumulates every column (the scheme of ggml-cuda mmv / mmvq, with
/// F32 activations). w `t` [K, M] (rows nb1 apart), x F32 [K, n1, n2, n3], dst F32
/// [M, n1, n2, n3].
cudaError_t MulMatVec(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, cudaStream_t stream);

/// x F32 [K, n1, n2, n3] (strided columns, K a multiple of 32) quantized to q8_1 blocks:
/// out holds n1*n2*n3 columns of K/32 blocks of kQ8_1BlockBytes each, column c's block b
/// at index c * K/32 + b (4-byte aligned). The formula is q8_1_dot.h's QuantizeQ8_1
/// (quantize_row_q8_1_ref: d = amax/127, q = round(x/d), s = d * sum(q)).
/// cudaErrorInvalidValue when K is not a multiple of 32.
cudaError_t QuantizeQ8_1(const DevTensor& x, void* out, cudaStream_t stream);

/// MulMatVec with q8_1 activations (MMVQ, as ggml-cuda's mul_mat_vec_q): xq is x
/// quantized by QuantizeQ8_1 (x gives the shape only); one warp per weight row, each lane
/// dotting 32-weight units with their q8_1 block by dp4a (q8_1_dot.h's Dot*). Weight
/// types IsQuantWType, ncols <= kMatVecMaxCols; cudaErrorInvalidValue otherwise.
cudaError_t MulMatVecQ8(WType t, const DevTensor& w, const DevTensor& x, const void* xq, const DevTensor& dst,
                        cudaStream_t stream);

/// The product on tensor cores for up to kMmaMaxCols columns (like ggml-cuda's mmq, but
/// F16 operands): blocks of 64 weight rows x 16/32/64 columns, K in steps of 64; each
/// block dequantizes its weight rows to F16 in shared memory (the weight is read once per
/// 64 columns and never dequantized as a whole), converts the activations to F16, and
/// multiplies with nvcuda::wmma 16x16x16 F16 -> F32. Weight types IsQuantWType; edge
/// rows and columns masked. When MmaSplitK(M, K, ncols) > 1, K is split over that many
/// block slices whose partial sums go to `partial` (MmaSplitK * ncols * M floats, device
/// scratch) and a second kernel adds them in order into dst. cudaErrorInvalidValue in
/// builds without kHasMma (HIP), for other types, more columns or a missing partial.
cudaError_t MulMatMma(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, void* partial,
                      cudaStream_t stream);

/// The same product for any number of columns: 64x64 output tiles, K in steps of 32
/// through shared memory (weights dequantized on load). The fallback when cuBLAS is
/// absent or a layout does not suit it.
cudaError_t MulMatTiled(WType t, const DevTensor& w, const DevTensor& x, const DevTensor& dst, cudaStream_t stream);

/// w `t` [K, M] dequantized into contiguous F16 rows: out[m * K + k].
cudaError_t DequantizeToF16(WType t, const DevTensor& w, void* out, cudaStream_t stream);

/// x F32 [K, n1, n2, n3] (strided rows) into contiguous rows out[c * K + k], c the flat
/// column index; as F16 (round to nearest even) or F32.
cudaError_t PackRows(const DevTensor& x, bool to_f16, void* out, cudaStream_t stream);

// ---------------------------------------------------------------------------
// kernels_ops.cu (element-wise and row ops; compiled with --fmad=false, or
// -ffp-contract=off by hipcc, so that float expressions round as the CPU backend's)

enum class UnaryOp : int {
  kScale = 0,  // x * f0
  kSilu,       // x / (1 + e^-x)
  kGelu,       // ggml's CPU GELU: x <= -10 -> 0, x >= 10 -> x, else fp16(gelu_tanh(fp16(x)))
  kGeluErf,    // 0.5 x (1 + erf(x / sqrt 2))
  kClamp,      // MAX(MIN(x, f1), f0)
  kCopy,       // x (cont)
};
/// d = op(a), element-wise over d's shape; a and d have the same shape, any strides.
cudaError_t Unary(UnaryOp op, const DevTensor& a, const DevTensor& d, float f0, float f1, cudaStream_t stream);

enum class BinaryOp : int { kAdd = 0, kMul, kSwiglu };
/// d = a op b; b's row (i1 % b.ne1, i2 % b.ne2, i3 % b.ne3) pairs with a's row (ggml's
/// repeat rule). swiglu: silu(a) * b.
cudaError_t Binary(BinaryOp op, const DevTensor& a, const DevTensor& b, const DevTensor& d, cudaStream_t stream);

/// Per row: rms_norm (rms == true) y = x / sqrt(mean(x^2) + eps), or norm
/// y = (x - mean) / sqrt(var + eps); sums in double as ggml-cpu.
cudaError_t Norm(bool rms, const DevTensor& a, const DevTensor& d, float eps, cudaStream_t stream);

/// soft_max_ext per row: w = x * scale + slope(i2) * mask[i1 % mask.ne1]; y = e^(w - max)
/// / sum (sum in double). mask may be null.
cudaError_t SoftMax(const DevTensor& a, const DevTensor* mask, const DevTensor& d, float scale, const Alibi& alibi,
                    cudaStream_t stream);

/// RoPE (ggml_rope_ext): a F32 [head_dim, n_head, n_tokens, ne3], pos I32 [n_tokens],
/// freq factors F32 [n_dims / 2] or null; d like a.
cudaError_t Rope(const DevTensor& a, const DevTensor& pos, const DevTensor* ff, const DevTensor& d,
                 const RopeConsts& rc, cudaStream_t stream);

/// set_rows: row r of src F32 [ne0, n] into row idx[r] of dst (F32, or F16 when dst_f16,
/// round to nearest even). An index outside [0, dst.ne1) sets kErrSetRowsIndex.
cudaError_t SetRows(const DevTensor& dst, bool dst_f16, const DevTensor& src, const DevTensor& idx, unsigned* err,
                    cudaStream_t stream);

// ---------------------------------------------------------------------------
// kernels_attn.cu

/// The split of a flash attention over its KV range (attn_split.h's SplitPlan plus the
/// partials' device memory): n_split ranges of `cells` cells (a multiple of
/// attn::kKvStep; the last range may be shorter) and attn::PartialFloats(hd, n_head *
/// n_tokens, n_split) floats at `partials`. n_split <= 1 or partials == nullptr: unsplit.
struct FlashAttnSplit {
  int64_t n_split = 1;
  int64_t cells = 0;
  void* partials = nullptr;
};

/// flash_attn_ext: out[:, h, t] = softmax(scale * K_hk^T q + slope(h) * mask[:, t]) V_hk
/// with hk = h / gqa, an online softmax over chunks of KV cells (ggml-cuda fattn-vec's
/// invariants: running max and sum, accumulator rescaled when the max grows). q F32
/// [hd, n_head, n_tokens]; k, v [hd, n_head_kv, n_kv] F16 (kv_f16) or F32; mask F32
/// [>= n_kv, >= n_tokens] or null; out F32 [hd, n_head, n_tokens]. hd <= 256. With an
/// F16 K, q is rounded to F16 first (as ggml-cpu converts it for ggml_vec_dot_f16).
/// With a split (decode): one block per (row, range) writes the range's running max, sum
/// and unnormalized accumulator to split.partials, then a second kernel merges each row's
/// ranges by log-sum-exp (attn::CombineElement; ggml-cuda's flash_attn_combine_results).
/// cudaErrorInvalidValue for a split whose ranges do not cover the KV exactly.
cudaError_t FlashAttn(const DevTensor& q, const DevTensor& k, const DevTensor& v, const DevTensor* mask,
                      const DevTensor& out, bool kv_f16, float scale, const Alibi& alibi, const FlashAttnSplit& split,
                      cudaStream_t stream);

}  // namespace HERD_GPU_ABI
}  // namespace herd::cuda
