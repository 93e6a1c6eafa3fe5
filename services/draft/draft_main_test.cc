// Starts the real herd-draft binary: ports printed, Propose over gRPC, /metrics,
// clean exit on SIGTERM; bad flags and an incompatible draft model are refused at
// start-up with a clear error.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "proto/herd/v1/draft.grpc.pb.h"
#include "tests/promtool.h"
#include "tests/shared_data.h"

namespace {

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // stdout and stderr
};

Child Spawn(const std::vector<std::string>& args) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    copy.insert(copy.begin(), "services/draft/draft");
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::perror("execv services/draft/draft");
    ::_exit(127);
  }
  ::close(fds[1]);
  c.out = ::fdopen(fds[0], "r");
  return c;
}

// Reads lines until one starts with `prefix`: the port after its last ':', or -1.
int ReadPort(FILE* f, const std::string& prefix, std::string* seen) {
  char line[1024];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string s(line);
    *seen += s;
    if (s.rfind(prefix, 0) != 0) continue;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    int port = -1;
    return absl::SimpleAtoi(s.substr(s.rfind(':') + 1), &port) ? port : -1;
  }
  return -1;
}

// Runs to completion; returns the exit status and all output.
int RunToEnd(const std::vector<std::string>& args, std::string* output) {
  Child c = Spawn(args);
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), c.out)) > 0) output->append(buf, n);
  std::fclose(c.out);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(DraftMain, ServesAndStopsOnSigterm) {
  Child c = Spawn({"--host=127.0.0.1", "--port=0", "--metrics_port=0", "--spec_type=ngram-simple",
                   "--spec_ngram_size_n=2", "--grace_ms=1000"});
  std::string seen;
  const int port = ReadPort(c.out, "draft listening on ", &seen);
  const int metrics_port = ReadPort(c.out, "draft metrics on ", &seen);
  ASSERT_GT(port, 0) << seen;
  ASSERT_GT(metrics_port, 0) << seen;

  auto stub = herd::v1::Draft::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  herd::v1::DraftRequest req;
  req.set_session_id("a");
  for (int t : {5, 6, 7, 8, 5, 6}) req.add_new_tokens(t);
  req.set_start(0);
  herd::v1::DraftResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = stub->Propose(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.tokens_size(), 16);  // (5 6 7 8) repeating, cut to --draft_max
  EXPECT_EQ(resp.tokens(0), 7);

  httplib::Client http("127.0.0.1", metrics_port);
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  {
    absl::Status prom = herd::testing::PromtoolCheckMetrics(res->body);
    EXPECT_TRUE(prom.ok()) << prom;
  }
  EXPECT_NE(res->body.find("herd_draft_calls_total{type=\"ngram-simple\"} 1"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("herd_draft_gen_tokens_total{type=\"ngram-simple\"} 16"), std::string::npos);

  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t done = 0;
  while ((done = ::waitpid(c.pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) ::kill(c.pid, SIGKILL);
  ASSERT_EQ(done, c.pid) << "draft did not exit within 20 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::fclose(c.out);
}

TEST(DraftMain, BadFlagsNameTheFlag) {
  std::string out;
  EXPECT_EQ(RunToEnd({"--port=0", "--metrics_port=-1", "--spec_ngram_size_n=0"}, &out), 1);
  EXPECT_NE(out.find("herd-draft: error: --spec_ngram_size_n: 0 is outside 1..1024"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunToEnd({"--port=0", "--metrics_port=-1", "--spec_type=eagle"}, &out), 1);
  EXPECT_NE(out.find("--spec_type: unknown speculative type"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunToEnd({"--port=0", "--metrics_port=-1", "--spec_type=draft-model"}, &out), 1);
  EXPECT_NE(out.find("needs --model_draft"), std::string::npos) << out;
}

TEST(DraftMain, IncompatibleDraftModelIsRefusedAtStartup) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << herd::kSharedDirMissing;
  std::string out;
  EXPECT_EQ(RunToEnd({"--port=0", "--metrics_port=-1", "--model_draft=" + shared + "/models/stories260K.gguf",
                      "--target_vocab=" + shared + "/models/llama-2-tiny-random.gguf"},
                     &out),
            1);
  EXPECT_NE(out.find("herd-draft: error: --model_draft"), std::string::npos) << out;
  EXPECT_NE(out.find("draft model vocabulary is incompatible with the target's: sizes 512 (draft) and 32000 "
                     "(target)"),
            std::string::npos)
      << out;
  out.clear();
  EXPECT_EQ(RunToEnd({"--port=0", "--metrics_port=-1", "--model_draft=" + shared + "/models/stories260K.gguf"}, &out),
            1);
  EXPECT_NE(out.find("needs the target's vocabulary"), std::string::npos) << out;
}

TEST(DraftMain, CompatibleDraftModelServes) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << herd::kSharedDirMissing;
  Child c = Spawn({"--host=127.0.0.1", "--port=0", "--metrics_port=-1",
                   "--model_draft=" + shared + "/models/stories260K.gguf",
                   "--target_vocab=" + shared + "/models/stories260K.gguf", "--draft_ctx=256", "--grace_ms=500"});
  std::string seen;
  const int port = ReadPort(c.out, "draft listening on ", &seen);
  ASSERT_GT(port, 0) << seen;
  auto stub = herd::v1::Draft::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  herd::v1::DraftRequest req;
  req.set_session_id("m");
  for (int t : {1, 403, 407, 261, 378}) req.add_new_tokens(t);
  req.mutable_config()->set_draft_p_min(0.0f);
  req.set_n_max(3);
  herd::v1::DraftResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = stub->Propose(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.tokens_size(), 3);
  EXPECT_EQ(resp.stats().type(), "draft-model");
  ::kill(c.pid, SIGTERM);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::fclose(c.out);
}

}  // namespace
