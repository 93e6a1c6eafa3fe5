// The CUDA backend against the CPU backend: every op x type on small graphs with odd
// sizes, batches, broadcasts and strided views, compared by normalized mean squared
// error NMSE = sum((cuda - cpu)^2) / sum(cpu^2) with per-op thresholds (the structure of
// libs/backend/vulkan/vulkan_backend_test.cc). Batched products run both through cuBLAS
// (when libcublas.so.13 is present) and through the built-in tiled kernel. Skips, saying
// why, when there is no CUDA device (no driver, or none present).
//
// The same file tests the HIP backend (//libs/backend/hip:hip_backend_test compiles it
// with HERD_HIP: no BLAS there, so every product runs on the backend's own kernels;
// skips without an AMD GPU).
#if defined(HERD_HIP)
#include "libs/backend/hip/hip_backend.h"
#else
#include "libs/backend/cuda/cuda_backend.h"
#endif

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/base/fp16.h"
#include "libs/tensor/quants.h"

namespace herd {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

// Thresholds.
constexpr double kExact = 1e-7;     // F32 ops that agree to float rounding
constexpr double kF16Quant = 5e-4;  // F16 / quantized dot products, flash attention

// A graph under construction and the host bytes of its leaves.
class Builder {
 public:
  Graph& g() { return g_; }
  Tensor* Raw(GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
    Tensor* t = g_.NewTensor(type, std::move(ne));
    t->name = "leaf" + std::to_string(data_.size());
    t->is_input = true;
    bytes.resize(t->nbytes());
    data_[t] = std::move(bytes);
    return t;
  }
  /// Uniform floats in [lo, hi) from `seed`.
  static std::vector<float> Floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  }
  Tensor* F32(std::vector<int64_t> ne, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    int64_t n = 1;
    for (int64_t e : ne) n *= e;
    return F32Values(std::move(ne), Floats(n, seed, lo, hi));
  }
  Tensor* F32Values(std::vector<int64_t> ne, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return Raw(GgmlType::F32, std::move(ne), std::move(b));
  }
  /// Random floats converted row by row to `type` (F16 or a block type).
  Tensor* Typed(GgmlType type, std::vector<int64_t> ne, uint32_t seed) {
    if (type == GgmlType::F32) return F32(std::move(ne), seed);
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const std::vector<float> v = Floats(ne[0] * rows, seed);
    const size_t row_bytes = GgmlRowSize(type, ne[0]);
    std::vector<uint8_t> b(row_bytes * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(type, v.data() + r * ne[0], b.data() + static_cast<size_t>(r) * row_bytes, ne[0]);
    }
    return Raw(type, std::move(ne), std::move(b));
  }
  Tensor* I32(const std::vector<int32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return Raw(GgmlType::I32, {static_cast<int64_t>(v.size())}, std::move(b));
  }
  const std::map<Tensor*, std::vector<uint8_t>>& data() const { return data_; }

 private:
  Graph g_;
  std::map<Tensor*, std::vector<uint8_t>> data_;
};

using BuildFn = std::function<Tensor*(Builder&)>;

// Output of `fn`'s graph computed on `be`, as floats (F16 outputs converted).
// `placed`: place every node in a buffer first and compute Graph::Placed(nodes).
absl::StatusOr<std::vector<float>> RunOn(Backend* be, const BuildFn& fn, bool placed = false) {
  Builder b;
  Tensor* out = fn(b);
  b.g().SetOutput(out);
  BufferType* bt = be->default_buffer_type();
  const size_t align = bt->alignment();
  const auto rounded = [&](const Tensor* t) { return (t->nbytes() + align - 1) / align * align; };
  size_t total = 0;
  for (const auto& [t, bytes] : b.data()) total += rounded(t);
  if (placed) {
    for (Tensor* n : b.g().nodes()) {
      if (n->view_src == nullptr) total += rounded(n);
    }
  }
  absl::StatusOr<std::unique_ptr<Buffer>> buf = bt->Allocate(total);
  if (!buf.ok()) return buf.status();
  size_t off = 0;
  for (const auto& [t, bytes] : b.data()) {
    absl::Status s = PlaceTensor(t, buf->get(), off);
    if (!s.ok()) return s;
    off += rounded(t);
    s = be->SetTensor(t, bytes.data(), 0, bytes.size());
    if (!s.ok()) return s;
  }
  absl::Status s;
  if (placed) {
    for (Tensor* n : b.g().nodes()) {
      if (n->view_src != nullptr) {
        n->data = static_cast<uint8_t*>(n->view_src->data) + n->view_offs;
        n->buffer = n->view_src->buffer;
      } else {
        s = PlaceTensor(n, buf->get(), off);
        if (!s.ok()) return s;
        off += rounded(n);
      }
    }
    std::unique_ptr<Graph> pg = Graph::Placed(b.g().nodes());
    s = be->GraphCompute(*pg);
  } else {
    s = be->GraphCompute(b.g());
  }
  if (!s.ok()) return s;
  std::vector<float> result(static_cast<size_t>(out->nelements()));
  if (out->type == GgmlType::F16) {
    std::vector<uint16_t> h(result.size());
    s = be->GetTensor(out, h.data(), 0, h.size() * 2);
    for (size_t i = 0; i < h.size(); ++i) result[i] = Fp16ToFp32(h[i]);
  } else {
    s = be->GetTensor(out, result.data(), 0, result.size() * 4);
  }
  if (!s.ok()) return s;
  return result;
}

double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return num / den;
}

struct Row {
  std::string op, type, shape;
  double nmse, limit;
};

class CudaBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    devices_ = new std::vector<DeviceInfo>(GpuDevices());
    if (devices_->empty()) return;
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateGpu(0, true);
    ASSERT_TRUE(be.ok()) << be.status();
    cuda_ = be->release();
    be = CreateGpu(0, false);
    ASSERT_TRUE(be.ok()) << be.status();
    tiled_ = be->release();
    std::printf("%s device: %s; %s %s\n", kApi, (*devices_)[0].description.c_str(), kBlasName,
                UsesBlas(cuda_) ? "loaded" : "not available (tiled kernel only)");
    cpu_ = new CpuBackend(2);
    rows_ = new std::vector<Row>();
  }
  static void TearDownTestSuite() {
    if (rows_ != nullptr && !rows_->empty()) {
      std::printf("\n%-16s %-6s %-34s %12s %10s\n", "op", "type", "shape", "NMSE", "limit");
      std::map<std::string, double> worst;
      for (const Row& r : *rows_) {
        std::printf("%-16s %-6s %-34s %12.3e %10.1e\n", r.op.c_str(), r.type.c_str(), r.shape.c_str(), r.nmse, r.limit);
        worst[r.op] = std::max(worst[r.op], r.nmse);
      }
      std::printf("\n%zu cases; worst NMSE per op:\n", rows_->size());
      for (const auto& [op, w] : worst) std::printf("  %-16s %.3e\n", op.c_str(), w);
    }
    delete cuda_;
    delete tiled_;
    delete cpu_;
    delete rows_;
    delete devices_;
    cuda_ = nullptr;
    tiled_ = nullptr;
    cpu_ = nullptr;
    rows_ = nullptr;
    devices_ = nullptr;
  }
  void SetUp() override {
    if (devices_->empty()) {
      GTEST_SKIP() << "no " << kApi << " device (" << GpuUnavailableReason() << "): the " << kApi
                   << " backend is not tested";
    }
    ASSERT_NE(cuda_, nullptr);
  }

  // Computes `fn` on both backends and checks NMSE <= limit.
  // `both`: also on the backend without cuBLAS (when the default one uses it).
  void Compare(const std::string& op, const std::string& type, const std::string& shape, const BuildFn& fn,
               double limit, bool placed = false, bool both = false) {
    SCOPED_TRACE(op + " " + type + " " + shape);
    absl::StatusOr<std::vector<float>> want = RunOn(cpu_, fn, placed);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<std::pair<Backend*, std::string>> runs = {{cuda_, ""}};
    if (both && UsesBlas(cuda_)) {
      runs[0].second = " cublas";
      runs.push_back({tiled_, " tiled"});
    }
    for (const auto& [be, label] : runs) {
      absl::StatusOr<std::vector<float>> got = RunOn(be, fn, placed);
      ASSERT_TRUE(got.ok()) << got.status() << label;
      ASSERT_EQ(got->size(), want->size());
      for (float v : *got) ASSERT_FALSE(std::isnan(v)) << "NaN in the " << kApi << " result" << label;
      const double e = Nmse(*got, *want);
      rows_->push_back({op, type, shape + label, e, limit});
      EXPECT_LE(e, limit) << label;
    }
  }

  static std::vector<DeviceInfo>* devices_;
  static Backend* cuda_;   // cuBLAS for batched products when present
  static Backend* tiled_;  // never cuBLAS
  static CpuBackend* cpu_;
  static std::vector<Row>* rows_;
};

std::vector<DeviceInfo>* CudaBackendTest::devices_ = nullptr;
Backend* CudaBackendTest::cuda_ = nullptr;
Backend* CudaBackendTest::tiled_ = nullptr;
CpuBackend* CudaBackendTest::cpu_ = nullptr;
std::vector<Row>* CudaBackendTest::rows_ = nullptr;

std::string TypeLabel(GgmlType t) { return GgmlTypeName(t); }

std::string Shape(std::initializer_list<int64_t> ne) {
  std::string s;
  for (int64_t e : ne) s += (s.empty() ? "" : "x") + std::to_string(e);
  return s;
}

// ----------------------------------------------------------------------------

TEST_F(CudaBackendTest, DeviceInfo) {
  const DeviceInfo& d = (*devices_)[0];
  EXPECT_EQ(d.backend, kKind);
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.name, kDevice0);
  EXPECT_FALSE(d.description.empty());
  EXPECT_GT(d.memory_total, 0u);
  EXPECT_FALSE(d.host_visible);
  EXPECT_EQ(cuda_->name(), kDevice0);
  EXPECT_EQ(cuda_->device().description, d.description);
  EXPECT_GT(cuda_->device().memory_free, 0u);  // cudaMemGetInfo
  EXPECT_FALSE(cuda_->default_buffer_type()->is_host());
  EXPECT_TRUE(cuda_->CanUseBufferType(cuda_->default_buffer_type()));
  EXPECT_FALSE(cuda_->CanUseBufferType(cpu_->default_buffer_type()));
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

TEST_F(CudaBackendTest, TransfersRoundTrip) {
  Graph g;
  Tensor* a = g.NewTensor(GgmlType::F32, {1000, 3});
  Tensor* b = g.NewTensor(GgmlType::F32, {1000, 3});
  absl::StatusOr<std::unique_ptr<Buffer>> buf = cuda_->default_buffer_type()->Allocate(a->nbytes() * 2 + 4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_NE((*buf)->base(), nullptr);
  ASSERT_TRUE(PlaceTensor(a, buf->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(b, buf->get(), 12288).ok());
  const std::vector<float> v = Builder::Floats(3000, 7);
  ASSERT_TRUE(cuda_->SetTensor(a, v.data(), 0, v.size() * 4).ok());
  ASSERT_TRUE(cuda_->CopyTensor(a, b).ok());
  std::vector<float> back(3000);
  ASSERT_TRUE(cuda_->GetTensor(b, back.data(), 0, back.size() * 4).ok());
  EXPECT_EQ(back, v);
  // Partial reads and writes at byte offsets.
  const float x = 42.5f;
  ASSERT_TRUE(cuda_->SetTensor(b, &x, 4 * 1001, 4).ok());
  float y = 0;
  ASSERT_TRUE(cuda_->GetTensor(b, &y, 4 * 1001, 4).ok());
  EXPECT_EQ(y, x);
  EXPECT_EQ(cuda_->SetTensor(b, v.data(), 4, b->nbytes()).code(), absl::StatusCode::kOutOfRange);
  (*buf)->Clear(0);
  ASSERT_TRUE(cuda_->GetTensor(b, &y, 0, 4).ok());
  EXPECT_EQ(y, 0.0f);
  // A tensor in host memory is not this backend's.
  absl::StatusOr<std::unique_ptr<Buffer>> host = cpu_->default_buffer_type()->Allocate(a->nbytes());
  ASSERT_TRUE(host.ok());
  Tensor* c = g.NewTensor(GgmlType::F32, {1000, 3});
  ASSERT_TRUE(PlaceTensor(c, host->get(), 0).ok());
  EXPECT_EQ(cuda_->SetTensor(c, v.data(), 0, 4).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBackendTest, AsyncTransfers) {
  Graph g;
  Tensor* a = g.NewTensor(GgmlType::F32, {4096, 5});
  absl::StatusOr<std::unique_ptr<Buffer>> buf = cuda_->default_buffer_type()->Allocate(a->nbytes());
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_TRUE(PlaceTensor(a, buf->get(), 0).ok());
  const std::vector<float> v = Builder::Floats(4096 * 5, 9);
  std::vector<float> back(v.size(), -1.0f), part(10, -1.0f);
  for (int rep = 0; rep < 3; ++rep) {  // staging reused after each Synchronize
    ASSERT_TRUE(cuda_->SetTensorAsync(a, v.data(), 0, v.size() * 4).ok());
    ASSERT_TRUE(cuda_->GetTensorAsync(a, back.data(), 0, back.size() * 4).ok());
    ASSERT_TRUE(cuda_->GetTensorAsync(a, part.data(), 4 * 4090, part.size() * 4).ok());
    ASSERT_TRUE(cuda_->Synchronize().ok());
    EXPECT_EQ(back, v);
    EXPECT_EQ(part, std::vector<float>(v.begin() + 4090, v.begin() + 4100));
    std::fill(back.begin(), back.end(), -1.0f);
  }
  EXPECT_EQ(cuda_->GetTensorAsync(a, back.data(), 4, a->nbytes()).code(), absl::StatusCode::kOutOfRange);
}

TEST_F(CudaBackendTest, LargeBatchedProduct) {
  // A prompt-sized product (512 columns) on every weight type, both GEMM paths.
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const double limit = t == GgmlType::F32 ? 1e-6 : kF16Quant;
    Compare(
        "mul_mat", TypeLabel(t), "512x300 x 512x512",
        [&](Builder& b) {
          return b.g().MulMat(b.Typed(t, {512, 300}, 31), b.F32({512, 512}, 32));
        },
        limit, false, true);
  }
}

TEST_F(CudaBackendTest, GetRows) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t k = (t == GgmlType::Q4_K || t == GgmlType::Q6_K)   ? 512
                      : (t == GgmlType::Q4_0 || t == GgmlType::Q8_0) ? 96
                                                                     : 67;
    for (const std::vector<int32_t>& ids : {std::vector<int32_t>{3}, std::vector<int32_t>{0, 12, 3, 3, 7, 1, 11}}) {
      Compare(
          "get_rows", TypeLabel(t), Shape({k, 13}) + " ids " + std::to_string(ids.size()),
          [&](Builder& b) {
            return b.g().GetRows(b.Typed(t, {k, 13}, 11), b.I32(ids));
          },
          kExact);
    }
  }
}

TEST_F(CudaBackendTest, MulMat) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const bool kq = t == GgmlType::Q4_K || t == GgmlType::Q6_K;
    const bool q = t == GgmlType::Q4_0 || t == GgmlType::Q8_0;
    const std::vector<int64_t> ks = kq  ? std::vector<int64_t>{256, 768}
                                    : q ? std::vector<int64_t>{64, 160}
                                        : std::vector<int64_t>{67, 256};
    const double limit = t == GgmlType::F32 ? kExact : kF16Quant;
    for (int64_t k : ks) {
      for (int64_t m : {int64_t{5}, int64_t{67}}) {
        for (int64_t n : {1, 2, 3, 5, 17, 33, 70}) {
          Compare(
              "mul_mat", TypeLabel(t), Shape({k, m}) + " x " + Shape({k, n}),
              [&](Builder& b) {
                return b.g().MulMat(b.Typed(t, {k, m}, 21), b.F32({k, n}, 22));
              },
              limit, false, true);
        }
      }
    }
    const int64_t k = ks[0];
    // Batched activations [k, 3, 2] (6 columns: mat-vec), [k, 5, 3] (15: batched) and
    // [k, 1, 2, 2].
    Compare(
        "mul_mat", TypeLabel(t), Shape({k, 67}) + " x " + Shape({k, 3, 2}),
        [&](Builder& b) {
          return b.g().MulMat(b.Typed(t, {k, 67}, 23), b.F32({k, 3, 2}, 24));
        },
        limit);
    Compare(
        "mul_mat", TypeLabel(t), Shape({k, 67}) + " x " + Shape({k, 5, 3}),
        [&](Builder& b) {
          return b.g().MulMat(b.Typed(t, {k, 67}, 23), b.F32({k, 5, 3}, 24));
        },
        limit, false, true);
    Compare(
        "mul_mat", TypeLabel(t), Shape({k, 67}) + " x " + Shape({k, 1, 2, 2}),
        [&](Builder& b) {
          return b.g().MulMat(b.Typed(t, {k, 67}, 23), b.F32({k, 1, 2, 2}, 25));
        },
        limit);
    // Strided activations: rows of k floats 8 floats apart beyond k.
    for (int64_t n : {1, 9, 40}) {
      Compare(
          "mul_mat", TypeLabel(t), Shape({k, 67}) + " x view " + Shape({k, n}),
          [&](Builder& b) {
            Tensor* x = b.F32({k + 8, n}, 26);
            return b.g().MulMat(b.Typed(t, {k, 67}, 27), b.g().View(x, {k, n}, {x->nb[1]}, 8 * 4));
          },
          limit, false, true);
    }
    // Non-uniform columns: [k, 20, 2] taken from a [k, 21, 2] tensor (cuBLAS packs them).
    Compare(
        "mul_mat", TypeLabel(t), Shape({k, 67}) + " x view " + Shape({k, 20, 2}),
        [&](Builder& b) {
          Tensor* x = b.F32({k, 21, 2}, 28);
          return b.g().MulMat(b.Typed(t, {k, 67}, 29), b.g().View(x, {k, 20, 2}, {x->nb[1], x->nb[2]}, 0));
        },
        limit, false, true);
  }
}

TEST_F(CudaBackendTest, AddMul) {
  for (bool add : {true, false}) {
    const std::string op = add ? "add" : "mul";
    const auto f = [add](Builder& b, Tensor* x, Tensor* y) { return add ? b.g().Add(x, y) : b.g().Mul(x, y); };
    for (const std::vector<int64_t>& bshape : {std::vector<int64_t>{67, 5, 3}, std::vector<int64_t>{67},
                                               std::vector<int64_t>{67, 5}, std::vector<int64_t>{67, 1, 3}}) {
      Compare(
          op, "F32",
          "67x5x3 . " + Shape({bshape[0], bshape.size() > 1 ? bshape[1] : 1, bshape.size() > 2 ? bshape[2] : 1}),
          [&](Builder& b) {
            return f(b, b.F32({67, 5, 3}, 31), b.F32(bshape, 32));
          },
          kExact);
    }
    Compare(
        op, "F32", "view 67x5 . 67",
        [&](Builder& b) {
          Tensor* x = b.F32({80, 5}, 33);
          return f(b, b.g().View(x, {67, 5}, {x->nb[1]}, 4 * 4), b.F32({67}, 34));
        },
        kExact);
  }
}

// A [67, 5, 3] F32 input, or a strided view of a [80, 6, 3] tensor of that shape.
Tensor* UnaryInput(Builder& b, bool view, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  if (!view) return b.F32({67, 5, 3}, seed, lo, hi);
  Tensor* x = b.F32({80, 6, 3}, seed, lo, hi);
  return b.g().View(x, {67, 5, 3}, {x->nb[1], x->nb[2]}, 2 * 4 + x->nb[1]);
}

TEST_F(CudaBackendTest, Unary) {
  struct U {
    std::string name;
    std::function<Tensor*(Graph&, Tensor*)> op;
    double limit;
    float lo, hi;
  };
  const std::vector<U> ops = {
      {"scale", [](Graph& g, Tensor* x) { return g.Scale(x, 0.37f); }, kExact, -3, 3},
      {"silu", [](Graph& g, Tensor* x) { return g.Silu(x); }, kExact, -12, 12},
      {"gelu", [](Graph& g, Tensor* x) { return g.Gelu(x); }, 1e-6, -12, 12},
      {"gelu_erf", [](Graph& g, Tensor* x) { return g.GeluErf(x); }, kExact, -6, 6},
      {"clamp", [](Graph& g, Tensor* x) { return g.Clamp(x, -0.5f, 0.75f); }, kExact, -3, 3},
      {"cont", [](Graph& g, Tensor* x) { return g.Cont(x); }, kExact, -3, 3},
      {"rms_norm", [](Graph& g, Tensor* x) { return g.RmsNorm(x, 1e-6f); }, kExact, -3, 3},
      {"norm", [](Graph& g, Tensor* x) { return g.Norm(x, 1e-5f); }, kExact, -2, 4},
  };
  for (const U& u : ops) {
    for (bool view : {false, true}) {
      Compare(
          u.name, "F32", view ? "view 67x5x3" : "67x5x3",
          [&](Builder& b) { return u.op(b.g(), UnaryInput(b, view, 41, u.lo, u.hi)); }, u.limit);
    }
  }
  // Long rows (several elements per invocation of the row kernels).
  Compare(
      "rms_norm", "F32", "4099x2",
      [](Builder& b) {
        return b.g().RmsNorm(b.F32({4099, 2}, 42), 1e-5f);
      },
      kExact);
  Compare(
      "norm", "F32", "4099x2",
      [](Builder& b) {
        return b.g().Norm(b.F32({4099, 2}, 43), 1e-5f);
      },
      kExact);
  // cont of a permuted view: [8, 4, 5] (head, head index, token) read as [8, 5, 4].
  Compare(
      "cont", "F32", "permuted 8x5x4",
      [](Builder& b) {
        Tensor* x = b.F32({8, 4, 5}, 44);
        return b.g().Cont(b.g().View(x, {8, 5, 4}, {x->nb[2], x->nb[1]}, 0));
      },
      kExact);
}

TEST_F(CudaBackendTest, Swiglu) {
  Compare(
      "swiglu", "F32", "67x5x3",
      [](Builder& b) {
        return b.g().Swiglu(b.F32({67, 5, 3}, 51, -8, 8), b.F32({67, 5, 3}, 52));
      },
      kExact);
  Compare(
      "swiglu", "F32", "view 67x5x3",
      [](Builder& b) {
        return b.g().Swiglu(UnaryInput(b, true, 53), b.F32({67, 5, 3}, 54));
      },
      kExact);
}

// A mask [n_kv, rows] with -inf above a causal diagonal (offset so every row keeps cells).
std::vector<float> CausalMask(int64_t n_kv, int64_t rows, bool alibi) {
  std::vector<float> m(static_cast<size_t>(n_kv * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = n_kv - rows + r;
    for (int64_t c = 0; c < n_kv; ++c) {
      m[static_cast<size_t>(r * n_kv + c)] = c > pos ? kNegInf : alibi ? -static_cast<float>(std::abs(pos - c)) : 0.0f;
    }
  }
  return m;
}

TEST_F(CudaBackendTest, SoftMax) {
  for (int64_t heads : {4, 6}) {
    for (float max_bias : {0.0f, 8.0f}) {
      for (bool mask : {false, true}) {
        Compare(
            "soft_max", "F32", Shape({33, 7, heads}) + (mask ? " mask" : "") + (max_bias > 0 ? " alibi" : ""),
            [&](Builder& b) {
              Tensor* m = mask ? b.F32Values({33, 7}, CausalMask(33, 7, max_bias > 0)) : nullptr;
              return b.g().SoftMax(b.F32({33, 7, heads}, 61, -4, 4), m, 0.125f, max_bias);
            },
            kExact);
      }
    }
  }
  Compare(
      "soft_max", "F32", "1000x3 view",
      [](Builder& b) {
        Tensor* x = b.F32({1010, 3}, 62, -10, 10);
        return b.g().SoftMax(b.g().View(x, {1000, 3}, {x->nb[1]}, 40), nullptr, 1.0f, 0.0f);
      },
      kExact);
}

TEST_F(CudaBackendTest, Rope) {
  const std::vector<int32_t> pos = {0, 1, 7, 100, 3000};
  struct R {
    std::string label;
    int64_t hd;
    int n_dims, mode;
    bool ff;
    float freq_scale, ext_factor;
  };
  const std::vector<R> cases = {
      {"normal", 64, 64, 0, false, 1.0f, 0.0f},           {"neox", 64, 64, 2, false, 1.0f, 0.0f},
      {"normal partial", 67, 32, 0, false, 1.0f, 0.0f},   {"neox partial", 80, 48, 2, false, 1.0f, 0.0f},
      {"neox freq_factors", 64, 64, 2, true, 1.0f, 0.0f}, {"normal yarn", 64, 64, 0, false, 0.25f, 1.0f},
      {"neox yarn+ff", 128, 128, 2, true, 0.125f, 1.0f},
  };
  for (const R& c : cases) {
    for (bool view : {false, true}) {
      Compare(
          "rope", "F32", Shape({c.hd, 4, 5}) + " " + c.label + (view ? " view" : ""),
          [&](Builder& b) {
            Tensor* x;
            if (view) {  // the q part of a fused [hd, 4 q + 2 k heads, tokens] tensor
              Tensor* qk = b.F32({c.hd, 6, 5}, 71);
              x = b.g().View(qk, {c.hd, 4, 5}, {qk->nb[1], qk->nb[2]}, 0);
            } else {
              x = b.F32({c.hd, 4, 5}, 72);
            }
            Tensor* ff = c.ff ? b.F32({c.n_dims / 2}, 73, 1.0f, 4.0f) : nullptr;
            return b.g().Rope(x, b.I32(pos), ff, c.n_dims, c.mode, 4096, 10000.0f, c.freq_scale, c.ext_factor, 1.0f,
                              32.0f, 1.0f);
          },
          kExact);
    }
  }
}

TEST_F(CudaBackendTest, SetRows) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t row : {int64_t{64}, int64_t{67}}) {
      Compare(
          "set_rows", TypeLabel(t), Shape({row, 10}) + " <- 3 rows",
          [&](Builder& b) {
            Tensor* cache = b.Typed(t, {row, 10}, 81);
            return b.g().SetRows(cache, b.F32({row, 3}, 82, -100, 100), b.I32({7, 0, 4}));
          },
          kExact);
    }
  }
}

// flash_attn_ext with K/V as strided views of [hd * n_head_kv, n_ctx] caches.
BuildFn FlashAttn(GgmlType kv, int64_t hd, int64_t n_head, int64_t n_head_kv, int64_t n_tokens, int64_t n_kv, bool mask,
                  float max_bias, bool q_view) {
  return [=](Builder& b) {
    const int64_t n_ctx = n_kv + 5;
    Tensor* kc = b.Typed(kv, {hd * n_head_kv, n_ctx}, 91);
    Tensor* vc = b.Typed(kv, {hd * n_head_kv, n_ctx}, 92);
    const size_t es = kv == GgmlType::F16 ? 2 : 4;
    Tensor* k = b.g().View(kc, {hd, n_head_kv, n_kv}, {hd * es, kc->nb[1]}, 0);
    Tensor* v = b.g().View(vc, {hd, n_head_kv, n_kv}, {hd * es, vc->nb[1]}, 0);
    Tensor* q;
    if (q_view) {  // [hd, n_tokens, n_head] permuted to [hd, n_head, n_tokens]
      Tensor* qt = b.F32({hd, n_tokens, n_head}, 93);
      q = b.g().View(qt, {hd, n_head, n_tokens}, {qt->nb[2], qt->nb[1]}, 0);
    } else {
      q = b.F32({hd, n_head, n_tokens}, 93);
    }
    Tensor* m = mask ? b.F32Values({n_kv, n_tokens}, CausalMask(n_kv, n_tokens, max_bias > 0)) : nullptr;
    return b.g().FlashAttnExt(q, k, v, m, 1.0f / std::sqrt(static_cast<float>(hd)), max_bias);
  };
}

TEST_F(CudaBackendTest, FlashAttnExt) {
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
    const std::string tl = TypeLabel(kv);
    Compare("flash_attn_ext", tl, "hd64 h4/2 t1 kv37 mask", FlashAttn(kv, 64, 4, 2, 1, 37, true, 0, false), kF16Quant);
    Compare("flash_attn_ext", tl, "hd64 h4/2 t7 kv37 mask", FlashAttn(kv, 64, 4, 2, 7, 37, true, 0, false), kF16Quant);
    Compare("flash_attn_ext", tl, "hd64 h4/4 t3 kv300 no mask", FlashAttn(kv, 64, 4, 4, 3, 300, false, 0, false),
            kF16Quant);
    Compare("flash_attn_ext", tl, "hd128 h8/2 t33 kv300 mask", FlashAttn(kv, 128, 8, 2, 33, 300, true, 0, false),
            kF16Quant);
    Compare("flash_attn_ext", tl, "hd32 h6/3 t5 kv50 alibi q-view", FlashAttn(kv, 32, 6, 3, 5, 50, true, 8.0f, true),
            kF16Quant);
  }
}

// Several dependent ops in one graph (barriers between dispatches; scratch reuse).
BuildFn Block(GgmlType w) {
  return [w](Builder& b) {
    Graph& g = b.g();
    Tensor* x = b.F32({256, 12}, 101);
    Tensor* h = g.Mul(g.RmsNorm(x, 1e-5f), b.F32({256}, 102, 0.5f, 1.5f));
    Tensor* up = g.MulMat(b.Typed(w, {256, 96}, 103), h);
    Tensor* gate = g.MulMat(b.Typed(w, {256, 96}, 104), h);
    Tensor* act = g.Swiglu(gate, up);
    Tensor* down = g.MulMat(b.Typed(w, {96, 256}, 105), act);
    return g.Add(x, down);
  };
}

TEST_F(CudaBackendTest, ChainedGraph) {
  for (GgmlType w : {GgmlType::F32, GgmlType::Q8_0}) {
    const double limit = w == GgmlType::F32 ? kExact : kF16Quant;
    Compare("graph", TypeLabel(w), "norm/mul_mat/swiglu/add", Block(w), limit, false, true);
    Compare("graph", TypeLabel(w), "same, placed", Block(w), limit, /*placed=*/true, true);
  }
  // set_rows into the KV caches, then attention over views of the written caches.
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
    Compare(
        "graph", TypeLabel(kv), "set_rows + flash_attn_ext",
        [kv](Builder& b) {
          Graph& g = b.g();
          const int64_t hd = 32, nh = 4, nkv_h = 2, n_ctx = 40, nt = 3;
          const size_t es = kv == GgmlType::F16 ? 2 : 4;
          Tensor* kc = b.Typed(kv, {hd * nkv_h, n_ctx}, 111);
          Tensor* vc = b.Typed(kv, {hd * nkv_h, n_ctx}, 112);
          Tensor* idx = b.I32({20, 21, 22});
          Tensor* ks = g.SetRows(kc, b.F32({hd * nkv_h, nt}, 113), idx);
          Tensor* vs = g.SetRows(vc, b.F32({hd * nkv_h, nt}, 114), idx);
          Tensor* k = g.View(ks, {hd, nkv_h, 23}, {hd * es, kc->nb[1]}, 0);
          Tensor* v = g.View(vs, {hd, nkv_h, 23}, {hd * es, vc->nb[1]}, 0);
          Tensor* q = b.F32({hd, nh, nt}, 115);
          Tensor* m = b.F32Values({23, nt}, CausalMask(23, nt, false));
          return g.FlashAttnExt(q, k, v, m, 0.17f, 0.0f);
        },
        kF16Quant);
  }
}

TEST_F(CudaBackendTest, BadIndexIsAnError) {
  const BuildFn get_rows = [](Builder& b) { return b.g().GetRows(b.F32({8, 4}, 1), b.I32({1, 4})); };
  absl::StatusOr<std::vector<float>> r = RunOn(cuda_, get_rows);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  const BuildFn set_rows = [](Builder& b) { return b.g().SetRows(b.F32({8, 4}, 1), b.F32({8, 1}, 2), b.I32({-1})); };
  r = RunOn(cuda_, set_rows);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  // The backend stays usable.
  Compare(
      "get_rows", "F32", "after an error",
      [](Builder& b) {
        return b.g().GetRows(b.F32({8, 4}, 1), b.I32({3, 0}));
      },
      kExact);
}

TEST_F(CudaBackendTest, UnsupportedOpsAreRefused) {
  Builder b;
  Tensor* w = b.Typed(GgmlType::Q5_K, {256, 4}, 1);  // no CUDA kernel for Q5_K
  Tensor* mm = b.g().MulMat(w, b.F32({256, 1}, 2));
  EXPECT_FALSE(cuda_->SupportsOp(*mm));
  Tensor* cache = b.Typed(GgmlType::Q8_0, {64, 4}, 3);
  Tensor* sr = b.g().SetRows(cache, b.F32({64, 1}, 4), b.I32({0}));
  EXPECT_FALSE(cuda_->SupportsOp(*sr));
  absl::Status s = cuda_->GraphCompute(b.g());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

}  // namespace
}  // namespace herd
