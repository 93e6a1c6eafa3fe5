// The CPU backend's element-wise, row-wise and matmul graph ops (graph_ops.h): the node's
// rows split over the thread pool, each row computed by the kernels of kernels.h.
#include "libs/kernels/cpu/graph_ops.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/kernels/cpu/kernels.h"
#include "libs/kernels/cpu/model_ops.h"
#include "libs/tensor/op_params.h"
#include "libs/tensor/quants.h"

namespace herd::cpu {

uint8_t* WorkBuffer::Get(size_t bytes) {
  if (buf_.size() < bytes + 64) buf_.resize(bytes + 64);
  uintptr_t p = reinterpret_cast<uintptr_t>(buf_.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

namespace {

float* F32Row(const Tensor* t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return reinterpret_cast<float*>(t->row(i1, i2, i3));
}

// Work on fewer elements than this runs on the calling thread: waking the pool costs more.
constexpr int64_t kInlineElements = 16384;

// fn(ith, nth) on the pool, or as fn(0, 1) on this thread when `inline_` (tiny work).
template <typename Fn>
void RunSplit(ThreadPool& pool, bool inline_, const Fn& fn) {
  if (inline_) {
    fn(0, 1);
  } else {
    pool.Run(fn);
  }
}

// Runs fn(row index i1, i2, i3) over all rows of n split across threads; small
// element-wise work runs on the calling thread.
template <typename Fn>
void ForRows(ThreadPool& pool, const Tensor* n, const Fn& fn) {
  const int64_t nrows = n->nrows();
  if (n->nelements() < kInlineElements) {
    for (int64_t r = 0; r < nrows; ++r) {
      fn(r % n->ne[1], (r / n->ne[1]) % n->ne[2], r / (n->ne[1] * n->ne[2]));
    }
    return;
  }
  pool.Run([&](int ith, int nth) {
    int64_t r0, r1;
    SplitRange(nrows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i1 = r % n->ne[1];
      const int64_t i2 = (r / n->ne[1]) % n->ne[2];
      const int64_t i3 = r / (n->ne[1] * n->ne[2]);
      fn(i1, i2, i3);
    }
  });
}

// INVALID_ARGUMENT "<what><id> outside [0, rows) of '<name>'" for the first of the n row
// ids that is not a row (ne1) of t.
absl::Status CheckRowIds(const int32_t* ids, int64_t n, const Tensor& t, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= t.ne[1]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ids[i], " outside [0, ", t.ne[1], ") of '", t.name, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// get_rows: row ids[i] of src[0], dequantized to F32, into row i of n.
absl::Status ComputeGetRows(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const int64_t n_ids = b->ne[0];
  const int32_t* ids = static_cast<const int32_t*>(b->data);
  if (absl::Status s = CheckRowIds(ids, n_ids, *a, "get_rows: id "); !s.ok()) return s;
  RunSplit(pool, n->nelements() < kInlineElements, [&](int ith, int nth) {
    int64_t r0, r1;
    SplitRange(n_ids, ith, nth, &r0, &r1);
    for (int64_t i = r0; i < r1; ++i) DequantizeRow(a->type, a->row(ids[i]), F32Row(n, i), n->ne[0]);
  });
  return absl::OkStatus();
}

// The row-wise ops of two F32 sources: add and mul (src[1] broadcast over rows), swiglu.
void ComputeBinary(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const int64_t ne0 = n->ne[0];
  switch (n->op) {
    case Op::kAdd:
    case Op::kMul: {
      const bool add = n->op == Op::kAdd;
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = F32Row(a, i1, i2, i3);
        const float* y = F32Row(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
        if (add) {
          cpu::Add(x, y, F32Row(n, i1, i2, i3), ne0);
        } else {
          cpu::Mul(x, y, F32Row(n, i1, i2, i3), ne0);
        }
      });
      return;
    }
    case Op::kSwiglu:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::Swiglu(F32Row(a, i1, i2, i3), F32Row(b, i1, i2, i3), F32Row(n, i1, i2, i3), ne0);
      });
      return;
    default:
      return;
  }
}

// The row-wise ops of one F32 source: scale, norms, activations, clamp, cont.
void ComputeUnary(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const int64_t ne0 = n->ne[0];
  const float eps = n->op == Op::kRmsNorm || n->op == Op::kNorm ? NormParams::Of(*n).eps : 0.0f;
  const ClampParams clamp = n->op == Op::kClamp ? ClampParams::Of(*n) : ClampParams{};
  switch (n->op) {
    case Op::kScale: {
      const float scale = ScaleParams::Of(*n).scale;
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::Scale(F32Row(a, i1, i2, i3), scale, F32Row(n, i1, i2, i3), ne0);
      });
      return;
    }
    case Op::kRmsNorm:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::RmsNorm(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0, eps);
      });
      return;
    case Op::kNorm:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::Norm(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0, eps);
      });
      return;
    case Op::kSilu:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::Silu(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0);
      });
      return;
    case Op::kGelu:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::GeluGgmlTable(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0);
      });
      return;
    case Op::kGeluErf:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::GeluErf(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0);
      });
      return;
    case Op::kClamp:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        cpu::Clamp(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), ne0, clamp.min, clamp.max);
      });
      return;
    case Op::kCont:
      ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
        std::memcpy(F32Row(n, i1, i2, i3), F32Row(a, i1, i2, i3), static_cast<size_t>(ne0) * sizeof(float));
      });
      return;
    default:
      return;
  }
}

// soft_max_ext: scaled, masked (src[1], optional) softmax of each row, ALiBi per head.
void ComputeSoftMax(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const SoftMaxParams sp = SoftMaxParams::Of(*n);
  const float scale = sp.scale;
  const float max_bias = sp.max_bias;
  const int n_head = static_cast<int>(n->ne[2]);
  ForRows(pool, n, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* mask = b ? F32Row(b, i1 % b->ne[1]) : nullptr;
    const float slope = AlibiSlope(static_cast<int>(i2), n_head, max_bias);
    cpu::SoftMax(F32Row(a, i1, i2, i3), F32Row(n, i1, i2, i3), n->ne[0], scale, mask, slope);
  });
}

// rope: every head of each token rotated at its position (src[1]), with the optional
// frequency factors of src[2].
void ComputeRope(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const herd::RopeParams rp = herd::RopeParams::Of(*n);
  cpu::RopeParams p;
  p.n_dims = rp.n_dims;
  p.neox = rp.neox();
  p.n_ctx_orig = rp.n_ctx_orig;
  p.freq_base = rp.freq_base;
  p.freq_scale = rp.freq_scale;
  p.ext_factor = rp.ext_factor;
  p.attn_factor = rp.attn_factor;
  p.beta_fast = rp.beta_fast;
  p.beta_slow = rp.beta_slow;
  const int32_t* pos = static_cast<const int32_t*>(n->src[1]->data);
  const float* ff = n->src[2] ? static_cast<const float*>(n->src[2]->data) : nullptr;
  const int64_t n_tokens = n->ne[2];
  RunSplit(pool, n->nelements() < kInlineElements, [&](int ith, int nth) {
    std::vector<float> cs(static_cast<size_t>(p.n_dims) + 2);
    int64_t t0, t1;
    SplitRange(n_tokens, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; ++t) {
      cpu::RopeCache(p, static_cast<float>(pos[t]), ff, cs.data());
      for (int64_t h = 0; h < n->ne[1]; ++h) {
        cpu::RopeApply(p, cs.data(), F32Row(a, h, t), F32Row(n, h, t), n->ne[0]);
      }
    }
  });
}

// set_rows: row i of src[1] converted into row idx[i] (src[2]) of src[0] (the destination).
absl::Status ComputeSetRows(ThreadPool& pool, Tensor* n, Isa isa) {
  Tensor* dst = n->src[0];
  const Tensor* b = n->src[1];
  const int32_t* idx = static_cast<const int32_t*>(n->src[2]->data);
  const int64_t n_rows = b->ne[1];
  if (absl::Status s = CheckRowIds(idx, n_rows, *dst, "set_rows: row "); !s.ok()) return s;
  RunSplit(pool, b->nelements() < kInlineElements, [&](int ith, int nth) {
    int64_t r0, r1;
    SplitRange(n_rows, ith, nth, &r0, &r1);
    for (int64_t i = r0; i < r1; ++i) {
      cpu::FromFloat(dst->type, F32Row(b, i), dst->row(idx[i]), b->ne[0], isa);
    }
  });
  return absl::OkStatus();
}

absl::Status ComputeMulMat(ThreadPool& pool, const GraphOpContext& ctx, Tensor* n) {
  if (ctx.work == nullptr) return absl::InvalidArgumentError("mul_mat: the GraphOpContext has no WorkBuffer");
  Tensor* w = n->src[0];
  Tensor* x = n->src[1];
  const int64_t k = w->ne[0];
  const int64_t m = w->ne[1];
  const int64_t cols = x->ne[1] * x->ne[2] * x->ne[3];
  const Isa isa = ctx.isa;
  const uint8_t* packed =
      ctx.packed_weight != nullptr && cpu::SupportsPacked(w->type, isa) ? ctx.packed_weight(w) : nullptr;
  const GgmlType vt = packed != nullptr ? cpu::PackedActType(w->type, isa) : cpu::VecDotType(w->type);
  // Packed F16 kernels that read F32 (AVX-512): the activations rounded to F16 as ggml's
  // vec_dot_f16 takes them, kept in F32, once for all threads.
  const bool f16_in_f32 = w->type == GgmlType::F16 && vt == GgmlType::F32;
  const size_t a_stride = GgmlRowSize(vt, k);
  // Activations in the weight type's dot-product format (as ggml does before vec_dot).
  uint8_t* act = nullptr;
  if (vt == GgmlType::F32 && x->is_contiguous() && !f16_in_f32) {
    act = static_cast<uint8_t*>(x->data);
  } else {
    act = ctx.work->Get(a_stride * static_cast<size_t>(cols));
    const auto convert = [&](int ith, int nth) {
      int64_t c0, c1;
      SplitRange(cols, ith, nth, &c0, &c1);
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
        uint8_t* row = act + a_stride * static_cast<size_t>(c);
        if (f16_in_f32) {
          cpu::RoundF16(F32Row(x, i1, i2, i3), reinterpret_cast<float*>(row), k, isa);
        } else {
          cpu::FromFloat(vt, F32Row(x, i1, i2, i3), row, k, isa);
        }
      }
    };
    // A decode step converts one short row: cheaper here than a pool round trip.
    if (cols * k < 16384) {
      convert(0, 1);
    } else {
      pool.Run(convert);
    }
  }
  float* dst = static_cast<float*>(n->data);
  const size_t dst_stride = static_cast<size_t>(m);
  const uint8_t* wdata = static_cast<const uint8_t*>(w->data);
  if (packed != nullptr) {
    // Rows in whole 16-row pieces (two packed panels). Decode: one equal part per thread.
    // Batches: chunks taken from a shared counter (as ggml's mul_mat does), so a thread
    // slowed by the other tenants of its core does less of the work instead of holding the
    // others at the end; guided sizes (GuidedChunks, at least 32 rows) leave it a short
    // last chunk for a dozen or so calls per matmul. Each call packs its activations once.
    const int nth = pool.size();
    if (cols == 1 || nth == 1) {
      const int64_t per = ((m + nth - 1) / nth + 15) / 16 * 16;
      pool.Run([&](int ith, int) {
        const int64_t r0 = std::min<int64_t>(m, ith * per), r1 = std::min<int64_t>(m, r0 + per);
        if (r0 < r1) cpu::MulMatPacked(w->type, isa, k, packed, act, a_stride, dst, dst_stride, r0, r1, 0, cols);
      });
      return absl::OkStatus();
    }
    const std::vector<int64_t> starts = GuidedChunks(m, nth, 16, 32);
    const int64_t nchunks = static_cast<int64_t>(starts.size()) - 1;
    std::atomic<int64_t> next{0};
    pool.Run([&](int, int) {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < nchunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        cpu::MulMatPacked(w->type, isa, k, packed, act, a_stride, dst, dst_stride, starts[c], starts[c + 1], 0, cols);
      }
    });
    return absl::OkStatus();
  }
  // Weight rows split across threads; each thread makes one tile call over all columns
  // (the kernel does its own cache blocking and packs the activations once).
  pool.Run([&](int ith, int nth) {
    // Keep row chunks a multiple of 16 so micro-kernels see full tiles.
    const int64_t per = ((m + nth - 1) / nth + 15) / 16 * 16;
    const int64_t r0 = std::min<int64_t>(m, per * ith);
    const int64_t r1 = std::min<int64_t>(m, r0 + per);
    if (r0 < r1) {
      cpu::MulMatTile(w->type, isa, k, wdata, w->nb[1], act, a_stride, dst, dst_stride, r0, r1, 0, cols);
    }
  });
  return absl::OkStatus();
}

}  // namespace herd::cpu
