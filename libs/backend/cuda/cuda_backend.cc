// The CUDA backend, and from the same source the HIP backend: //libs/backend/hip
// compiles this file with HERD_HIP defined (gpu_compat.h maps the CUDA runtime names to
// HIP's). The build differences are confined to the "Build" block below (names, the
// public entry points at the end) and to cuBLAS (HERD_GPU_HAS_BLAS: CUDA only).
#include "libs/backend/cuda/gpu_compat.h"

#if HERD_GPU_HIP
#include "libs/backend/hip/hip_backend.h"
#else
#include "libs/backend/cuda/cuda_backend.h"
#endif

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#if HERD_GPU_HAS_BLAS
#include <cublas_v2.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

#include "libs/backend/cuda/attn_split.h"
#include "libs/backend/cuda/kernels.h"
#include "libs/backend/op_support.h"
#include "libs/base/log.h"
#include "libs/tensor/graph_alloc.h"
#include "libs/tensor/op_params.h"

namespace herd {
namespace {

// ---------------------------------------------------------------------------
// Build: CUDA (backend "cuda", devices CUDA0...) or HIP (backend "hip", devices HIP0...).
#if HERD_GPU_HIP
constexpr char kKind[] = "hip";
constexpr char kDevicePrefix[] = "HIP";
static_assert(kHipMatVecMaxCols == cuda::kMatVecMaxCols, "one mat-vec limit");
struct GpuOptions {
  bool use_cublas = false;  // no BLAS library in the HIP build
};
#else
constexpr char kKind[] = "cuda";
constexpr char kDevicePrefix[] = "CUDA";
static_assert(kCudaMatVecMaxCols == cuda::kMatVecMaxCols, "one mat-vec limit");
using GpuOptions = CudaBackendOptions;
#endif

using cuda::DevTensor;
using cuda::WType;

// Opaque base address of every device buffer (never dereferenced).
void* const kFakeBase = reinterpret_cast<void*>(uintptr_t{0x1000});
// cudaMalloc returns 256-byte aligned memory; tensors are placed at this alignment.
constexpr size_t kAlignment = 256;
// Pinned staging for async transfers: blocks of at least this size, at most this much
// in all; larger transfers run synchronously.
constexpr size_t kStagingBlock = size_t{64} << 20;
constexpr size_t kStagingMax = size_t{512} << 20;

size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// The runtime call named in a message ("cudaMalloc (mul_mat scratch)"), as the HIP
// build really calls it ("hipMalloc (mul_mat scratch)"; gpu_compat.h's mapping).
std::string ApiCall(absl::string_view call) {
  if (!HERD_GPU_HIP || !absl::ConsumePrefix(&call, "cuda")) return std::string(call);
  if (absl::ConsumePrefix(&call, "HostAlloc")) return absl::StrCat("hipHostMalloc", call);
  if (absl::ConsumePrefix(&call, "FreeHost")) return absl::StrCat("hipHostFree", call);
  return absl::StrCat("hip", call);
}

// A failed CUDA (HIP) call as a status naming it; clears the (non-sticky) error state.
absl::Status CudaError(const char* call, cudaError_t e) {
  (void)cudaGetLastError();
  const std::string msg =
      absl::StrCat(ApiCall(call), " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

#define HERD_CUDA_RETURN_IF_ERROR(call, expr)                              \
  do {                                                                     \
    const cudaError_t herd_cuda_e_ = (expr);                               \
    if (herd_cuda_e_ != cudaSuccess) return CudaError(call, herd_cuda_e_); \
  } while (0)

// ---------------------------------------------------------------------------
// cuBLAS through dlopen (binaries must run where it is not installed). The HIP build has
// none (no hipBLAS / rocBLAS in Debian 12): Cublas is empty there and LoadCublas never
// runs, so batched products take the tiled kernel.
#if HERD_GPU_HAS_BLAS

// cublasGemmEx with a cublasComputeType_t (the header also declares a C++ overload).
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  void* lib = nullptr;
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  GemmExFn gemm_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;  // optional

  std::string StatusName(cublasStatus_t s) const {
    if (status_name != nullptr) return status_name(s);
    return absl::StrCat("cublasStatus ", static_cast<int>(s));
  }
};

// The process-wide cuBLAS library, or nullptr when it cannot be opened (loaded once).
// $HERD_CUBLAS_PATH (a libcublas.so.13 file, e.g. a pip wheel's nvidia/cublas/lib one; its
// libcublasLt is found beside it) comes first: tools/gpu_check.sh sets it to what its own
// search found, so the check and the backend use the same library. Then the dynamic
// loader's search (LD_LIBRARY_PATH, ldconfig's cache, /usr/lib/x86_64-linux-gnu, ...), then
// the CUDA install's lib64.
const Cublas* LoadCublas() {
  static const Cublas* loaded = []() -> const Cublas* {
    void* lib = nullptr;
    const char* env_path = std::getenv("HERD_CUBLAS_PATH");
    if (env_path != nullptr && *env_path != '\0') {
      lib = dlopen(env_path, RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        const char* why = dlerror();
        HERD_LOG(Warning) << "CUDA backend: HERD_CUBLAS_PATH=" << env_path
                          << " cannot be opened: " << (why != nullptr ? why : "?");
      }
    }
    for (const char* name : {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13"}) {
      if (lib != nullptr) break;
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) {
      HERD_LOG(Info) << "CUDA backend: libcublas.so.13 not found; batched mul_mat uses the built-in tiled kernel";
      return nullptr;
    }
    auto* c = new Cublas();
    c->lib = lib;
    const auto sym = [lib](const char* n) { return dlsym(lib, n); };
    c->create = reinterpret_cast<decltype(c->create)>(sym("cublasCreate_v2"));
    c->destroy = reinterpret_cast<decltype(c->destroy)>(sym("cublasDestroy_v2"));
    c->set_stream = reinterpret_cast<decltype(c->set_stream)>(sym("cublasSetStream_v2"));
    c->sgemm = reinterpret_cast<decltype(c->sgemm)>(sym("cublasSgemm_v2"));
    c->gemm_ex = reinterpret_cast<decltype(c->gemm_ex)>(sym("cublasGemmEx"));
    c->status_name = reinterpret_cast<decltype(c->status_name)>(sym("cublasGetStatusName"));
    if (c->create == nullptr || c->destroy == nullptr || c->set_stream == nullptr || c->sgemm == nullptr ||
        c->gemm_ex == nullptr) {
      HERD_LOG(Warning) << "CUDA backend: libcublas.so.13 lacks an expected symbol; not using it";
      dlclose(lib);
      delete c;
      return nullptr;
    }
    return c;
  }();
  return loaded;
}
#else
struct Cublas {};
using cublasHandle_t = void*;
#endif  // HERD_GPU_HAS_BLAS

// ---------------------------------------------------------------------------
// Graphs: the two calls whose arguments differ between CUDA 12 and HIP 5.2.

cudaError_t GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
#if HERD_GPU_HIP
  return hipGraphInstantiate(exec, graph, nullptr, nullptr, 0);
#else
  return cudaGraphInstantiate(exec, graph, 0);
#endif
}

// Whether `exec` now runs `graph` (same topology and kernels; new parameters). Clears the
// error state when not.
bool GraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph) {
#if HERD_GPU_HIP
  hipGraphNode_t error_node = nullptr;
  hipGraphExecUpdateResult result = hipGraphExecUpdateError;
  const bool ok =
      hipGraphExecUpdate(exec, graph, &error_node, &result) == hipSuccess && result == hipGraphExecUpdateSuccess;
#else
  cudaGraphExecUpdateResultInfo info;
  const bool ok = cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess && info.result == cudaGraphExecUpdateSuccess;
#endif
  if (!ok) (void)cudaGetLastError();
  return ok;
}

// Whether the environment variable `name` is set to `value`.
bool EnvIs(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, value) == 0;
}

// ---------------------------------------------------------------------------
// Devices.

struct Probe {
  int count = 0;
  std::string reason;  // why count is 0
};

Probe ProbeDevices() {
  Probe p;
  const cudaError_t e = cudaGetDeviceCount(&p.count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    p.count = 0;
    p.reason = absl::StrCat(ApiCall("cudaGetDeviceCount"), ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  } else if (p.count == 0) {
    p.reason = absl::StrCat(ApiCall("cudaGetDeviceCount"), ": no ", HERD_GPU_API, " device");
  }
  return p;
}

absl::StatusOr<DeviceInfo> MakeDeviceInfo(int index) {
  cudaDeviceProp prop;
  HERD_CUDA_RETURN_IF_ERROR("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, index));
  DeviceInfo d;
  d.backend = kKind;
  d.index = index;
  d.name = absl::StrCat(kDevicePrefix, index);
#if HERD_GPU_HIP
  d.description = absl::StrCat(prop.name, " (", prop.gcnArchName, ")");  // "... (gfx90a:sramecc+:xnack-)"
#else
  d.description = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
#endif
  d.memory_total = prop.totalGlobalMem;
  d.memory_free = 0;
  d.host_visible = false;
  return d;
}

// ---------------------------------------------------------------------------
// Buffers.

class CudaBufferType : public BufferType, public std::enable_shared_from_this<CudaBufferType> {
 public:
  CudaBufferType(int device, std::string name) : device_(device), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  size_t alignment() const override { return kAlignment; }
  bool is_host() const override { return false; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  int device() const { return device_; }

 private:
  int device_;
  std::string name_;
};

/// A cudaMalloc allocation; keeps its buffer type alive.
class CudaBuffer : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<CudaBufferType> type, void* dev, size_t size)
      : type_(std::move(type)), dev_(dev), size_(size) {}
  ~CudaBuffer() override {
    // cudaFree waits for work using the memory.
    if (cudaSetDevice(type_->device()) != cudaSuccess || cudaFree(dev_) != cudaSuccess) {
      const cudaError_t e = cudaGetLastError();
      HERD_LOG(Error) << HERD_GPU_API " buffer free: " << cudaGetErrorName(e);
    }
  }
  BufferType* type() const override { return type_.get(); }
  void* base() const override { return kFakeBase; }
  size_t size() const override { return size_; }
  void Clear(uint8_t value) override {
    // On the legacy default stream, which orders with every backend's (blocking) stream.
    cudaError_t e = cudaSetDevice(type_->device());
    if (e == cudaSuccess) e = cudaMemsetAsync(dev_, value, size_, nullptr);
    if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
    if (e != cudaSuccess) {
      HERD_LOG(Error) << HERD_GPU_API " buffer clear: " << CudaError("cudaMemsetAsync", e);
    }
  }
  uint8_t* dev() const { return static_cast<uint8_t*>(dev_); }

 private:
  std::shared_ptr<CudaBufferType> type_;
  void* dev_;
  size_t size_;
};

absl::StatusOr<std::unique_ptr<Buffer>> CudaBufferType::Allocate(size_t size) {
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max(RoundUp(size, kAlignment), kAlignment));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string msg = absl::StrCat(ApiCall("cudaMalloc"), " of ", size, " bytes on ", name_,
                                         " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
    return absl::UnavailableError(msg);
  }
  return std::unique_ptr<Buffer>(new CudaBuffer(shared_from_this(), p, size));
}

// ---------------------------------------------------------------------------
// The backend.

int WTypeOf(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return static_cast<int>(WType::kF32);
    case GgmlType::F16:
      return static_cast<int>(WType::kF16);
    case GgmlType::Q4_0:
      return static_cast<int>(WType::kQ4_0);
    case GgmlType::Q8_0:
      return static_cast<int>(WType::kQ8_0);
    case GgmlType::Q4_K:
      return static_cast<int>(WType::kQ4_K);
    case GgmlType::Q6_K:
      return static_cast<int>(WType::kQ6_K);
    default:
      return -1;
  }
}

// Shape and strides the kernels can index: positive extents; for F32 / F16 / I32 rows of
// contiguous elements and element-aligned strides and view offsets; for block types
// even row strides (the kernels read 16-bit halves of blocks).
bool Fits(const Tensor* t) {
  if (t == nullptr) return false;
  for (int i = 0; i < 4; ++i) {
    if (t->ne[i] <= 0) return false;
  }
  size_t unit = 2;
  if (t->type == GgmlType::F32 || t->type == GgmlType::I32) unit = 4;
  const bool plain = t->type == GgmlType::F32 || t->type == GgmlType::I32 || t->type == GgmlType::F16;
  if (plain && t->ne[0] > 1 && t->nb[0] != unit) return false;
  for (int i = 1; i < 4; ++i) {
    if (t->nb[i] % unit != 0) return false;
  }
  if (t->view_src != nullptr && t->view_offs % unit != 0) return false;
  return true;
}

// The columns of t (dims 1..3) lie nb[1] apart: dims 2 and 3 continue dim 1's stride.
bool UniformColumns(const Tensor* t) {
  return (t->ne[2] == 1 || t->nb[2] == t->nb[1] * static_cast<size_t>(t->ne[1])) &&
         (t->ne[3] == 1 || t->nb[3] == t->nb[2] * static_cast<size_t>(t->ne[2]));
}

// The ALiBi constants (libs/tensor/op_params.h) of n_head heads as the kernels take them.
cuda::Alibi AlibiParams(int64_t n_head, float max_bias) {
  const AlibiConsts c = AlibiConsts::For(n_head, max_bias);
  cuda::Alibi a;
  a.use = static_cast<int>(c.use);
  a.n_head_log2 = c.n_head_log2;
  a.m0 = c.m0;
  a.m1 = c.m1;
  return a;
}

// RoPE's constants (libs/tensor/op_params.h) as the kernel takes them.
cuda::RopeConsts RopeConstsOf(const Tensor& n) {
  const RopeParams p = RopeParams::Of(n);
  cuda::RopeConsts rc;
  rc.n_dims = p.n_dims;
  rc.neox = p.neox() ? 1 : 0;
  rc.freq_scale = p.freq_scale;
  rc.ext_factor = p.ext_factor;
  rc.theta_scale = p.theta_scale();
  float corr[2];
  p.CorrDims(corr);
  rc.corr0 = corr[0];
  rc.corr1 = corr[1];
  rc.mscale = p.mscale();
  return rc;
}

// How a mul_mat runs and the scratch it needs.
struct GemmPlan {
  enum Kind { kMatVec, kMatVecQ8, kMma, kTiled, kSgemm, kGemmEx } kind = kTiled;
  size_t w_bytes = 0;  // dequantized F16 weights (kGemmEx, unless the weights are F16 already)
  size_t x_bytes = 0;  // packed activations (F16 for kGemmEx; F32 for kSgemm with strided columns;
                       // q8_1 blocks for kMatVecQ8)
};

// The quantized-weight product paths, each on unless the environment sets its variable to
// 0 (for bisecting on a device): HERD_CUDA_MMVQ (q8_1 activations + dp4a mat-vec, else the
// F32 mat-vec) and HERD_CUDA_MMQ (tensor-core tiles up to kMmaMaxCols columns, else cuBLAS
// or the tiled kernel). Read once per process; a path turned off is logged once.
struct QuantPaths {
  bool mmvq = true;
  bool mmq = true;
};
const QuantPaths& QuantPathsFromEnv() {
  static const QuantPaths paths = [] {
    const auto on = [](const char* name) {
      const char* v = std::getenv(name);
      const bool off = v != nullptr && std::strcmp(v, "0") == 0;
      if (off) {
        HERD_LOG(Info) << HERD_GPU_API " backend: " << name << "=0, that mul_mat path is off";
      }
      return !off;
    };
    QuantPaths p;
    p.mmvq = on("HERD_CUDA_MMVQ");
    p.mmq = on("HERD_CUDA_MMQ");
    return p;
  }();
  return paths;
}

class CudaBackend : public Backend {
 public:
  CudaBackend(DeviceInfo info, std::shared_ptr<CudaBufferType> buft)
      : info_(std::move(info)),
        buft_(std::move(buft)),
        limits_(GpuOpLimits([](GgmlType t) { return WTypeOf(t) >= 0; }, [](const Tensor& t) { return Fits(&t); })) {}
  ~CudaBackend() override;
  absl::Status Init(const GpuOptions& opts);

  std::string name() const override { return info_.name; }
  DeviceInfo device() const override;
  BufferType* default_buffer_type() override { return buft_.get(); }
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status Synchronize() override;
  bool SupportsOp(const Tensor& node) const override;
  absl::Status GraphCompute(Graph& g) override;

  bool uses_cublas() const { return cublas_ != nullptr; }

 private:
  struct Staging {
    uint8_t* p = nullptr;
    size_t size = 0, used = 0;
  };
  struct PendingGet {
    const uint8_t* staged;
    void* dst;
    size_t n;
  };

  int dev() const { return buft_->device(); }
  // The device address of t's first byte (t in one of this backend's buffers, whole).
  absl::StatusOr<uint8_t*> Locate(const Tensor* t) const;
  absl::StatusOr<DevTensor> Dev(const Tensor* t, size_t elem_align) const;
  // Checks [offset, offset + size) against t and returns the device address of offset.
  absl::StatusOr<uint8_t*> Range(const Tensor* t, size_t offset, size_t size, const char* what) const;
  GemmPlan PlanMulMat(const Tensor* n) const;
  // How flash attention node n is split over its KV (attn_split.h; unsplit when
  // HERD_CUDA_FA_SPLIT=0).
  cuda::attn::SplitPlan PlanFlashAttn(const Tensor* n) const;
  // Enqueues the whole graph: the error word's reset, every node, its copy to the host.
  // An error names the node; what was enqueued before it is left queued.
  absl::Status EncodeGraph(Graph& g);
  // Runs the graph through a CUDA graph (replayed, updated or captured anew); *ran false
  // when capture did not work out and the caller should enqueue it eagerly.
  absl::Status RunCaptured(Graph& g, bool* ran);
  // Whether g may be captured: graphs on and no batched mul_mat (cuBLAS calls and
  // prompt-sized shapes that change every call run eagerly).
  bool Capturable(const Graph& g) const;
  // What a captured graph depends on: every node's op, type, shape, strides, parameters
  // and device address and those of its sources, and the mul_mat / attention scratch.
  std::vector<uint64_t> GraphKey(const Graph& g) const;
  void DropCapturedGraph();
  absl::Status Encode(Tensor* n);
  absl::Status EncodeMulMat(Tensor* n);
  absl::Status EnsureScratch(size_t bytes);
  absl::Status EnsureWork(size_t bytes);
  absl::Status SyncLocked(const char* what);
  // Pinned staging of n bytes for a queued transfer (nullptr: none; go synchronous).
  uint8_t* StagingAlloc(size_t n);
  void FinishPending();

  DeviceInfo info_;
  std::shared_ptr<CudaBufferType> buft_;
  OpLimits limits_;  // what SupportsOp accepts beyond the op's shape rules
  mutable std::mutex mu_;
  cudaStream_t stream_ = nullptr;
  unsigned* err_dev_ = nullptr;      // the kernels' error word
  unsigned* err_host_ = nullptr;     // pinned copy
  std::unique_ptr<Buffer> scratch_;  // planned intermediate tensors
  void* work_ = nullptr;             // mul_mat scratch (dequantized weights, packed activations)
  size_t work_size_ = 0;
  // The mul_mat source whose q8_1 copy is at the start of work_ (kMatVecQ8): the products
  // of one activation (Q, K and V; up and gate) quantize it once per graph. Reset by
  // GraphCompute, by any other mul_mat that writes work_ and by split attention (its partials).
  const Tensor* q8_src_ = nullptr;
  const Cublas* cublas_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  std::vector<Staging> staging_;
  std::vector<PendingGet> pending_;
  int sm_count_ = 1;                      // multiprocessors (CUs on AMD): sizes the attention split
  bool fa_split_ = true;                  // HERD_CUDA_FA_SPLIT != 0
  bool graphs_on_ = false;                // CUDA graphs for GraphCompute (HERD_CUDA_GRAPHS)
  cudaGraphExec_t graph_exec_ = nullptr;  // the last captured graph, instantiated
  std::vector<uint64_t> graph_key_;       // and its GraphKey
  int graph_rebuilds_ = 0;                // consecutive instantiations (or failed captures)
};

// After this many consecutive graph computes that each had to instantiate a new CUDA
// graph (topology changing every step) capture stops for the backend's life: each one
// costs more than it saves.
constexpr int kMaxGraphRebuilds = 4;

absl::Status CudaBackend::Init(const GpuOptions& opts) {
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  HERD_CUDA_RETURN_IF_ERROR("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
  HERD_CUDA_RETURN_IF_ERROR("cudaMalloc", cudaMalloc(reinterpret_cast<void**>(&err_dev_), sizeof(unsigned)));
  HERD_CUDA_RETURN_IF_ERROR(
      "cudaHostAlloc", cudaHostAlloc(reinterpret_cast<void**>(&err_host_), sizeof(unsigned), cudaHostAllocDefault));
#if HERD_GPU_HAS_BLAS
  const char* env = std::getenv("HERD_CUDA_NO_CUBLAS");
  const bool want = opts.use_cublas && !(env != nullptr && std::strcmp(env, "1") == 0);
  if (want) {
    const Cublas* c = LoadCublas();
    if (c != nullptr) {
      cublasStatus_t s = c->create(&handle_);
      if (s != CUBLAS_STATUS_SUCCESS) {
        HERD_LOG(Warning) << "CUDA backend: cublasCreate failed (" << c->StatusName(s) << "); using the tiled kernel";
        handle_ = nullptr;
      } else if ((s = c->set_stream(handle_, stream_)) != CUBLAS_STATUS_SUCCESS) {
        return absl::UnavailableError(absl::StrCat("cublasSetStream failed: ", c->StatusName(s)));
      } else {
        cublas_ = c;
      }
    }
  }
#else
  (void)opts;
#endif
  int sm = 0;
  if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, dev()) == cudaSuccess && sm > 0) {
    sm_count_ = sm;
  } else {
    (void)cudaGetLastError();
  }
  fa_split_ = !EnvIs("HERD_CUDA_FA_SPLIT", "0");
  // CUDA: on unless HERD_CUDA_GRAPHS=0. HIP: off unless HERD_CUDA_GRAPHS=1 (ROCm 5.2's
  // graph API is beta and unverified here).
  graphs_on_ = HERD_GPU_HIP ? EnvIs("HERD_CUDA_GRAPHS", "1") : !EnvIs("HERD_CUDA_GRAPHS", "0");
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cudaSetDevice(dev()) != cudaSuccess) return;
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  pending_.clear();
  DropCapturedGraph();
  scratch_.reset();
#if HERD_GPU_HAS_BLAS
  if (handle_ != nullptr && cublas_ != nullptr) cublas_->destroy(handle_);
#endif
  if (work_ != nullptr) (void)cudaFree(work_);
  for (Staging& s : staging_) (void)cudaFreeHost(s.p);
  if (err_dev_ != nullptr) (void)cudaFree(err_dev_);
  if (err_host_ != nullptr) (void)cudaFreeHost(err_host_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

DeviceInfo CudaBackend::device() const {
  DeviceInfo d = info_;
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(dev()) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    d.memory_free = free_b;
    d.memory_total = total_b;
  } else {
    (void)cudaGetLastError();
  }
  return d;
}

absl::StatusOr<uint8_t*> CudaBackend::Locate(const Tensor* t) const {
  const Buffer* b = nullptr;
  size_t offset = 0;
  if (absl::Status s = LocateTensor(t, buft_.get(), name(), &b, &offset); !s.ok()) return s;
  return static_cast<const CudaBuffer*>(b)->dev() + offset;
}

absl::StatusOr<DevTensor> CudaBackend::Dev(const Tensor* t, size_t elem_align) const {
  absl::StatusOr<uint8_t*> p = Locate(t);
  if (!p.ok()) return p.status();
  if (reinterpret_cast<uintptr_t>(*p) % elem_align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' starts at a device address that is not a multiple of ", elem_align));
  }
  DevTensor d;
  d.data = *p;
  for (int i = 0; i < 4; ++i) {
    d.ne[i] = t->ne[i];
    d.nb[i] = static_cast<int64_t>(t->nb[i]);
  }
  return d;
}

absl::StatusOr<uint8_t*> CudaBackend::Range(const Tensor* t, size_t offset, size_t size, const char* what) const {
  absl::StatusOr<uint8_t*> p = Locate(t);
  if (!p.ok()) return p.status();
  if (offset + size > t->nbytes()) {
    return absl::OutOfRangeError(absl::StrCat(what, " of ", size, " bytes at ", offset, " past tensor '", t->name,
                                              "' (", t->nbytes(), " bytes)"));
  }
  return *p + offset;
}

absl::Status CudaBackend::SyncLocked(const char* what) {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    pending_.clear();
    for (Staging& s : staging_) s.used = 0;
    return CudaError(what, e);
  }
  FinishPending();
  return absl::OkStatus();
}

void CudaBackend::FinishPending() {
  for (const PendingGet& g : pending_) std::memcpy(g.dst, g.staged, g.n);
  pending_.clear();
  for (Staging& s : staging_) s.used = 0;
}

uint8_t* CudaBackend::StagingAlloc(size_t n) {
  n = RoundUp(std::max<size_t>(n, 1), 64);
  size_t total = 0;
  for (Staging& s : staging_) {
    if (s.size - s.used >= n) {
      uint8_t* p = s.p + s.used;
      s.used += n;
      return p;
    }
    total += s.size;
  }
  const size_t size = std::max(n, kStagingBlock);
  if (total + size > kStagingMax) return nullptr;
  void* p = nullptr;
  if (cudaHostAlloc(&p, size, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  staging_.push_back(Staging{static_cast<uint8_t*>(p), size, n});
  return static_cast<uint8_t*>(p);
}

absl::Status CudaBackend::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint8_t*> p = Range(t, offset, size, "write");
  if (!p.ok()) return p.status();
  if (size == 0) return absl::OkStatus();
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(*p, data, size, cudaMemcpyHostToDevice, stream_));
  return SyncLocked("cudaStreamSynchronize (after a host-to-device copy)");
}

absl::Status CudaBackend::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint8_t*> p = Range(t, offset, size, "read");
  if (!p.ok()) return p.status();
  if (size == 0) return absl::OkStatus();
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(data, *p, size, cudaMemcpyDeviceToHost, stream_));
  return SyncLocked("cudaStreamSynchronize (after a device-to-host copy)");
}

absl::Status CudaBackend::SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint8_t*> p = Range(t, offset, size, "write");
  if (!p.ok()) return p.status();
  if (size == 0) return absl::OkStatus();
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  uint8_t* staged = StagingAlloc(size);
  if (staged == nullptr) {  // too large to stage: the caller's memory, synchronously
    HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(*p, data, size, cudaMemcpyHostToDevice, stream_));
    return SyncLocked("cudaStreamSynchronize (after a host-to-device copy)");
  }
  std::memcpy(staged, data, size);
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(*p, staged, size, cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint8_t*> p = Range(t, offset, size, "read");
  if (!p.ok()) return p.status();
  if (size == 0) return absl::OkStatus();
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  uint8_t* staged = StagingAlloc(size);
  if (staged == nullptr) {
    HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(data, *p, size, cudaMemcpyDeviceToHost, stream_));
    return SyncLocked("cudaStreamSynchronize (after a device-to-host copy)");
  }
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(staged, *p, size, cudaMemcpyDeviceToHost, stream_));
  pending_.push_back(PendingGet{staged, data, size});
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  std::lock_guard<std::mutex> lock(mu_);
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  return SyncLocked("cudaStreamSynchronize");
}

absl::Status CudaBackend::CopyTensor(const Tensor* src, Tensor* dst) {
  if (src->nbytes() != dst->nbytes() || src->type != dst->type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': type or size differ"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint8_t*> s = Locate(src);
  if (!s.ok()) return s.status();
  absl::StatusOr<uint8_t*> d = Locate(dst);
  if (!d.ok()) return d.status();
  const size_t n = src->nbytes();
  if (*s < *d + n && *d < *s + n) {
    if (*s == *d) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': their bytes overlap"));
  }
  if (n == 0) return absl::OkStatus();
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync", cudaMemcpyAsync(*d, *s, n, cudaMemcpyDeviceToDevice, stream_));
  return SyncLocked("cudaStreamSynchronize (after a device-to-device copy)");
}

bool CudaBackend::SupportsOp(const Tensor& n) const { return OpSupported(n, limits_); }

GemmPlan CudaBackend::PlanMulMat(const Tensor* n) const {
  GemmPlan p;
  const Tensor* w = n->src[0];
  const Tensor* x = n->src[1];
  const int64_t K = w->ne[0], M = w->ne[1];
  const int64_t ncols = x->ne[1] * x->ne[2] * x->ne[3];
  const WType wt = static_cast<WType>(WTypeOf(w->type));
  const bool quant = cuda::IsQuantWType(wt) && K % 32 == 0;
  const QuantPaths& paths = QuantPathsFromEnv();
  if (ncols <= cuda::kMatVecMaxCols) {
    // Decode: quantized weights with q8_1 activations and dp4a (MMVQ), else F32 activations.
    if (quant && paths.mmvq) {
      p.kind = GemmPlan::kMatVecQ8;
      p.x_bytes = static_cast<size_t>(ncols * (K / 32) * cuda::kQ8_1BlockBytes);
    } else {
      p.kind = GemmPlan::kMatVec;
    }
    return p;
  }
  if (cuda::kHasMma && quant && paths.mmq && ncols <= cuda::kMmaMaxCols) {
    p.kind = GemmPlan::kMma;  // small batches: weight tiles dequantized in shared memory only
    const int slices = cuda::MmaSplitK(M, K, ncols);
    if (slices > 1) p.x_bytes = static_cast<size_t>(slices * ncols * M) * sizeof(float);  // partial sums
    return p;
  }
  constexpr int64_t kIntMax = 0x7FFFFFFF;
  // cuBLAS takes int sizes and leading dimensions; the output's columns must be evenly
  // spaced (ldc), as must F32 weights' rows.
  if (cublas_ == nullptr || K > kIntMax || M > kIntMax || ncols > kIntMax || !UniformColumns(n) ||
      n->nb[1] / sizeof(float) > static_cast<size_t>(kIntMax) || w->nb[1] / 2 > static_cast<size_t>(kIntMax) ||
      x->nb[1] / sizeof(float) > static_cast<size_t>(kIntMax)) {
    p.kind = GemmPlan::kTiled;
    return p;
  }
  if (w->type == GgmlType::F32) {
    p.kind = GemmPlan::kSgemm;
    if (!UniformColumns(x)) p.x_bytes = static_cast<size_t>(K * ncols) * sizeof(float);
    return p;
  }
  p.kind = GemmPlan::kGemmEx;
  if (w->type != GgmlType::F16) p.w_bytes = static_cast<size_t>(K * M) * 2;
  p.x_bytes = static_cast<size_t>(K * ncols) * 2;
  return p;
}

cuda::attn::SplitPlan CudaBackend::PlanFlashAttn(const Tensor* n) const {
  const Tensor* q = n->src[0];
  const Tensor* k = n->src[1];
  if (!fa_split_) {
    cuda::attn::SplitPlan p;
    p.cells = k->ne[2];
    return p;
  }
  return cuda::attn::PlanSplit(q->ne[2], q->ne[1] * q->ne[2], k->ne[2], sm_count_);
}

absl::Status CudaBackend::EnsureScratch(size_t bytes) {
  if (scratch_ != nullptr && scratch_->size() >= bytes) return absl::OkStatus();
  absl::Status s = SyncLocked("cudaStreamSynchronize (before growing the compute scratch)");
  if (!s.ok()) return s;
  scratch_.reset();
  absl::StatusOr<std::unique_ptr<Buffer>> b = buft_->Allocate(bytes);
  if (!b.ok()) return b.status();
  scratch_ = std::move(*b);
  return absl::OkStatus();
}

absl::Status CudaBackend::EnsureWork(size_t bytes) {
  if (bytes <= work_size_) return absl::OkStatus();
  absl::Status s = SyncLocked("cudaStreamSynchronize (before growing the mul_mat scratch)");
  if (!s.ok()) return s;
  if (work_ != nullptr) {
    HERD_CUDA_RETURN_IF_ERROR("cudaFree", cudaFree(work_));
    work_ = nullptr;
    work_size_ = 0;
  }
  const size_t size = RoundUp(bytes, size_t{1} << 20);
  const cudaError_t e = cudaMalloc(&work_, size);
  if (e != cudaSuccess) {
    work_ = nullptr;
    return CudaError("cudaMalloc (mul_mat scratch)", e);
  }
  work_size_ = size;
  return absl::OkStatus();
}

#define HERD_LAUNCH(kernel, expr)                                                         \
  do {                                                                                    \
    const cudaError_t herd_cuda_e_ = (expr);                                              \
    if (herd_cuda_e_ != cudaSuccess) return CudaError("launch of " kernel, herd_cuda_e_); \
  } while (0)

absl::Status CudaBackend::EncodeMulMat(Tensor* n) {
  const Tensor* w = n->src[0];
  const Tensor* x = n->src[1];
  const WType wt = static_cast<WType>(WTypeOf(w->type));
  absl::StatusOr<DevTensor> dw = Dev(w, w->type == GgmlType::F32 ? 4 : 2);
  if (!dw.ok()) return dw.status();
  absl::StatusOr<DevTensor> dx = Dev(x, 4);
  if (!dx.ok()) return dx.status();
  absl::StatusOr<DevTensor> dd = Dev(n, 4);
  if (!dd.ok()) return dd.status();
  const GemmPlan plan = PlanMulMat(n);
  if (plan.kind != GemmPlan::kMatVecQ8 && plan.w_bytes + plan.x_bytes > 0) {
    q8_src_ = nullptr;  // this product overwrites work_
  }
  [[maybe_unused]] const int64_t K = w->ne[0], M = w->ne[1];  // unused without BLAS
  [[maybe_unused]] const int64_t ncols = x->ne[1] * x->ne[2] * x->ne[3];
  switch (plan.kind) {
    case GemmPlan::kMatVec:
      HERD_LAUNCH("mul_mat_vec", cuda::MulMatVec(wt, *dw, *dx, *dd, stream_));
      return absl::OkStatus();
    case GemmPlan::kMatVecQ8:
      // The activations to q8_1 at the start of the mul_mat scratch, then the dp4a mat-vec.
      // Skipped when the previous product quantized the same computed tensor: it is still
      // live (this product reads it), and only its own node writes it (no leaf, view or
      // set_rows result, whose memory other nodes may write).
      if (q8_src_ != x) {
        q8_src_ = nullptr;
        HERD_LAUNCH("quantize_q8_1", cuda::QuantizeQ8_1(*dx, work_, stream_));
        const bool own_memory =
            x->op != Op::kNone && x->op != Op::kView && x->op != Op::kSetRows && x->view_src == nullptr;
        if (own_memory) q8_src_ = x;
      }
      HERD_LAUNCH("mul_mat_vec_q8_1", cuda::MulMatVecQ8(wt, *dw, *dx, work_, *dd, stream_));
      return absl::OkStatus();
    case GemmPlan::kMma:
      HERD_LAUNCH("mul_mat_mma", cuda::MulMatMma(wt, *dw, *dx, *dd, work_, stream_));
      return absl::OkStatus();
    case GemmPlan::kTiled:
      HERD_LAUNCH("mul_mat_tiled", cuda::MulMatTiled(wt, *dw, *dx, *dd, stream_));
      return absl::OkStatus();
#if HERD_GPU_HAS_BLAS
    case GemmPlan::kSgemm: {
      const float* xp = reinterpret_cast<const float*>(dx->data);
      int64_t ldx = static_cast<int64_t>(x->nb[1] / sizeof(float));
      if (plan.x_bytes > 0) {
        HERD_LAUNCH("pack_rows", cuda::PackRows(*dx, /*to_f16=*/false, work_, stream_));
        xp = static_cast<const float*>(work_);
        ldx = K;
      }
      const float alpha = 1.0f, beta = 0.0f;
      // Column-major: dst (M x ncols) = W^T (W is K x M with ld nb1) * X (K x ncols).
      const cublasStatus_t s = cublas_->sgemm(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(M), static_cast<int>(ncols), static_cast<int>(K), &alpha,
          reinterpret_cast<const float*>(dw->data), static_cast<int>(w->nb[1] / sizeof(float)), xp,
          static_cast<int>(ldx), &beta, reinterpret_cast<float*>(dd->data), static_cast<int>(n->nb[1] / sizeof(float)));
      if (s != CUBLAS_STATUS_SUCCESS) {
        return absl::UnavailableError(absl::StrCat("cublasSgemm failed: ", cublas_->StatusName(s)));
      }
      return absl::OkStatus();
    }
    case GemmPlan::kGemmEx: {
      uint8_t* work = static_cast<uint8_t*>(work_);
      const void* wp = dw->data;
      int64_t ldw = static_cast<int64_t>(w->nb[1] / 2);
      if (plan.w_bytes > 0) {
        HERD_LAUNCH("dequantize_f16", cuda::DequantizeToF16(wt, *dw, work, stream_));
        wp = work;
        ldw = K;
      }
      void* xp = work + RoundUp(plan.w_bytes, kAlignment);
      HERD_LAUNCH("pack_rows", cuda::PackRows(*dx, /*to_f16=*/true, xp, stream_));
      const float alpha = 1.0f, beta = 0.0f;
      const cublasStatus_t s = cublas_->gemm_ex(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(M), static_cast<int>(ncols), static_cast<int>(K), &alpha,
          wp, CUDA_R_16F, static_cast<int>(ldw), xp, CUDA_R_16F, static_cast<int>(K), &beta, dd->data, CUDA_R_32F,
          static_cast<int>(n->nb[1] / sizeof(float)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) {
        return absl::UnavailableError(absl::StrCat("cublasGemmEx failed: ", cublas_->StatusName(s)));
      }
      return absl::OkStatus();
    }
#else
    case GemmPlan::kSgemm:
    case GemmPlan::kGemmEx:
      break;  // never planned without a BLAS library
#endif
  }
  return absl::InternalError("mul_mat: unknown plan");
}

absl::Status CudaBackend::Encode(Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  switch (n->op) {
    case Op::kGetRows: {
      absl::StatusOr<DevTensor> da = Dev(a, a->type == GgmlType::F32 ? 4 : 2);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> db = Dev(b, 4);
      if (!db.ok()) return db.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      HERD_LAUNCH("get_rows", cuda::GetRows(static_cast<WType>(WTypeOf(a->type)), *da, *db, *dn, err_dev_, stream_));
      return absl::OkStatus();
    }
    case Op::kMulMat:
      return EncodeMulMat(n);
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu: {
      absl::StatusOr<DevTensor> da = Dev(a, 4);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> db = Dev(b, 4);
      if (!db.ok()) return db.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      const cuda::BinaryOp op = n->op == Op::kAdd   ? cuda::BinaryOp::kAdd
                                : n->op == Op::kMul ? cuda::BinaryOp::kMul
                                                    : cuda::BinaryOp::kSwiglu;
      HERD_LAUNCH("binary", cuda::Binary(op, *da, *db, *dn, stream_));
      return absl::OkStatus();
    }
    case Op::kScale:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kGeluErf:
    case Op::kClamp:
    case Op::kCont: {
      absl::StatusOr<DevTensor> da = Dev(a, 4);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      cuda::UnaryOp op = cuda::UnaryOp::kCopy;
      if (n->op == Op::kScale) op = cuda::UnaryOp::kScale;
      if (n->op == Op::kSilu) op = cuda::UnaryOp::kSilu;
      if (n->op == Op::kGelu) op = cuda::UnaryOp::kGelu;
      if (n->op == Op::kGeluErf) op = cuda::UnaryOp::kGeluErf;
      if (n->op == Op::kClamp) op = cuda::UnaryOp::kClamp;
      float fp[2];
      ElementOpFloats(*n, fp);
      HERD_LAUNCH("unary", cuda::Unary(op, *da, *dn, fp[0], fp[1], stream_));
      return absl::OkStatus();
    }
    case Op::kRmsNorm:
    case Op::kNorm: {
      absl::StatusOr<DevTensor> da = Dev(a, 4);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      HERD_LAUNCH("norm", cuda::Norm(n->op == Op::kRmsNorm, *da, *dn, NormParams::Of(*n).eps, stream_));
      return absl::OkStatus();
    }
    case Op::kSoftMax: {
      absl::StatusOr<DevTensor> da = Dev(a, 4);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      DevTensor dm;
      if (b != nullptr) {
        absl::StatusOr<DevTensor> r = Dev(b, 4);
        if (!r.ok()) return r.status();
        dm = *r;
      }
      const SoftMaxParams sp = SoftMaxParams::Of(*n);
      HERD_LAUNCH("soft_max", cuda::SoftMax(*da, b != nullptr ? &dm : nullptr, *dn, sp.scale,
                                            AlibiParams(n->ne[2], sp.max_bias), stream_));
      return absl::OkStatus();
    }
    case Op::kRope: {
      const Tensor* ff = n->src[2];
      absl::StatusOr<DevTensor> da = Dev(a, 4);
      if (!da.ok()) return da.status();
      absl::StatusOr<DevTensor> dpos = Dev(b, 4);
      if (!dpos.ok()) return dpos.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      DevTensor dff;
      if (ff != nullptr) {
        absl::StatusOr<DevTensor> r = Dev(ff, 4);
        if (!r.ok()) return r.status();
        dff = *r;
      }
      const cuda::RopeConsts rc = RopeConstsOf(*n);
      HERD_LAUNCH("rope", cuda::Rope(*da, *dpos, ff != nullptr ? &dff : nullptr, *dn, rc, stream_));
      return absl::OkStatus();
    }
    case Op::kSetRows: {
      const Tensor* idx = n->src[2];
      const bool f16 = a->type == GgmlType::F16;
      absl::StatusOr<DevTensor> dd = Dev(a, f16 ? 2 : 4);
      if (!dd.ok()) return dd.status();
      absl::StatusOr<DevTensor> ds = Dev(b, 4);
      if (!ds.ok()) return ds.status();
      absl::StatusOr<DevTensor> di = Dev(idx, 4);
      if (!di.ok()) return di.status();
      HERD_LAUNCH("set_rows", cuda::SetRows(*dd, f16, *ds, *di, err_dev_, stream_));
      return absl::OkStatus();
    }
    case Op::kFlashAttnExt: {
      const Tensor* k = n->src[1];
      const Tensor* v = n->src[2];
      const Tensor* mask = n->src[3];
      const bool f16 = k->type == GgmlType::F16;
      absl::StatusOr<DevTensor> dq = Dev(a, 4);
      if (!dq.ok()) return dq.status();
      absl::StatusOr<DevTensor> dk = Dev(k, f16 ? 2 : 4);
      if (!dk.ok()) return dk.status();
      absl::StatusOr<DevTensor> dv = Dev(v, f16 ? 2 : 4);
      if (!dv.ok()) return dv.status();
      absl::StatusOr<DevTensor> dn = Dev(n, 4);
      if (!dn.ok()) return dn.status();
      DevTensor dm;
      if (mask != nullptr) {
        absl::StatusOr<DevTensor> r = Dev(mask, 4);
        if (!r.ok()) return r.status();
        dm = *r;
      }
      const FlashAttnParams fp = FlashAttnParams::Of(*n);
      const cuda::attn::SplitPlan plan = PlanFlashAttn(n);
      cuda::FlashAttnSplit split;
      split.n_split = plan.n_split;
      split.cells = plan.cells;
      split.partials = plan.n_split > 1 ? work_ : nullptr;  // sized by GraphCompute
      if (plan.n_split > 1) q8_src_ = nullptr;              // the partials overwrite the q8_1 copy
      HERD_LAUNCH("flash_attn_ext", cuda::FlashAttn(*dq, *dk, *dv, mask != nullptr ? &dm : nullptr, *dn, f16, fp.scale,
                                                    AlibiParams(a->ne[1], fp.max_bias), split, stream_));
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(absl::StrCat(name(), " does not support ", OpName(n->op)));
  }
}

absl::Status CudaBackend::GraphCompute(Graph& g) {
  for (Tensor* n : g.nodes()) {
    if (!SupportsOp(*n)) {
      return absl::UnimplementedError(
          absl::StrCat(name(), " does not support ", OpName(n->op), " for node '", n->name, "'"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  HERD_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(dev()));
  if (absl::Status s = PlaceInScratch(
          g, buft_->alignment(), kFakeBase, [this](size_t bytes) { return EnsureScratch(bytes); }, scratch_);
      !s.ok()) {
    return s;
  }
  size_t work = 0;
  for (Tensor* n : g.nodes()) {
    if (n->op != Op::kMulMat) continue;
    const GemmPlan p = PlanMulMat(n);
    work = std::max(work, RoundUp(p.w_bytes, kAlignment) + p.x_bytes);
  }
  for (Tensor* n : g.nodes()) {  // split attention's partials share the mul_mat scratch
    if (n->op != Op::kFlashAttnExt) continue;
    const cuda::attn::SplitPlan p = PlanFlashAttn(n);
    if (p.n_split <= 1) continue;
    const Tensor* q = n->src[0];
    work = std::max(work, cuda::attn::PartialFloats(q->ne[0], q->ne[1] * q->ne[2], p.n_split) * sizeof(float));
  }
  q8_src_ = nullptr;  // tensors of another graph
  absl::Status s = EnsureWork(work);
  if (!s.ok()) return s;
  bool ran = false;  // through a CUDA graph
  if (Capturable(g)) s = RunCaptured(g, &ran);
  if (s.ok() && !ran) s = EncodeGraph(g);
  if (!s.ok()) {
    // Let what was queued finish before the caller touches the memory again.
    (void)cudaStreamSynchronize(stream_);
    (void)cudaGetLastError();
    return s;
  }
  s = SyncLocked("cudaStreamSynchronize (after the graph)");
  if (!graphs_on_ && graph_exec_ != nullptr) DropCapturedGraph();  // turned off: free it once it has run
  if (!s.ok()) return s;
  const unsigned flags = *err_host_;
  if (flags & cuda::kErrGetRowsIndex) {
    return absl::InvalidArgumentError("get_rows: an id is outside the rows of its source (zeros written)");
  }
  if (flags & cuda::kErrSetRowsIndex) {
    return absl::InvalidArgumentError("set_rows: a row index is outside the destination (row skipped)");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::EncodeGraph(Graph& g) {
  HERD_CUDA_RETURN_IF_ERROR("cudaMemsetAsync", cudaMemsetAsync(err_dev_, 0, sizeof(unsigned), stream_));
  for (Tensor* n : g.nodes()) {
    if (n->op == Op::kNone || n->op == Op::kView) continue;
    const absl::Status s = Encode(n);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(OpName(n->op), " '", n->name, "': ", s.message()));
  }
  HERD_CUDA_RETURN_IF_ERROR("cudaMemcpyAsync",
                            cudaMemcpyAsync(err_host_, err_dev_, sizeof(unsigned), cudaMemcpyDeviceToHost, stream_));
  return absl::OkStatus();
}

bool CudaBackend::Capturable(const Graph& g) const {
  if (!graphs_on_) return false;
  bool any = false;
  for (const Tensor* n : g.nodes()) {
    if (n->op == Op::kNone || n->op == Op::kView) continue;
    any = true;
    if (n->op == Op::kMulMat) {
      const Tensor* x = n->src[1];
      if (x->ne[1] * x->ne[2] * x->ne[3] > cuda::kMatVecMaxCols) return false;
    }
  }
  return any;
}

std::vector<uint64_t> CudaBackend::GraphKey(const Graph& g) const {
  std::vector<uint64_t> key;
  key.reserve(g.nodes().size() * 64 + 2);
  const auto add_tensor = [&](const Tensor* t) {
    if (t == nullptr) {
      key.push_back(0);
      return;
    }
    absl::StatusOr<uint8_t*> p = Locate(t);
    key.push_back(p.ok() ? reinterpret_cast<uintptr_t>(*p) : 1);
    key.push_back(static_cast<uint64_t>(t->type));
    for (int i = 0; i < 4; ++i) {
      key.push_back(static_cast<uint64_t>(t->ne[i]));
      key.push_back(static_cast<uint64_t>(t->nb[i]));
    }
  };
  for (const Tensor* n : g.nodes()) {
    if (n->op == Op::kNone || n->op == Op::kView) continue;
    key.push_back(static_cast<uint64_t>(n->op));
    for (int32_t v : n->i_params) key.push_back(static_cast<uint32_t>(v));
    for (float v : n->f_params) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      key.push_back(bits);
    }
    add_tensor(n);
    for (const Tensor* src : n->src) add_tensor(src);
  }
  key.push_back(reinterpret_cast<uintptr_t>(work_));
  key.push_back(reinterpret_cast<uintptr_t>(err_dev_));
  return key;
}

void CudaBackend::DropCapturedGraph() {
  if (graph_exec_ != nullptr) (void)cudaGraphExecDestroy(graph_exec_);
  graph_exec_ = nullptr;
  graph_key_.clear();
}

absl::Status CudaBackend::RunCaptured(Graph& g, bool* ran) {
  *ran = false;
  std::vector<uint64_t> key = GraphKey(g);
  if (graph_exec_ == nullptr || key != graph_key_) {
    // Capture: nothing runs, the launches are recorded. No step of EncodeGraph waits for
    // the host (scratch grew before; the error word is read after the launch).
    cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      HERD_LOG(Warning) << name() << ": " << ApiCall("cudaStreamBeginCapture") << " failed (" << cudaGetErrorName(e)
                        << "); graphs off, kernels launched one by one";
      graphs_on_ = false;
      DropCapturedGraph();
      return absl::OkStatus();
    }
    const absl::Status s = EncodeGraph(g);
    cudaGraph_t graph = nullptr;
    e = cudaStreamEndCapture(stream_, &graph);
    if (e != cudaSuccess || graph == nullptr) {
      // Invalidated (the legacy default stream used meanwhile, or the failed launch
      // itself): the caller runs the graph eagerly, which reports a real error naming its op.
      (void)cudaGetLastError();
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      if (++graph_rebuilds_ >= kMaxGraphRebuilds) {
        HERD_LOG(Info) << name() << ": stream capture failed " << graph_rebuilds_
                       << " computes in a row; CUDA graphs off, kernels launched one by one";
        graphs_on_ = false;
      }
      DropCapturedGraph();
      return absl::OkStatus();
    }
    if (!s.ok()) {  // a failure of its own (EncodeGraph names the op); nothing was enqueued
      (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      return s;
    }
    const bool updated = graph_exec_ != nullptr && GraphExecUpdate(graph_exec_, graph);
    if (!updated) {
      DropCapturedGraph();
      e = GraphInstantiate(&graph_exec_, graph);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        HERD_LOG(Warning) << name() << ": " << ApiCall("cudaGraphInstantiate") << " failed (" << cudaGetErrorName(e)
                          << "); graphs off, kernels launched one by one";
        graph_exec_ = nullptr;
        graphs_on_ = false;
        (void)cudaGraphDestroy(graph);
        return absl::OkStatus();  // the caller enqueues the graph eagerly
      }
      if (++graph_rebuilds_ >= kMaxGraphRebuilds) {
        HERD_LOG(Info) << name() << ": a new graph topology " << graph_rebuilds_
                       << " computes in a row; CUDA graphs off, kernels launched one by one";
        graphs_on_ = false;
      }
    } else {
      graph_rebuilds_ = 0;
    }
    (void)cudaGraphDestroy(graph);  // the executable keeps what it needs
    graph_key_ = std::move(key);
  } else {
    graph_rebuilds_ = 0;
  }
  HERD_CUDA_RETURN_IF_ERROR("cudaGraphLaunch", cudaGraphLaunch(graph_exec_, stream_));
  *ran = true;
  return absl::OkStatus();
}

std::vector<DeviceInfo> GpuDevices() {
  std::vector<DeviceInfo> out;
  const Probe p = ProbeDevices();
  for (int i = 0; i < p.count; ++i) {
    absl::StatusOr<DeviceInfo> d = MakeDeviceInfo(i);
    if (d.ok()) out.push_back(*std::move(d));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend(int device, const GpuOptions& opts) {
  const Probe p = ProbeDevices();
  if (device < 0 || device >= p.count) {
    return absl::NotFoundError(absl::StrCat("no ", HERD_GPU_API, " device ", device, " (", p.count, " found",
                                            p.reason.empty() ? "" : absl::StrCat("; ", p.reason), ")"));
  }
  absl::StatusOr<DeviceInfo> info = MakeDeviceInfo(device);
  if (!info.ok()) return info.status();
  auto buft = std::make_shared<CudaBufferType>(device, info->name);
  auto backend = std::make_unique<CudaBackend>(*info, buft);
  absl::Status s = backend->Init(opts);
  if (!s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace

#if HERD_GPU_HIP

std::vector<DeviceInfo> HipDevices() { return GpuDevices(); }

std::string HipUnavailableReason() { return ProbeDevices().reason; }

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(int device) { return CreateGpuBackend(device, GpuOptions()); }

#else

std::vector<DeviceInfo> CudaDevices() { return GpuDevices(); }

std::string CudaUnavailableReason() { return ProbeDevices().reason; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, const CudaBackendOptions& opts) {
  return CreateGpuBackend(device, opts);
}

bool CudaBackendUsesCublas(const Backend* backend) {
  const auto* b = dynamic_cast<const CudaBackend*>(backend);
  return b != nullptr && b->uses_cublas();
}

#endif  // HERD_GPU_HIP

}  // namespace herd
