// Tensors and the compute-graph IR shared by every backend.
// Shapes follow ggml: ne[0] is the innermost (contiguous) dimension, nb[i] is the
// byte stride of dimension i. A graph is built in a Graph (an arena that owns
// tensor headers, not data), then placed in memory by the GraphAllocator and
// computed by a Backend (libs/backend).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "libs/gguf/ggml_type.h"

namespace herd {

class Buffer;  // libs/backend

/// Graph operations (names as in ggml.h `enum ggml_op`, same semantics unless noted).
enum class Op : int {
  kNone = 0,  // a leaf: weights, inputs, KV cache
  kView,      // a strided window into src[0] (no compute)
  kGetRows,   // dst[:, i] = float(src0[:, src1[i]]); src1 I32
  kMulMat,    // dst[i, j] = dot(src0 row i, src1 row j); dst F32 [src0.ne1, src1.ne1, ...]
  kAdd,       // dst = src0 + src1 (src1 broadcast over rows when ne1..3 are 1)
  kMul,       // dst = src0 * src1 (same broadcast)
  kScale,     // dst = src0 * f[0]
  kRmsNorm,   // per row, eps = f[0]
  kNorm,      // per row (mean/variance), eps = f[0]
  kRope,      // src0 [head_dim, n_head, n_tokens], src1 I32 positions [n_tokens], src2 optional freq factors
  kSoftMax,   // per row: softmax(src0*f[0] + slope(h)*src1); src1 optional mask [ne0, ne1]; f[1] = max_bias (ALiBi)
  kSilu,
  kGelu,
  kSwiglu,        // silu(src0) * src1
  kFlashAttnExt,  // softmax(scale * K^T Q + mask) V per head; see Graph::FlashAttnExt
  kSetRows,  // writes float rows of src1 into rows src2[i] of src0 (converting to src0's type); dst is a view of src0
  kClamp,    // dst = min(max(src0, f[0]), f[1])  (ggml_clamp)
  kGeluErf,  // 0.5x(1+erf(x/sqrt2)) in float (ggml_gelu_erf)
  kCont,     // contiguous copy of a strided F32 view (ggml_cont)
  kCount,
};

const char* OpName(Op op);

/// Backend-specific data attached to a tensor (ggml_tensor::extra), e.g. the CPU
/// backend's copy of a weight matrix repacked for its batched kernels. Owned by the
/// tensor; a backend that finds one it did not make (dynamic_cast) ignores it.
struct TensorExtra {
  virtual ~TensorExtra() = default;
};

/// A tensor header. Data lives in a Buffer (or, for mmapped weights, in the file).
struct Tensor {
  GgmlType type = GgmlType::F32;
  int64_t ne[4] = {1, 1, 1, 1};
  size_t nb[4] = {0, 0, 0, 0};
  Op op = Op::kNone;
  Tensor* src[4] = {nullptr, nullptr, nullptr, nullptr};
  int32_t i_params[8] = {0};
  float f_params[8] = {0};
  void* data = nullptr;        // host address when the buffer is host memory
  Buffer* buffer = nullptr;    // owning buffer (nullptr for unallocated / external)
  Tensor* view_src = nullptr;  // for views: the tensor whose memory this aliases
  size_t view_offs = 0;        // byte offset into view_src
  std::string name;
  bool is_input = false;   // set by the caller before compute (never reused by the allocator)
  bool is_output = false;  // kept alive until the end of the graph
  /// Set by Backend::PrepareWeights on weights (see TensorExtra); dropped when the
  /// tensor's bytes are written through its backend.
  std::shared_ptr<const TensorExtra> extra;

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  /// Bytes spanned by the tensor (for contiguous tensors: row size * rows).
  size_t nbytes() const;
  /// Row size in bytes of ne[0] elements of `type`.
  size_t row_size() const { return GgmlRowSize(type, ne[0]); }
  bool is_contiguous() const;
  /// Pointer to row (i1, i2, i3) when data is host memory.
  uint8_t* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<uint8_t*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
};

/// Sets contiguous strides for t->type and t->ne.
void SetContiguousStrides(Tensor* t);

/// A compute graph: owns tensor headers and records graph nodes in creation order (which is a valid
/// topological order, since a node can only use tensors created before it).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// A leaf tensor (weights, inputs) with contiguous strides and no data yet.
  Tensor* NewTensor(GgmlType type, std::vector<int64_t> ne, const std::string& name = "");

  /// Views (no compute). View: explicit ne/nb and byte offset into `src`.
  Tensor* View(Tensor* src, std::vector<int64_t> ne, std::vector<size_t> nb, size_t offset);
  /// Reshape of a contiguous tensor (use Cont first for a strided view).
  Tensor* Reshape(Tensor* src, std::vector<int64_t> ne);

  // Ops. Each returns a new F32 node (except SetRows, which returns a view of the cache).
  Tensor* GetRows(Tensor* a, Tensor* ids);  // a [n, rows], ids I32 [k] -> [n, k]
  Tensor* MulMat(Tensor* w, Tensor* x);     // w [k, m], x F32 [k, n, b2, b3] -> [m, n, b2, b3]
  Tensor* Add(Tensor* a, Tensor* b);
  Tensor* Mul(Tensor* a, Tensor* b);
  Tensor* Scale(Tensor* a, float s);
  Tensor* RmsNorm(Tensor* a, float eps);
  Tensor* Norm(Tensor* a, float eps);
  /// RoPE (ggml_rope_ext): a [head_dim, n_head, n_tokens], pos I32 [n_tokens],
  /// freq_factors F32 [n_dims/2] or nullptr. mode: 0 normal, 2 NeoX (GGML_ROPE_TYPE_NEOX).
  Tensor* Rope(Tensor* a, Tensor* pos, Tensor* freq_factors, int n_dims, int mode, int n_ctx_orig, float freq_base,
               float freq_scale, float ext_factor, float attn_factor, float beta_fast, float beta_slow);
  /// ggml_soft_max_ext: a [n, rows...], mask F32 [n, rows] or nullptr; ALiBi when max_bias > 0
  /// (the head index is dimension 2 of a).
  Tensor* SoftMax(Tensor* a, Tensor* mask, float scale, float max_bias);
  Tensor* Silu(Tensor* a);
  /// GELU, tanh approximation, as ggml's CPU backend computes it (through its F16 table).
  Tensor* Gelu(Tensor* a);
  /// GELU, exact erf form (ggml_gelu_erf): 0.5x(1 + erf(x / sqrt(2))), F32 math.
  Tensor* GeluErf(Tensor* a);
  /// ggml_clamp: every element limited to [lo, hi]. Same shape as a (F32, any strides).
  Tensor* Clamp(Tensor* a, float lo, float hi);
  /// ggml_cont: a contiguous F32 copy of `a` (which may be a strided view: rows of
  /// ne[0] contiguous floats at any nb[1..3]). Same shape as a.
  Tensor* Cont(Tensor* a);
  Tensor* Swiglu(Tensor* a, Tensor* b);
  /// Attention (ggml_flash_attn_ext semantics): q F32 [hd, n_head, n_tokens];
  /// k, v [hd, n_head_kv, n_kv] (F32 or F16, strided views of the KV cache);
  /// mask F32 [n_kv, n_tokens] (0 or -inf; nullptr = none). Heads are grouped GQA-style:
  /// q head h uses kv head h / (n_head / n_head_kv). ALiBi when max_bias > 0: the score of
  /// cell c becomes scale*q.k + slope(h)*mask[c] (AlibiSlope; the mask then holds -|pos_q -
  /// pos_k|, llama.cpp's convention). q may be a strided view (rows of hd contiguous floats).
  /// Returns F32 [hd, n_head, n_tokens].
  Tensor* FlashAttnExt(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, float max_bias);
  /// Writes rows of src (F32 [row_len, n]) into rows idx[i] (I32 [n]) of dst (2-D, any
  /// type FromFloat supports). Returns a view of dst that depends on the write.
  Tensor* SetRows(Tensor* dst, Tensor* src, Tensor* idx);

  /// A graph over `nodes` owned by another graph, every one already placed in memory
  /// (data set): a split of libs/backend/sched. Its leaves() are empty.
  static std::unique_ptr<Graph> Placed(std::vector<Tensor*> nodes);
  /// True for Placed() graphs: backends compute them without planning memory.
  bool placed() const { return placed_; }

  /// Marks a tensor as an output (kept until the end of compute).
  void SetOutput(Tensor* t) { t->is_output = true; }

  /// Compute nodes (op != kNone, including views) in creation order.
  const std::vector<Tensor*>& nodes() const { return nodes_; }
  /// Leaves created by NewTensor.
  const std::vector<Tensor*>& leaves() const { return leaves_; }

 private:
  Tensor* NewNode(Op op, GgmlType type, std::vector<int64_t> ne);
  std::deque<Tensor> tensors_;
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leaves_;
  bool placed_ = false;
};

}  // namespace herd
