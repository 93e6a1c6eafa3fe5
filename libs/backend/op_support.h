// What a backend's SupportsOp says: the op's shape rules (OpShapeSupported in
// libs/tensor/op_params.h, the same for every backend) plus the backend's own limits,
// stated as an OpLimits value. CPU, CUDA / HIP and Vulkan each fill one in.
#pragma once
#include <cstdint>
#include <functional>

#include "libs/gguf/ggml_type.h"
#include "libs/tensor/op_params.h"
#include "libs/tensor/tensor.h"

namespace herd {

/// One backend's limits beyond the op semantics.
struct OpLimits {
  /// Types GET_ROWS reads (src0) and MUL_MAT multiplies (src0); nullptr: any.
  std::function<bool(GgmlType)> get_rows_type;
  std::function<bool(GgmlType)> mul_mat_type;
  /// Destination types SET_ROWS converts into; nullptr: any.
  std::function<bool(GgmlType)> set_rows_type;
  /// Whether the kernels can index a tensor (extents, strides, offsets, sizes); tested on
  /// the node and each of its sources. nullptr: every tensor.
  std::function<bool(const Tensor&)> fits;
  /// Largest FLASH_ATTN_EXT head size (q ne0); 0: no limit.
  int64_t max_head_dim = 0;
};

/// OpShapeSupported(n) and the limits: the types above and `fits` for every operand of a
/// computing node (views and leaves are always supported).
bool OpSupported(const Tensor& n, const OpLimits& limits);

/// The limits of the GPU backends (CUDA, HIP, Vulkan): get_rows / mul_mat weights of the
/// types `weight_type` accepts, an F32 or F16 set_rows destination, `fits`, head size <= 256.
OpLimits GpuOpLimits(std::function<bool(GgmlType)> weight_type, std::function<bool(const Tensor&)> fits);

}  // namespace herd
