// The Backend interface (after ggml-backend): buffer types allocate buffers,
// buffers hold tensor data, a backend moves tensor bytes in and out and computes
// graphs. One implementation per device kind (libs/backend/cpu_backend.h,
// libs/backend/vulkan, libs/backend/cuda, libs/backend/hip: the CUDA sources built as
// HIP). Backends are created by name through libs/backend/registry.h;
// libs/backend/sched.h splits a graph across several.
//
// Memory that is not host memory: a device buffer's base() is an opaque address
// (never dereferenced by the host); a tensor placed in it has data = base() + offset,
// and only its backend's SetTensor/GetTensor/CopyTensor and compute touch the bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "libs/tensor/tensor.h"

namespace herd {

class BufferType;

/// A block of device memory holding tensor data.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual BufferType* type() const = 0;
  /// Base address (a host pointer for host buffers; an opaque device address otherwise).
  virtual void* base() const = 0;
  virtual size_t size() const = 0;
  /// Fills the whole buffer with `value`.
  virtual void Clear(uint8_t value) = 0;
};

/// Allocates buffers of one memory kind.
class BufferType {
 public:
  virtual ~BufferType() = default;
  virtual std::string name() const = 0;
  virtual size_t alignment() const = 0;
  /// True when base() is directly addressable by the host.
  virtual bool is_host() const = 0;
  /// RESOURCE_EXHAUSTED when the device cannot provide `size` bytes.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) = 0;
  /// A buffer over host memory [ptr, ptr + size) that stays owned by the caller and
  /// must outlive the buffer (ggml_backend_cpu_buffer_from_ptr: weights stay in the
  /// file's mmap). UNIMPLEMENTED for memory kinds that cannot wrap host memory.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> FromHostPtr(void* ptr, size_t size);
};

/// One device a backend kind can drive (ggml_backend_dev_props).
struct DeviceInfo {
  std::string backend;        // the kind's registry name: "cpu", "vulkan", ...
  int index = 0;              // --device N within the kind
  std::string name;           // "CPU", "Vulkan0"
  std::string description;    // "AMD EPYC ... (avx2)", "llvmpipe (LLVM 15.0.6, 256 bits)"
  uint64_t memory_total = 0;  // bytes
  uint64_t memory_free = 0;   // bytes (0 = unknown)
  bool host_visible = false;  // whether its buffers are host memory (base() addressable)
};

/// Places `t` at `offset` inside `buf` (sets t->buffer and t->data).
/// INVALID_ARGUMENT when it does not fit or the offset is misaligned.
absl::Status PlaceTensor(Tensor* t, Buffer* buf, size_t offset);

/// Where t's bytes lie: its buffer (a view's: its root's), which must be of type `buft`,
/// and t->data's byte offset from that buffer's base(). FAILED_PRECONDITION when t has no
/// data in a buffer; INVALID_ARGUMENT when the buffer is of another type or t's bytes do
/// not lie inside it. `backend` names the memory in the messages ("tensor 'x' is in a CPU
/// buffer, not in <backend> memory").
absl::Status LocateTensor(const Tensor* t, const BufferType* buft, absl::string_view backend, const Buffer** buf,
                          size_t* offset);

/// For a backend whose buffers the host cannot address (base() is a fake address): places
/// an unplaced graph's intermediate tensors in the backend's one scratch buffer. Plans g
/// (PlanGraph with `alignment`), has ensure_scratch(bytes) grow `scratch` when the plan
/// needs memory (its error is returned), lays the tensors out from fake_base (ApplyPlan)
/// and points them at *scratch, views at their root's buffer. A placed graph: nothing.
absl::Status PlaceInScratch(Graph& g, size_t alignment, void* fake_base,
                            const std::function<absl::Status(size_t)>& ensure_scratch,
                            const std::unique_ptr<Buffer>& scratch);

/// A compute device.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// The device this backend computes on.
  virtual DeviceInfo device() const = 0;
  virtual BufferType* default_buffer_type() = 0;
  /// The memory that layer `il` of an n_layer-layer model keeps its weights and KV cache
  /// in (llama.cpp's -ngl / --tensor-split placement). il = -1 is the input layer
  /// (token_embd, position_embd, token_types and any other tensor whose name starts with
  /// "tok" or "pos"), il = n_layer the output layer (output_norm, output and every other
  /// tensor not under "blk.N."). The default: default_buffer_type() for every layer; a
  /// Scheduler with a layer placement (Scheduler::SetLayerPlacement) splits the layers
  /// across its backends.
  virtual BufferType* layer_buffer_type(int64_t il, int64_t n_layer) {
    (void)il;
    (void)n_layer;
    return default_buffer_type();
  }
  /// Whether this backend's compute can read and write tensors held in buffers of
  /// `buft` directly (the CPU: any host buffer; a device: its own memory). The
  /// scheduler copies a tensor into this backend's memory when not.
  virtual bool CanUseBufferType(const BufferType* buft) const {
    return buft == const_cast<Backend*>(this)->default_buffer_type();
  }

  /// Copies `size` bytes from host memory into tensor `t` at byte `offset`.
  virtual absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) = 0;
  /// Copies `size` bytes of `t` from byte `offset` into host memory.
  virtual absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) = 0;
  /// Copies all bytes of src into dst (same type and shape), both in this backend's memory.
  virtual absl::Status CopyTensor(const Tensor* src, Tensor* dst) = 0;
  /// Queued versions of SetTensor/GetTensor: the host memory must stay valid, and `data`
  /// of a get is filled, only after Synchronize() (ggml_backend_tensor_set_async). The
  /// defaults are synchronous.
  virtual absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
    return SetTensor(t, data, offset, size);
  }
  virtual absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
    return GetTensor(t, data, offset, size);
  }
  /// Waits for every queued transfer and computation. Errors: the device's (e.g. a lost
  /// device), naming the call.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }

  /// Called once a model's weights are in memory this backend uses and will not change
  /// (with a layer split, the list is the whole model's: weights in memory this backend
  /// does not use must be left alone):
  /// a backend may attach a layout its kernels prefer (Tensor::extra; ggml's "extra"
  /// buffer types such as the CPU repack). Errors: RESOURCE_EXHAUSTED when the memory
  /// for it cannot be had. The default does nothing.
  virtual absl::Status PrepareWeights(const std::vector<Tensor*>& weights) {
    (void)weights;
    return absl::OkStatus();
  }
  /// Whether the device can be used now, for a caller that watches it (the worker's
  /// health). OK by default. A device that can be lost says so: UNAVAILABLE while it cannot
  /// be reached (a remote compute server; naming it); DATA_LOSS once after it came back
  /// without the memory it had (a restarted server: weights are restored, the KV cache is
  /// not), so the caller drops what it computed before (engine::Scheduler::DropKvCache).
  virtual absl::Status CheckDevice() { return absl::OkStatus(); }
  /// Whether this backend can compute `node` (its op, types and shapes).
  virtual bool SupportsOp(const Tensor& node) const = 0;
  /// Computes every node of `ctx` in order. Leaves must have data in memory this backend
  /// can use (CanUseBufferType). Unless ctx.placed() (the scheduler placed every node
  /// already), the backend plans and owns the scratch memory for intermediate nodes.
  /// Unsupported ops give UNIMPLEMENTED naming the op.
  virtual absl::Status GraphCompute(Graph& ctx) = 0;
};

}  // namespace herd
