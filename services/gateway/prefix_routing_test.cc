// Prefix-aware routing over three real in-process workers (stories260K on the CPU
// backend) and a real loader: tenants with their own long shared prefixes send requests
// concurrently; with --route_policy=prefix every request after a tenant's first finds
// that tenant's prefix in the KV cache of the worker it is sent to (the scheduler's own
// reuse count, SessionStarted.n_cached, equals what the gateway expected), and the
// workers' prefix-cache digests (WorkerInfo.prefix_block_hashes) hold exactly the block
// hashes of the cached prompts.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "libs/engine/engine.h"
#include "libs/engine/scheduler.h"
#include "libs/model/model.h"
#include "libs/serving/metrics.h"
#include "libs/serving/prefix_blocks.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/gateway/gateway.h"
#include "services/gateway/in_process_testing.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"
#include "tests/stories_model_test.h"

namespace herd::gateway {
namespace {

constexpr int kWorkers = 3;
constexpr int kTenants = 3;
constexpr int kRounds = 4;

struct InProcessWorker {
  std::unique_ptr<Backend> backend;
  testing::WorkerServer srv;
  std::unique_ptr<v1::Worker::Stub> stub;
};

class PrefixRoutingTest : public StoriesModelTest {
 protected:
  void SetUp() override {
    StoriesModelTest::SetUp();  // model_, vocab_
    if (IsSkipped() || HasFatalFailure()) return;
    shared_ = SharedDir();
    ASSERT_TRUE(testing::StartLoaderServer(shared_ + "/models", nullptr, &loader_).ok());
    GatewayOptions go;
    go.loader_address = absl::StrCat("127.0.0.1:", loader_.port);
    go.pool.poll_interval = absl::Milliseconds(50);
    go.pool.route_policy = RoutePolicy::kPrefix;
    for (int i = 0; i < kWorkers; ++i) {
      InProcessWorker& w = workers_[i];
      w.backend = CpuBackendForTests(1);
      const absl::Status st = testing::StartWorkerServer(*model_, vocab_.get(), w.backend.get(), 2048, nullptr, &w.srv);
      ASSERT_TRUE(st.ok()) << st;
      const std::string address = absl::StrCat("127.0.0.1:", w.srv.port);
      w.stub = v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      go.pool.addresses.push_back(address);
    }
    const absl::Status st = testing::StartGatewayServer(go, &registry_, kWorkers, &gateway_);
    ASSERT_TRUE(st.ok()) << st;
  }

  void TearDown() override {
    const auto soon = std::chrono::system_clock::now() + std::chrono::seconds(2);
    gateway_.Stop(soon);
    for (InProcessWorker& w : workers_) w.srv.Stop(soon);
    if (loader_.server) loader_.server->Shutdown(soon);
  }

  // Tenant t's shared header: ~150 tokens of text no other tenant starts with.
  static std::string Header(int t) {
    static const char* kNames[kTenants] = {"Lily", "Tom", "Sue"};
    std::string s = absl::StrCat(kNames[t], " had a little red ball.");
    for (int i = 0; i < 12; ++i) absl::StrAppend(&s, " ", kNames[t], " liked to play with the ball in the park.");
    return s;
  }

  grpc::Status Generate(const std::string& text, int32_t* cached_tokens = nullptr) {
    v1::GenerateRequest req;
    req.set_model("stories260K");
    req.set_text(text);
    req.set_n_predict(4);
    req.mutable_sampling()->set_temperature(0);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto r = gateway_.stub->Generate(&ctx, req);
    v1::GenerateResponse m;
    while (r->Read(&m)) {
      if (m.has_usage() && cached_tokens != nullptr) *cached_tokens = m.usage().cached_tokens();
    }
    return r->Finish();
  }

  std::string shared_;
  serving::Registry registry_;
  testing::LoaderServer loader_;
  InProcessWorker workers_[kWorkers];
  testing::GatewayServer gateway_;
};

TEST_F(PrefixRoutingTest, TenantsFollowTheirCachedPrefixes) {
  // Tokens of each header (the prompt's BOS included; the suffix may merge with the
  // header's last token, so one token less is what a later request can reuse for sure).
  int64_t ideal = 0;
  for (int t = 0; t < kTenants; ++t) {
    const std::vector<int32_t> ids = vocab_->Tokenize(Header(t), /*add_special=*/true, /*parse_special=*/false);
    ideal += (kRounds - 1) * (static_cast<int64_t>(ids.size()) - 1);
  }
  std::vector<std::thread> tenants;
  std::vector<grpc::Status> status(kTenants * kRounds);
  std::vector<int32_t> cached(kTenants * kRounds, -1);
  for (int t = 0; t < kTenants; ++t) {
    tenants.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        status[t * kRounds + r] =
            Generate(absl::StrCat(Header(t), " Question ", r, ": what did ", t, " do?"), &cached[t * kRounds + r]);
      }
    });
  }
  for (std::thread& th : tenants) th.join();
  for (const grpc::Status& s : status) ASSERT_TRUE(s.ok()) << s.error_message();

  uint64_t reused = 0;
  for (const InProcessWorker& w : workers_) reused += w.srv.scheduler->Stats().prefix_tokens_reused;
  const double expected = registry_.Counter("herd_gateway_prefix_tokens_expected_total", "")->Value();
  const double realized = registry_.Counter("herd_gateway_prefix_tokens_realized_total", "")->Value();
  const double by_prefix = registry_.Counter("herd_gateway_route_decisions_total", "", {"reason"})->Value({"prefix"});
  std::printf(
      "prefix tokens: ideal >= %lld, expected by the gateway %.0f, realized %.0f (workers: %llu); %0.f of %d "
      "decisions by prefix\n",
      static_cast<long long>(ideal), expected, realized, static_cast<unsigned long long>(reused), by_prefix,
      kTenants * kRounds);
  EXPECT_EQ(realized, static_cast<double>(reused));
  // Each response's usage.cached_tokens (OpenAI's prompt_tokens_details) says its share.
  int64_t in_usage = 0;
  for (int32_t c : cached) in_usage += c;
  EXPECT_EQ(static_cast<double>(in_usage), realized);
  EXPECT_GE(realized, static_cast<double>(ideal));
  // The gateway expects whole blocks; the scheduler reuses every common token.
  EXPECT_GE(realized, expected);
  EXPECT_GE(expected, static_cast<double>(ideal) - kTenants * (kRounds - 1) * 16.0);
  EXPECT_GE(by_prefix, kTenants * (kRounds - 1));
}

TEST_F(PrefixRoutingTest, WorkerDigestHoldsTheCachedPromptsBlocks) {
  const std::string text = Header(0);
  ASSERT_TRUE(Generate(text).ok());
  const std::vector<int32_t> ids = vocab_->Tokenize(text, true, false);
  // The worker that served it: the one whose scheduler caches a prefix once the session's
  // end has reached it (the stream ends before the worker releases the sequence).
  const InProcessWorker* served = nullptr;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (served == nullptr && std::chrono::steady_clock::now() < end) {
    for (const InProcessWorker& w : workers_) {
      if (w.srv.scheduler->Stats().cached_prefixes > 0 && w.srv.scheduler->Stats().active == 0) served = &w;
    }
    if (served == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(served, nullptr);
  v1::WorkerInfo info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(served->stub->Info(&ctx, v1::WorkerInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.prefix_block_tokens(), 16);
  EXPECT_NE(info.prefix_version(), 0u);
  EXPECT_FALSE(info.prefix_unchanged());
  // Cached: the prompt and the tokens generated after it (all but the last one).
  std::vector<std::vector<int32_t>> cached = served->srv.scheduler->CachedPrompts();
  ASSERT_EQ(cached.size(), 1u);
  ASSERT_GE(cached[0].size(), ids.size());
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), cached[0].begin()));
  const std::vector<uint64_t> want = serving::PrefixBlockHashes(cached[0], 16);
  EXPECT_EQ(std::vector<uint64_t>(info.prefix_block_hashes().begin(), info.prefix_block_hashes().end()), want);
  // Asked again with the version it knows: nothing resent.
  v1::WorkerInfoRequest again;
  again.set_known_prefix_version(info.prefix_version());
  v1::WorkerInfo info2;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(served->stub->Info(&ctx2, again, &info2).ok());
  EXPECT_TRUE(info2.prefix_unchanged());
  EXPECT_EQ(info2.prefix_block_hashes_size(), 0);
  EXPECT_EQ(info2.prefix_version(), info.prefix_version());
}

}  // namespace
}  // namespace herd::gateway
