// Starts the real herd-loader binary on free ports and talks to it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "libs/clients/loader_client.h"
#include "tests/promtool.h"
#include "tests/shared_data.h"

namespace herd::loader {
namespace {

// Reads lines from `fd` until one starts with `prefix`; returns the port after the
// last ':' or -1 at EOF.
int ReadPort(FILE* f, const std::string& prefix) {
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.rfind(prefix, 0) != 0) continue;
    int port = -1;
    if (!absl::SimpleAtoi(s.substr(s.rfind(':') + 1), &port)) return -1;
    return port;
  }
  return -1;
}

TEST(LoaderMain, ServesAndStopsOnSigterm) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/main_store";
  ::mkdir(dir.c_str(), 0755);
  {
    std::ifstream in(shared + "/models/stories260K.gguf", std::ios::binary);
    std::ofstream out(dir + "/stories260K.gguf", std::ios::binary);
    out << in.rdbuf();
  }

  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    const std::string models = "--models_dir=" + dir;
    ::execl("services/loader/loader", "loader", models.c_str(), "--host=127.0.0.1", "--port=0", "--metrics_port=0",
            "--grace_ms=1000", static_cast<char*>(nullptr));
    std::perror("execl services/loader/loader");
    ::_exit(127);
  }
  ::close(pipefd[1]);
  FILE* out = ::fdopen(pipefd[0], "r");
  const int port = ReadPort(out, "loader listening on ");
  const int metrics_port = ReadPort(out, "loader metrics on ");
  ASSERT_GT(port, 0);
  ASSERT_GT(metrics_port, 0);

  auto stub = herd::v1::Loader::NewStub(MakeLoaderChannel(absl::StrCat("127.0.0.1:", port)));
  auto models = ListModels(stub.get(), std::chrono::milliseconds(10000));
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name(), "stories260K");
  EXPECT_EQ((*models)[0].architecture(), "llama");
  auto f = FetchModel(stub.get(), "stories260K", std::chrono::milliseconds(10000));
  ASSERT_TRUE(f.ok()) << f.status();

  // Quantize through the binary (libs/quant): progress stream, then a new model.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    herd::v1::QuantizeRequest req;
    req.set_source("stories260K");
    req.set_target("stories260K-q8_0");
    req.set_type("Q8_0");
    req.add_tensor_type("ffn_down=f16");  // 172 columns: not a multiple of 32
    auto reader = stub->Quantize(&ctx, req);
    herd::v1::QuantizeProgress p, last;
    while (reader->Read(&p)) last = p;
    grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(last.done());
    auto after = ListModels(stub.get(), std::chrono::milliseconds(10000));
    ASSERT_TRUE(after.ok()) << after.status();
    ASSERT_EQ(after->size(), 2u);
    EXPECT_EQ((*after)[1].name(), "stories260K-q8_0");
    EXPECT_EQ((*after)[1].error(), "");
  }

  httplib::Client http("127.0.0.1", metrics_port);
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  {
    absl::Status prom = herd::testing::PromtoolCheckMetrics(res->body);
    EXPECT_TRUE(prom.ok()) << prom;
  }
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("herd_loader_requests_total{method=\"ListModels\",code=\"OK\"} 2"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("herd_loader_request_seconds_count{method=\"GetModelInfo\"} 1"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("herd_loader_requests_total{method=\"Quantize\",code=\"OK\"} 1"), std::string::npos)
      << res->body;

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) ::kill(pid, SIGKILL);
  ASSERT_EQ(done, pid) << "loader did not exit within 20 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::fclose(out);
}

}  // namespace
}  // namespace herd::loader
