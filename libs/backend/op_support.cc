#include "libs/backend/op_support.h"

#include <utility>

namespace herd {

bool OpSupported(const Tensor& n, const OpLimits& limits) {
  if (n.op == Op::kNone || n.op == Op::kView) return true;
  if (!OpShapeSupported(n)) return false;
  const auto accepts = [](const std::function<bool(GgmlType)>& f, GgmlType t) { return f == nullptr || f(t); };
  switch (n.op) {
    case Op::kGetRows:
      if (!accepts(limits.get_rows_type, n.src[0]->type)) return false;
      break;
    case Op::kMulMat:
      if (!accepts(limits.mul_mat_type, n.src[0]->type)) return false;
      break;
    case Op::kSetRows:
      if (!accepts(limits.set_rows_type, n.src[0]->type)) return false;
      break;
    case Op::kFlashAttnExt:
      if (limits.max_head_dim > 0 && n.src[0]->ne[0] > limits.max_head_dim) return false;
      break;
    default:
      break;
  }
  if (limits.fits == nullptr) return true;
  if (!limits.fits(n)) return false;
  for (const Tensor* s : n.src) {
    if (s != nullptr && !limits.fits(*s)) return false;
  }
  return true;
}

OpLimits GpuOpLimits(std::function<bool(GgmlType)> weight_type, std::function<bool(const Tensor&)> fits) {
  OpLimits l;
  l.get_rows_type = weight_type;
  l.mul_mat_type = std::move(weight_type);
  l.set_rows_type = [](GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16; };
  l.fits = std::move(fits);
  l.max_head_dim = 256;
  return l;
}

}  // namespace herd
