// Tensors and graphs on the wire of proto/herd/v1/remote.proto, both directions: the
// client encodes a placed graph as (buffer id, offset) and source indices; the server
// decodes each header and checks it before any byte is read (DecodeHeader).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/tensor/tensor.h"
#include "proto/herd/v1/remote.pb.h"

namespace herd::remote {

/// The version of remote.proto this build speaks (GetDeviceResponse.protocol_version).
inline constexpr uint32_t kProtocolVersion = 1;

/// Longest tensor name a message may carry (bytes).
inline constexpr size_t kMaxName = 128;

/// Weight types a backend computes with (GgmlType ids), as GetDevice reports them.
struct WeightTypes {
  std::vector<int> get_rows;  // GET_ROWS sources
  std::vector<int> mul_mat;   // MUL_MAT src0
  std::vector<int> set_rows;  // SET_ROWS destinations
};
/// Asks backend.SupportsOp of one small node per known type.
WeightTypes ProbeWeightTypes(const Backend& backend);

/// ABORTED: "the compute server restarted (instance X): its buffers are gone".
absl::Status RestartedError(uint64_t instance);

/// The command's kind in messages: "set", "get", "copy", "clear", "free", "compute",
/// "prepare".
std::string CommandName(const v1::Command& c);

/// The alignment a tensor of `type` needs of its address and strides: the largest of
/// 8, 4, 2, 1 dividing its block size in bytes (F32 4, F16 2, Q4_0 2, Q4_K 8), so that a
/// kernel may load its elements and block fields as their C++ types.
uint64_t TypeAlignment(GgmlType type);

/// Type, extents and strides equal (a prepared weight matches a later leaf).
bool SameLayout(const Tensor& a, const Tensor& b);

/// Fills `t` from `w`, tensor number `index` of its message, whose earlier tensors are
/// `earlier` (already checked). Sets type, ne, nb, op, sources, parameters, name and, for
/// views, view_src / view_offs; not data or buffer. INVALID_ARGUMENT naming the field when
/// the type or op id is unknown; an extent is < 1 or > 2^32, or the elements > 2^40; a
/// stride is > 2^48 or nb[0] is not the element size; a stride or a view's offset is
/// not a multiple of TypeAlignment (the caller checks a buffer offset); ne[0] is not
/// whole blocks; a source index is not in [0, index); a view lies outside its root or
/// its root is not its source's root; a compute node's type, extents or strides differ
/// from what its op makes of its sources (tensor.h's builders); an op has missing or
/// extra sources.
absl::Status DecodeHeader(const v1::WireTensor& w, int index, const std::vector<Tensor*>& earlier, Tensor* t);

/// Where a tensor's bytes are on the server: (buffer id, offset). The client's lookup.
using LocateFn = std::function<absl::StatusOr<std::pair<uint64_t, uint64_t>>(const Tensor* t)>;

/// Encodes `nodes` (compute nodes, placed in remote memory) and every tensor they read
/// (leaves, nodes of earlier splits, views) into `out`, sources before their readers.
/// Errors: those of `locate` (a tensor not in remote memory), naming the tensor.
absl::Status EncodeGraph(const std::vector<Tensor*>& nodes, const LocateFn& locate, v1::ComputeGraph* out);

/// Encodes leaves (weights) for a PrepareWeights command.
absl::Status EncodeLeaves(const std::vector<Tensor*>& leaves, const LocateFn& locate, v1::PrepareWeights* out);

}  // namespace herd::remote
