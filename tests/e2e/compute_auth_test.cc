// herd-compute (services/compute) requires the cluster key like every internal service:
// the real binary started with HERD_CLUSTER_KEY refuses a remote backend that sends no
// key or a wrong one (UNAUTHENTICATED, before any buffer is touched) and serves one
// that sends the right key (a tensor written, computed on and read back).
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/remote/remote_backend.h"
#include "libs/serving/security.h"
#include "libs/tensor/tensor.h"
#include "tests/child_process.h"

namespace herd {
namespace {

constexpr char kClusterKey[] = "cluster-key-compute-e2e-0123456789";

// herd-compute on a free loopback port with the cluster key; its address from "compute
// listening on ..." (empty on failure).
std::string StartCompute(ChildProcess* proc) {
  ::setenv("HERD_CLUSTER_KEY", kClusterKey, 1);  // the child inherits it
  if (!proc->Start({"services/compute/compute", "--port=0", "--metrics_port=-1", "--threads=1",
                    "--max_buffer_bytes=16777216"})
           .ok()) {
    return "";
  }
  return proc->ReadAfter("compute listening on ").value_or("");
}

absl::StatusOr<std::unique_ptr<remote::RemoteBackend>> ConnectWith(const std::string& addr, const std::string& key) {
  serving::ClientSecurity sec;
  sec.key = key;
  remote::RemoteOptions o;
  o.address = addr;
  o.channel = serving::MakeChannel(addr, sec);
  o.timeout = std::chrono::seconds(10);
  return remote::RemoteBackend::Connect(o);
}

TEST(ComputeAuth, ClusterKeyIsRequired) {
  ChildProcess proc;
  const std::string addr = StartCompute(&proc);
  ASSERT_FALSE(addr.empty()) << "herd-compute did not announce its address";

  auto none = ConnectWith(addr, "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  auto wrong = ConnectWith(addr, "not-the-cluster-key-0123456789");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();

  auto right = ConnectWith(addr, kClusterKey);
  ASSERT_TRUE(right.ok()) << right.status();
  remote::RemoteBackend* be = right->get();
  Graph g;
  Tensor* x = g.NewTensor(GgmlType::F32, {16}, "x");
  Tensor* y = g.Scale(x, 2.0f);
  g.SetOutput(y);
  auto buf = be->default_buffer_type()->Allocate(1024);
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_TRUE(PlaceTensor(x, buf->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(y, buf->get(), 512).ok());
  float in[16];
  for (int i = 0; i < 16; ++i) in[i] = static_cast<float>(i) - 3.5f;
  ASSERT_TRUE(be->SetTensor(x, in, 0, sizeof(in)).ok());
  float back[16] = {};
  ASSERT_TRUE(be->GetTensor(x, back, 0, sizeof(back)).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], in[i]) << i;
  ASSERT_TRUE(be->GraphCompute(g).ok());
  float out[16] = {};
  absl::Status s = be->GetTensor(y, out, 0, sizeof(out));
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 2.0f * in[i]) << i;
}

}  // namespace
}  // namespace herd
