// One model served by a CPU worker and a Vulkan worker side by side behind one gateway
// (Vulkan on lavapipe here, pinned by VK_ICD_FILENAMES): both report their backend,
// greedy output through the gateway equals llama.cpp's ids and run.c's text whichever
// worker serves it, and killing either worker leaves the other serving. Skips when this
// machine has no Vulkan device.
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/backend/registry.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "proto/herd/v1/worker.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

struct Collected {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
};

Collected Greedy(v1::Gateway::Stub* stub, const std::string& prompt, int n) {
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text(prompt);
  req.set_n_predict(n);
  req.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  Collected c;
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    c.ids.insert(c.ids.end(), r.token_ids().begin(), r.token_ids().end());
    c.text += r.text();
  }
  c.status = reader->Finish();
  return c;
}

std::string WorkerBackend(const std::string& addr) {
  auto stub = v1::Worker::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WorkerInfo info;
  grpc::Status s = stub->Info(&ctx, v1::WorkerInfoRequest(), &info);
  return s.ok() ? info.backend() : "error: " + s.error_message();
}

class MixedBackendsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED to run the end-to-end tests";
    bool vulkan = false;
    for (const DeviceInfo& d : ListDevices()) vulkan |= d.backend == "vulkan";
    if (!vulkan) GTEST_SKIP() << "no Vulkan device here (" << DescribeDevices() << ")";
    cli::ClusterOptions o = e2e::TinyClusterOptions(shared_);
    o.workers_per_model = 2;
    o.worker_backends = {"cpu", "vulkan"};
    o.n_ctx = 4096;     // 512 cells per sequence with the default 8 sequences: the whole story
    o.restart = false;  // the test restarts workers itself
    ASSERT_TRUE(cluster_.Start(o, std::chrono::seconds(120)).ok());
    stub_ = v1::Gateway::NewStub(grpc::CreateChannel(cluster_.gateway_addr(), grpc::InsecureChannelCredentials()));
    std::ifstream in(shared_ + "/reference/A-stories260K-once_upon_a_time.json");
    want_ids_ = nlohmann::json::parse(in)["output_ids"].get<std::vector<int32_t>>();
    std::ifstream tin(shared_ + "/models/stories260K.run_c_t0_n256.txt");
    runc_.assign((std::istreambuf_iterator<char>(tin)), std::istreambuf_iterator<char>());
    runc_.pop_back();  // run.c's own final newline
  }
  void TearDown() override { cluster_.Stop(); }

  // The greedy story through the gateway, retried for up to 20 s while the gateway
  // notices a killed worker; then it must equal llama.cpp and run.c.
  void ExpectStory(const std::string& when) {
    const auto t0 = std::chrono::steady_clock::now();
    Collected c;
    do {
      c = Greedy(stub_.get(), "Once upon a time", 256);
      if (!c.status.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } while (!c.status.ok() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
    ASSERT_TRUE(c.status.ok()) << when << ": " << c.status.error_message();
    EXPECT_EQ(c.ids, want_ids_) << when;
    const std::string ours = "Once upon a time" + c.text;
    ASSERT_GE(ours.size(), runc_.size()) << when;
    EXPECT_EQ(ours.substr(0, runc_.size()), runc_) << when;
  }

  std::string shared_;
  cli::LocalCluster cluster_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  std::vector<int32_t> want_ids_;
  std::string runc_;
};

TEST_F(MixedBackendsTest, CpuAndVulkanWorkersServeTheSameModelAndSurviveEachOther) {
  ASSERT_EQ(cluster_.workers().size(), 2u);
  EXPECT_EQ(WorkerBackend(cluster_.workers()[0]->grpc_addr), "cpu");
  EXPECT_EQ(WorkerBackend(cluster_.workers()[1]->grpc_addr), "vulkan");
  // Concurrent requests spread over both workers; every one gives the reference story.
  std::vector<std::thread> threads;
  std::vector<Collected> got(4);
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = Greedy(stub_.get(), "Once upon a time", 256); });
  for (auto& t : threads) t.join();
  for (const Collected& c : got) {
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_EQ(c.ids, want_ids_);
  }
  ExpectStory("both workers up");

  ASSERT_TRUE(cluster_.KillWorker(0).ok());  // the CPU worker
  ExpectStory("CPU worker killed (Vulkan serves)");
  ExpectStory("CPU worker killed, again");
  ASSERT_TRUE(cluster_.RestartWorker(0).ok());
  ASSERT_TRUE(cluster_.KillWorker(1).ok());  // the Vulkan worker
  ExpectStory("Vulkan worker killed (CPU serves)");
  ExpectStory("Vulkan worker killed, again");
}

}  // namespace
}  // namespace herd
