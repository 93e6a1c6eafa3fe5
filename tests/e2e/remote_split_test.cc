// A two-host layer split on loopback (LocalCluster remote_split, the code behind `herd
// up --remote-split`): loader, one stories260K worker with `--backend
// cpu,remote://127.0.0.1:PORT` and its herd-compute server, gateway. The link between
// worker and compute server is cut mid-generation by stopping the compute server
// (SIGSTOP: its sockets stay open and nothing answers, as with a cut cable) and the
// compute server is crashed (SIGKILL: the supervisor restarts it on the same port, a new
// instance without the worker's buffers). Asserted:
//  - greedy output through the gateway equals run.c's reference story;
//  - cut: the stream in flight ends with UNAVAILABLE naming the remote backend within
//    --remote_timeout_ms plus a few seconds (a 60 s client deadline makes a hang fail,
//    not block), and the worker's grpc health turns NOT_SERVING;
//  - SIGCONT: health SERVING again and the greedy output is the reference again;
//  - SIGKILL: the worker recovers by itself (weights sent again, KV cache dropped):
//    health SERVING and the reference output within 30 s, the new server holding
//    buffers again.
// Only generous upper bounds on time are asserted; the measured times are printed.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRemoteTimeoutMs = 2000;
constexpr int kServing = 1;
constexpr int kNotServing = 2;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Collected {
  grpc::Status status;
  std::string text;
  int tokens = 0;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

// A generation through the gateway; `on_token` runs after each message with tokens (the
// test stops the compute server from there). The 60 s deadline turns a hang into a
// DEADLINE_EXCEEDED failure.
Collected Generate(v1::Gateway::Stub* stub, const v1::GenerateRequest& req,
                   const std::function<void(int tokens)>& on_token = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  Collected c;
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    c.tokens += r.token_ids_size();
    c.text += r.text();
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) c.finish = r.finish_reason();
    if (on_token && r.token_ids_size() > 0) on_token(c.tokens);
  }
  c.status = reader->Finish();
  return c;
}

class RemoteSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    std::ifstream in(shared_ + "/models/stories260K.run_c_t0_n256.txt");
    runc_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(runc_.empty());
    runc_.pop_back();  // run.c's own final newline
    cli::ClusterOptions o = e2e::TinyClusterOptions(shared_);
    o.remote_split = true;
    o.max_sequences = 4;
    o.n_ctx = 16384;  // 4096 cells a sequence: the long stream never runs out
    o.restart_backoff_initial = std::chrono::milliseconds(50);
    o.extra_worker_flags = {absl::StrCat("--remote_timeout_ms=", kRemoteTimeoutMs)};
    o.extra_gateway_flags = {"--poll_ms=100"};
    absl::Status s = cluster_.Start(o, std::chrono::seconds(120));
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(cluster_.computes().size(), 1u);
    ASSERT_EQ(cluster_.workers().size(), 1u);
    compute_ = cluster_.computes()[0]->name;
    compute_addr_ = cluster_.computes()[0]->grpc_addr;
    worker_addr_ = cluster_.workers()[0]->grpc_addr;
    stub_ = v1::Gateway::NewStub(grpc::CreateChannel(cluster_.gateway_addr(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (!compute_.empty()) (void)cluster_.Signal(compute_, SIGCONT);  // never leave it stopped
    cluster_.Stop();
  }

  // The greedy 256-token story through the gateway equals run.c's. Right after a failure
  // the gateway may hold the worker out until its next poll (UNAVAILABLE): retried for
  // up to `within`. Returns the seconds until the successful generation.
  double ExpectReferenceStory(const std::string& when, std::chrono::seconds within = std::chrono::seconds(30)) {
    const auto t0 = Clock::now();
    Collected c;
    for (;;) {
      c = Generate(stub_.get(), e2e::Greedy("stories260K", "Once upon a time", 256));
      if (c.status.ok() || Clock::now() - t0 > within) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const double took = Seconds(Clock::now() - t0);
    EXPECT_TRUE(c.status.ok()) << when << ": code " << c.status.error_code() << ": " << c.status.error_message();
    if (!c.status.ok()) return took;
    EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH) << when;
    EXPECT_EQ(c.tokens, 256) << when;
    const std::string ours = "Once upon a time" + c.text;
    EXPECT_GE(ours.size(), runc_.size()) << when;
    EXPECT_EQ(ours.substr(0, runc_.size()), runc_) << when;
    return took;
  }

  // A long streaming generation; `sig` goes to the compute server after its first tokens.
  // Returns the stream and sets *t_sig to when the signal was sent.
  Collected CutMidStream(int sig, Clock::time_point* t_sig) {
    v1::GenerateRequest req = e2e::Greedy("stories260K", "Once upon a time", 3000);
    req.set_ignore_eos(true);
    bool sent = false;
    Collected c = Generate(stub_.get(), req, [&](int tokens) {
      if (sent || tokens < 8) return;
      sent = true;
      *t_sig = Clock::now();
      absl::Status s = cluster_.Signal(compute_, sig);
      EXPECT_TRUE(s.ok()) << s;
    });
    EXPECT_TRUE(sent) << "the stream ended before its 8th token: " << c.status.error_message();
    return c;
  }

  int Health() const { return e2e::HealthStatus(worker_addr_); }

  std::string shared_, runc_, compute_, compute_addr_, worker_addr_;
  cli::LocalCluster cluster_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
};

TEST_F(RemoteSplitTest, CutLinkMidGenerationThenRecover) {
  ASSERT_EQ(Health(), kServing);
  ExpectReferenceStory("before the cut");
  if (HasFailure()) return;

  // Cut: the compute server stops answering mid-stream.
  Clock::time_point t_stop;
  const Collected cut = CutMidStream(SIGSTOP, &t_stop);
  const double stop_to_error = Seconds(Clock::now() - t_stop);
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::UNAVAILABLE) << cut.status.error_message();
  EXPECT_TRUE(absl::StrContains(cut.status.error_message(), "remote backend " + compute_addr_))
      << cut.status.error_message();
  EXPECT_EQ(cut.finish, v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_LT(cut.tokens, 3000);
  EXPECT_LT(stop_to_error, 15.0) << "the stream took " << stop_to_error << " s to end after SIGSTOP";
  const bool not_serving = e2e::WaitFor([&] { return Health() == kNotServing; }, std::chrono::seconds(20));
  const double stop_to_not_serving = Seconds(Clock::now() - t_stop);
  EXPECT_TRUE(not_serving) << "worker health " << Health() << " 20 s after the link was cut";

  // The link is back.
  const auto t_cont = Clock::now();
  ASSERT_TRUE(cluster_.Signal(compute_, SIGCONT).ok());
  const bool serving = e2e::WaitFor([&] { return Health() == kServing; }, std::chrono::seconds(20));
  const double cont_to_serving = Seconds(Clock::now() - t_cont);
  EXPECT_TRUE(serving) << "worker health " << Health() << " 20 s after SIGCONT";
  ExpectReferenceStory("after SIGCONT");
  const double cont_to_story = Seconds(Clock::now() - t_cont);
  if (HasFailure()) return;

  // Crash: the supervisor restarts the compute server on its port, empty; the worker
  // sends its weights again and drops its KV cache by itself.
  const int restarts = cluster_.Restarts(compute_);
  const pid_t old_pid = cluster_.Pid(compute_);
  Clock::time_point t_kill;
  const Collected crashed = CutMidStream(SIGKILL, &t_kill);
  const double kill_to_error = Seconds(Clock::now() - t_kill);
  EXPECT_EQ(crashed.status.error_code(), grpc::StatusCode::UNAVAILABLE) << crashed.status.error_message();
  EXPECT_TRUE(absl::StrContains(crashed.status.error_message(), "remote backend " + compute_addr_))
      << crashed.status.error_message();
  EXPECT_LT(kill_to_error, 15.0);
  ASSERT_TRUE(e2e::WaitFor([&] { return cluster_.Restarts(compute_) > restarts; }, std::chrono::seconds(30)))
      << compute_ << " was not restarted";
  EXPECT_NE(cluster_.Pid(compute_), old_pid);
  const bool back = e2e::WaitFor([&] { return Health() == kServing; }, std::chrono::seconds(30));
  const double kill_to_serving = Seconds(Clock::now() - t_kill);
  EXPECT_TRUE(back) << "worker health " << Health() << " 30 s after the compute server was killed";
  ExpectReferenceStory("after the compute server restarted");
  const double kill_to_story = Seconds(Clock::now() - t_kill);
  // The new instance holds the worker's layers again (its counters start at 0).
  EXPECT_GT(e2e::MetricSum(cluster_.computes()[0]->metrics_addr, "herd_compute_buffer_bytes"), 0);

  std::printf(
      "remote_split_test: SIGSTOP -> stream error %.2f s (%d tokens; \"%s\"), -> NOT_SERVING %.2f s; SIGCONT -> "
      "SERVING %.2f s, -> reference story %.2f s; SIGKILL -> stream error %.2f s (\"%s\"), -> SERVING %.2f s, -> "
      "reference story %.2f s\n",
      stop_to_error, cut.tokens, cut.status.error_message().c_str(), stop_to_not_serving, cont_to_serving,
      cont_to_story, kill_to_error, crashed.status.error_message().c_str(), kill_to_serving, kill_to_story);
  RecordProperty("stop_to_error_ms", static_cast<int>(stop_to_error * 1000));
  RecordProperty("cont_to_serving_ms", static_cast<int>(cont_to_serving * 1000));
  RecordProperty("kill_to_serving_ms", static_cast<int>(kill_to_serving * 1000));
}

}  // namespace
}  // namespace herd
