// A fake device backend for tests of the scheduler and of the engine's backend seam:
// its memory is opaque to the host (buffers report a made-up base address that is
// never host-addressable; only SetTensor/GetTensor/CopyTensor move bytes), and it
// computes only the ops it is told to support (with the CPU kernels on its private
// memory), so every other op must fall back to the CPU through libs/backend/sched.
#pragma once
#include <memory>
#include <set>
#include <string>

#include "libs/backend/backend.h"

namespace herd::testing {

class FakeDevice : public Backend {
 public:
  /// `ops`: the ops this device computes (kNone and kView are always supported).
  explicit FakeDevice(std::set<Op> ops, int n_threads = 1);
  ~FakeDevice() override;

  std::string name() const override { return "Fake"; }
  DeviceInfo device() const override;
  BufferType* default_buffer_type() override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  bool SupportsOp(const Tensor& node) const override;
  /// FAILED_PRECONDITION when a tensor it reads is not in its memory.
  absl::Status GraphCompute(Graph& g) override;

  /// Nodes computed so far.
  int64_t nodes_computed() const { return nodes_computed_; }
  /// Bytes held in its buffers now.
  size_t bytes_allocated() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::set<Op> ops_;
  int64_t nodes_computed_ = 0;
};

}  // namespace herd::testing
