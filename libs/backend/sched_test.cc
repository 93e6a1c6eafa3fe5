// The scheduler over a fake device (opaque memory, only some ops) and the CPU: same
// results as the CPU alone, ops falling back, tensors copied across splits, writes
// into device buffers kept on the device, and clear errors.
#include "libs/backend/sched.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/testing/fake_device.h"

namespace herd {
namespace {

using testing::FakeDevice;

// A small graph: rms_norm -> mul(weight) -> mul_mat -> silu -> add -> softmax, plus a
// set_rows into a cache and a view read back. Inputs and weights are host vectors.
struct Net {
  Graph g;
  Tensor* x;      // F32 [16, 5] input
  Tensor* norm;   // F32 [16] weight
  Tensor* w;      // F32 [16, 12] weight
  Tensor* cache;  // F32 [12, 8] (rows written by set_rows)
  Tensor* idx;    // I32 [5]
  Tensor* out;
  Tensor* rows;  // view of the cache after the write
};

std::unique_ptr<Net> Build() {
  auto n = std::make_unique<Net>();
  Graph& g = n->g;
  n->x = g.NewTensor(GgmlType::F32, {16, 5}, "x");
  n->norm = g.NewTensor(GgmlType::F32, {16}, "norm");
  n->w = g.NewTensor(GgmlType::F32, {16, 12}, "w");
  n->cache = g.NewTensor(GgmlType::F32, {12, 8}, "cache");
  n->idx = g.NewTensor(GgmlType::I32, {5}, "idx");
  Tensor* h = g.Mul(g.RmsNorm(n->x, 1e-5f), n->norm);
  Tensor* y = g.MulMat(n->w, h);  // [12, 5]
  Tensor* a = g.Silu(y);
  Tensor* b = g.Add(a, y);
  Tensor* written = g.SetRows(n->cache, b, n->idx);
  n->rows = g.View(written, {12, 5}, {written->nb[1], written->nb[1] * 5, written->nb[1] * 5}, 0);
  n->out = g.SoftMax(g.Scale(b, 0.5f), nullptr, 1.0f, 0.0f);
  g.SetOutput(n->out);
  g.SetOutput(n->rows);
  return n;
}

struct Data {
  std::vector<float> x, norm, w, cache;
  std::vector<int32_t> idx;
};

Data MakeData() {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  Data d;
  for (int i = 0; i < 16 * 5; ++i) d.x.push_back(u(rng));
  for (int i = 0; i < 16; ++i) d.norm.push_back(u(rng));
  for (int i = 0; i < 16 * 12; ++i) d.w.push_back(u(rng));
  d.cache.assign(12 * 8, 0.0f);
  d.idx = {7, 0, 3, 5, 2};
  return d;
}

// Places every leaf in one buffer of `buft` and uploads `d` through `be`.
std::unique_ptr<Buffer> Upload(Net& n, const Data& d, BufferType* buft, Backend* be) {
  std::vector<std::pair<Tensor*, const void*>> leaves = {
      {n.x, d.x.data()}, {n.norm, d.norm.data()}, {n.w, d.w.data()}, {n.cache, d.cache.data()}, {n.idx, d.idx.data()}};
  size_t total = 0;
  for (auto& [t, p] : leaves) total += (t->nbytes() + 255) / 256 * 256;
  auto buf = buft->Allocate(total);
  EXPECT_TRUE(buf.ok());
  size_t off = 0;
  for (auto& [t, p] : leaves) {
    EXPECT_TRUE(PlaceTensor(t, buf->get(), off).ok());
    EXPECT_TRUE(be->SetTensor(t, p, 0, t->nbytes()).ok());
    off += (t->nbytes() + 255) / 256 * 256;
  }
  return *std::move(buf);
}

std::vector<float> Read(Backend* be, const Tensor* t) {
  std::vector<float> v(static_cast<size_t>(t->nelements()));
  EXPECT_TRUE(be->GetTensor(t, v.data(), 0, v.size() * sizeof(float)).ok());
  return v;
}

std::unique_ptr<Scheduler> FakeThenCpu(std::set<Op> ops) {
  std::vector<std::unique_ptr<Backend>> bs;
  bs.push_back(std::make_unique<FakeDevice>(std::move(ops)));
  bs.push_back(std::make_unique<CpuBackend>(1));
  auto s = Scheduler::Create(std::move(bs));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(SchedTest, FallbackToCpuGivesTheCpuResult) {
  const Data d = MakeData();
  CpuBackend cpu(1);
  auto ref = Build();
  auto ref_buf = Upload(*ref, d, cpu.default_buffer_type(), &cpu);
  ASSERT_TRUE(cpu.GraphCompute(ref->g).ok());
  const std::vector<float> want = Read(&cpu, ref->out), want_rows = Read(&cpu, ref->rows);

  // The fake computes norms, mul, mul_mat, add, set_rows; silu, scale and softmax fall back.
  auto sched = FakeThenCpu({Op::kRmsNorm, Op::kMul, Op::kMulMat, Op::kAdd, Op::kSetRows});
  auto net = Build();
  auto buf = Upload(*net, d, sched->default_buffer_type(), sched.get());
  ASSERT_FALSE(buf->type()->is_host());
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  const std::vector<float> got = Read(sched.get(), net->out), got_rows = Read(sched.get(), net->rows);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  for (size_t i = 0; i < got_rows.size(); ++i) EXPECT_FLOAT_EQ(got_rows[i], want_rows[i]) << i;

  const SchedStats& st = sched->last_stats();
  EXPECT_EQ(st.nodes_per_backend[0], 5);  // rms_norm, mul, mul_mat, add, set_rows on the fake
  EXPECT_EQ(st.nodes_per_backend[1], 3);  // silu, scale, soft_max on the CPU
  EXPECT_GE(st.n_splits, 3);
  EXPECT_GT(st.n_copies, 0);
  EXPECT_GT(st.bytes_copied, 0u);
  EXPECT_GT(static_cast<FakeDevice*>(sched->backend(0))->nodes_computed(), 0);
  // The cache (device memory) holds the written rows: read it back through the owner.
  EXPECT_EQ(Read(sched.get(), net->cache), Read(&cpu, ref->cache));

  // A second compute reuses the arenas and gives the same result.
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  const std::vector<float> again = Read(sched.get(), net->out);
  EXPECT_EQ(again, got);
}

TEST(SchedTest, EverythingOnTheDeviceNeedsNoCopies) {
  const Data d = MakeData();
  auto sched =
      FakeThenCpu({Op::kRmsNorm, Op::kMul, Op::kMulMat, Op::kAdd, Op::kSetRows, Op::kSilu, Op::kScale, Op::kSoftMax});
  auto net = Build();
  auto buf = Upload(*net, d, sched->default_buffer_type(), sched.get());
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  EXPECT_EQ(sched->last_stats().n_splits, 1);
  EXPECT_EQ(sched->last_stats().n_copies, 0);
  EXPECT_EQ(sched->last_stats().nodes_per_backend[1], 0);
}

TEST(SchedTest, HostWeightsUsedByTheDeviceAreCopiedIn) {
  const Data d = MakeData();
  CpuBackend cpu(1);
  auto ref = Build();
  auto ref_buf = Upload(*ref, d, cpu.default_buffer_type(), &cpu);
  ASSERT_TRUE(cpu.GraphCompute(ref->g).ok());
  // Leaves in host memory, the fake computes everything it can.
  auto sched = FakeThenCpu({Op::kRmsNorm, Op::kMul, Op::kMulMat, Op::kAdd, Op::kSilu, Op::kScale, Op::kSoftMax});
  auto net = Build();
  auto buf = Upload(*net, d, cpu.default_buffer_type(), &cpu);
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  EXPECT_EQ(Read(sched.get(), net->out), Read(&cpu, ref->out));
  EXPECT_GT(sched->last_stats().n_copies, 0);
  // set_rows writes host memory: it ran on the CPU, which owns it.
  EXPECT_GT(sched->last_stats().nodes_per_backend[1], 0);
}

TEST(SchedTest, AWriteIntoDeviceMemoryTheDeviceCannotDoIsAnError) {
  const Data d = MakeData();
  auto sched = FakeThenCpu({Op::kRmsNorm, Op::kMul, Op::kMulMat, Op::kAdd});
  auto net = Build();
  auto buf = Upload(*net, d, sched->default_buffer_type(), sched.get());
  absl::Status s = sched->GraphCompute(net->g);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("cache"), std::string::npos) << s;
}

TEST(SchedTest, CreateChecksItsBackends) {
  EXPECT_FALSE(Scheduler::Create({}).ok());
  std::vector<std::unique_ptr<Backend>> device_last;
  device_last.push_back(std::make_unique<CpuBackend>(1));
  device_last.push_back(std::make_unique<FakeDevice>(std::set<Op>{}));
  auto s = Scheduler::Create(std::move(device_last));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd
