// The remote backend against a compute server on loopback, and the server's checks of
// every message (ComputeServer driven directly with hand-made bad messages).
#include "libs/backend/remote/remote_backend.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/remote/remote_server.h"
#include "libs/backend/remote/testing/loopback.h"
#include "libs/backend/remote/wire.h"
#include "libs/backend/testing/device_checks.h"
#include "libs/backend/testing/op_graph.h"

namespace herd::remote {
namespace {

using ::herd::remote::testing::LoopbackServer;

class RemoteBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = LoopbackServer::Start(1);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    auto b = server_->Connect();
    ASSERT_TRUE(b.ok()) << b.status();
    remote_ = *std::move(b);
  }
  std::unique_ptr<LoopbackServer> server_;
  std::unique_ptr<RemoteBackend> remote_;
  CpuBackend cpu_{1};
};

TEST_F(RemoteBackendTest, DeviceInfo) {
  herd::testing::ExpectDevice0(remote_->device(), "remote", remote_->name(), remote_.get(), &cpu_);
  EXPECT_NE(remote_->device().description.find(server_->address()), std::string::npos);
}

TEST_F(RemoteBackendTest, TransfersRoundTrip) { herd::testing::ExpectTransfersRoundTrip(remote_.get(), &cpu_); }

TEST_F(RemoteBackendTest, BadIndexIsAnError) { herd::testing::ExpectBadIndexIsAnError(remote_.get(), &cpu_); }

// Inputs, a graph and the read of its result cost one round trip.
TEST_F(RemoteBackendTest, ComputeAndReadIsOneRoundTrip) {
  Graph g;
  Tensor* w = g.NewTensor(GgmlType::F32, {64, 32}, "w");
  Tensor* x = g.NewTensor(GgmlType::F32, {64, 4}, "x");
  Tensor* y = g.MulMat(w, x);
  Tensor* z = g.RmsNorm(y, 1e-5f);
  g.SetOutput(z);
  auto buf = remote_->default_buffer_type()->Allocate(w->nbytes() + x->nbytes() + 256);
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_TRUE(PlaceTensor(w, buf->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(x, buf->get(), (w->nbytes() + 255) / 256 * 256).ok());
  const std::vector<float> wv = herd::testing::OpGraph::Floats(64 * 32, 1);
  const std::vector<float> xv = herd::testing::OpGraph::Floats(64 * 4, 2);
  ASSERT_TRUE(remote_->SetTensor(w, wv.data(), 0, w->nbytes()).ok());
  ASSERT_TRUE(remote_->Synchronize().ok());
  const RemoteStats before = remote_->stats();
  ASSERT_TRUE(remote_->SetTensorAsync(x, xv.data(), 0, x->nbytes()).ok());
  ASSERT_TRUE(remote_->GraphCompute(g).ok());  // places y and z in a scratch buffer (one AllocBuffer)
  std::vector<float> got(static_cast<size_t>(z->nelements()));
  ASSERT_TRUE(remote_->GetTensor(z, got.data(), 0, z->nbytes()).ok());
  const RemoteStats after = remote_->stats();
  EXPECT_EQ(after.round_trips - before.round_trips, 2u);  // the scratch allocation + one Execute

  // The same graph again: the scratch is reused, so one round trip.
  ASSERT_TRUE(remote_->SetTensorAsync(x, xv.data(), 0, x->nbytes()).ok());
  Graph g2;
  Tensor* w2 = g2.NewTensor(GgmlType::F32, {64, 32}, "w");
  Tensor* x2 = g2.NewTensor(GgmlType::F32, {64, 4}, "x");
  *w2 = *w;
  *x2 = *x;
  Tensor* z2 = g2.RmsNorm(g2.MulMat(w2, x2), 1e-5f);
  g2.SetOutput(z2);
  ASSERT_TRUE(remote_->GraphCompute(g2).ok());
  std::vector<float> again(got.size());
  ASSERT_TRUE(remote_->GetTensor(z2, again.data(), 0, z2->nbytes()).ok());
  EXPECT_EQ(remote_->stats().round_trips - after.round_trips, 1u);
  EXPECT_EQ(again, got);

  // The CPU computes the same.
  Graph c;
  Tensor* cw = c.NewTensor(GgmlType::F32, {64, 32});
  Tensor* cx = c.NewTensor(GgmlType::F32, {64, 4});
  cw->data = const_cast<float*>(wv.data());
  cx->data = const_cast<float*>(xv.data());
  Tensor* cz = c.RmsNorm(c.MulMat(cw, cx), 1e-5f);
  c.SetOutput(cz);
  ASSERT_TRUE(cpu_.GraphCompute(c).ok());
  EXPECT_EQ(0, std::memcmp(cz->data, got.data(), cz->nbytes()));
}

// A server that stops answering: UNAVAILABLE naming it, within the deadline.
TEST_F(RemoteBackendTest, LostServerIsUnavailableNamingIt) {
  Graph g;
  Tensor* a = g.NewTensor(GgmlType::F32, {16});
  auto buf = remote_->default_buffer_type()->Allocate(a->nbytes());
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(PlaceTensor(a, buf->get(), 0).ok());
  server_->Shutdown();
  float v[16] = {};
  absl::Status s = remote_->GetTensor(a, v, 0, sizeof(v));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(server_->address()), std::string::npos) << s;
  EXPECT_EQ(remote_->CheckDevice().code(), absl::StatusCode::kUnavailable);
}

// A server that restarts: CheckDevice restores the buffers, sends the weights again
// (written from stable memory) and says the rest is lost; computing works again.
TEST_F(RemoteBackendTest, RestartedServerGetsItsWeightsBack) {
  Graph g;
  Tensor* w = g.NewTensor(GgmlType::Q8_0, {64, 32}, "blk.0.ffn_up.weight");
  Tensor* x = g.NewTensor(GgmlType::F32, {64, 2}, "x");
  Tensor* kv = g.NewTensor(GgmlType::F32, {16}, "cache");
  Tensor* y = g.MulMat(w, x);
  g.SetOutput(y);
  std::vector<uint8_t> weights(w->nbytes());
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>((i * 37) % 251);
  for (size_t b = 0; b < weights.size(); b += 34) weights[b + 1] = 0x1c;  // sane f16 block scales
  remote_->AddStableHostRegion(weights.data(), weights.size());
  auto wbuf = remote_->default_buffer_type()->Allocate(w->nbytes());
  auto other = remote_->default_buffer_type()->Allocate(4096);
  ASSERT_TRUE(wbuf.ok() && other.ok());
  ASSERT_TRUE(PlaceTensor(w, wbuf->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(x, other->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(kv, other->get(), 1024).ok());
  ASSERT_TRUE(remote_->SetTensor(w, weights.data(), 0, weights.size()).ok());
  ASSERT_TRUE(remote_->PrepareWeights({w}).ok());
  const std::vector<float> xv = herd::testing::OpGraph::Floats(128, 3);
  const std::vector<float> kvv(16, 2.5f);
  ASSERT_TRUE(remote_->SetTensor(kv, kvv.data(), 0, kv->nbytes()).ok());
  auto run = [&](std::vector<float>* out) -> absl::Status {
    if (absl::Status s = remote_->SetTensor(x, xv.data(), 0, x->nbytes()); !s.ok()) return s;
    Graph again;
    Tensor* y2 = again.MulMat(w, x);
    again.SetOutput(y2);
    if (absl::Status s = remote_->GraphCompute(again); !s.ok()) return s;
    out->resize(static_cast<size_t>(y2->nelements()));
    return remote_->GetTensor(y2, out->data(), 0, y2->nbytes());
  };
  std::vector<float> before;
  ASSERT_TRUE(run(&before).ok());
  ASSERT_TRUE(remote_->CheckDevice().ok());

  const int port = std::stoi(server_->address().substr(server_->address().rfind(':') + 1));
  server_->Shutdown();
  EXPECT_EQ(remote_->CheckDevice().code(), absl::StatusCode::kUnavailable);
  std::vector<float> during;
  EXPECT_EQ(run(&during).code(), absl::StatusCode::kUnavailable);

  auto restarted = LoopbackServer::Start(1, {}, /*instance=*/2, port);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  absl::Status s = remote_->CheckDevice();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(remote_->CheckDevice().ok());
  std::vector<float> after;
  ASSERT_TRUE(run(&after).ok());
  EXPECT_EQ(after, before);
  std::vector<float> kv_after(16, -1.0f);
  ASSERT_TRUE(remote_->GetTensor(kv, kv_after.data(), 0, kv->nbytes()).ok());
  EXPECT_EQ(kv_after, std::vector<float>(16, 0.0f));  // not stable memory: lost
  server_ = *std::move(restarted);
}

// ---------------------------------------------------------------------------
// The server's checks, message by message.

class ComputeServerTest : public ::testing::Test {
 protected:
  ComputeServerTest() : server_(std::make_unique<CpuBackend>(1), Opts(), 7) {}
  static ServerOptions Opts() {
    ServerOptions o;
    o.max_buffer_bytes = 1 << 20;
    return o;
  }
  uint64_t Alloc(uint64_t size) {
    absl::StatusOr<uint64_t> id = server_.Alloc(7, size);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }
  absl::Status Run(const v1::Command& c) {
    v1::ExecuteRequest req;
    req.set_instance(7);
    *req.add_commands() = c;
    v1::ExecuteResponse resp;
    return server_.Execute(req, &resp);
  }
  static v1::WireTensor Leaf(uint64_t buffer, uint64_t offset, std::vector<int64_t> ne, GgmlType type = GgmlType::F32) {
    Tensor t;
    t.type = type;
    for (size_t i = 0; i < 4; ++i) t.ne[i] = i < ne.size() ? ne[i] : 1;
    SetContiguousStrides(&t);
    v1::WireTensor w;
    w.set_type(static_cast<int>(type));
    for (int i = 0; i < 4; ++i) {
      w.add_ne(t.ne[i]);
      w.add_nb(t.nb[i]);
    }
    w.set_buffer(buffer);
    w.set_offset(offset);
    w.set_name("leaf");
    return w;
  }
  // A valid compute: rms_norm of a [64, 2] leaf at 0 into 1024.
  v1::Command Norm(uint64_t buf) {
    v1::Command c;
    *c.mutable_compute()->add_tensors() = Leaf(buf, 0, {64, 2});
    v1::WireTensor n = Leaf(buf, 1024, {64, 2});
    n.set_op(static_cast<int>(Op::kRmsNorm));
    n.add_src(0);
    n.add_f_params(1e-5f);
    *c.mutable_compute()->add_tensors() = n;
    return c;
  }
  void ExpectBad(const v1::Command& c, const std::string& words) {
    absl::Status s = Run(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  }
  ComputeServer server_;
};

TEST_F(ComputeServerTest, ValidGraphRuns) {
  const uint64_t b = Alloc(4096);
  EXPECT_TRUE(Run(Norm(b)).ok());
}

TEST_F(ComputeServerTest, OtherInstanceIsAborted) {
  EXPECT_EQ(server_.Alloc(8, 64).status().code(), absl::StatusCode::kAborted);
  v1::ExecuteRequest req;
  req.set_instance(8);
  v1::ExecuteResponse resp;
  EXPECT_EQ(server_.Execute(req, &resp).code(), absl::StatusCode::kAborted);
}

// Buffers belong to their client: another client cannot name them, and a client not
// heard from for client_idle has them released (a worker that died frees its half).
TEST(ComputeServerClientsTest, BuffersAreTheirClientsAndIdleClientsAreReleased) {
  ServerOptions o;
  o.client_idle = std::chrono::milliseconds(50);
  ComputeServer server(std::make_unique<CpuBackend>(1), o, 7);
  absl::StatusOr<uint64_t> a = server.Alloc(7, 4096, /*client=*/11);
  ASSERT_TRUE(a.ok());
  v1::ExecuteRequest req;
  req.set_instance(7);
  req.set_client(12);
  req.add_commands()->mutable_get()->set_buffer(*a);
  v1::ExecuteResponse resp;
  absl::Status s = server.Execute(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("unknown buffer"), std::string::npos);
  req.set_client(11);
  EXPECT_TRUE(server.Execute(req, &resp).ok());
  EXPECT_EQ(server.bytes_allocated(), 4096u);

  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // > client_idle without a call from 11
  v1::ExecuteRequest other;  // any Alloc / Execute of a client not idle itself releases idle ones
  other.set_instance(7);
  other.set_client(14);
  ASSERT_TRUE(server.Execute(other, &resp).ok());
  EXPECT_EQ(server.bytes_allocated(), 0u);
  EXPECT_EQ(server.n_buffers(), 0u);
  s = server.Execute(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("released"), std::string::npos) << s;
  EXPECT_EQ(server.Alloc(7, 64, 11).status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(server.Alloc(7, 64, 13).ok());  // a new client id starts afresh
}

// GetDevice keep-alives (a worker's once-a-second probe) keep an otherwise idle client's
// buffers, and are answered without the lock a compute holds.
TEST(ComputeServerClientsTest, ProbesKeepAnIdleClientsBuffers) {
  ServerOptions o;
  o.client_idle = std::chrono::milliseconds(2000);
  ComputeServer server(std::make_unique<CpuBackend>(1), o, 7);
  ASSERT_TRUE(server.Alloc(7, 4096, /*client=*/21).ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
  while (std::chrono::steady_clock::now() < until) {  // longer than client_idle, probing only
    (void)server.Device(/*client=*/21);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  v1::ExecuteRequest other;
  other.set_instance(7);
  other.set_client(22);
  v1::ExecuteResponse resp;
  ASSERT_TRUE(server.Execute(other, &resp).ok());  // sweeps idle clients: 21 is not idle
  EXPECT_EQ(server.bytes_allocated(), 4096u);
}

// A client whose buffers were released (the link was down past client_idle) recovers like
// after a restart: CheckDevice restores them under a new client id.
TEST(RemoteBackendIdleTest, ReleasedClientIsRestoredByCheckDevice) {
  ServerOptions o;
  o.client_idle = std::chrono::milliseconds(300);
  auto server = LoopbackServer::Start(1, o);
  ASSERT_TRUE(server.ok());
  auto backend = (*server)->Connect();
  ASSERT_TRUE(backend.ok());
  RemoteBackend& remote = **backend;
  std::vector<float> w(256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  remote.AddStableHostRegion(w.data(), w.size() * sizeof(float));
  Graph g;
  Tensor* t = g.NewTensor(GgmlType::F32, {256}, "blk.0.w");
  auto buf = remote.default_buffer_type()->Allocate(t->nbytes());
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(PlaceTensor(t, buf->get(), 0).ok());
  ASSERT_TRUE(remote.SetTensor(t, w.data(), 0, t->nbytes()).ok());
  ASSERT_TRUE(remote.Synchronize().ok());
  // Another client's call after the idle time releases this one's buffers.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto other = (*server)->Connect();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->CheckDevice().ok());
  std::vector<float> got(256);
  EXPECT_EQ(remote.GetTensor(t, got.data(), 0, t->nbytes()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(remote.CheckDevice().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(remote.GetTensor(t, got.data(), 0, t->nbytes()).ok());
  EXPECT_EQ(got, w);
}

// A request that reaches the server after its deadline (held up by a cut link) is not
// run: it must not write into buffers its client has moved on from.
TEST_F(ComputeServerTest, LateRequestIsNotRun) {
  const uint64_t b = Alloc(256);
  v1::ExecuteRequest req;
  req.set_instance(7);
  v1::SetBytes* set = req.add_commands()->mutable_set();
  set->set_buffer(b);
  set->set_data(std::string(16, 'x'));
  v1::ExecuteResponse resp;
  absl::Status s = server_.Execute(req, &resp, std::chrono::system_clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  v1::Command get;
  get.mutable_get()->set_buffer(b);
  get.mutable_get()->set_size(16);
  v1::ExecuteRequest r2;
  r2.set_instance(7);
  *r2.add_commands() = get;
  v1::ExecuteResponse out;
  ASSERT_TRUE(server_.Execute(r2, &out, std::chrono::system_clock::now() + std::chrono::seconds(60)).ok());
  EXPECT_EQ(out.reads(0), std::string(16, '\0'));
}

TEST_F(ComputeServerTest, BufferLimitIsResourceExhausted) {
  EXPECT_EQ(server_.Alloc(7, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_.Alloc(7, (1 << 20) + 1).status().code(), absl::StatusCode::kResourceExhausted);
  const uint64_t b = Alloc(1 << 19);
  EXPECT_EQ(server_.Alloc(7, (1 << 19) + 1).status().code(), absl::StatusCode::kResourceExhausted);
  v1::Command f;
  f.mutable_free()->set_buffer(b);
  EXPECT_TRUE(Run(f).ok());
  EXPECT_EQ(server_.bytes_allocated(), 0u);
  EXPECT_TRUE(server_.Alloc(7, 1 << 20).ok());
}

TEST_F(ComputeServerTest, ByteRangesOutsideBuffersAreRefused) {
  const uint64_t b = Alloc(256);
  v1::Command c;
  c.mutable_set()->set_buffer(b);
  c.mutable_set()->set_offset(200);
  c.mutable_set()->set_data(std::string(57, 'x'));
  ExpectBad(c, "outside buffer");
  c.mutable_set()->set_offset(~uint64_t{0});
  c.mutable_set()->set_data("x");
  ExpectBad(c, "outside buffer");
  v1::Command g;
  g.mutable_get()->set_buffer(b + 100);
  g.mutable_get()->set_size(1);
  ExpectBad(g, "unknown buffer");
  v1::Command cp;
  cp.mutable_copy()->set_src_buffer(b);
  cp.mutable_copy()->set_dst_buffer(b);
  cp.mutable_copy()->set_dst_offset(128);
  cp.mutable_copy()->set_size(129);
  ExpectBad(cp, "outside buffer");
  v1::Command cl;
  cl.mutable_clear()->set_buffer(b);
  cl.mutable_clear()->set_value(256);
  ExpectBad(cl, "not a byte");
  EXPECT_EQ(Run(v1::Command()).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ComputeServerTest, BadTensorsAreRefusedByName) {
  const uint64_t b = Alloc(4096);
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_offset(4096 - 64);  // leaf past the end
    ExpectBad(c, "outside buffer");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->set_src(0, 1);  // itself
    ExpectBad(c, "not an earlier tensor");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->set_src(0, -7);
    ExpectBad(c, "not an earlier tensor");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->set_op(999);
    ExpectBad(c, "unknown op");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_type(12345);
    ExpectBad(c, "unknown type");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->set_ne(1, 3);  // the node's shape is not its source's
    ExpectBad(c, "not what it makes of its sources");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_ne(2, 0);
    ExpectBad(c, "outside [1, 2^32]");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_nb(3, uint64_t{1} << 60);
    ExpectBad(c, "above 2^48");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_nb(0, 2);
    ExpectBad(c, "element size");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->clear_src();  // rms_norm without its source
    ExpectBad(c, "needs src[0]");
  }
  {
    // A view reaching past its root.
    v1::Command c = Norm(b);
    v1::WireTensor v = Leaf(0, 0, {64, 2});
    v.set_op(static_cast<int>(Op::kView));
    v.add_src(0);
    v.set_view_src(1);
    v.set_view_offs(8);
    *c.mutable_compute()->mutable_tensors(1) = v;
    ExpectBad(c, "outside its root");
  }
  {
    // A quantized matrix whose rows are not whole blocks.
    v1::Command c;
    *c.mutable_compute()->add_tensors() = Leaf(b, 0, {33, 2}, GgmlType::Q4_0);
    ExpectBad(c, "not whole");
  }
  {
    // mul_mat of mismatched inner sizes (SupportsOp refuses).
    v1::Command c;
    *c.mutable_compute()->add_tensors() = Leaf(b, 0, {64, 4});
    *c.mutable_compute()->add_tensors() = Leaf(b, 1024, {32, 2});
    v1::WireTensor m = Leaf(b, 2048, {4, 2});
    m.set_op(static_cast<int>(Op::kMulMat));
    m.add_src(0);
    m.add_src(1);
    *c.mutable_compute()->add_tensors() = m;
    ExpectBad(c, "does not compute");
  }
}

// Tensors whose address or strides are not aligned for their type are refused before a
// kernel loads a float from them (found by tests/fuzz/remote_compute_fuzz: a flash
// attention V leaf at offset 4039 was read as floats).
TEST_F(ComputeServerTest, MisalignedTensorsAreRefused) {
  const uint64_t b = Alloc(4096);
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_offset(3);  // F32 at an odd byte
    ExpectBad(c, "offset 3 is not a multiple of 4 (F32 alignment)");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(1)->set_offset(1026);
    ExpectBad(c, "offset 1026 is not a multiple of 4");
  }
  {
    v1::Command c = Norm(b);
    c.mutable_compute()->mutable_tensors(0)->set_nb(1, 258);  // rows 2 bytes apart from alignment
    ExpectBad(c, "nb[1] = 258 is not a multiple of 4");
  }
  {
    // A view 2 bytes into its F32 root.
    v1::Command c = Norm(b);
    v1::WireTensor v = Leaf(0, 0, {32, 1});
    v.set_op(static_cast<int>(Op::kView));
    v.add_src(0);
    v.set_view_src(1);
    v.set_view_offs(2);
    *c.mutable_compute()->mutable_tensors(1) = v;
    ExpectBad(c, "view_offs = 2 is not a multiple of 4");
  }
  {
    // F16 and Q4_0 (18-byte blocks of halves) need 2 bytes; Q4_0 at an even offset is fine.
    v1::Command c;
    *c.mutable_compute()->add_tensors() = Leaf(b, 1, {32, 2}, GgmlType::F16);
    ExpectBad(c, "offset 1 is not a multiple of 2 (F16 alignment)");
    *c.mutable_compute()->mutable_tensors(0) = Leaf(b, 18, {32, 2}, GgmlType::Q4_0);
    EXPECT_TRUE(Run(c).ok());
  }
  EXPECT_EQ(TypeAlignment(GgmlType::F32), 4u);
  EXPECT_EQ(TypeAlignment(GgmlType::Q8_0), 2u);
  EXPECT_EQ(TypeAlignment(GgmlType::I8), 1u);
  EXPECT_EQ(TypeAlignment(GgmlType::F64), 8u);
}

// Weights of one PrepareWeights command that share bytes are refused: preparing the
// second dropped the first one's fresh layout while the backend was still to read it (a
// use after free found by tests/fuzz/remote_compute_fuzz).
TEST_F(ComputeServerTest, OverlappingPreparedWeightsAreRefused) {
  const uint64_t b = Alloc(8192);
  {
    v1::Command c;
    *c.mutable_prepare()->add_tensors() = Leaf(b, 64, {128, 4}, GgmlType::Q8_0);
    *c.mutable_prepare()->add_tensors() = Leaf(b, 64, {128, 4}, GgmlType::Q8_0);  // the same bytes again
    ExpectBad(c, "tensors[1] 'leaf' overlaps tensors[0]");
  }
  {
    v1::Command c;
    *c.mutable_prepare()->add_tensors() = Leaf(b, 0, {128, 16}, GgmlType::Q8_0);  // 2176 bytes
    *c.mutable_prepare()->add_tensors() = Leaf(b, 4096, {128, 4}, GgmlType::Q8_0);
    *c.mutable_prepare()->add_tensors() = Leaf(b, 1024, {32, 2}, GgmlType::Q8_0);  // inside the first
    ExpectBad(c, "tensors[2] 'leaf' overlaps tensors[0]");
  }
  {
    // Side by side, and in another buffer at the same offset: fine.
    const uint64_t b2 = Alloc(4096);
    v1::Command c;
    *c.mutable_prepare()->add_tensors() = Leaf(b, 0, {128, 4}, GgmlType::Q8_0);  // 544 bytes
    *c.mutable_prepare()->add_tensors() = Leaf(b, 544, {128, 4}, GgmlType::Q8_0);
    *c.mutable_prepare()->add_tensors() = Leaf(b2, 0, {128, 4}, GgmlType::Q8_0);
    EXPECT_TRUE(Run(c).ok());
    EXPECT_TRUE(Run(c).ok());  // prepared already
  }
}

// A graph that reads a prepared weight and writes over its bytes (another node's
// output): the server drops the stale layout, but the graph still holds its header as
// a source, so it lives until the graph has run (it was freed first: a use after free
// under ASan, found with tests/fuzz/remote_compute_fuzz).
TEST_F(ComputeServerTest, NodeOverwritingAPreparedWeightTheGraphReads) {
  const uint64_t b = Alloc(4096);
  v1::Command prep;
  *prep.mutable_prepare()->add_tensors() = Leaf(b, 0, {128, 4}, GgmlType::Q8_0);
  ASSERT_TRUE(Run(prep).ok());
  v1::Command c;
  *c.mutable_compute()->add_tensors() = Leaf(b, 0, {128, 4}, GgmlType::Q8_0);  // the prepared weight
  *c.mutable_compute()->add_tensors() = Leaf(b, 1024, {128, 2});
  v1::WireTensor y = Leaf(b, 2048, {4, 2});
  y.set_op(static_cast<int>(Op::kMulMat));
  y.add_src(0);
  y.add_src(1);
  *c.mutable_compute()->add_tensors() = y;
  v1::WireTensor z = Leaf(b, 0, {128, 2});  // x * 2 over the weight's bytes
  z.set_op(static_cast<int>(Op::kScale));
  z.add_src(1);
  z.add_f_params(2.0f);
  *c.mutable_compute()->add_tensors() = z;
  EXPECT_TRUE(Run(c).ok());
  EXPECT_TRUE(Run(c).ok());  // again, without a prepared layout
}

// A node whose bytes overlap a source's (not exactly in place) is refused: CONT copied
// rows with memcpy over the rows it was reading (found by tests/fuzz/remote_compute_fuzz).
TEST_F(ComputeServerTest, NodeOverlappingItsSourceIsRefused) {
  const uint64_t b = Alloc(4096);
  v1::Command c;
  *c.mutable_compute()->add_tensors() = Leaf(b, 0, {64, 4});
  v1::WireTensor n = Leaf(b, 256, {64, 4});  // one row further: rows 1..3 overlap
  n.set_op(static_cast<int>(Op::kCont));
  n.add_src(0);
  *c.mutable_compute()->add_tensors() = n;
  ExpectBad(c, "tensors[1] 'leaf': its bytes overlap those of src[0]");
  c.mutable_compute()->mutable_tensors(1)->set_offset(0);  // exactly in place
  EXPECT_TRUE(Run(c).ok());
  c.mutable_compute()->mutable_tensors(1)->set_offset(1024);  // beside it
  EXPECT_TRUE(Run(c).ok());
}

// get_rows ids past the table are the kernel's clean error, not a read outside it.
TEST_F(ComputeServerTest, BadRowIdIsAnError) {
  const uint64_t b = Alloc(4096);
  v1::Command set;
  set.mutable_set()->set_buffer(b);
  set.mutable_set()->set_offset(2048);
  const int32_t ids[2] = {1, 1000};
  set.mutable_set()->set_data(ids, sizeof(ids));
  ASSERT_TRUE(Run(set).ok());
  v1::Command c;
  *c.mutable_compute()->add_tensors() = Leaf(b, 0, {16, 4});
  *c.mutable_compute()->add_tensors() = Leaf(b, 2048, {2}, GgmlType::I32);
  v1::WireTensor r = Leaf(b, 3072, {16, 2});
  r.set_op(static_cast<int>(Op::kGetRows));
  r.add_src(0);
  r.add_src(1);
  *c.mutable_compute()->add_tensors() = r;
  absl::Status s = Run(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("outside [0, 4)"), std::string::npos) << s;
}

}  // namespace
}  // namespace herd::remote
