// Test graphs for comparing backends: an OpGraph holds a graph under construction and
// the host bytes of its leaves (random floats, quantized rows, index lists, masks), a
// PlacedGraph is such a graph uploaded to one backend's buffer, ready to compute (again
// and again, for timing) and read back as floats. tests/backend_ops compares every op on
// every backend with the CPU through these; the per-backend unit tests use them for the
// checks they share (device_checks.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/tensor/tensor.h"

namespace herd::testing {

/// A graph under construction and the host bytes of its leaves.
class OpGraph {
 public:
  Graph& g() { return g_; }
  /// A leaf of `type` and shape `ne` holding `bytes` (resized to the tensor's size).
  Tensor* Raw(GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);
  /// `n` uniform floats in [lo, hi) from `seed`.
  static std::vector<float> Floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
  /// An F32 leaf of uniform floats in [lo, hi).
  Tensor* F32(std::vector<int64_t> ne, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
  /// An F32 leaf holding `v`.
  Tensor* F32Values(std::vector<int64_t> ne, const std::vector<float>& v);
  /// Uniform floats in [-1, 1) converted row by row to `type` (F32, F16 or a block type).
  Tensor* Typed(GgmlType type, std::vector<int64_t> ne, uint32_t seed);
  /// A 1-D I32 leaf holding `v` (row ids, positions).
  Tensor* I32(const std::vector<int32_t>& v);
  /// The leaves and their bytes.
  const std::map<Tensor*, std::vector<uint8_t>>& data() const { return data_; }

 private:
  Graph g_;
  std::map<Tensor*, std::vector<uint8_t>> data_;
};

/// Builds a test graph's leaves and ops; returns the node whose value is compared.
using BuildFn = std::function<Tensor*(OpGraph&)>;

/// The graph of a BuildFn in one buffer of a backend, its leaves uploaded.
class PlacedGraph {
 public:
  /// Builds `fn`'s graph and uploads its leaves to a buffer of `be`'s default buffer type.
  /// `place_nodes`: every computed node gets a place in that buffer too and Compute runs
  /// Graph::Placed(nodes) (the engine's way); otherwise the backend plans its own scratch.
  static absl::StatusOr<std::unique_ptr<PlacedGraph>> Create(Backend* be, const BuildFn& fn, bool place_nodes = false);

  /// GraphCompute, then Synchronize.
  absl::Status Compute();
  /// The output node's values as F32 (F16 and block types dequantized), row by row.
  absl::StatusOr<std::vector<float>> Output() const;
  /// The output node.
  const Tensor& output() const { return *out_; }
  /// The graph as built (leaves and nodes).
  Graph& graph() { return b_.g(); }
  /// Bytes of the leaves uploaded.
  size_t input_bytes() const;

 private:
  PlacedGraph() = default;
  Backend* be_ = nullptr;
  OpGraph b_;
  Tensor* out_ = nullptr;
  std::unique_ptr<Buffer> buf_;
  std::unique_ptr<Graph> placed_;  // Graph::Placed(nodes) when place_nodes
};

/// `fn`'s graph computed once on `be`: the output as F32.
absl::StatusOr<std::vector<float>> RunOn(Backend* be, const BuildFn& fn, bool place_nodes = false);

/// Normalized mean squared error sum((got - want)^2) / sum(want^2) (the plain sum when
/// want is all zeros). Infinite where one side is NaN or infinite and the other is not;
/// positions where both are the same infinity count as equal.
double Nmse(const std::vector<float>& got, const std::vector<float>& want);

/// A mask [n_kv, rows] for `rows` query tokens at the end of n_kv cells: row r sees cells
/// up to n_kv - rows + r (at least cell 0), -inf beyond; with `alibi` the visible cells
/// hold -|distance| to the row's position instead of 0.
std::vector<float> CausalMask(int64_t n_kv, int64_t rows, bool alibi);

}  // namespace herd::testing
