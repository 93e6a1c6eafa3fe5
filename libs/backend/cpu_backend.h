// The CPU backend: host buffers, weight repacking, and graph compute on a thread pool:
// each node dispatched to its op in libs/kernels/cpu (graph_ops.h; SIMD path chosen at
// run time).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/backend/op_support.h"
#include "libs/base/cpu_features.h"
#include "libs/base/thread_pool.h"
#include "libs/kernels/cpu/graph_ops.h"
#include "libs/kernels/cpu/kernels.h"

namespace herd {

/// Host memory (64-byte aligned, zero-initialised).
class CpuBufferType : public BufferType {
 public:
  static CpuBufferType* Get();
  std::string name() const override { return "CPU"; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  /// Wraps caller-owned host memory (INVALID_ARGUMENT for a null pointer).
  absl::StatusOr<std::unique_ptr<Buffer>> FromHostPtr(void* ptr, size_t size) override;
};

class CpuBackend : public Backend {
 public:
  /// n_threads >= 1 worker threads (the caller's thread counts as one).
  /// isa defaults to the best the CPU supports (BestIsa()).
  /// repack: whether PrepareWeights repacks weights (see there).
  /// pin_threads: bind each compute thread to its own core (ThreadPool's pin).
  /// ggml_order: leave Q8_0 / Q5_0 weights unpacked, in ggml's summation order
  /// (BackendOptions::ggml_order).
  explicit CpuBackend(int n_threads, Isa isa = BestIsa(), bool repack = true, bool pin_threads = false,
                      bool ggml_order = false);
  /// The host as a DeviceInfo (what device() returns), without creating a backend.
  static DeviceInfo HostDevice();
  ~CpuBackend() override;

  std::string name() const override { return "CPU"; }
  /// "cpu" device 0: the host (memory_total/free from /proc/meminfo).
  DeviceInfo device() const override;
  BufferType* default_buffer_type() override { return CpuBufferType::Get(); }
  /// Any host buffer.
  bool CanUseBufferType(const BufferType* buft) const override { return buft->is_host(); }
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  /// Repacks every 2-D Q4_0 / Q8_0 / F16 weight that MulMat may read (not embeddings, which
  /// GetRows reads) into cpu::PackWeights's 8-row panels, attached as Tensor::extra, so
  /// matmuls of every batch size stream them without per-call repacking (llama.cpp's
  /// CPU_REPACK buffer type). Needs an ISA with packed kernels (cpu::SupportsPacked) and
  /// `repack`; otherwise nothing. With ggml_order, Q8_0 and Q5_0 weights stay unpacked. The mapped originals are then
  /// not read by MulMat. The copies of one call share one 2 MiB-aligned allocation advised as transparent huge pages,
  /// freed when the last of them is dropped (SetTensor drops a tensor's own). RESOURCE_EXHAUSTED when the copies cannot
  /// be allocated.
  absl::Status PrepareWeights(const std::vector<Tensor*>& weights) override;
  /// Bytes held by packed weight copies this backend made.
  size_t packed_bytes() const { return packed_bytes_; }
  bool SupportsOp(const Tensor& node) const override;
  absl::Status GraphCompute(Graph& ctx) override;

  int n_threads() const { return pool_.size(); }
  Isa isa() const { return isa_; }
  /// Whether FLASH_ATTN_EXT attends KV cells that several query tokens of a batch share
  /// (a common prompt prefix of several sequences) once for all of them, merging by
  /// log-sum-exp (cpu::SharedPrefixAttention, libs/kernels/cpu/flash_attn_shared.cc; F32 accumulation, so within float
  /// rounding of the per-token path rather than bit-identical). Off by default: a token's result then depends on which
  /// other tokens share its batch, so batched, solo and speculative decoding no longer give bit-identical greedy
  /// output. Not thread-safe with GraphCompute.
  void set_shared_prefix_attention(bool on) { shared_prefix_attention_ = on; }
  bool shared_prefix_attention() const { return shared_prefix_attention_; }
  /// FLASH_ATTN_EXT nodes computed by the shared-prefix path so far.
  uint64_t shared_prefix_attention_runs() const { return shared_attention_.runs(); }
  /// Bytes of scratch memory currently held for intermediate results.
  size_t scratch_bytes() const { return arena_size_; }

 private:
  absl::Status ComputeNode(Tensor* node);  // dispatches to libs/kernels/cpu/graph_ops.h
  cpu::GraphOpContext OpContext();         // what the ops use of this backend

  ThreadPool pool_;
  Isa isa_;
  bool repack_;
  bool ggml_order_;
  bool shared_prefix_attention_;
  cpu::SharedPrefixAttention shared_attention_;  // its plan and count (told of each GraphCompute)
  size_t packed_bytes_ = 0;
  std::unique_ptr<uint8_t[], void (*)(void*)> arena_{nullptr, nullptr};
  size_t arena_size_ = 0;
  cpu::WorkBuffer work_;  // scratch of one op at a time
  OpLimits limits_;       // what SupportsOp accepts beyond the op's shape rules
};

}  // namespace herd
