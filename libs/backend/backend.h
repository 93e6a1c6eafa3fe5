// The Backend interface (after ggml-backend): buffer types allocate buffers,
// buffers hold tensor data, a backend moves tensor bytes in and out and computes
// graphs. One implementation per device kind (cpu here; cuda/hip/vulkan later).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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
};

/// Places `t` at `offset` inside `buf` (sets t->buffer and t->data).
/// INVALID_ARGUMENT when it does not fit or the offset is misaligned.
absl::Status PlaceTensor(Tensor* t, Buffer* buf, size_t offset);

/// A compute device.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual BufferType* default_buffer_type() = 0;

  /// Copies `size` bytes from host memory into tensor `t` at byte `offset`.
  virtual absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) = 0;
  /// Copies `size` bytes of `t` from byte `offset` into host memory.
  virtual absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) = 0;
  /// Copies all bytes of src into dst (same type and shape).
  virtual absl::Status CopyTensor(const Tensor* src, Tensor* dst) = 0;

  /// Whether this backend can compute `node` (its op, types and shapes).
  virtual bool SupportsOp(const Tensor& node) const = 0;
  /// Computes every node of `ctx` in order. Leaves must have data; the backend plans
  /// and owns the scratch memory for intermediate nodes. Unsupported ops give
  /// UNIMPLEMENTED naming the op.
  virtual absl::Status GraphCompute(Graph& ctx) = 0;
};

}  // namespace herd
