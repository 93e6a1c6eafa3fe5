// The device registry (the role of ggml-backend-reg): every backend kind compiled
// into this build, the devices each finds on this machine, and backends created by
// name (`--backend cpu|vulkan|... --device N` on every binary).
//
// A new backend plugs in by adding one BackendKind entry to BackendKinds() in
// registry.cc (behind its build condition) with a `devices` probe and a `create`
// factory; everything else (flags, the scheduler's CPU fallback, backend_ops,
// the worker) picks it up by name.
//
// A kind that needs a shared library not every binary should depend on (hip:
// libamdhip64 from ROCm) registers itself instead: its `register` library (alwayslink,
// e.g. //libs/backend/hip:register) calls RegisterBackendKind from a static initializer,
// so exactly the binaries that link it have the kind (//services/worker:worker_hip).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"

namespace herd {

/// What creating a backend needs.
struct BackendOptions {
  int n_threads = 1;  // CPU threads (the CPU backend, and the CPU fallback of a device)
  int device = 0;     // index among the kind's devices (--device N)
  /// CPU: repack Q4_0 / Q8_0 / F16 matmul weights at load for the batched kernels
  /// (CpuBackend::PrepareWeights; llama.cpp's --no-repack turns its equivalent off).
  bool repack = true;
  /// CPU: reproduce llama.cpp's x86 CPU results bit for bit where herd's repacked kernels
  /// sum differently: Q8_0 and Q5_0 matmul weights are then not repacked and run in ggml's
  /// 8-float-lane order (tinyBLAS_Q0_AVX / ggml_vec_dot_q8_0_q8_0). Costs 4-5x in prompt
  /// processing for those types and 20-40% in decode (llama-110m, 2 threads). For checking
  /// against llama.cpp (tests/conformance/quant_reference_test), not for serving.
  bool ggml_order = false;
  /// CPU: attend KV cells that several sequences of a batch share (a common prompt prefix)
  /// once for all of them (CpuBackend::set_shared_prefix_attention; off by default: results
  /// then depend on the batch's composition). Ignored (off) with ggml_order.
  bool shared_prefix_attention = false;
  /// CPU: bind each compute thread to its own core for its life (llama.cpp's --cpu-strict 1;
  /// OMP_PROC_BIND=TRUE OMP_PLACES=cores for its OpenMP build). Off by default: a pod whose
  /// CPU limit is a CFS quota rather than a cpuset shares its CPUs with other pods.
  bool pin_threads = false;
};

/// One backend kind compiled into this build.
struct BackendKind {
  std::string name;  // "cpu", "vulkan", "cuda", "hip"
  /// The devices present on this machine (empty when none, e.g. no Vulkan driver).
  std::function<std::vector<DeviceInfo>()> devices;
  /// Creates a backend on device opts.device (only called with a present index).
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)> create;
  /// Optional: why `devices` is empty ("hipGetDeviceCount: hipErrorNoDevice (...)"),
  /// shown by DescribeDevices.
  std::function<std::string()> why_none;
};

/// Every kind compiled in, "cpu" first, then "vulkan", "cuda", then the registered ones
/// (RegisterBackendKind) in registration order.
const std::vector<BackendKind>& BackendKinds();

/// Adds a kind to BackendKinds(). For static initializers of kinds linked only into some
/// binaries; must run before the first BackendKinds() call (before main). False, with an
/// error logged, for a name already present or a registration after BackendKinds() was
/// first used.
bool RegisterBackendKind(BackendKind kind);

/// Every device present, kind by kind.
std::vector<DeviceInfo> ListDevices();

/// One line per kind compiled in: its devices, or that it has none (with the kind's
/// reason when it gives one): "cpu: 0 CPU (AMD EPYC 7B13 (avx2), 23.4 GiB); vulkan: no
/// device found; hip: no device found (hipGetDeviceCount: ...)".
std::string DescribeDevices();

/// Creates backend kind `name` on device opts.device. A device kind other than the CPU
/// comes wrapped in a Scheduler (libs/backend/sched.h) over it and a CPU backend of
/// opts.n_threads threads, so that ops the device lacks run on the CPU.
/// Errors: NOT_FOUND for a kind not compiled in or a device index not present, the
/// message listing what this build and machine have (DescribeDevices); the kind's own
/// errors otherwise (e.g. UNAVAILABLE when the Vulkan device cannot be opened).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name, const BackendOptions& opts);

/// A model split by layers across several backends (llama.cpp's --rpc with
/// --tensor-split): what CreateSplitBackend needs besides BackendOptions.
struct SplitOptions {
  int64_t n_layer = 0;  ///< the model's layers
  /// One proportion per listed backend (--tensor_split 3,1); empty = even.
  std::vector<double> tensor_split;
  /// Creates the backend of a "remote://HOST:PORT" entry from "HOST:PORT" (the caller
  /// brings the channel and its security: libs/backend/remote, serving::MakeChannel).
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const std::string& address)> connect_remote;
};

/// True for a --backend value that lists several backends or a remote one ("cpu,remote://
/// 10.0.0.7:50061", "remote://h:p").
bool IsSplitSpec(const std::string& spec);

/// A Scheduler over the backends listed in `spec` (comma-separated kind names, device
/// opts.device for each device kind, and "remote://HOST:PORT" entries), with the layers
/// in contiguous ranges in list order (LayerPlacementFromSplit: the input layer with the
/// first listed, the output layer with the last). Device and remote backends come first
/// in the scheduler's priority, the CPU last (a listed "cpu", else one added as the
/// fallback for ops the others lack); graph inputs stay in CPU memory. Errors:
/// INVALID_ARGUMENT for an empty entry, a kind listed twice, a tensor_split whose size
/// differs from the list's or that sums to 0; NOT_FOUND as CreateBackend; FAILED_PRECONDITION
/// for a remote entry without connect_remote; the connection's errors (UNAVAILABLE naming
/// the address).
absl::StatusOr<std::unique_ptr<Backend>> CreateSplitBackend(const std::string& spec, const BackendOptions& opts,
                                                            const SplitOptions& split);

}  // namespace herd
