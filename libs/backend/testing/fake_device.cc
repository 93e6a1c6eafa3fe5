#include "libs/backend/testing/fake_device.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/backend/cpu_backend.h"
#include "libs/tensor/graph_alloc.h"

namespace herd::testing {
namespace {

// Device addresses: each buffer gets its own range far above any host mapping.
uintptr_t NextBase() {
  static uintptr_t next = uintptr_t{0x7e0000000000};
  const uintptr_t b = next;
  next += uintptr_t{1} << 36;
  return b;
}

class FakeBuffer;

class FakeBufferType : public BufferType {
 public:
  std::string name() const override { return "Fake"; }
  size_t alignment() const override { return 128; }
  bool is_host() const override { return false; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t live_bytes = 0;
};

class FakeBuffer : public Buffer {
 public:
  FakeBuffer(FakeBufferType* t, size_t size)
      : type_(t), base_(reinterpret_cast<void*>(NextBase())), mem_(size + 64, 0) {
    t->live_bytes += size;
  }
  ~FakeBuffer() override { type_->live_bytes -= size(); }
  BufferType* type() const override { return type_; }
  void* base() const override { return base_; }
  size_t size() const override { return mem_.size() - 64; }
  void Clear(uint8_t value) override { std::memset(mem_.data(), value, mem_.size()); }
  // The host address behind device address `p` (64-byte aligned storage).
  uint8_t* Host(const void* p) {
    uintptr_t h = reinterpret_cast<uintptr_t>(mem_.data());
    h = (h + 63) & ~uintptr_t{63};
    return reinterpret_cast<uint8_t*>(h) + (static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(base_));
  }

 private:
  FakeBufferType* type_;
  void* base_;
  std::vector<uint8_t> mem_;
};

absl::StatusOr<std::unique_ptr<Buffer>> FakeBufferType::Allocate(size_t size) {
  return std::unique_ptr<Buffer>(new FakeBuffer(this, size));
}

}  // namespace

class FakeDevice::Impl {
 public:
  explicit Impl(int n_threads) : cpu(n_threads) {}
  FakeBufferType buft;
  CpuBackend cpu;
  std::unique_ptr<Buffer> scratch;
};

FakeDevice::FakeDevice(std::set<Op> ops, int n_threads)
    : impl_(std::make_unique<Impl>(n_threads)), ops_(std::move(ops)) {}
FakeDevice::~FakeDevice() = default;

DeviceInfo FakeDevice::device() const {
  DeviceInfo d;
  d.backend = "fake";
  d.name = "Fake0";
  d.description = "test device with opaque memory";
  return d;
}

BufferType* FakeDevice::default_buffer_type() { return &impl_->buft; }

size_t FakeDevice::bytes_allocated() const { return impl_->buft.live_bytes; }

namespace {

// The host bytes of a tensor in fake memory, or nullptr when it is not.
uint8_t* HostOf(const Tensor* t, const BufferType* buft) {
  Buffer* b = t->buffer != nullptr ? t->buffer : (t->view_src != nullptr ? t->view_src->buffer : nullptr);
  if (b == nullptr || b->type() != buft || t->data == nullptr) return nullptr;
  return static_cast<FakeBuffer*>(b)->Host(t->data);
}

}  // namespace

absl::Status FakeDevice::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  uint8_t* h = HostOf(t, &impl_->buft);
  if (h == nullptr) return absl::FailedPreconditionError(absl::StrCat("tensor '", t->name, "' is not in Fake memory"));
  if (offset + size > t->nbytes()) return absl::OutOfRangeError(absl::StrCat("write past tensor '", t->name, "'"));
  std::memcpy(h + offset, data, size);
  return absl::OkStatus();
}

absl::Status FakeDevice::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  const uint8_t* h = HostOf(t, &impl_->buft);
  if (h == nullptr) return absl::FailedPreconditionError(absl::StrCat("tensor '", t->name, "' is not in Fake memory"));
  if (offset + size > t->nbytes()) return absl::OutOfRangeError(absl::StrCat("read past tensor '", t->name, "'"));
  std::memcpy(data, h + offset, size);
  return absl::OkStatus();
}

absl::Status FakeDevice::CopyTensor(const Tensor* src, Tensor* dst) {
  const uint8_t* s = HostOf(src, &impl_->buft);
  uint8_t* d = HostOf(dst, &impl_->buft);
  if (s == nullptr || d == nullptr || src->nbytes() != dst->nbytes()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "'"));
  }
  std::memcpy(d, s, src->nbytes());
  return absl::OkStatus();
}

bool FakeDevice::SupportsOp(const Tensor& node) const {
  if (node.op == Op::kNone || node.op == Op::kView) return true;
  return ops_.count(node.op) > 0 && impl_->cpu.SupportsOp(node);
}

absl::Status FakeDevice::GraphCompute(Graph& g) {
  if (!g.placed()) {
    GraphPlan plan = PlanGraph(g, 128);
    if (impl_->scratch == nullptr || impl_->scratch->size() < plan.arena_size) {
      impl_->scratch.reset();
      auto b = impl_->buft.Allocate(plan.arena_size);
      if (!b.ok()) return b.status();
      impl_->scratch = *std::move(b);
    }
    ApplyPlan(plan, g, impl_->scratch->base());
    for (Tensor* t : plan.tensors) t->buffer = impl_->scratch.get();
    for (Tensor* n : g.nodes()) {
      if (n->view_src != nullptr) n->buffer = n->view_src->buffer;
    }
  }
  for (Tensor* n : g.nodes()) {
    if (n->op == Op::kView) continue;
    if (!SupportsOp(*n)) {
      return absl::UnimplementedError(absl::StrCat("Fake does not support ", OpName(n->op), " ('", n->name, "')"));
    }
    // The same node over host addresses, computed by the CPU kernels.
    Tensor node = *n;
    Tensor srcs[4];
    for (int i = 0; i < 4; ++i) {
      if (n->src[i] == nullptr) continue;
      srcs[i] = *n->src[i];
      srcs[i].data = HostOf(n->src[i], &impl_->buft);
      if (srcs[i].data == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("Fake: '", n->name, "' reads '", n->src[i]->name, "', which is not in Fake memory"));
      }
      srcs[i].view_src = nullptr;
      node.src[i] = &srcs[i];
    }
    node.data = HostOf(n, &impl_->buft);
    if (node.data == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("Fake: '", n->name, "' is not placed in Fake memory"));
    }
    node.view_src = nullptr;
    std::unique_ptr<Graph> one = Graph::Placed({&node});
    if (absl::Status s = impl_->cpu.GraphCompute(*one); !s.ok()) return s;
    ++nodes_computed_;
  }
  return absl::OkStatus();
}

}  // namespace herd::testing
