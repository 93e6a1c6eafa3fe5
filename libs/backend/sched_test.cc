// The scheduler over a fake device (opaque memory, only some ops) and the CPU: same
// results as the CPU alone, ops falling back, tensors copied across splits, writes
// into device buffers kept on the device, and clear errors.
#include "libs/backend/sched.h"

#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
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

// Every op the CPU computes: a device standing in for a remote CPU host.
std::set<Op> AllOps() {
  std::set<Op> ops;
  for (int o = 0; o < static_cast<int>(Op::kCount); ++o) ops.insert(static_cast<Op>(o));
  return ops;
}

// [fake (every op), cpu] with the scheduler's memory on the CPU.
std::unique_ptr<Scheduler> SplitFakeCpu() {
  std::vector<std::unique_ptr<Backend>> bs;
  bs.push_back(std::make_unique<FakeDevice>(AllOps()));
  bs.push_back(std::make_unique<CpuBackend>(1));
  auto s = Scheduler::Create(std::move(bs), 1);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// Two "layers" of norm -> mul(weight) -> mul_mat(weight) -> silu over an input x.
struct TwoLayers {
  Graph g;
  Tensor* x;                   // F32 [16, 3], a graph input
  Tensor* norm[2];             // F32 [16]
  Tensor* w[2];                // F32 [16, 16]
  Tensor* out[2];              // each layer's silu
  std::vector<Tensor*> nodes;  // per layer: rms_norm, mul, mul_mat, silu
};

std::unique_ptr<TwoLayers> BuildTwoLayers() {
  auto n = std::make_unique<TwoLayers>();
  Graph& g = n->g;
  n->x = g.NewTensor(GgmlType::F32, {16, 3}, "x");
  n->x->is_input = true;
  Tensor* h = n->x;
  for (int il = 0; il < 2; ++il) {
    n->norm[il] = g.NewTensor(GgmlType::F32, {16}, "blk." + std::to_string(il) + ".norm");
    n->w[il] = g.NewTensor(GgmlType::F32, {16, 16}, "blk." + std::to_string(il) + ".w");
    Tensor* a = g.RmsNorm(h, 1e-5f);
    Tensor* b = g.Mul(a, n->norm[il]);
    Tensor* c = g.MulMat(n->w[il], b);
    h = n->out[il] = g.Silu(c);
    for (Tensor* t : {a, b, c, h}) n->nodes.push_back(t);
  }
  g.SetOutput(h);
  return n;
}

// Places `ts` in one buffer of `buft` and fills them with `seed`'s values through `be`.
std::unique_ptr<Buffer> PlaceAndFill(const std::vector<Tensor*>& ts, BufferType* buft, Backend* be, int seed) {
  size_t total = 0;
  for (Tensor* t : ts) total += (t->nbytes() + 255) / 256 * 256;
  auto buf = buft->Allocate(total);
  EXPECT_TRUE(buf.ok()) << buf.status();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  size_t off = 0;
  for (Tensor* t : ts) {
    std::vector<float> v(static_cast<size_t>(t->nelements()));
    for (float& f : v) f = u(rng);
    EXPECT_TRUE(PlaceTensor(t, buf->get(), off).ok());
    EXPECT_TRUE(be->SetTensor(t, v.data(), 0, t->nbytes()).ok());
    off += (t->nbytes() + 255) / 256 * 256;
  }
  return *std::move(buf);
}

TEST(SchedTest, LayerSplitRunsEachLayerWhereItsWeightsAre) {
  CpuBackend cpu(1);
  auto ref = BuildTwoLayers();
  auto ref_in = PlaceAndFill({ref->x}, cpu.default_buffer_type(), &cpu, 1);
  auto ref_w0 = PlaceAndFill({ref->norm[0], ref->w[0]}, cpu.default_buffer_type(), &cpu, 2);
  auto ref_w1 = PlaceAndFill({ref->norm[1], ref->w[1]}, cpu.default_buffer_type(), &cpu, 3);
  ASSERT_TRUE(cpu.GraphCompute(ref->g).ok());
  const std::vector<float> want = Read(&cpu, ref->out[1]);

  auto sched = SplitFakeCpu();
  auto* fake = static_cast<FakeDevice*>(sched->backend(0));
  Backend* host = sched->backend(1);
  // Input and layer 0 on the CPU, layer 1 and the output on the fake device.
  ASSERT_TRUE(sched->SetLayerPlacement({1, 1, 0, 0}).ok());
  EXPECT_EQ(sched->default_buffer_type(), host->default_buffer_type());
  EXPECT_EQ(sched->layer_buffer_type(-1, 2), host->default_buffer_type());
  EXPECT_EQ(sched->layer_buffer_type(0, 2), host->default_buffer_type());
  EXPECT_EQ(sched->layer_buffer_type(1, 2), fake->default_buffer_type());
  EXPECT_EQ(sched->layer_buffer_type(2, 2), fake->default_buffer_type());

  auto net = BuildTwoLayers();
  auto in = PlaceAndFill({net->x}, sched->default_buffer_type(), sched.get(), 1);
  auto w0 = PlaceAndFill({net->norm[0], net->w[0]}, sched->layer_buffer_type(0, 2), sched.get(), 2);
  auto w1 = PlaceAndFill({net->norm[1], net->w[1]}, sched->layer_buffer_type(1, 2), sched.get(), 3);
  ASSERT_TRUE(w0->type()->is_host());
  ASSERT_FALSE(w1->type()->is_host());
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  EXPECT_EQ(Read(sched.get(), net->out[1]), want);  // the same kernels on both

  // Layer 0's four nodes on the CPU (the input in CPU memory does not pull them to the
  // device, the first backend); layer 1's weighted nodes and what follows them on the
  // fake device. Layer 1's rms_norm reads no weight: it follows the last weight-pinned
  // node, layer 0's mul_mat, onto the CPU.
  const SchedStats& st = sched->last_stats();
  EXPECT_EQ(st.nodes_per_backend[0], 3);
  EXPECT_EQ(st.nodes_per_backend[1], 5);
  EXPECT_EQ(st.n_splits, 2);
  EXPECT_EQ(fake->nodes_computed(), 3);
  for (size_t i = 0; i < net->nodes.size(); ++i) {
    EXPECT_EQ(net->nodes[i]->buffer->type()->is_host(), i < 5) << net->nodes[i]->name;
  }
  // Only one hidden state crossed, once (layer 1's normed input, the size of layer 0's
  // output).
  EXPECT_EQ(st.n_copies, 1);
  EXPECT_EQ(st.bytes_copied, net->out[0]->nbytes());

  // The other way round: layer 0 on the device, layer 1 on the CPU: the input crosses in
  // and layer 0's output crosses back.
  auto sched2 = SplitFakeCpu();
  ASSERT_TRUE(sched2->SetLayerPlacement({1, 0, 1, 1}).ok());
  auto net2 = BuildTwoLayers();
  auto in2 = PlaceAndFill({net2->x}, sched2->default_buffer_type(), sched2.get(), 1);
  auto w20 = PlaceAndFill({net2->norm[0], net2->w[0]}, sched2->layer_buffer_type(0, 2), sched2.get(), 2);
  auto w21 = PlaceAndFill({net2->norm[1], net2->w[1]}, sched2->layer_buffer_type(1, 2), sched2.get(), 3);
  ASSERT_TRUE(sched2->GraphCompute(net2->g).ok());
  EXPECT_EQ(Read(sched2.get(), net2->out[1]), want);
  EXPECT_EQ(sched2->last_stats().nodes_per_backend[0], 5);
  EXPECT_EQ(sched2->last_stats().n_splits, 2);
  EXPECT_EQ(sched2->last_stats().n_copies, 2);
  EXPECT_EQ(sched2->last_stats().bytes_copied, net2->x->nbytes() + net2->out[0]->nbytes());
}

TEST(SchedTest, WithoutAPlacementHostWeightsDoNotPullNodesOffTheDevice) {
  // The old rule for [device, cpu] with the device's memory: host leaves do not pin, so
  // the device computes everything and copies them in.
  auto sched = FakeThenCpu(AllOps());
  auto net = BuildTwoLayers();
  CpuBackend cpu(1);
  auto in = PlaceAndFill({net->x}, sched->default_buffer_type(), sched.get(), 1);
  auto w = PlaceAndFill({net->norm[0], net->w[0], net->norm[1], net->w[1]}, cpu.default_buffer_type(), &cpu, 2);
  ASSERT_TRUE(sched->GraphCompute(net->g).ok());
  EXPECT_EQ(sched->last_stats().nodes_per_backend[0], 8);
  EXPECT_EQ(sched->last_stats().n_copies, 4);
}

// Records the weights PrepareWeights hands it.
template <typename Base>
class Recording : public Base {
 public:
  using Base::Base;
  absl::Status PrepareWeights(const std::vector<Tensor*>& weights) override {
    for (Tensor* t : weights) prepared.push_back(t->name);
    return absl::OkStatus();
  }
  std::vector<std::string> prepared;
};

TEST(SchedTest, EachBackendPreparesTheWeightsInItsMemory) {
  std::vector<std::unique_ptr<Backend>> bs;
  bs.push_back(std::make_unique<Recording<FakeDevice>>(AllOps()));
  bs.push_back(std::make_unique<Recording<CpuBackend>>(1));
  auto s = Scheduler::Create(std::move(bs), 1);
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  ASSERT_TRUE(sched.SetLayerPlacement({1, 1, 0, 0}).ok());
  auto net = BuildTwoLayers();
  auto w0 = PlaceAndFill({net->norm[0], net->w[0]}, sched.layer_buffer_type(0, 2), &sched, 2);
  auto w1 = PlaceAndFill({net->norm[1], net->w[1]}, sched.layer_buffer_type(1, 2), &sched, 3);
  ASSERT_TRUE(sched.PrepareWeights({net->norm[0], net->w[0], net->norm[1], net->w[1]}).ok());
  // Each backend holding some is told the whole model (and leaves the others' alone:
  // CpuBackend skips weights not in host memory, RemoteBackend those not in its own).
  const std::vector<std::string> all = {"blk.0.norm", "blk.0.w", "blk.1.norm", "blk.1.w"};
  EXPECT_EQ(static_cast<Recording<CpuBackend>*>(sched.backend(1))->prepared, all);
  EXPECT_EQ(static_cast<Recording<FakeDevice>*>(sched.backend(0))->prepared, all);

  // A backend holding none is not called.
  std::vector<std::unique_ptr<Backend>> bs2;
  bs2.push_back(std::make_unique<Recording<FakeDevice>>(AllOps()));
  bs2.push_back(std::make_unique<Recording<CpuBackend>>(1));
  auto s2 = Scheduler::Create(std::move(bs2), 1);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE((*s2)->PrepareWeights({net->norm[0], net->w[0]}).ok());
  EXPECT_EQ(static_cast<Recording<FakeDevice>*>((*s2)->backend(0))->prepared.size(), 0u);
}

// With a split, the CPU repacks only its own matrices: one in another backend's memory is
// left alone (its bytes are not host memory).
TEST(SchedTest, CpuPrepareLeavesOtherBackendsWeightsAlone) {
  FakeDevice dev(AllOps());
  CpuBackend cpu(1);
  Graph g;
  Tensor* mine = g.NewTensor(GgmlType::F16, {64, 16}, "blk.0.ffn_up.weight");
  Tensor* theirs = g.NewTensor(GgmlType::F16, {64, 16}, "blk.1.ffn_up.weight");
  auto hb = cpu.default_buffer_type()->Allocate(mine->nbytes());
  auto db = dev.default_buffer_type()->Allocate(theirs->nbytes());
  ASSERT_TRUE(hb.ok() && db.ok());
  ASSERT_TRUE(PlaceTensor(mine, hb->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(theirs, db->get(), 0).ok());
  ASSERT_TRUE(cpu.PrepareWeights({mine, theirs}).ok());
  EXPECT_EQ(theirs->extra, nullptr);
}

TEST(SchedTest, LayerPlacementIsChecked) {
  auto sched = SplitFakeCpu();
  EXPECT_EQ(sched->SetLayerPlacement({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sched->SetLayerPlacement({0, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sched->SetLayerPlacement({0, 2, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sched->layer_placement().empty());
  BufferType* cpu_mem = sched->backend(1)->default_buffer_type();
  EXPECT_EQ(sched->layer_buffer_type(0, 1), cpu_mem);  // no placement: the memory backend's
  ASSERT_TRUE(sched->SetLayerPlacement({0, 0, 0}).ok());
  EXPECT_EQ(sched->layer_buffer_type(0, 1), sched->backend(0)->default_buffer_type());
  EXPECT_EQ(sched->layer_buffer_type(0, 2), cpu_mem);  // another n_layer: the default
  EXPECT_EQ(sched->layer_buffer_type(5, 1), cpu_mem);  // outside [-1, n_layer]

  std::vector<std::unique_ptr<Backend>> bs;
  bs.push_back(std::make_unique<CpuBackend>(1));
  EXPECT_EQ(Scheduler::Create(std::move(bs), 1).status().code(), absl::StatusCode::kInvalidArgument);
  // The old Create keeps the first backend's memory.
  auto first = FakeThenCpu({});
  EXPECT_EQ(first->default_buffer_type(), first->backend(0)->default_buffer_type());
}

TEST(SchedTest, LayerPlacementFromSplitFollowsLlamaCpp) {
  // --tensor-split 1,1 over [cpu (1), device (0)]: input and 0-3 on the CPU, 4-7 and the
  // output on the device.
  EXPECT_EQ(LayerPlacementFromSplit(8, {1, 1}, {1, 0}), (std::vector<size_t>{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(LayerPlacementFromSplit(8, {}, {1, 0}), (std::vector<size_t>{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
  // 3:1 over 4 layers; odd counts round as llama.cpp does (layer il on the first device
  // whose cumulative share exceeds il / n_layer).
  EXPECT_EQ(LayerPlacementFromSplit(4, {3, 1}, {0, 1}), (std::vector<size_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(LayerPlacementFromSplit(5, {1, 1}, {0, 1}), (std::vector<size_t>{0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(LayerPlacementFromSplit(3, {1, 1, 1}, {2, 0, 1}), (std::vector<size_t>{2, 2, 0, 1, 1}));
  // A zero share gets no layers (but the output stays on the last listed).
  EXPECT_EQ(LayerPlacementFromSplit(4, {1, 0}, {0, 1}), (std::vector<size_t>{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(LayerPlacementFromSplit(2, {1}, {1}), (std::vector<size_t>{1, 1, 1, 1}));
  EXPECT_EQ(LayerPlacementFromSplit(0, {}, {0, 1}), (std::vector<size_t>{0, 1}));
  // Bad inputs: nothing.
  EXPECT_TRUE(LayerPlacementFromSplit(4, {}, {}).empty());
  EXPECT_TRUE(LayerPlacementFromSplit(4, {1}, {0, 1}).empty());
  EXPECT_TRUE(LayerPlacementFromSplit(4, {1, -1}, {0, 1}).empty());
  EXPECT_TRUE(LayerPlacementFromSplit(4, {0, 0}, {0, 1}).empty());
  EXPECT_TRUE(LayerPlacementFromSplit(-1, {}, {0}).empty());
}

}  // namespace
}  // namespace herd
