#include "libs/tensor/tensor.h"

#include "libs/tensor/op_params.h"

namespace herd {

const char* OpName(Op op) {
  switch (op) {
    case Op::kNone:
      return "NONE";
    case Op::kView:
      return "VIEW";
    case Op::kGetRows:
      return "GET_ROWS";
    case Op::kMulMat:
      return "MUL_MAT";
    case Op::kAdd:
      return "ADD";
    case Op::kMul:
      return "MUL";
    case Op::kScale:
      return "SCALE";
    case Op::kRmsNorm:
      return "RMS_NORM";
    case Op::kNorm:
      return "NORM";
    case Op::kRope:
      return "ROPE";
    case Op::kSoftMax:
      return "SOFT_MAX";
    case Op::kSilu:
      return "SILU";
    case Op::kGelu:
      return "GELU";
    case Op::kSwiglu:
      return "SWIGLU";
    case Op::kFlashAttnExt:
      return "FLASH_ATTN_EXT";
    case Op::kSetRows:
      return "SET_ROWS";
    case Op::kClamp:
      return "CLAMP";
    case Op::kGeluErf:
      return "GELU_ERF";
    case Op::kCont:
      return "CONT";
    default:
      return "?";
  }
}

size_t Tensor::nbytes() const {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(type);
  size_t bytes = GgmlRowSize(type, ne[0]);
  (void)t;
  for (int i = 1; i < 4; ++i) bytes += static_cast<size_t>(ne[i] - 1) * nb[i];
  return bytes;
}

bool Tensor::is_contiguous() const {
  size_t expect = GgmlRowSize(type, ne[0]);
  for (int i = 1; i < 4; ++i) {
    if (ne[i] != 1 && nb[i] != expect) return false;
    expect *= static_cast<size_t>(ne[i]);
  }
  return true;
}

void SetContiguousStrides(Tensor* t) {
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(t->type);
  t->nb[0] = tr->type_size;
  t->nb[1] = GgmlRowSize(t->type, t->ne[0]);
  t->nb[2] = t->nb[1] * static_cast<size_t>(t->ne[1]);
  t->nb[3] = t->nb[2] * static_cast<size_t>(t->ne[2]);
}

std::unique_ptr<Graph> Graph::Placed(std::vector<Tensor*> nodes) {
  auto g = std::make_unique<Graph>();
  g->nodes_ = std::move(nodes);
  g->placed_ = true;
  return g;
}

Tensor* Graph::NewTensor(GgmlType type, std::vector<int64_t> ne, const std::string& name) {
  tensors_.emplace_back();
  Tensor* t = &tensors_.back();
  t->type = type;
  for (size_t i = 0; i < ne.size() && i < 4; ++i) t->ne[i] = ne[i];
  SetContiguousStrides(t);
  t->name = name;
  leaves_.push_back(t);
  return t;
}

Tensor* Graph::NewNode(Op op, GgmlType type, std::vector<int64_t> ne) {
  tensors_.emplace_back();
  Tensor* t = &tensors_.back();
  t->op = op;
  t->type = type;
  for (size_t i = 0; i < ne.size() && i < 4; ++i) t->ne[i] = ne[i];
  SetContiguousStrides(t);
  nodes_.push_back(t);
  return t;
}

Tensor* Graph::View(Tensor* src, std::vector<int64_t> ne, std::vector<size_t> nb, size_t offset) {
  Tensor* t = NewNode(Op::kView, src->type, ne);
  for (size_t i = 0; i < nb.size() && i < 4; ++i) t->nb[i + 1] = nb[i];
  // Strides of dims beyond those given: keep them consistent for 1-sized dims.
  for (size_t i = nb.size() + 1; i < 4; ++i) t->nb[i] = t->nb[i - 1] * static_cast<size_t>(t->ne[i - 1]);
  t->src[0] = src;
  Tensor* root = src->view_src ? src->view_src : src;
  t->view_src = root;
  t->view_offs = (src->view_src ? src->view_offs : 0) + offset;
  return t;
}

Tensor* Graph::Reshape(Tensor* src, std::vector<int64_t> ne) {
  Tensor* t = NewNode(Op::kView, src->type, ne);
  t->src[0] = src;
  Tensor* root = src->view_src ? src->view_src : src;
  t->view_src = root;
  t->view_offs = src->view_src ? src->view_offs : 0;
  return t;
}

Tensor* Graph::GetRows(Tensor* a, Tensor* ids) {
  Tensor* t = NewNode(Op::kGetRows, GgmlType::F32, {a->ne[0], ids->ne[0]});
  t->src[0] = a;
  t->src[1] = ids;
  return t;
}

Tensor* Graph::MulMat(Tensor* w, Tensor* x) {
  Tensor* t = NewNode(Op::kMulMat, GgmlType::F32, {w->ne[1], x->ne[1], x->ne[2], x->ne[3]});
  t->src[0] = w;
  t->src[1] = x;
  return t;
}

Tensor* Graph::Add(Tensor* a, Tensor* b) {
  Tensor* t = NewNode(Op::kAdd, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* Graph::Mul(Tensor* a, Tensor* b) {
  Tensor* t = NewNode(Op::kMul, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* Graph::Scale(Tensor* a, float s) {
  Tensor* t = NewNode(Op::kScale, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  ScaleParams{s}.Write(t);
  return t;
}

Tensor* Graph::RmsNorm(Tensor* a, float eps) {
  Tensor* t = NewNode(Op::kRmsNorm, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  NormParams{eps}.Write(t);
  return t;
}

Tensor* Graph::Norm(Tensor* a, float eps) {
  Tensor* t = NewNode(Op::kNorm, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  NormParams{eps}.Write(t);
  return t;
}

Tensor* Graph::Rope(Tensor* a, Tensor* pos, Tensor* freq_factors, int n_dims, int mode, int n_ctx_orig, float freq_base,
                    float freq_scale, float ext_factor, float attn_factor, float beta_fast, float beta_slow) {
  Tensor* t = NewNode(Op::kRope, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  t->src[1] = pos;
  t->src[2] = freq_factors;
  RopeParams p;
  p.n_dims = n_dims;
  p.mode = mode;
  p.n_ctx_orig = n_ctx_orig;
  p.freq_base = freq_base;
  p.freq_scale = freq_scale;
  p.ext_factor = ext_factor;
  p.attn_factor = attn_factor;
  p.beta_fast = beta_fast;
  p.beta_slow = beta_slow;
  p.Write(t);
  return t;
}

Tensor* Graph::SoftMax(Tensor* a, Tensor* mask, float scale, float max_bias) {
  Tensor* t = NewNode(Op::kSoftMax, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  t->src[1] = mask;
  SoftMaxParams{scale, max_bias}.Write(t);
  return t;
}

Tensor* Graph::Silu(Tensor* a) {
  Tensor* t = NewNode(Op::kSilu, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  return t;
}

Tensor* Graph::Gelu(Tensor* a) {
  Tensor* t = NewNode(Op::kGelu, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  return t;
}

Tensor* Graph::GeluErf(Tensor* a) {
  Tensor* t = NewNode(Op::kGeluErf, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  return t;
}

Tensor* Graph::Clamp(Tensor* a, float lo, float hi) {
  Tensor* t = NewNode(Op::kClamp, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  ClampParams{lo, hi}.Write(t);
  return t;
}

Tensor* Graph::Cont(Tensor* a) {
  Tensor* t = NewNode(Op::kCont, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  return t;
}

Tensor* Graph::Swiglu(Tensor* a, Tensor* b) {
  Tensor* t = NewNode(Op::kSwiglu, GgmlType::F32, {a->ne[0], a->ne[1], a->ne[2], a->ne[3]});
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* Graph::FlashAttnExt(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, float max_bias) {
  Tensor* t = NewNode(Op::kFlashAttnExt, GgmlType::F32, {v->ne[0], q->ne[1], q->ne[2], 1});
  t->src[0] = q;
  t->src[1] = k;
  t->src[2] = v;
  FlashAttnParams{scale, max_bias}.Write(t);
  t->src[3] = mask;
  return t;
}

Tensor* Graph::SetRows(Tensor* dst, Tensor* src, Tensor* idx) {
  Tensor* t = NewNode(Op::kSetRows, dst->type, {dst->ne[0], dst->ne[1], dst->ne[2], dst->ne[3]});
  for (int i = 0; i < 4; ++i) t->nb[i] = dst->nb[i];
  t->src[0] = dst;
  t->src[1] = src;
  t->src[2] = idx;
  Tensor* root = dst->view_src ? dst->view_src : dst;
  t->view_src = root;
  t->view_offs = dst->view_src ? dst->view_offs : 0;
  return t;
}

}  // namespace herd
