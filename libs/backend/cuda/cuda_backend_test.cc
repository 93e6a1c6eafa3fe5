// What is specific to the CUDA backend: its device, buffers, sync and async transfers,
// the two paths of batched products (cuBLAS when libcublas.so.13 is present, the built-in
// tiled kernel), errors for bad indices and refusal of the ops it lacks. Op results
// against the CPU over every op x type x shape are tests/backend_ops's. Skips, saying why,
// when there is no CUDA device (no driver, or none present).
//
// The same file tests the HIP backend (//libs/backend/hip:hip_backend_test compiles it
// with HERD_HIP: no BLAS there; skips without an AMD GPU).
#if defined(HERD_HIP)
#include "libs/backend/hip/hip_backend.h"
#else
#include "libs/backend/cuda/cuda_backend.h"
#endif

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/testing/device_checks.h"
#include "libs/backend/testing/op_graph.h"

namespace herd {
namespace {

using testing::OpGraph;

// The build under test.
#if defined(HERD_HIP)
constexpr char kKind[] = "hip";
constexpr char kDevice0[] = "HIP0";
constexpr char kApi[] = "HIP";
std::vector<DeviceInfo> GpuDevices() { return HipDevices(); }
std::string GpuUnavailableReason() { return HipUnavailableReason(); }
absl::StatusOr<std::unique_ptr<Backend>> CreateGpu(int device, bool /*use_blas*/) { return CreateHipBackend(device); }
bool UsesBlas(const Backend* /*backend*/) { return false; }
constexpr char kBlasName[] = "BLAS";
#else
constexpr char kKind[] = "cuda";
constexpr char kDevice0[] = "CUDA0";
constexpr char kApi[] = "CUDA";
std::vector<DeviceInfo> GpuDevices() { return CudaDevices(); }
std::string GpuUnavailableReason() { return CudaUnavailableReason(); }
absl::StatusOr<std::unique_ptr<Backend>> CreateGpu(int device, bool use_blas) {
  CudaBackendOptions o;
  o.use_cublas = use_blas;
  return CreateCudaBackend(device, o);
}
bool UsesBlas(const Backend* backend) { return CudaBackendUsesCublas(backend); }
constexpr char kBlasName[] = "cuBLAS";
#endif

class CudaBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    devices_ = new std::vector<DeviceInfo>(GpuDevices());
    if (devices_->empty()) return;
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateGpu(0, true);
    ASSERT_TRUE(be.ok()) << be.status();
    gpu_ = be->release();
    be = CreateGpu(0, false);
    ASSERT_TRUE(be.ok()) << be.status();
    tiled_ = be->release();
    std::printf("%s device: %s; %s %s\n", kApi, (*devices_)[0].description.c_str(), kBlasName,
                UsesBlas(gpu_) ? "loaded" : "not available (tiled kernel only)");
    cpu_ = new CpuBackend(2);
  }
  static void TearDownTestSuite() {
    delete gpu_;
    delete tiled_;
    delete cpu_;
    delete devices_;
    gpu_ = nullptr;
    tiled_ = nullptr;
    cpu_ = nullptr;
    devices_ = nullptr;
  }
  void SetUp() override {
    if (devices_->empty()) {
      GTEST_SKIP() << "no " << kApi << " device (" << GpuUnavailableReason() << "): the " << kApi
                   << " backend is not tested";
    }
    ASSERT_NE(gpu_, nullptr);
  }

  static std::vector<DeviceInfo>* devices_;
  static Backend* gpu_;    // cuBLAS for batched products when present
  static Backend* tiled_;  // never cuBLAS
  static CpuBackend* cpu_;
};

std::vector<DeviceInfo>* CudaBackendTest::devices_ = nullptr;
Backend* CudaBackendTest::gpu_ = nullptr;
Backend* CudaBackendTest::tiled_ = nullptr;
CpuBackend* CudaBackendTest::cpu_ = nullptr;

TEST_F(CudaBackendTest, DeviceInfo) {
  testing::ExpectDevice0((*devices_)[0], kKind, kDevice0, gpu_, cpu_);
  EXPECT_GT(gpu_->device().memory_free, 0u);  // cudaMemGetInfo
}

TEST_F(CudaBackendTest, MissingDeviceIsNotFound) {
  absl::StatusOr<std::unique_ptr<Backend>> be = CreateGpu(static_cast<int>(devices_->size()) + 5, true);
  EXPECT_EQ(be.status().code(), absl::StatusCode::kNotFound) << be.status();
}

// Runs on every machine: with no device (no driver, no GPU) the runtime still loads and
// creating a backend is NOT_FOUND with the reason, never a crash.
TEST(CudaBackendNoDeviceTest, CreatingAMissingDeviceIsNotFound) {
  const std::vector<DeviceInfo> devs = GpuDevices();
  const int missing = static_cast<int>(devs.size());
  absl::StatusOr<std::unique_ptr<Backend>> be = CreateGpu(missing, true);
  ASSERT_EQ(be.status().code(), absl::StatusCode::kNotFound) << be.status();
  EXPECT_NE(be.status().message().find(std::string("no ") + kApi + " device " + std::to_string(missing)),
            std::string::npos)
      << be.status();
  if (devs.empty()) {
    EXPECT_FALSE(GpuUnavailableReason().empty());
    std::printf("no %s device here: %s\n", kApi, std::string(be.status().message()).c_str());
  }
}

TEST_F(CudaBackendTest, TransfersRoundTrip) { testing::ExpectTransfersRoundTrip(gpu_, cpu_); }

TEST_F(CudaBackendTest, AsyncTransfers) {
  Graph g;
  Tensor* a = g.NewTensor(GgmlType::F32, {4096, 5});
  absl::StatusOr<std::unique_ptr<Buffer>> buf = gpu_->default_buffer_type()->Allocate(a->nbytes());
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_TRUE(PlaceTensor(a, buf->get(), 0).ok());
  const std::vector<float> v = OpGraph::Floats(4096 * 5, 9);
  std::vector<float> back(v.size(), -1.0f), part(10, -1.0f);
  for (int rep = 0; rep < 3; ++rep) {  // staging reused after each Synchronize
    ASSERT_TRUE(gpu_->SetTensorAsync(a, v.data(), 0, v.size() * 4).ok());
    ASSERT_TRUE(gpu_->GetTensorAsync(a, back.data(), 0, back.size() * 4).ok());
    ASSERT_TRUE(gpu_->GetTensorAsync(a, part.data(), 4 * 4090, part.size() * 4).ok());
    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_EQ(back, v);
    EXPECT_EQ(part, std::vector<float>(v.begin() + 4090, v.begin() + 4100));
    std::fill(back.begin(), back.end(), -1.0f);
  }
  EXPECT_EQ(gpu_->GetTensorAsync(a, back.data(), 4, a->nbytes()).code(), absl::StatusCode::kOutOfRange);
}

// Batched products through cuBLAS and through the tiled kernel agree with the CPU
// (tests/backend_ops runs the backend as the registry creates it: cuBLAS when present).
TEST_F(CudaBackendTest, BlasAndTiledProductsAgree) {
  if (!UsesBlas(gpu_)) GTEST_SKIP() << kBlasName << " not loaded: backend_ops covers the tiled kernel";
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const std::vector<int64_t>& x :
         std::vector<std::vector<int64_t>>{{512, 17}, {512, 70}, {512, 5, 3}, {512, 512}}) {
      SCOPED_TRACE(GgmlTypeName(t) + " x [" + std::to_string(x[1]) + (x.size() > 2 ? " x 3]" : "]"));
      const testing::BuildFn fn = [&](OpGraph& b) { return b.g().MulMat(b.Typed(t, {512, 300}, 31), b.F32(x, 32)); };
      absl::StatusOr<std::vector<float>> want = testing::RunOn(cpu_, fn);
      ASSERT_TRUE(want.ok()) << want.status();
      for (Backend* be : {gpu_, tiled_}) {
        absl::StatusOr<std::vector<float>> got = testing::RunOn(be, fn);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_LE(testing::Nmse(*got, *want), t == GgmlType::F32 ? 1e-6 : 5e-4) << (be == gpu_ ? kBlasName : "tiled");
      }
    }
  }
}

// A decode-like graph (a mat-vec product viewed as q, attention over F16 K/V caches of
// n_kv cells) computed again and again on one backend: the first compute captures a CUDA
// graph, the next ones replay it and must see each new input; a new KV length (new shapes:
// a graph update, or a new capture when the attention's split changes) still agrees with
// the CPU. Also with HERD_CUDA_GRAPHS=0 and HERD_CUDA_FA_SPLIT=0 (eager, unsplit).
TEST_F(CudaBackendTest, RepeatedDecodeGraphsSeeNewInputs) {
  for (bool plain : {false, true}) {
    if (plain) {
      setenv("HERD_CUDA_GRAPHS", "0", 1);
      setenv("HERD_CUDA_FA_SPLIT", "0", 1);
    }
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateGpu(0, true);
    unsetenv("HERD_CUDA_GRAPHS");
    unsetenv("HERD_CUDA_FA_SPLIT");
    ASSERT_TRUE(be.ok()) << be.status();
    for (int64_t n_kv : {700, 700, 1500, 40, 1500}) {
      SCOPED_TRACE((plain ? "eager, unsplit; n_kv " : "graphs, split; n_kv ") + std::to_string(n_kv));
      Tensor* x_leaf = nullptr;
      const auto fn = [&](uint32_t seed) -> testing::BuildFn {
        return [&x_leaf, n_kv, seed](OpGraph& b) {
          Graph& g = b.g();
          const int64_t hd = 64, n_head = 4, n_head_kv = 2;
          Tensor* x = b.F32({hd, 1}, seed);
          x_leaf = x;
          Tensor* qm = g.MulMat(b.Typed(GgmlType::Q8_0, {hd, hd * n_head}, 41), x);
          Tensor* q = g.View(qm, {hd, n_head, 1}, {hd * sizeof(float), hd * n_head * sizeof(float)}, 0);
          Tensor* kc = b.Typed(GgmlType::F16, {hd * n_head_kv, n_kv}, 42);
          Tensor* vc = b.Typed(GgmlType::F16, {hd * n_head_kv, n_kv}, 43);
          Tensor* k = g.View(kc, {hd, n_head_kv, n_kv}, {2 * hd, kc->nb[1]}, 0);
          Tensor* v = g.View(vc, {hd, n_head_kv, n_kv}, {2 * hd, vc->nb[1]}, 0);
          Tensor* m = b.F32Values({n_kv, 1}, testing::CausalMask(n_kv, 1, false));
          return g.FlashAttnExt(q, k, v, m, 0.125f, 0.0f);
        };
      };
      absl::StatusOr<std::unique_ptr<testing::PlacedGraph>> pg = testing::PlacedGraph::Create(be->get(), fn(1));
      ASSERT_TRUE(pg.ok()) << pg.status();
      Tensor* x = x_leaf;
      for (uint32_t seed : {1u, 2u, 3u, 4u}) {
        const std::vector<float> xv = OpGraph::Floats(64, seed);
        ASSERT_TRUE((*be)->SetTensor(x, xv.data(), 0, xv.size() * sizeof(float)).ok());
        ASSERT_TRUE((*pg)->Compute().ok());
        absl::StatusOr<std::vector<float>> got = (*pg)->Output();
        ASSERT_TRUE(got.ok()) << got.status();
        absl::StatusOr<std::vector<float>> want = testing::RunOn(cpu_, fn(seed));
        ASSERT_TRUE(want.ok()) << want.status();
        EXPECT_LE(testing::Nmse(*got, *want), 5e-4) << "input seed " << seed;
      }
    }
  }
}

TEST_F(CudaBackendTest, BadIndexIsAnError) { testing::ExpectBadIndexIsAnError(gpu_, cpu_); }

TEST_F(CudaBackendTest, UnsupportedOpsAreRefused) { testing::ExpectUnsupportedOpsAreRefused(gpu_); }

}  // namespace
}  // namespace herd
