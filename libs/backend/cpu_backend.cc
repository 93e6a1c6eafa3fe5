#include "libs/backend/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/base/fp16.h"
#include "libs/base/status_macros.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/kernels/cpu/model_ops.h"
#include "libs/tensor/graph_alloc.h"
#include "libs/tensor/quants.h"

namespace herd {
namespace {

class CpuBuffer : public Buffer {
 public:
  CpuBuffer(void* p, size_t size, bool owned = true) : p_(p), size_(size), owned_(owned) {}
  ~CpuBuffer() override {
    if (owned_) std::free(p_);
  }
  BufferType* type() const override { return CpuBufferType::Get(); }
  void* base() const override { return p_; }
  size_t size() const override { return size_; }
  void Clear(uint8_t value) override { std::memset(p_, value, size_); }

 private:
  void* p_;
  size_t size_;
  bool owned_;
};

void* AlignedAlloc(size_t size) {
  size_t rounded = (size + 63) & ~size_t{63};
  if (rounded == 0) rounded = 64;
  return std::aligned_alloc(64, rounded);
}

float* F32Row(const Tensor* t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return reinterpret_cast<float*>(t->row(i1, i2, i3));
}

// Tiled flash attention (FlashAttnTiled; ggml-cpu's GGML_FA_TILE_Q / GGML_FA_TILE_KV):
// batches of at least kFlashAttnTileTokens query tokens take it, with at most
// kFlashAttnTileRows query rows (tokens x heads of one KV head) and kFlashAttnTileKv KV
// cells per tile.
constexpr int64_t kFlashAttnTileTokens = 64;
constexpr int64_t kFlashAttnTileRows = 64;
constexpr int64_t kFlashAttnTileKv = 64;
// Most bytes of F32 K / V tiles a tiled flash attention converts once for all its query
// tiles (beyond: each query tile converts the tiles it reads itself).
constexpr size_t kFlashAttnSharedKvBytes = size_t{32} << 20;

}  // namespace

CpuBufferType* CpuBufferType::Get() {
  static CpuBufferType t;
  return &t;
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBufferType::Allocate(size_t size) {
  void* p = AlignedAlloc(size);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes of host memory"));
  }
  std::memset(p, 0, size);
  return std::unique_ptr<Buffer>(new CpuBuffer(p, size));
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBufferType::FromHostPtr(void* ptr, size_t size) {
  if (ptr == nullptr) return absl::InvalidArgumentError("cannot wrap a null host pointer");
  return std::unique_ptr<Buffer>(new CpuBuffer(ptr, size, /*owned=*/false));
}

namespace {
// "model name" of /proc/cpuinfo ("CPU" when unreadable).
std::string CpuModelName() {
  std::string name = "CPU";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "model name", 10) == 0) {
        const char* colon = std::strchr(line, ':');
        if (colon != nullptr) {
          name = colon + 1;
          while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(name.begin());
          while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
        }
        break;
      }
    }
    std::fclose(f);
  }
  return name;
}
}  // namespace

DeviceInfo CpuBackend::HostDevice() {
  DeviceInfo d;
  d.backend = "cpu";
  d.index = 0;
  d.name = "CPU";
  d.description = absl::StrCat(CpuModelName(), " (", IsaName(BestIsa()), ")");
  d.host_visible = true;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    unsigned long long kb = 0;
    while (std::fscanf(f, "%63s %llu kB", key, &kb) == 2) {
      if (std::strcmp(key, "MemTotal:") == 0) d.memory_total = kb * 1024;
      if (std::strcmp(key, "MemAvailable:") == 0) d.memory_free = kb * 1024;
    }
    std::fclose(f);
  }
  return d;
}

DeviceInfo CpuBackend::device() const { return HostDevice(); }

CpuBackend::CpuBackend(int n_threads, Isa isa, bool repack, bool pin_threads, bool ggml_order)
    : pool_(n_threads, pin_threads),
      isa_(isa),
      repack_(repack),
      ggml_order_(ggml_order),
      shared_prefix_attention_(false) {
  limits_.get_rows_type = CanDequantize;
  limits_.mul_mat_type = cpu::SupportsMulMat;
  limits_.set_rows_type = CanQuantize;
}

namespace {

// A weight's copy in cpu::PackWeights's layout (Tensor::extra). `src`, `type`, `k` and
// `m` record what it was made from: a tensor placed elsewhere since is not served from it.
struct CpuPackedWeight : TensorExtra {
  GgmlType type = GgmlType::F32;
  int64_t k = 0, m = 0;
  const void* src = nullptr;
  std::shared_ptr<uint8_t> arena;  // the PackedArena holding `data`
  uint8_t* data = nullptr;
};

// One allocation for all the weights one PrepareWeights call packs, aligned to and sized in
// 2 MiB and advised as transparent huge pages (madvise(MADV_HUGEPAGE); advisory, no error
// when the kernel declines). Decode streams every packed byte once per token: over 4 KiB
// pages on a Zen 5 EPYC VM, tinyllama-1.1b F16 tg64 ran 2.5-10.6 t/s at 1 thread and
// 11.8-25.8 at 2, over huge pages 14.2-18.6 and 22.9-32.9 (3 interleaved pairs of runs;
// llama-110m, whose matrices are 1-3 MiB each: +0-20% in most cells). One arena rather
// than one per tensor: 2 MiB rounding per 1 MiB matrix would waste half.
// nullptr when the memory cannot be had.
std::shared_ptr<uint8_t> PackedArena(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* mem = std::aligned_alloc(kHugePage, size);
  if (mem == nullptr) return nullptr;
  madvise(mem, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(mem), std::free);
}

const CpuPackedWeight* PackedFor(const Tensor* w) {
  const auto* p = dynamic_cast<const CpuPackedWeight*>(w->extra.get());
  if (p == nullptr || p->src != w->data || p->type != w->type || p->k != w->ne[0] || p->m != w->ne[1]) return nullptr;
  return p;
}

}  // namespace

absl::Status CpuBackend::PrepareWeights(const std::vector<Tensor*>& weights) {
  if (!repack_) return absl::OkStatus();
  std::vector<Tensor*> todo;
  size_t total = 0;
  // Embeddings are read by GET_ROWS from the mapping and are not packed, except a tied
  // output matrix: without "output.weight" the logits multiply by token_embd (as llama.cpp's
  // loaders duplicate LLM_TENSOR_OUTPUT from TOKEN_EMBD), so it gets a packed copy for that
  // matmul (the largest of a small model's decode: llama-110m Q8_0 tg64 spent 27% of a token
  // in the row-at-a-time kernel over its 26 MB).
  const bool tied_output =
      std::none_of(weights.begin(), weights.end(), [](const Tensor* t) { return t->name == "output.weight"; });
  for (Tensor* t : weights) {
    const bool embd = t->name.find("embd") != std::string::npos && !(tied_output && t->name == "token_embd.weight");
    const Buffer* buf = t->buffer != nullptr ? t->buffer : (t->view_src != nullptr ? t->view_src->buffer : nullptr);
    if (buf != nullptr && !buf->type()->is_host()) continue;  // another backend's (a layer split)
    if (t->data == nullptr || !cpu::SupportsPacked(t->type, isa_) || t->ne[2] != 1 || t->ne[3] != 1 ||
        t->ne[0] % 32 != 0 || t->ne[1] < cpu::kPackRows || embd ||
        (ggml_order_ && (t->type == GgmlType::Q8_0 || t->type == GgmlType::Q5_0)) || PackedFor(t) != nullptr) {
      continue;
    }
    todo.push_back(t);
    total += (cpu::PackedWeightBytes(t->type, t->ne[0], t->ne[1], isa_) + 63) / 64 * 64;
  }
  if (todo.empty()) return absl::OkStatus();
  std::shared_ptr<uint8_t> arena = PackedArena(total);
  if (arena == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("repacking ", todo.size(), " weights (first: '", todo[0]->name,
                                                     "'): cannot allocate ", total, " bytes"));
  }
  size_t offset = 0;
  for (Tensor* t : todo) {
    const int64_t k = t->ne[0], m = t->ne[1];
    const size_t bytes = cpu::PackedWeightBytes(t->type, k, m, isa_);
    auto packed = std::make_shared<CpuPackedWeight>();
    packed->type = t->type;
    packed->k = k;
    packed->m = m;
    packed->src = t->data;
    packed->arena = arena;
    packed->data = arena.get() + offset;
    offset += (bytes + 63) / 64 * 64;
    const int64_t panels = (m + cpu::kPackRows - 1) / cpu::kPackRows;
    uint8_t* dst = packed->data;
    pool_.Run([&](int ith, int nth) {
      int64_t p0, p1;
      SplitRange(panels, ith, nth, &p0, &p1);
      cpu::PackWeights(t->type, k, m, t->data, t->nb[1], dst, p0, p1, isa_);
    });
    packed_bytes_ += bytes;
    t->extra = std::move(packed);
  }
  return absl::OkStatus();
}
CpuBackend::~CpuBackend() = default;

absl::Status CpuBackend::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  if (t->data == nullptr) return absl::FailedPreconditionError(absl::StrCat("tensor '", t->name, "' has no data"));
  if (offset + size > t->nbytes()) {
    return absl::OutOfRangeError(absl::StrCat("write of ", size, " bytes at ", offset, " past tensor '", t->name, "' (",
                                              t->nbytes(), " bytes)"));
  }
  std::memcpy(static_cast<uint8_t*>(t->data) + offset, data, size);
  t->extra.reset();  // a packed copy would be stale
  return absl::OkStatus();
}

absl::Status CpuBackend::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  if (t->data == nullptr) return absl::FailedPreconditionError(absl::StrCat("tensor '", t->name, "' has no data"));
  if (offset + size > t->nbytes()) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", size, " bytes at ", offset, " past tensor '", t->name, "' (", t->nbytes(), " bytes)"));
  }
  std::memcpy(data, static_cast<const uint8_t*>(t->data) + offset, size);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyTensor(const Tensor* src, Tensor* dst) {
  if (src->nbytes() != dst->nbytes() || src->type != dst->type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': type or size differ"));
  }
  std::memcpy(dst->data, src->data, src->nbytes());
  return absl::OkStatus();
}

bool CpuBackend::SupportsOp(const Tensor& n) const { return OpSupported(n, limits_); }

uint8_t* CpuBackend::Work(size_t bytes) {
  if (work_.size() < bytes + 64) work_.resize(bytes + 64);
  uintptr_t p = reinterpret_cast<uintptr_t>(work_.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

absl::Status CpuBackend::GraphCompute(Graph& ctx) {
  ++graph_epoch_;  // masks are new: shared-attention plans are rebuilt
  for (Tensor* n : ctx.nodes()) {
    if (!SupportsOp(*n)) {
      return absl::UnimplementedError(
          absl::StrCat("CPU backend does not support ", OpName(n->op), " for node '", n->name, "'"));
    }
  }
  if (ctx.placed()) {  // the scheduler placed every node
    for (Tensor* n : ctx.nodes()) {
      absl::Status s = ComputeNode(n);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  GraphPlan plan = PlanGraph(ctx, 64);
  if (plan.arena_size > arena_size_) {
    void* p = AlignedAlloc(plan.arena_size);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", plan.arena_size, " bytes of compute scratch"));
    }
    arena_ = std::unique_ptr<uint8_t[], void (*)(void*)>(static_cast<uint8_t*>(p), std::free);
    arena_size_ = plan.arena_size;
  }
  ApplyPlan(plan, ctx, arena_.get());
  for (Tensor* n : ctx.nodes()) {
    absl::Status s = ComputeNode(n);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

// A FLASH_ATTN_EXT node's operands and sizes: q [hd, n_head, n_tokens] F32, k / v
// [hd, n_head_kv, n_kv], mask [n_kv, n_tokens] F32 or none; gqa = n_head / n_head_kv.
struct FlashAttnDims {
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* mask;  // nullptr: every cell seen
  float scale, max_bias;
  int64_t hd, n_head, n_tokens, n_kv, n_head_kv, gqa;
  explicit FlashAttnDims(const Tensor* n)
      : q(n->src[0]),
        k(n->src[1]),
        v(n->src[2]),
        mask(n->src[3]),
        scale(FlashAttnParams::Of(*n).scale),
        max_bias(FlashAttnParams::Of(*n).max_bias),
        hd(q->ne[0]),
        n_head(q->ne[1]),
        n_tokens(q->ne[2]),
        n_kv(k->ne[2]),
        n_head_kv(k->ne[1]),
        gqa(n_head / n_head_kv) {}
};

// The cells a query token sees, in cell order, into *vis (cleared first): where its mask
// row (n_kv floats) is not -inf; every cell without a mask (mrow nullptr).
void VisibleCells(const float* mrow, int64_t n_kv, std::vector<int32_t>* vis) {
  vis->clear();
  if (mrow != nullptr) {
    cpu::AppendVisibleCells(mrow, n_kv, vis);
  } else {
    for (int64_t c = 0; c < n_kv; ++c) vis->push_back(static_cast<int32_t>(c));
  }
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

// get_rows: row ids[i] of src[0], dequantized to F32, into row i of n.
absl::Status ComputeGetRows(ThreadPool& pool, Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const int64_t n_ids = b->ne[0];
  const int32_t* ids = static_cast<const int32_t*>(b->data);
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= a->ne[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("get_rows: id ", ids[i], " outside [0, ", a->ne[1], ") of '", a->name, "'"));
    }
  }
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
  const RopeParams rp = RopeParams::Of(*n);
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
  for (int64_t i = 0; i < n_rows; ++i) {
    if (idx[i] < 0 || idx[i] >= dst->ne[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("set_rows: row ", idx[i], " outside [0, ", dst->ne[1], ") of '", dst->name, "'"));
    }
  }
  RunSplit(pool, b->nelements() < kInlineElements, [&](int ith, int nth) {
    int64_t r0, r1;
    SplitRange(n_rows, ith, nth, &r0, &r1);
    for (int64_t i = r0; i < r1; ++i) {
      cpu::FromFloat(dst->type, F32Row(b, i), dst->row(idx[i]), b->ne[0], isa);
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuBackend::ComputeNode(Tensor* n) {
  switch (n->op) {
    case Op::kNone:
    case Op::kView:
      return absl::OkStatus();
    case Op::kGetRows:
      return ComputeGetRows(pool_, n);
    case Op::kMulMat:
      return ComputeMulMat(n);
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      ComputeBinary(pool_, n);
      return absl::OkStatus();
    case Op::kScale:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kGeluErf:
    case Op::kClamp:
    case Op::kCont:
      ComputeUnary(pool_, n);
      return absl::OkStatus();
    case Op::kSoftMax:
      ComputeSoftMax(pool_, n);
      return absl::OkStatus();
    case Op::kRope:
      ComputeRope(pool_, n);
      return absl::OkStatus();
    case Op::kFlashAttnExt:
      return ComputeFlashAttn(n);
    case Op::kSetRows:
      return ComputeSetRows(pool_, n, isa_);
    default:
      return absl::UnimplementedError(absl::StrCat("op ", OpName(n->op)));
  }
}

absl::Status CpuBackend::ComputeMulMat(Tensor* n) {
  Tensor* w = n->src[0];
  Tensor* x = n->src[1];
  const int64_t k = w->ne[0];
  const int64_t m = w->ne[1];
  const int64_t cols = x->ne[1] * x->ne[2] * x->ne[3];
  const CpuPackedWeight* packed = cpu::SupportsPacked(w->type, isa_) ? PackedFor(w) : nullptr;
  const GgmlType vt = packed != nullptr ? cpu::PackedActType(w->type, isa_) : cpu::VecDotType(w->type);
  // Packed F16 kernels that read F32 (AVX-512): the activations rounded to F16 as ggml's
  // vec_dot_f16 takes them, kept in F32, once for all threads.
  const bool f16_in_f32 = w->type == GgmlType::F16 && vt == GgmlType::F32;
  const size_t a_stride = GgmlRowSize(vt, k);
  // Activations in the weight type's dot-product format (as ggml does before vec_dot).
  uint8_t* act = nullptr;
  if (vt == GgmlType::F32 && x->is_contiguous() && !f16_in_f32) {
    act = static_cast<uint8_t*>(x->data);
  } else {
    act = Work(a_stride * static_cast<size_t>(cols));
    const auto convert = [&](int ith, int nth) {
      int64_t c0, c1;
      SplitRange(cols, ith, nth, &c0, &c1);
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
        uint8_t* row = act + a_stride * static_cast<size_t>(c);
        if (f16_in_f32) {
          cpu::RoundF16(F32Row(x, i1, i2, i3), reinterpret_cast<float*>(row), k, isa_);
        } else {
          cpu::FromFloat(vt, F32Row(x, i1, i2, i3), row, k, isa_);
        }
      }
    };
    // A decode step converts one short row: cheaper here than a pool round trip.
    if (cols * k < 16384) {
      convert(0, 1);
    } else {
      pool_.Run(convert);
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
    const int nth = pool_.size();
    if (cols == 1 || nth == 1) {
      const int64_t per = ((m + nth - 1) / nth + 15) / 16 * 16;
      pool_.Run([&](int ith, int) {
        const int64_t r0 = std::min<int64_t>(m, ith * per), r1 = std::min<int64_t>(m, r0 + per);
        if (r0 < r1) cpu::MulMatPacked(w->type, isa_, k, packed->data, act, a_stride, dst, dst_stride, r0, r1, 0, cols);
      });
      return absl::OkStatus();
    }
    const std::vector<int64_t> starts = GuidedChunks(m, nth, 16, 32);
    const int64_t nchunks = static_cast<int64_t>(starts.size()) - 1;
    std::atomic<int64_t> next{0};
    pool_.Run([&](int, int) {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < nchunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        cpu::MulMatPacked(w->type, isa_, k, packed->data, act, a_stride, dst, dst_stride, starts[c], starts[c + 1], 0,
                          cols);
      }
    });
    return absl::OkStatus();
  }
  // Weight rows split across threads; each thread makes one tile call over all columns
  // (the kernel does its own cache blocking and packs the activations once).
  pool_.Run([&](int ith, int nth) {
    // Keep row chunks a multiple of 16 so micro-kernels see full tiles.
    const int64_t per = ((m + nth - 1) / nth + 15) / 16 * 16;
    const int64_t r0 = std::min<int64_t>(m, per * ith);
    const int64_t r1 = std::min<int64_t>(m, r0 + per);
    if (r0 < r1) {
      cpu::MulMatTile(w->type, isa_, k, wdata, w->nb[1], act, a_stride, dst, dst_stride, r0, r1, 0, cols);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::ComputeFlashAttn(Tensor* n) {
  const FlashAttnDims fd(n);
  const GgmlType kt = fd.k->type;
  // ggml computes KQ with ggml_vec_dot_f16 on F16 K; for head sizes below 64 that is its
  // scalar (double-accumulating) loop, which the scalar kernel reproduces.
  cpu::VecDotFn dot = cpu::GetVecDot(kt, (kt == GgmlType::F16 && fd.q->ne[0] < 64) ? Isa::kScalar : isa_);
  if (dot == nullptr) return absl::UnimplementedError("flash_attn_ext: no vec_dot for K type");
  const size_t q_row = GgmlRowSize(kt, fd.hd);
  // F16 K/V (the KV cache's type). Prompt-sized batches: llama.cpp's tiled path (its
  // condition: >= 64 query rows, F16 or F32 K and V of one type, head size a multiple of
  // the SIMD width: 8 floats on AVX2, 16 on AVX-512; herd takes 16 on every CPU, so which
  // path runs never depends on the CPU).
  if (kt == GgmlType::F16 && fd.v->type == GgmlType::F16 && fd.k->nb[1] == q_row && fd.v->nb[1] == q_row) {
    if (fd.n_tokens >= kFlashAttnTileTokens && fd.hd % 16 == 0 && fd.v->ne[0] == fd.hd && fd.q->type == GgmlType::F32 &&
        n->type == GgmlType::F32) {
      return FlashAttnTiled(n, dot);
    }
    if (shared_prefix_attention_) {
      absl::StatusOr<bool> shared = FlashAttnShared(n, dot);
      if (!shared.ok()) return shared.status();
      if (*shared) return absl::OkStatus();
    }
    return FlashAttnF16(n, dot, nullptr);
  }
  const int64_t n_work = fd.n_tokens * fd.n_head;
  pool_.Run([&](int ith, int nth) {
    std::vector<float> scores(static_cast<size_t>(fd.n_kv));
    // The cells token t may see (mask != -inf), shared by its heads: a batch of many
    // sequences in a large pool masks most cells, so each (token, head) visits only its
    // own (in cell order, as the full scan did).
    std::vector<int32_t> vis;
    vis.reserve(static_cast<size_t>(fd.n_kv));
    int64_t vis_t = -1;
    std::vector<uint8_t> qconv(q_row + 64);
    std::vector<float> acc(static_cast<size_t>(fd.hd));
    std::vector<float> vrow(static_cast<size_t>(fd.hd));
    std::vector<uint16_t> vkq16(static_cast<size_t>(fd.hd));
    // Round-robin, as in FlashAttnF16 (causal masks make later tokens dearer).
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t t = w / fd.n_head;
      const int64_t h = w % fd.n_head;
      const int64_t hk = h / fd.gqa;
      const float slope = AlibiSlope(static_cast<int>(h), static_cast<int>(fd.n_head), fd.max_bias);
      const float* qv = F32Row(fd.q, h, t);
      cpu::FromFloat(kt, qv, qconv.data(), fd.hd, isa_);
      const float* mrow = fd.mask ? F32Row(fd.mask, t) : nullptr;
      if (t != vis_t) {
        // slope > 0, so slope * mask is -inf exactly where the mask is.
        VisibleCells(mrow, fd.n_kv, &vis);
        vis_t = t;
      }
      const int64_t n_vis = static_cast<int64_t>(vis.size());
      float mx = -std::numeric_limits<float>::infinity();
      // K rows are nb[2] apart and in decode mostly not cached: request them ahead.
      const size_t k_row_bytes = GgmlRowSize(kt, fd.hd);
      // Far enough ahead to cover a DRAM miss (a decode's K/V rows are rarely cached).
      constexpr int64_t kAheadK = 24;
      const auto prefetch_k = [&](int64_t i) {
        const uint8_t* p = fd.k->row(hk, vis[static_cast<size_t>(i)]);
        for (size_t b = 0; b < k_row_bytes; b += 64) __builtin_prefetch(p + b);
      };
      for (int64_t i = 0; i < kAheadK && i < n_vis; ++i) prefetch_k(i);
      for (int64_t i = 0; i < n_vis; ++i) {
        if (i + kAheadK < n_vis) prefetch_k(i + kAheadK);
        const int64_t c = vis[static_cast<size_t>(i)];
        const float mv = mrow ? slope * mrow[c] : 0.0f;
        float s;
        dot(fd.hd, &s, fd.k->row(hk, c), qconv.data());
        s = s * fd.scale + mv;
        scores[i] = s;
        if (s > mx) mx = s;
      }
      float* out = F32Row(n, h, t);
      if (fd.v->type == GgmlType::F16) {
        // llama.cpp's path for an F16 V: online softmax with the accumulator in F16.
        cpu::FlashAttnF16VRowIdx(scores.data(), vis.data(), n_vis, fd.v->row(hk, 0), fd.v->nb[2], fd.hd, vkq16.data(),
                                 out);
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      double sum = 0.0;
      if (mx == -std::numeric_limits<float>::infinity()) {
        std::fill(out, out + fd.hd, 0.0f);
        continue;
      }
      for (int64_t i = 0; i < n_vis; ++i) {
        if (scores[i] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(scores[i] - mx);
        sum += p;
        const uint8_t* vr = fd.v->row(hk, vis[static_cast<size_t>(i)]);
        if (fd.v->type == GgmlType::F32) {
          const float* vf = reinterpret_cast<const float*>(vr);
          for (int64_t d = 0; d < fd.hd; ++d) acc[d] += p * vf[d];
        } else {
          DequantizeRow(fd.v->type, vr, vrow.data(), fd.hd);
          for (int64_t d = 0; d < fd.hd; ++d) acc[d] += p * vrow[d];
        }
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t d = 0; d < fd.hd; ++d) out[d] = acc[d] * inv;
    }
  });
  return absl::OkStatus();
}

// F16 K and V (the KV cache's default), llama.cpp's F16 one_chunk numerics: token-major.
// A work item is one token and a group of KV heads: cpu::FlashAttnF16Heads over the
// token's visible cells for all heads of the group (fused on AVX2: the cells' K / V runs
// of those heads read together, several cells' dots at once). For every head the
// operations and their order are those of FlashAttnF16VRowIdx over the same cells:
// results are bit-identical.
// ggml's tiled flash attention (ggml_compute_forward_flash_attn_ext_tiled), per work item
// = (tile of query tokens, KV head): the rows are those tokens x the KV head's gqa query
// heads (at most kFlashAttnTileRows), Q kept in F32. For each tile of kFlashAttnTileKv KV
// cells that some row sees: S = Q K^T (GemmF32 over the tile's K, converted to F32 and
// transposed), S = S * scale + slope * mask, per row the tile max M', if M' > M: O *= expf(M
// - M'), L *= that, M = M'; P = exp(S - M) (ExpSubMax), L += sum P; then O += P V
// (GemmF32). Out = O / L (0 where L is 0). Accumulation in F32 throughout, as llama.cpp's
// tiled path does (its one-chunk path, FlashAttnF16, keeps V in F16).
namespace {
// One row of an F16 or F32 K/V tensor as F32.
void ToF32Row(const Tensor* t, const uint8_t* row, float* out, int64_t n) {
  if (t->type == GgmlType::F16) {
    cpu::F16ToF32(reinterpret_cast<const uint16_t*>(row), out, n);
  } else {
    std::memcpy(out, row, static_cast<size_t>(n) * 4);
  }
}

// The shapes of one tiled flash attention (FlashAttnTiled): query tiles of qt tokens
// (rows_max = qt * gqa query rows) x KV tiles of kt cells.
struct TiledAttn : FlashAttnDims {
  Tensor* out;
  static constexpr int64_t kt = kFlashAttnTileKv;
  int64_t qt, rows_max, n_qtiles, n_kvtiles;
  size_t tile_floats;  // floats of one K (or V) tile: hd * kt
  Isa isa;
  // kv_seen[qi * n_kvtiles + ct]: some token of query tile qi sees a cell of KV tile ct.
  std::vector<uint8_t> kv_seen;

  TiledAttn(Tensor* n, Isa isa_) : FlashAttnDims(n), out(n), isa(isa_) {
    qt = std::max<int64_t>(1, kFlashAttnTileRows / gqa);
    rows_max = qt * gqa;
    n_qtiles = (n_tokens + qt - 1) / qt;
    n_kvtiles = (n_kv + kt - 1) / kt;
    tile_floats = static_cast<size_t>(hd * kt);
    kv_seen.assign(static_cast<size_t>(n_qtiles * n_kvtiles), mask == nullptr ? 1 : 0);
  }
  bool seen(int64_t qi, int64_t ct) const { return kv_seen[static_cast<size_t>(qi * n_kvtiles + ct)] != 0; }
};

// Fills a.kv_seen from the mask and returns, per query tile, whether tiling pays: a batch
// of many sequences (decode tokens, several prompts) puts tokens of different sequences in
// one query tile, whose union of cells is far more than what each token sees; those tiles'
// tokens take the one-chunk path over their own cells instead.
std::vector<uint8_t> PlanQueryTiles(ThreadPool& pool, TiledAttn& a) {
  std::vector<uint8_t> tiled(static_cast<size_t>(a.n_qtiles), 1);
  if (a.mask == nullptr) return tiled;
  constexpr int64_t kt = TiledAttn::kt;
  pool.Run([&](int ith, int nth) {
    std::vector<int32_t> vis;
    for (int64_t qi = ith; qi < a.n_qtiles; qi += nth) {
      const int64_t t0 = qi * a.qt, nt = std::min(a.qt, a.n_tokens - t0);
      int64_t exact = 0, tiles = 0;
      for (int64_t tt = 0; tt < nt; ++tt) {
        vis.clear();
        cpu::AppendVisibleCells(F32Row(a.mask, t0 + tt), a.n_kv, &vis);
        exact += static_cast<int64_t>(vis.size());
        for (int32_t c : vis) a.kv_seen[static_cast<size_t>(qi * a.n_kvtiles + c / kt)] = 1;
      }
      for (int64_t ct = 0; ct < a.n_kvtiles; ++ct) tiles += a.kv_seen[static_cast<size_t>(qi * a.n_kvtiles + ct)];
      // A causal prompt tile computes about twice the cells its tokens see.
      tiled[static_cast<size_t>(qi)] = tiles * kt * nt <= 3 * exact + 2 * kt * nt;
    }
  });
  return tiled;
}

// One KV tile of KV head hk from cell c0 in F32: K transposed (Kt[d * kt + c]) and V
// (V[c * hd + d]), cells past n_kv zero. krow: hd floats of scratch.
void FillKvTile(const TiledAttn& a, int64_t hk, int64_t c0, float* Kt, float* V, float* krow) {
  constexpr int64_t kt = TiledAttn::kt;
  const int64_t hd = a.hd;
  const int64_t nc = std::min(kt, a.n_kv - c0);
  for (int64_t c = 0; c < kt; ++c) {
    if (c < nc) {
      ToF32Row(a.k, a.k->row(hk, c0 + c), krow, hd);
      for (int64_t d = 0; d < hd; ++d) Kt[d * kt + c] = krow[d];
      ToF32Row(a.v, a.v->row(hk, c0 + c), V + c * hd, hd);
    } else {
      for (int64_t d = 0; d < hd; ++d) Kt[d * kt + c] = 0.0f;
      std::fill(V + c * hd, V + (c + 1) * hd, 0.0f);
    }
  }
}

// Every query tile of a prompt reads the KV tiles before it: converted once per call for
// all of them (within kFlashAttnSharedKvBytes) instead of once per query tile (llama-110m
// F16 pp512: 8 query tiles per KV head). Returns the tiles (K then V of KV tile
// hk * n_kvtiles + ct at 2 * that * tile_floats), or nothing when not worth it or too big.
std::vector<float> SharedKvTiles(ThreadPool& pool, const TiledAttn& a, const std::vector<int64_t>& work) {
  std::vector<uint8_t> kv_used(static_cast<size_t>(a.n_kvtiles), 0);
  for (int64_t w : work) {
    const int64_t qi = w / a.n_head_kv;
    for (int64_t ct = 0; ct < a.n_kvtiles; ++ct) kv_used[static_cast<size_t>(ct)] |= a.seen(qi, ct) ? 1 : 0;
  }
  const bool shared_kv = a.n_qtiles > 1 && 2 * static_cast<size_t>(a.n_head_kv * a.n_kvtiles) * a.tile_floats * 4 <=
                                               kFlashAttnSharedKvBytes;
  std::vector<float> kv32(shared_kv ? 2 * static_cast<size_t>(a.n_head_kv * a.n_kvtiles) * a.tile_floats : 0);
  if (shared_kv) {
    pool.Run([&](int ith, int nth) {
      std::vector<float> krow(static_cast<size_t>(a.hd));
      for (int64_t w = ith; w < a.n_head_kv * a.n_kvtiles; w += nth) {
        if (!kv_used[static_cast<size_t>(w % a.n_kvtiles)]) continue;
        float* kt32 = kv32.data() + 2 * static_cast<size_t>(w) * a.tile_floats;
        FillKvTile(a, w / a.n_kvtiles, (w % a.n_kvtiles) * TiledAttn::kt, kt32, kt32 + a.tile_floats, krow.data());
      }
    });
  }
  return kv32;
}

// One thread's scratch for AttendTile.
struct TileScratch {
  std::vector<float> Q, O, P, Kt, V, krow, M, L, slope;
  explicit TileScratch(const TiledAttn& a)
      : Q(static_cast<size_t>(a.rows_max * a.hd)),
        O(static_cast<size_t>(a.rows_max * a.hd)),
        P(static_cast<size_t>(a.rows_max * TiledAttn::kt)),
        Kt(static_cast<size_t>(a.hd * TiledAttn::kt)),
        V(static_cast<size_t>(TiledAttn::kt * a.hd)),
        krow(static_cast<size_t>(a.hd)),
        M(static_cast<size_t>(a.rows_max)),
        L(static_cast<size_t>(a.rows_max)),
        slope(static_cast<size_t>(a.gqa)) {}
};

// The rows of query tile qi x KV head hk against the KV tiles they see (the online
// softmax of FlashAttnTiled), written to a.out. kv32: SharedKvTiles's tiles, or empty
// (each tile converted here).
void AttendTile(const TiledAttn& a, int64_t qi, int64_t hk, const std::vector<float>& kv32, TileScratch& s) {
  constexpr int64_t kt = TiledAttn::kt;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t hd = a.hd, gqa = a.gqa;
  const int64_t t0 = qi * a.qt;
  const int64_t nt = std::min(a.qt, a.n_tokens - t0), rows = nt * gqa;
  for (int64_t j = 0; j < gqa; ++j) {
    s.slope[static_cast<size_t>(j)] =
        AlibiSlope(static_cast<int>(hk * gqa + j), static_cast<int>(a.n_head), a.max_bias);
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(s.Q.data() + r * hd, F32Row(a.q, hk * gqa + r % gqa, t0 + r / gqa), static_cast<size_t>(hd) * 4);
  }
  std::fill(s.M.begin(), s.M.end(), ninf);
  std::fill(s.L.begin(), s.L.end(), 0.0f);
  std::fill(s.O.begin(), s.O.end(), 0.0f);
  for (int64_t c0 = 0; c0 < a.n_kv; c0 += kt) {
    const int64_t nc = std::min(kt, a.n_kv - c0);
    if (!a.seen(qi, c0 / kt)) continue;  // every row masks it
    const float* ktile = s.Kt.data();
    const float* vtile = s.V.data();
    if (!kv32.empty()) {
      ktile = kv32.data() + 2 * static_cast<size_t>(hk * a.n_kvtiles + c0 / kt) * a.tile_floats;
      vtile = ktile + a.tile_floats;
    } else {
      FillKvTile(a, hk, c0, s.Kt.data(), s.V.data(), s.krow.data());
    }
    std::fill(s.P.begin(), s.P.begin() + rows * kt, 0.0f);
    cpu::GemmF32(s.Q.data(), hd, ktile, kt, s.P.data(), kt, rows, hd, kt, a.isa);
    for (int64_t r = 0; r < rows; ++r) {
      float* pr = s.P.data() + r * kt;
      const float* mrow = a.mask != nullptr ? F32Row(a.mask, t0 + r / gqa) + c0 : nullptr;
      const float sl = s.slope[static_cast<size_t>(r % gqa)];
      const float mx = cpu::ScaleMaskMax(pr, mrow, a.scale, sl, pr, nc, a.isa);
      std::fill(pr + nc, pr + kt, ninf);
      if (mx == ninf) {  // nothing seen in this tile: no contribution
        std::fill(pr, pr + kt, 0.0f);
        continue;
      }
      float& Mr = s.M[static_cast<size_t>(r)];
      if (mx > Mr) {
        const float ms = std::exp(Mr - mx);
        float* orow = s.O.data() + r * hd;
        for (int64_t d = 0; d < hd; ++d) orow[d] *= ms;
        s.L[static_cast<size_t>(r)] *= ms;
        Mr = mx;
      }
      s.L[static_cast<size_t>(r)] += static_cast<float>(cpu::ExpSubMax(pr, pr, kt, Mr));
    }
    cpu::GemmF32(s.P.data(), kt, vtile, hd, s.O.data(), hd, rows, kt, hd, a.isa);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float Lr = s.L[static_cast<size_t>(r)];
    const float inv = Lr == 0.0f ? 0.0f : 1.0f / Lr;
    float* out = F32Row(a.out, hk * gqa + r % gqa, t0 + r / gqa);
    const float* orow = s.O.data() + r * hd;
    for (int64_t d = 0; d < hd; ++d) out[d] = orow[d] * inv;
  }
}

}  // namespace

absl::Status CpuBackend::FlashAttnTiled(Tensor* n, cpu::VecDotFn dot) {
  TiledAttn a(n, isa_);
  // Which KV tiles each query tile sees, and whether tiling pays.
  const std::vector<uint8_t> tiled = PlanQueryTiles(pool_, a);
  std::vector<int64_t> one_chunk;  // tokens of the query tiles that do not tile
  std::vector<int64_t> work;       // query tile x KV head items
  for (int64_t qi = 0; qi < a.n_qtiles; ++qi) {
    if (tiled[static_cast<size_t>(qi)]) {
      for (int64_t hk = 0; hk < a.n_head_kv; ++hk) work.push_back(qi * a.n_head_kv + hk);
    } else {
      for (int64_t t = qi * a.qt; t < std::min(a.n_tokens, (qi + 1) * a.qt); ++t) one_chunk.push_back(t);
    }
  }
  if (!one_chunk.empty()) HERD_RETURN_IF_ERROR(FlashAttnF16(n, dot, &one_chunk));
  const std::vector<float> kv32 = SharedKvTiles(pool_, a, work);
  const int64_t n_work = static_cast<int64_t>(work.size());
  pool_.Run([&](int ith, int nth) {
    TileScratch scratch(a);
    // Items dealt round-robin: under a causal mask later token tiles see more cells.
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t item = work[static_cast<size_t>(w)];
      AttendTile(a, item / a.n_head_kv, item % a.n_head_kv, kv32, scratch);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::FlashAttnF16(Tensor* n, cpu::VecDotFn dot, const std::vector<int64_t>* tokens) {
  const FlashAttnDims fd(n);
  const size_t q_row = GgmlRowSize(GgmlType::F16, fd.hd);
  // Enough work items for every thread even for one token (groups of KV heads).
  const int64_t nth_pool = pool_.size();
  const int64_t n_groups =
      std::min<int64_t>(fd.n_head_kv, std::max<int64_t>(1, (4 * nth_pool + fd.n_tokens - 1) / fd.n_tokens));
  const int64_t n_work = (tokens != nullptr ? static_cast<int64_t>(tokens->size()) : fd.n_tokens) * n_groups;
  pool_.Run([&](int ith, int nth) {
    std::vector<int32_t> vis;
    vis.reserve(static_cast<size_t>(fd.n_kv));
    int64_t vis_t = -1;
    std::vector<uint8_t> qconv;
    std::vector<float> scores, slope;
    std::vector<size_t> kv_row;  // byte offset of head j's KV head within a cell
    std::vector<uint16_t> vkq16;
    // Tokens dealt round-robin: under a causal mask later tokens see more cells, so
    // contiguous ranges would leave the first threads idle while the last ones work.
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t t = tokens != nullptr ? (*tokens)[static_cast<size_t>(w / n_groups)] : w / n_groups;
      const int64_t g = w % n_groups;
      const int64_t hk0 = g * fd.n_head_kv / n_groups, hk1 = (g + 1) * fd.n_head_kv / n_groups;
      const int64_t h0 = hk0 * fd.gqa, nh = (hk1 - hk0) * fd.gqa;
      const float* mrow = fd.mask ? F32Row(fd.mask, t) : nullptr;
      if (t != vis_t) {
        VisibleCells(mrow, fd.n_kv, &vis);
        vis_t = t;
      }
      const int64_t n_vis = static_cast<int64_t>(vis.size());
      qconv.resize(static_cast<size_t>(nh) * q_row + 64);
      scores.resize(static_cast<size_t>(nh * std::max<int64_t>(1, n_vis)));
      slope.resize(static_cast<size_t>(nh));
      kv_row.resize(static_cast<size_t>(nh));
      vkq16.resize(static_cast<size_t>(nh * fd.hd));
      for (int64_t j = 0; j < nh; ++j) {
        kv_row[static_cast<size_t>(j)] = static_cast<size_t>((h0 + j) / fd.gqa) * fd.k->nb[1];  // no division per cell
        cpu::FromFloat(GgmlType::F16, F32Row(fd.q, h0 + j, t), qconv.data() + j * q_row, fd.hd, isa_);
        slope[static_cast<size_t>(j)] = AlibiSlope(static_cast<int>(h0 + j), static_cast<int>(fd.n_head), fd.max_bias);
      }
      cpu::FlashAttnF16Token fa;
      fa.hd = fd.hd;
      fa.nh = nh;
      fa.q = reinterpret_cast<const uint16_t*>(qconv.data());
      fa.k = static_cast<const uint8_t*>(fd.k->data);
      fa.v = static_cast<const uint8_t*>(fd.v->data);
      fa.k_stride = fd.k->nb[2];
      fa.v_stride = fd.v->nb[2];
      fa.head_off = kv_row.data();
      fa.idx = vis.data();
      fa.n = n_vis;
      fa.mask = mrow;
      fa.slope = slope.data();
      fa.scale = fd.scale;
      fa.out = F32Row(n, h0, t);
      fa.out_stride = n->nb[1] / sizeof(float);
      fa.scores = scores.data();
      fa.vkq16 = vkq16.data();
      cpu::FlashAttnF16Heads(fa, dot);
    }
  });
  return absl::OkStatus();
}

}  // namespace herd
