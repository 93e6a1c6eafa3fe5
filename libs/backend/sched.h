// The graph scheduler (the role of ggml_backend_sched): one graph computed across
// several backends. A node reading a weight (a leaf in a buffer that is not a graph
// input) runs on the backend owning that weight's memory when it supports the op; a
// node that writes into a buffer (set_rows into the KV cache) runs on the backend
// owning that buffer; any other node follows the backend of the last weight-pinned
// node when that backend supports it, else goes to the first backend that does. Runs
// of nodes on one backend form a split; a tensor a split reads from memory its backend
// cannot use is copied into that backend's memory at the start of the split. The last
// backend is the CPU, so ops a device lacks fall back to it. GraphCompute does not synchronize
// (the caller does, as with any backend whose compute may be queued; a copy between splits
// reads through GetTensor, which waits for the work queued before it), so a lazy backend
// (remote) sends a decode step's inputs, its layers' compute and the read of its results
// in one round trip.
//
// Layer split (llama.cpp's -ngl / --tensor-split): SetLayerPlacement puts each layer's
// weights and KV cache in one backend's memory (Backend::layer_buffer_type, which
// Model::PlaceWeights and the engine's KV cache follow), so the graph runs layer
// ranges on different backends with only the hidden state crossing between them.
//
// A Scheduler is itself a Backend (the engine sees one backend): its name and device
// are the first backend's, its memory (where the engine puts graph inputs) the memory
// backend's (the first unless Create names another), and tensor reads and writes go
// to whichever backend owns the tensor's buffer.
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
  /// Same, with the scheduler's own memory (default_buffer_type: graph inputs, and the
  /// weights of layers without a placement) that of backends[memory_backend]; e.g. the
  /// CPU of [remote, cpu] so that inputs stay local. INVALID_ARGUMENT also for an index
  /// out of range.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(std::vector<std::unique_ptr<Backend>> backends,
                                                           size_t memory_backend);

  /// Puts layer il's weights and KV cache in the memory of backends[backend_of[il + 1]]:
  /// backend_of has n_layer + 2 entries, [input, layer 0 .. layer n_layer - 1, output]
  /// (see Backend::layer_buffer_type; LayerPlacementFromSplit makes one). Set it before
  /// the model's weights are placed and the engine is created. INVALID_ARGUMENT for fewer
  /// than 3 entries or an index out of range. An empty vector is not accepted; a
  /// scheduler without a placement keeps every layer in default_buffer_type().
  absl::Status SetLayerPlacement(std::vector<size_t> backend_of);
  const std::vector<size_t>& layer_placement() const { return backend_of_; }

  /// The first backend's name and device; the memory backend's memory.
  std::string name() const override;
  DeviceInfo device() const override;
  BufferType* default_buffer_type() override;
  /// With a layer placement for n_layer layers: its backend's memory for il (-1 input,
  /// n_layer output); otherwise (no placement, or one for another n_layer)
  /// default_buffer_type().
  BufferType* layer_buffer_type(int64_t il, int64_t n_layer) override;
  bool CanUseBufferType(const BufferType* buft) const override;

  /// Routed to the backend owning the tensor's buffer (host memory without a buffer:
  /// the CPU).
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  /// Within one backend's memory, or through the host between two.
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override;
  /// Each backend prepares the weights in memory it can use (the CPU repacks the layers
  /// placed in host memory, a device those in its own).
  absl::Status PrepareWeights(const std::vector<Tensor*>& weights) override;

  /// Every backend's CheckDevice: the first DATA_LOSS, else the first other error.
  absl::Status CheckDevice() override;
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
  Scheduler(std::vector<std::unique_ptr<Backend>> b, size_t memory) : backends_(std::move(b)), memory_(memory) {}
  /// Index of the backend owning memory of `buft` (nullptr = host memory: the CPU).
  size_t OwnerOf(const BufferType* buft) const;
  /// Whether a weight in memory of `buft` pins the nodes reading it to the memory's
  /// owner: device memory always; host memory when it is where this scheduler puts
  /// weights (its memory backend's, or a layer placement's).
  bool Pins(const BufferType* buft) const;
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
  size_t memory_ = 0;                            // the backend whose memory default_buffer_type() is
  std::vector<size_t> backend_of_;               // layer placement: [input, layers..., output]; empty = none
  std::vector<std::unique_ptr<Buffer>> arenas_;  // per backend: planned intermediate nodes
  std::vector<std::unique_ptr<Buffer>> copies_;  // per backend: tensors copied in
  SchedStats stats_;
};

/// A llama.cpp-style split (--tensor-split) as a layer placement for
/// Scheduler::SetLayerPlacement: the n_layer layers in contiguous ranges, one per listed
/// backend in list order, sized in proportion to `proportions` (one per entry of
/// backend_index; empty = even); the input layer on the first listed backend, the output
/// layer on the last. As llama.cpp assigns layers: layer il goes to the first listed
/// backend whose cumulative share exceeds il / n_layer (1,1 over 8 layers: 0-3, 4-7).
/// Returns n_layer + 2 entries; empty when
/// backend_index is empty, n_layer < 0, the sizes differ, or a proportion is negative or
/// they sum to 0.
std::vector<size_t> LayerPlacementFromSplit(int64_t n_layer, const std::vector<double>& proportions,
                                            const std::vector<size_t>& backend_index);

}  // namespace herd
