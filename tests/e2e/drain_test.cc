// Graceful drain under load, over real processes (LocalCluster, the code behind `herd up`):
// loader, three stories260K workers and a gateway. Several clients keep streaming greedy
// requests through the gateway while workers get SIGTERM, as Kubernetes sends it in a
// rolling update. A terminated worker reports `draining` in Info (the gateway stops
// routing to it), refuses new sessions with UNAVAILABLE (the gateway retries them on
// another worker), finishes the streams it has within its --grace_ms and exits; the
// supervisor starts it again on the same port, as a Deployment starts a new pod.
// Asserted: SIGTERM of one worker mid-load, then a rolling restart of every worker, with
// no failed or cut request, and every restarted worker serving sessions again.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

constexpr int kWorkers = 3;
constexpr int kClients = 6;
constexpr int kTokens = 96;

// Clients streaming greedy requests until Stop(); every request must end OK with finish
// STOP or LENGTH and at least one token.
class Load {
 public:
  explicit Load(const std::string& gateway_addr) {
    stub_ = v1::Gateway::NewStub(grpc::CreateChannel(gateway_addr, grpc::InsecureChannelCredentials()));
    for (int c = 0; c < kClients; ++c) clients_.emplace_back([this, c] { Client(c); });
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : clients_) {
      if (t.joinable()) t.join();
    }
  }
  int ok() const { return ok_.load(); }
  std::vector<std::string> failures() const {
    std::lock_guard<std::mutex> l(mu_);
    return failures_;
  }

 private:
  void Client(int c) {
    for (int j = 0; !stop_; ++j) {
      v1::GenerateRequest req;
      req.set_model("stories260K");
      req.set_text(absl::StrCat("Once upon a time, client ", c, " told story number ", j, " about a"));
      req.set_n_predict(kTokens);
      req.mutable_sampling()->set_temperature(0.0f);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      auto reader = stub_->Generate(&ctx, req);
      v1::GenerateResponse r;
      int tokens = 0;
      v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
      while (reader->Read(&r)) {
        tokens += r.token_ids_size();
        if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = r.finish_reason();
      }
      const grpc::Status st = reader->Finish();
      if (st.ok() && tokens > 0 && (finish == v1::FINISH_REASON_STOP || finish == v1::FINISH_REASON_LENGTH)) {
        ++ok_;
        continue;
      }
      std::lock_guard<std::mutex> l(mu_);
      failures_.push_back(absl::StrCat("client ", c, " request ", j, ": code ", st.error_code(), " \"",
                                       st.error_message(), "\", finish ", v1::FinishReason_Name(finish), ", ", tokens,
                                       " tokens"));
    }
  }

  std::unique_ptr<v1::Gateway::Stub> stub_;
  std::vector<std::thread> clients_;
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  mutable std::mutex mu_;
  std::vector<std::string> failures_;
};

TEST(DrainTest, SigtermAndRollingRestartUnderLoadLoseNoRequest) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  cli::LocalCluster cluster;
  cli::ClusterOptions o = e2e::TinyClusterOptions(shared);
  o.workers_per_model = kWorkers;
  o.max_sequences = 8;
  o.n_ctx = 4096;
  o.restart_backoff_initial = std::chrono::milliseconds(50);
  o.extra_worker_flags = {"--grace_ms=60000"};  // every stream in flight finishes
  o.extra_gateway_flags = {"--poll_ms=100"};
  absl::Status s = cluster.Start(o, std::chrono::seconds(120));
  ASSERT_TRUE(s.ok()) << s;

  Load load(cluster.gateway_addr());
  ASSERT_TRUE(
      e2e::WaitFor([&] { return load.ok() >= kClients || !load.failures().empty(); }, std::chrono::seconds(60)));

  // SIGTERM worker i while it runs streams; returns once its new process served tokens.
  auto terminate = [&](size_t i) {
    cli::Process* w = cluster.workers()[i];
    const std::string name = w->name, metrics = w->metrics_addr;
    ASSERT_TRUE(e2e::WaitFor([&] { return e2e::MetricSum(metrics, "herd_worker_active_sequences") > 0; },
                             std::chrono::seconds(30)))
        << name << " never had a stream in flight";
    const int restarts = cluster.Restarts(name);
    ASSERT_TRUE(cluster.TerminateWorker(i).ok());
    ASSERT_TRUE(e2e::WaitFor([&] { return cluster.Restarts(name) > restarts; }, std::chrono::seconds(90)))
        << name << " did not exit after SIGTERM";
    // The new process (its counters start at 0) gets sessions from the gateway again.
    ASSERT_TRUE(e2e::WaitFor([&] { return e2e::MetricSum(metrics, "herd_worker_tokens_generated_total") > 0; },
                             std::chrono::seconds(90)))
        << name << " served nothing after its restart";
  };

  // One worker terminated mid-load; the load goes on.
  terminate(0);
  if (::testing::Test::HasFatalFailure()) return;
  const int after_first = load.ok();
  EXPECT_TRUE(e2e::WaitFor([&] { return load.ok() >= after_first + kClients; }, std::chrono::seconds(60)));
  // A rolling restart: every worker in turn.
  for (size_t i = 0; i < kWorkers && !::testing::Test::HasFatalFailure(); ++i) terminate(i);
  if (::testing::Test::HasFatalFailure()) return;
  const int after_rolling = load.ok();
  EXPECT_TRUE(e2e::WaitFor([&] { return load.ok() >= after_rolling + kClients; }, std::chrono::seconds(60)));
  load.Stop();

  const std::vector<std::string> failures = load.failures();
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << failures.size() + load.ok()
                                << " requests failed; first: "
                                << absl::StrJoin(failures.begin(),
                                                 failures.begin() + std::min<size_t>(5, failures.size()), "; ");
  for (size_t i = 0; i < kWorkers; ++i) EXPECT_GE(cluster.Restarts(cluster.workers()[i]->name), 1);
  std::printf("drain: %d requests completed, %zu failed, across %d worker restarts\n", load.ok(), failures.size(),
              kWorkers + 1);
  cluster.Stop();
}

}  // namespace
}  // namespace herd
