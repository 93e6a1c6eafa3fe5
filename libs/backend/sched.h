// The graph scheduler (the role of ggml_backend_sched): one graph computed across
// several backends. Each node goes to the first backend that supports it, preferring
// the backend whose memory holds the node's weights; a node that writes into a
// buffer (set_rows into the KV cache) runs on the backend owning that buffer. Runs of
// nodes on one backend form a split; a tensor a split reads from memory its backend
// cannot use is copied into that backend's memory at the start of the split. The
// last backend is the CPU, so ops a device lacks fall back to it.
//
// A Scheduler is itself a Backend (the engine sees one backend): its memory is the
// first backend's, and tensor reads and writes go to whichever backend owns the
// tensor's buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd {

/// What the last GraphCompute did (for tests, logs and benchmarks).
struct SchedStats {
  int n_splits = 0;
  int n_copies = 0;  // tensors copied between backends
  size_t bytes_copied = 0;
  std::vector<int> nodes_per_backend;  // compute nodes (views excluded), in backend order
};

class Scheduler : public Backend {
 public:
  /// `backends` in priority order; the last must compute in host memory (a CPU
  /// backend) and supports every op the graph needs. Errors: INVALID_ARGUMENT for an
  /// empty list or a last backend whose memory is not host memory.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(std::vector<std::unique_ptr<Backend>> backends);

  /// The first backend's name, device and memory.
  std::string name() const override;
  DeviceInfo device() const override;
  BufferType* default_buffer_type() override;
  bool CanUseBufferType(const BufferType* buft) const override;

  /// Routed to the backend owning the tensor's buffer (host memory without a buffer:
  /// the CPU).
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  /// Within one backend's memory, or through the host between two.
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override;

  /// True when any backend supports the node.
  bool SupportsOp(const Tensor& node) const override;
  /// Assigns, places (one arena per backend, reused across calls), copies and computes.
  /// Errors: UNIMPLEMENTED naming an op no backend supports (or a buffer write whose
  /// owner lacks it); RESOURCE_EXHAUSTED when an arena cannot be allocated; the
  /// backends' own errors. Placed graphs (Graph::placed) are not accepted.
  absl::Status GraphCompute(Graph& g) override;

  const SchedStats& last_stats() const { return stats_; }
  size_t n_backends() const { return backends_.size(); }
  Backend* backend(size_t i) const { return backends_[i].get(); }

 private:
  explicit Scheduler(std::vector<std::unique_ptr<Backend>> b) : backends_(std::move(b)) {}
  /// Index of the backend owning memory of `buft` (nullptr = host memory: the CPU).
  size_t OwnerOf(const BufferType* buft) const;
  size_t OwnerOfTensor(const Tensor* t) const;
  absl::Status Grow(std::vector<std::unique_ptr<Buffer>>& bufs, size_t i, size_t bytes);

  // GraphCompute's phases, in order, over one call's state (sched.cc).
  struct GraphRun;
  // The backend whose memory holds t (its root's): its compute node's, else its buffer's.
  size_t MemoryOf(const GraphRun& run, Tensor* t) const;
  // 1. Assigns every compute node to a backend (views: no compute, no backend).
  absl::Status AssignBackends(const std::vector<Tensor*>& nodes, GraphRun& run);
  // 2. Splits: maximal runs of compute nodes on one backend.
  void MakeSplits(const std::vector<Tensor*>& nodes, GraphRun& run);
  // 3. Inputs each split must copy in: a source in memory its backend cannot use.
  void FindCopies(GraphRun& run);
  // 4. Place: per backend, plan its nodes (liveness within its own nodes; nodes other
  // splits read are kept), then views and copies.
  absl::Status PlaceTensors(const std::vector<Tensor*>& nodes, GraphRun& run);
  // 5. Runs the splits in order: copy the inputs in, point the nodes at the copies,
  // compute, point them back.
  absl::Status RunSplits(GraphRun& run);

  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Buffer>> arenas_;  // per backend: planned intermediate nodes
  std::vector<std::unique_ptr<Buffer>> copies_;  // per backend: tensors copied in
  SchedStats stats_;
};

}  // namespace herd
