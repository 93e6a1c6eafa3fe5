#include "libs/tensor/op_params.h"

#include <algorithm>
#include <cmath>

namespace herd {

ScaleParams ScaleParams::Of(const Tensor& n) { return ScaleParams{n.f_params[0]}; }
void ScaleParams::Write(Tensor* n) const { n->f_params[0] = scale; }

NormParams NormParams::Of(const Tensor& n) { return NormParams{n.f_params[0]}; }
void NormParams::Write(Tensor* n) const { n->f_params[0] = eps; }

ClampParams ClampParams::Of(const Tensor& n) { return ClampParams{n.f_params[0], n.f_params[1]}; }
void ClampParams::Write(Tensor* n) const {
  n->f_params[0] = min;
  n->f_params[1] = max;
}

SoftMaxParams SoftMaxParams::Of(const Tensor& n) { return SoftMaxParams{n.f_params[0], n.f_params[1]}; }
void SoftMaxParams::Write(Tensor* n) const {
  n->f_params[0] = scale;
  n->f_params[1] = max_bias;
}

FlashAttnParams FlashAttnParams::Of(const Tensor& n) { return FlashAttnParams{n.f_params[0], n.f_params[1]}; }
void FlashAttnParams::Write(Tensor* n) const {
  n->f_params[0] = scale;
  n->f_params[1] = max_bias;
}

RopeParams RopeParams::Of(const Tensor& n) {
  RopeParams p;
  p.n_dims = n.i_params[0];
  p.mode = n.i_params[1];
  p.n_ctx_orig = n.i_params[2];
  p.freq_base = n.f_params[0];
  p.freq_scale = n.f_params[1];
  p.ext_factor = n.f_params[2];
  p.attn_factor = n.f_params[3];
  p.beta_fast = n.f_params[4];
  p.beta_slow = n.f_params[5];
  return p;
}

void RopeParams::Write(Tensor* n) const {
  n->i_params[0] = n_dims;
  n->i_params[1] = mode;
  n->i_params[2] = n_ctx_orig;
  n->f_params[0] = freq_base;
  n->f_params[1] = freq_scale;
  n->f_params[2] = ext_factor;
  n->f_params[3] = attn_factor;
  n->f_params[4] = beta_fast;
  n->f_params[5] = beta_slow;
}

float RopeParams::theta_scale() const { return std::pow(freq_base, -2.0f / n_dims); }

float RopeParams::mscale() const {
  float m = attn_factor;
  if (ext_factor != 0.0f) m *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  return m;
}

void RopeParams::CorrDims(float dims[2]) const {
  YarnCorrDims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow, dims);
}

void ElementOpFloats(const Tensor& n, float out[2]) {
  out[0] = out[1] = 0.0f;
  if (n.op == Op::kScale) out[0] = ScaleParams::Of(n).scale;
  if (n.op == Op::kClamp) {
    const ClampParams c = ClampParams::Of(n);
    out[0] = c.min;
    out[1] = c.max;
  }
}

namespace {
// ggml_rope_yarn_corr_dim.
float YarnCorrDim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
}
}  // namespace

void YarnCorrDims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
  const float start = std::floor(YarnCorrDim(n_dims, n_ctx_orig, beta_fast, freq_base));
  const float end = std::ceil(YarnCorrDim(n_dims, n_ctx_orig, beta_slow, freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(n_dims - 1), end);
}

AlibiConsts AlibiConsts::For(int64_t n_head, float max_bias) {
  AlibiConsts a;
  if (max_bias <= 0.0f) return a;
  a.use = 1;
  a.n_head_log2 = 1u << static_cast<uint32_t>(std::floor(std::log2(static_cast<float>(n_head))));
  a.m0 = std::pow(2.0f, -max_bias / a.n_head_log2);
  a.m1 = std::pow(2.0f, -(max_bias / 2.0f) / a.n_head_log2);
  return a;
}

float AlibiSlope(int h, int n_head, float max_bias) {
  const AlibiConsts a = AlibiConsts::For(n_head, max_bias);
  if (a.use == 0) return 1.0f;
  return static_cast<uint32_t>(h) < a.n_head_log2
             ? std::pow(a.m0, static_cast<float>(h + 1))
             : std::pow(a.m1, static_cast<float>(2 * (h - static_cast<int>(a.n_head_log2)) + 1));
}

namespace {

bool IsF32(const Tensor* t) { return t != nullptr && t->type == GgmlType::F32; }
bool IsI32(const Tensor* t) { return t != nullptr && t->type == GgmlType::I32; }

// Rows of whole blocks (every row of a block type starts on a block).
bool WholeBlocks(const Tensor* t) {
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(t->type);
  return tr != nullptr && tr->block_size > 0 && t->ne[0] % tr->block_size == 0;
}

bool RopeShapeOk(const Tensor& n) {
  const Tensor* a = n.src[0];
  const Tensor* pos = n.src[1];
  const Tensor* ff = n.src[2];
  const RopeParams p = RopeParams::Of(n);
  return IsF32(a) && IsI32(pos) && p.n_dims > 0 && p.n_dims <= a->ne[0] && p.n_dims % 2 == 0 &&
         pos->ne[0] >= a->ne[2] && (ff == nullptr || (IsF32(ff) && ff->ne[0] >= p.n_dims / 2));
}

bool FlashAttnShapeOk(const Tensor& n) {
  const Tensor* q = n.src[0];
  const Tensor* k = n.src[1];
  const Tensor* v = n.src[2];
  const Tensor* mask = n.src[3];
  return IsF32(q) && k != nullptr && v != nullptr && (k->type == GgmlType::F32 || k->type == GgmlType::F16) &&
         v->type == k->type && k->ne[0] == q->ne[0] && v->ne[0] == q->ne[0] && k->ne[1] > 0 &&
         q->ne[1] % k->ne[1] == 0 && v->ne[1] == k->ne[1] && v->ne[2] >= k->ne[2] &&
         (mask == nullptr || (IsF32(mask) && mask->ne[0] >= k->ne[2] && mask->ne[1] >= q->ne[2]));
}

}  // namespace

bool OpShapeSupported(const Tensor& n) {
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  switch (n.op) {
    case Op::kNone:
    case Op::kView:
      return true;
    case Op::kGetRows:
      return a != nullptr && IsI32(b) && WholeBlocks(a);
    case Op::kMulMat:
      return a != nullptr && IsF32(b) && a->ne[2] == 1 && a->ne[3] == 1 && a->ne[0] == b->ne[0] && WholeBlocks(a);
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      return IsF32(a) && IsF32(b) && a->ne[0] == b->ne[0];
    case Op::kScale:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kGeluErf:
    case Op::kClamp:
      return IsF32(a);
    case Op::kCont:
      return IsF32(a) && a->nb[0] == sizeof(float);
    case Op::kSoftMax:
      return IsF32(a) && (b == nullptr || (IsF32(b) && b->ne[0] >= a->ne[0]));
    case Op::kRope:
      return RopeShapeOk(n);
    case Op::kFlashAttnExt:
      return FlashAttnShapeOk(n);
    case Op::kSetRows: {
      const Tensor* idx = n.src[2];
      return a != nullptr && IsF32(b) && IsI32(idx) && idx->ne[0] >= b->ne[1] && b->ne[0] <= a->ne[0];
    }
    default:
      return false;
  }
}

}  // namespace herd
