// How the CPU backend computes each graph op: one function per op (or family of row-wise
// ops) taking the node, the thread pool to split it over, and what the backend owns
// (GraphOpContext). libs/backend/cpu_backend.cc dispatches each node here; the numerics
// are those of the kernels in kernels.h (ggml's CPU backend, see its contract).
//
// Shapes are in ggml order (ne0 innermost). Every function reads the node's sources and
// writes its data (SET_ROWS: its destination src[0]); the backend has checked the node
// with OpSupported (libs/backend/op_support.h), so only what depends on tensor contents
// (row ids) is checked here.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/base/cpu_features.h"
#include "libs/base/thread_pool.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/tensor.h"

namespace herd::cpu {

/// Scratch memory an op reuses from call to call (the converted activations of a
/// MUL_MAT): grows as needed, never shrinks. Not thread-safe.
class WorkBuffer {
 public:
  /// At least `bytes` bytes, 64-byte aligned, valid until the next call (contents are not
  /// kept across calls).
  uint8_t* Get(size_t bytes);

 private:
  std::vector<uint8_t> buf_;
};

/// Shared-prefix ("cascade") flash attention (flash_attn_shared.cc): a batch of query
/// tokens whose masks share blocks of at least 32 cells attends each block once for all
/// the tokens of each 64-token chunk that see it, merging the parts by log-sum-exp (F32
/// accumulation: within float rounding of the per-token path, not bit-identical). Holds
/// the plans of the current graph's mask, built by the first FLASH_ATTN_EXT node that
/// reads that mask and reused by the later layers. Not thread-safe.
class SharedPrefixAttention {
 public:
  SharedPrefixAttention();
  ~SharedPrefixAttention();
  SharedPrefixAttention(const SharedPrefixAttention&) = delete;
  SharedPrefixAttention& operator=(const SharedPrefixAttention&) = delete;

  /// A new graph: its masks are new, so plans are rebuilt.
  void NewGraph() { ++epoch_; }
  /// FLASH_ATTN_EXT nodes computed by this path so far.
  uint64_t runs() const { return runs_.load(); }

  /// Computes FLASH_ATTN_EXT node n (q [hd, n_head, n_tokens] F32, k / v [hd, n_head_kv,
  /// n_kv] F16, mask [n_kv, n_tokens] F32; out F32) with KQ dot products `dot`
  /// (GetVecDot(F16, ...)). false, nothing written: not applicable (no mask, other types,
  /// one token) or some 64-token chunk shares too little to pay; the caller runs its own
  /// path (per-token, or tiled for prompt-sized batches).
  absl::StatusOr<bool> Compute(ThreadPool& pool, Tensor* n, VecDotFn dot, Isa isa);

  /// How one batch's mask shares KV cells (flash_attn_shared.cc).
  struct Plan;
  /// The parts and per-thread scratch of Compute, kept between calls (flash_attn_shared.cc).
  struct Buffers;

 private:
  uint64_t epoch_ = 0;                        // NewGraph calls so far
  std::vector<std::shared_ptr<Plan>> plans_;  // of the current graph's mask, one per 64 tokens
  std::unique_ptr<Buffers> buffers_;
  std::atomic<uint64_t> runs_{0};
};

/// The packed copy (PackWeights's layout for the context's Isa) of weight w that MUL_MAT
/// reads instead of w->data, or nullptr (w is read as stored).
using PackedWeightFn = const uint8_t* (*)(const Tensor* w);

/// What the backend owns that an op's compute uses.
struct GraphOpContext {
  Isa isa = Isa::kScalar;                  // the SIMD path of every kernel
  WorkBuffer* work = nullptr;              // MUL_MAT's converted activations
  PackedWeightFn packed_weight = nullptr;  // nullptr: no weight is packed
  // FLASH_ATTN_EXT's shared-prefix path (CpuBackend::set_shared_prefix_attention);
  // nullptr: off.
  SharedPrefixAttention* shared_attention = nullptr;
};

/// GET_ROWS: row ids[i] (src[1], I32) of src[0] (any type DequantizeRow reads) dequantized
/// to F32 into row i of n. INVALID_ARGUMENT for an id outside [0, src[0]->ne[1]).
absl::Status ComputeGetRows(ThreadPool& pool, Tensor* n);
/// ADD and MUL (src[1] broadcast over src[0]'s rows, ggml_can_repeat_rows), SWIGLU: row-wise
/// over two F32 sources. Other ops: nothing.
void ComputeBinary(ThreadPool& pool, Tensor* n);
/// SCALE, RMS_NORM, NORM, SILU, GELU (ggml's F16 table), GELU_ERF, CLAMP, CONT: row-wise over
/// one F32 source. Other ops: nothing.
void ComputeUnary(ThreadPool& pool, Tensor* n);
/// SOFT_MAX (ggml_soft_max_ext): scaled, masked (src[1], optional, broadcast over rows)
/// softmax of each row, ALiBi slope per head (ne2).
void ComputeSoftMax(ThreadPool& pool, Tensor* n);
/// ROPE (ggml_rope_ext): every head (ne1) of each token (ne2) rotated at its position
/// (src[1], I32), with the optional frequency factors of src[2].
void ComputeRope(ThreadPool& pool, Tensor* n);
/// SET_ROWS: row i of src[1] (F32) converted (FromFloat) into row idx[i] (src[2], I32) of
/// src[0]. INVALID_ARGUMENT for a row outside [0, src[0]->ne[1]).
absl::Status ComputeSetRows(ThreadPool& pool, Tensor* n, Isa isa);
/// MUL_MAT: n [m, cols...] = src[0] (weights [k, m]) x src[1] (F32 [k, cols...]): the
/// activations converted to the weight's dot-product type (into ctx.work), then
/// MulMatPacked over the packed copy when ctx.packed_weight has one, else MulMatTile.
absl::Status ComputeMulMat(ThreadPool& pool, const GraphOpContext& ctx, Tensor* n);
/// FLASH_ATTN_EXT (flash_attn.cc): q [hd, n_head, n_tokens] F32, k / v [hd, n_head_kv,
/// n_kv], mask [n_kv, n_tokens] F32 or none; out [hd, n_head, n_tokens] F32. F16 K and V:
/// llama.cpp's tiled path for 64 or more query tokens, else its one-chunk path (or the
/// shared-prefix path where ctx.shared_attention applies); other K / V types: per (token,
/// head) dot products and an F32 (F16 V: F16) softmax accumulator. UNIMPLEMENTED when K's
/// type has no dot product.
absl::Status ComputeFlashAttn(ThreadPool& pool, const GraphOpContext& ctx, Tensor* n);

}  // namespace herd::cpu
