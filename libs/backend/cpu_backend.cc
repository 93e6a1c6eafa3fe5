#include "libs/backend/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/kernels/cpu/graph_ops.h"
#include "libs/kernels/cpu/kernels.h"
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

// The packed copy MulMat reads for w (cpu::GraphOpContext::packed_weight), or nullptr.
const uint8_t* PackedData(const Tensor* w) {
  const CpuPackedWeight* p = PackedFor(w);
  return p != nullptr ? p->data : nullptr;
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

cpu::GraphOpContext CpuBackend::OpContext() {
  cpu::GraphOpContext c;
  c.isa = isa_;
  c.work = &work_;
  c.packed_weight = PackedData;
  c.shared_attention = shared_prefix_attention_ ? &shared_attention_ : nullptr;
  return c;
}

absl::Status CpuBackend::GraphCompute(Graph& ctx) {
  shared_attention_.NewGraph();  // masks are new: shared-attention plans are rebuilt
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

absl::Status CpuBackend::ComputeNode(Tensor* n) {
  switch (n->op) {
    case Op::kNone:
    case Op::kView:
      return absl::OkStatus();
    case Op::kGetRows:
      return cpu::ComputeGetRows(pool_, n);
    case Op::kMulMat:
      return cpu::ComputeMulMat(pool_, OpContext(), n);
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      cpu::ComputeBinary(pool_, n);
      return absl::OkStatus();
    case Op::kScale:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kGeluErf:
    case Op::kClamp:
    case Op::kCont:
      cpu::ComputeUnary(pool_, n);
      return absl::OkStatus();
    case Op::kSoftMax:
      cpu::ComputeSoftMax(pool_, n);
      return absl::OkStatus();
    case Op::kRope:
      cpu::ComputeRope(pool_, n);
      return absl::OkStatus();
    case Op::kFlashAttnExt:
      return cpu::ComputeFlashAttn(pool_, OpContext(), n);
    case Op::kSetRows:
      return cpu::ComputeSetRows(pool_, n, isa_);
    default:
      return absl::UnimplementedError(absl::StrCat("op ", OpName(n->op)));
  }
}

}  // namespace herd
