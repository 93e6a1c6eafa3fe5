// Op semantics shared by every backend: the typed parameters of each graph op that has
// any (read once from a node's i_params / f_params, written by the Graph constructors),
// the derived constants every backend computes the same way (YaRN correction dims, ALiBi
// slopes), and the shape predicate every backend's SupportsOp starts from.
//
// Each struct mirrors the op_params llama.cpp's ggml stores for the op (ggml.c), in the
// same order; Of(node) reads them, Write(node) stores them. Only this file indexes
// Tensor::i_params / f_params.
#pragma once
#include <cstdint>

#include "libs/tensor/tensor.h"

namespace herd {

/// SCALE (ggml_scale): dst = src0 * scale. f[0] = scale (ggml op_params[0]).
struct ScaleParams {
  float scale = 1.0f;
  static ScaleParams Of(const Tensor& n);
  void Write(Tensor* n) const;
};

/// RMS_NORM and NORM (ggml_rms_norm / ggml_norm): f[0] = eps (ggml op_params[0]).
struct NormParams {
  float eps = 0.0f;
  static NormParams Of(const Tensor& n);
  void Write(Tensor* n) const;
};

/// CLAMP (ggml_clamp): f[0] = min, f[1] = max (ggml op_params[0..1]).
struct ClampParams {
  float min = 0.0f;
  float max = 0.0f;
  static ClampParams Of(const Tensor& n);
  void Write(Tensor* n) const;
};

/// SOFT_MAX (ggml_soft_max_ext): f[0] = scale, f[1] = max_bias (ALiBi when > 0; the head
/// is dimension 2 of src0) (ggml op_params[0..1]).
struct SoftMaxParams {
  float scale = 1.0f;
  float max_bias = 0.0f;
  static SoftMaxParams Of(const Tensor& n);
  void Write(Tensor* n) const;
};

/// FLASH_ATTN_EXT (ggml_flash_attn_ext): f[0] = scale, f[1] = max_bias (ALiBi when > 0;
/// the head is dimension 1 of q) (ggml op_params[0..1]; herd has no logit softcap).
struct FlashAttnParams {
  float scale = 1.0f;
  float max_bias = 0.0f;
  static FlashAttnParams Of(const Tensor& n);
  void Write(Tensor* n) const;
};

/// ROPE (ggml_rope_ext): i[0] = n_dims, i[1] = mode, i[2] = n_ctx_orig; f[0..5] =
/// freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow (ggml's
/// op_params[1], [2], [4] and the floats at [5..10]; herd keeps no n_past).
struct RopeParams {
  int n_dims = 0;      // rotated dims (<= head_dim, even)
  int mode = 0;        // 0 normal (pairs 2i, 2i+1), GGML_ROPE_TYPE_NEOX = 2 (pairs i, i + n_dims/2)
  int n_ctx_orig = 0;  // YaRN's original context
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;

  static RopeParams Of(const Tensor& n);
  void Write(Tensor* n) const;
  bool neox() const { return (mode & 2) != 0; }
  /// powf(freq_base, -2 / n_dims): the angle ratio of consecutive pairs (rope_cache_init).
  float theta_scale() const;
  /// attn_factor, times 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0 (rope_yarn).
  float mscale() const;
  /// The YaRN correction dims of these parameters (YarnCorrDims).
  void CorrDims(float dims[2]) const;
};

/// The two floats of a one-source element op, as the GPU element kernels take them:
/// SCALE {scale, 0}, CLAMP {min, max}, every other op {0, 0}.
void ElementOpFloats(const Tensor& n, float out[2]);

/// ggml_rope_yarn_corr_dims: the first and last dims YaRN ramps between, in float
/// operations as ggml computes them (floor / ceil of n_dims ln(n_ctx_orig / (2 pi
/// beta)) / (2 ln(freq_base)), clamped to [0, n_dims - 1]).
void YarnCorrDims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);

/// ALiBi constants for n_head heads (ggml soft_max / flash_attn_ext): slope(h) = m0^(h+1)
/// for h < n_head_log2, else m1^(2(h - n_head_log2) + 1); use == 0 (max_bias <= 0):
/// every slope is 1. What device kernels take to compute AlibiSlope themselves.
struct AlibiConsts {
  uint32_t use = 0;
  uint32_t n_head_log2 = 1;  // largest power of two <= n_head
  float m0 = 1.0f;           // 2^(-max_bias / n_head_log2)
  float m1 = 1.0f;           // 2^(-(max_bias / 2) / n_head_log2)
  static AlibiConsts For(int64_t n_head, float max_bias);
};

/// ALiBi slope of head `h` of `n_head` (ggml soft_max / flash_attn_ext: heads beyond the
/// largest power of two use the interleaved m1 sequence). 1.0 when max_bias <= 0.
float AlibiSlope(int h, int n_head, float max_bias);

/// Whether node `n` is well-formed for its op, whatever the backend: its sources are
/// present, of the types the op is defined on (F32 activations, I32 ids / positions,
/// F32 or F16 K/V of one type) and of consistent shapes (ggml's asserts in the ops'
/// constructors, plus what a kernel needs to stay inside its operands: enough positions
/// for RoPE, a mask covering the rows it masks, enough destination rows for SET_ROWS,
/// whole blocks per row for a block type). Weight types (GET_ROWS / MUL_MAT src0,
/// SET_ROWS destination) are left to the backend. Every backend's SupportsOp is this and
/// its own limits (OpSupported in libs/backend/op_support.h).
bool OpShapeSupported(const Tensor& n);

}  // namespace herd
