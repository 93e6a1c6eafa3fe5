// The gateway binary: flags, the address lines on stdout, serving through fakes, and a
// graceful SIGTERM with a stream in flight.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "proto/herd/v1/gateway.grpc.pb.h"
#include "services/gateway/fakes.h"
#include "tests/promtool.h"
#include "tests/shared_data.h"

namespace herd::gateway {
namespace {

std::string BinaryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || ws == nullptr) return "";
  return absl::StrCat(srcdir, "/", ws, "/services/gateway/gateway");
}

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
  std::string grpc, http, metrics;
};

// Starts the binary; reads stdout until the three address lines arrived.
Child Launch(const std::vector<std::string>& args) {
  Child c;
  int fds[2];
  if (::pipe(fds) != 0) return c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    std::vector<std::string> a = args;
    std::vector<char*> argv;
    for (std::string& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  c.out = ::fdopen(fds[0], "r");
  char line[512];
  while ((c.grpc.empty() || c.http.empty() || c.metrics.empty()) && std::fgets(line, sizeof(line), c.out)) {
    std::string l(line);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    if (absl::StartsWith(l, "gateway listening on ")) c.grpc = l.substr(21);
    if (absl::StartsWith(l, "http on ")) c.http = l.substr(8);
    if (absl::StartsWith(l, "metrics on ")) c.metrics = l.substr(11);
  }
  return c;
}

int WaitExit(pid_t pid, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

TEST(GatewayMain, ServesAndShutsDownGracefully) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string bin = BinaryPath();
  ASSERT_FALSE(bin.empty());
  testing::FakeLoader loader;
  ASSERT_TRUE(loader.AddModelFromFile("stories260K", shared + "/models/stories260K.gguf").ok());
  ASSERT_TRUE(loader.Start().ok());
  testing::FakeWorkerConfig wc;
  wc.eos_after_script = false;
  wc.token_delay_ms = 20;
  testing::FakeWorker worker(wc);
  ASSERT_TRUE(worker.Start().ok());

  Child c = Launch({bin, "--loader=" + loader.address(), "--workers=" + worker.address(), "--host=127.0.0.1",
                    "--port=0", "--http_port=0", "--metrics_port=0", "--grace_ms=2000"});
  ASSERT_GT(c.pid, 0);
  ASSERT_FALSE(c.grpc.empty());
  ASSERT_FALSE(c.http.empty());
  ASSERT_FALSE(c.metrics.empty());
  EXPECT_TRUE(absl::StartsWith(c.grpc, "127.0.0.1:")) << c.grpc;

  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(c.grpc, grpc::InsecureChannelCredentials()));
  {
    // Ready once the gateway lists the worker's model (its first Info can be slow).
    v1::ListModelsResponse lm;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    do {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      lm.Clear();
      ASSERT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &lm).ok());
      if (lm.models_size() == 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < end);
    ASSERT_EQ(lm.models_size(), 1);
  }
  {
    const std::string m = c.metrics;
    httplib::Client cli(m.substr(0, m.rfind(':')), std::stoi(m.substr(m.rfind(':') + 1)));
    auto res = cli.Get("/metrics");
    ASSERT_TRUE(res);
    {
      absl::Status prom = herd::testing::PromtoolCheckMetrics(res->body);
      EXPECT_TRUE(prom.ok()) << prom;
    }
    EXPECT_TRUE(absl::StrContains(res->body, "herd_gateway_live_workers 1")) << res->body;
  }

  // A long stream is in flight when SIGTERM arrives: it gets its last message
  // (FINISH_REASON_CANCELLED) within the grace period and the process exits 0.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text("Once upon a time");
  req.set_n_predict(200);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(c.pid, SIGTERM);
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&r)) {
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = r.finish_reason();
  }
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(finish, v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(WaitExit(c.pid, 10000), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Its worker session was cancelled.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (worker.sessions_active() > 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(worker.sessions_active(), 0);
  std::fclose(c.out);
}

TEST(GatewayMain, RefusesToStartWithoutWorkers) {
  const std::string bin = BinaryPath();
  ASSERT_FALSE(bin.empty());
  Child c = Launch({bin, "--port=0", "--http_port=-1", "--metrics_port=-1"});
  ASSERT_GT(c.pid, 0);
  EXPECT_EQ(WaitExit(c.pid, 5000), 1);
  if (c.out != nullptr) std::fclose(c.out);
}

// Bad speculative flags are refused at start-up (exit status 1).
TEST(GatewayMain, RefusesBadSpeculativeFlags) {
  const std::string bin = BinaryPath();
  ASSERT_FALSE(bin.empty());
  for (const char* flag : {"--spec_type=magic", "--spec_ngram_size_n=0", "--draft_min=20", "--draft_p_min=2",
                           "--draft_workers=nohostport", "--draft_timeout_ms=0", "--draft_workers_dns=noport"}) {
    Child c = Launch({bin, "--workers=127.0.0.1:1", "--port=0", "--http_port=-1", "--metrics_port=-1", flag});
    ASSERT_GT(c.pid, 0);
    EXPECT_EQ(WaitExit(c.pid, 5000), 1) << flag;
    if (c.out != nullptr) std::fclose(c.out);
  }
}

}  // namespace
}  // namespace herd::gateway
