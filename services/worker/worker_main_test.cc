// Runs the herd-worker binary: with a local GGUF and through a real herd-loader,
// the printed ports, a session over gRPC, /metrics, flag errors, and graceful
// shutdown on SIGTERM (in-flight sessions continue, new ones are refused, the rest
// is cancelled at --grace_ms).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "proto/herd/v1/worker.grpc.pb.h"
#include "tests/promtool.h"
#include "tests/shared_data.h"

namespace herd::worker {
namespace {

namespace v1 = herd::v1;
using Clock = std::chrono::steady_clock;
using Stream = grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>;

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // its stdout
  std::string err_path;

  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out != nullptr) std::fclose(out);
  }
  // Waits for the exit; returns the exit status or -1 (killed after `timeout`).
  int Wait(std::chrono::milliseconds timeout) {
    int status = 0;
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < timeout) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string Stderr() const {
    std::ifstream f(err_path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
};

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::unique_ptr<Child> Spawn(const std::vector<std::string>& argv) {
  static int n = 0;
  auto c = std::make_unique<Child>();
  c->err_path = absl::StrCat(TmpDir(), "/child_", ::getpid(), "_", n++, ".err");
  int fds[2];
  if (::pipe(fds) != 0) return nullptr;
  const pid_t pid = ::fork();
  if (pid < 0) return nullptr;
  if (pid == 0) {
    ::dup2(fds[1], 1);
    const int err = ::open(c->err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) ::dup2(err, 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  ::close(fds[1]);
  c->pid = pid;
  c->out = ::fdopen(fds[0], "r");
  return c;
}

// Reads stdout lines until one starts with `prefix`; returns its port or -1 at EOF.
int ReadPort(FILE* f, const std::string& prefix, std::string* line_out = nullptr) {
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.rfind(prefix, 0) != 0) continue;
    if (line_out != nullptr) *line_out = s;
    int port = -1;
    if (!absl::SimpleAtoi(s.substr(s.rfind(':') + 1), &port)) return -1;
    return port;
  }
  return -1;
}

std::unique_ptr<v1::Worker::Stub> Connect(int port) {
  return v1::Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

v1::SessionRequest StartReq() {
  v1::SessionRequest r;
  for (int t : {1, 403, 407, 261, 378}) r.mutable_start()->add_prompt(t);
  r.mutable_start()->mutable_sampling()->set_temperature(0);
  return r;
}

v1::SessionRequest StepReq(int n) {
  v1::SessionRequest r;
  r.mutable_step()->set_n_steps(n);
  return r;
}

class WorkerMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    model_ = shared_ + "/models/stories260K.gguf";
  }
  std::unique_ptr<Child> StartWorker(std::vector<std::string> extra, int* port, int* metrics_port) {
    std::vector<std::string> argv = {"services/worker/worker", "--host=127.0.0.1", "--port=0",
                                     "--metrics_port=0",       "--threads=1",      "--n_ctx=256",
                                     "--max_sequences=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = Spawn(argv);
    if (c == nullptr) return nullptr;
    std::string line;
    *port = ReadPort(c->out, "worker listening on ", &line);
    EXPECT_EQ(line, absl::StrCat("worker listening on 127.0.0.1:", *port));
    *metrics_port = ReadPort(c->out, "worker metrics on ");
    EXPECT_GT(*port, 0) << c->Stderr();
    EXPECT_GT(*metrics_port, 0) << c->Stderr();
    return c;
  }
  std::string shared_, model_;
};

TEST_F(WorkerMainTest, ServesALocalModelAndDrainsOnSigterm) {
  int port = 0, mport = 0;
  auto w = StartWorker({"--model_path=" + model_, "--grace_ms=10000"}, &port, &mport);
  ASSERT_NE(w, nullptr);
  ASSERT_GT(port, 0);
  auto stub = Connect(port);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WorkerInfo info;
    ASSERT_TRUE(stub->Info(&ctx, v1::WorkerInfoRequest(), &info).ok());
    EXPECT_EQ(info.model(), "stories260K");
    EXPECT_EQ(info.backend(), "cpu");
    EXPECT_EQ(info.n_ctx(), 256);
    EXPECT_EQ(info.n_ctx_seq(), 256);  // a sequence may use the whole pool
    EXPECT_EQ(info.max_sequences(), 2);
  }
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub->Session(&ctx);
  ASSERT_TRUE(st->Write(StartReq()));
  ASSERT_TRUE(st->Write(StepReq(5)));
  v1::SessionResponse resp;
  ASSERT_TRUE(st->Read(&resp));
  ASSERT_TRUE(resp.has_started());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(st->Read(&resp));
    ASSERT_TRUE(resp.has_step());
  }
  httplib::Client http("127.0.0.1", mport);
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  {
    absl::Status prom = herd::testing::PromtoolCheckMetrics(res->body);
    EXPECT_TRUE(prom.ok()) << prom;
  }
  EXPECT_NE(res->body.find("herd_worker_tokens_generated_total 5"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("herd_worker_kv_cells_capacity 256"), std::string::npos) << res->body;

  // SIGTERM: the open session continues, new sessions are refused.
  ASSERT_EQ(::kill(w->pid, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(st->Write(StepReq(3)));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(st->Read(&resp));
    EXPECT_TRUE(resp.has_step());
  }
  {
    grpc::ClientContext c2;
    c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    std::unique_ptr<Stream> s2 = stub->Session(&c2);
    s2->Write(StartReq());
    s2->WritesDone();
    while (s2->Read(&resp)) {
    }
    EXPECT_EQ(s2->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  // Closing the last session lets the worker exit well before the grace deadline.
  const auto t0 = Clock::now();
  st->WritesDone();
  while (st->Read(&resp)) {
  }
  EXPECT_TRUE(st->Finish().ok());
  EXPECT_EQ(w->Wait(std::chrono::seconds(8)), 0) << w->Stderr();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(WorkerMainTest, CancelsSessionsAtTheGraceDeadline) {
  int port = 0, mport = 0;
  auto w = StartWorker({"--model_path=" + model_, "--grace_ms=500"}, &port, &mport);
  ASSERT_NE(w, nullptr);
  ASSERT_GT(port, 0);
  auto stub = Connect(port);
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub->Session(&ctx);
  ASSERT_TRUE(st->Write(StartReq()));
  v1::SessionResponse resp;
  ASSERT_TRUE(st->Read(&resp));
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(w->pid, SIGTERM), 0);
  while (st->Read(&resp)) {
  }
  const grpc::Status s = st->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(w->Wait(std::chrono::seconds(10)), 0) << w->Stderr();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_GE(ms, 400);
  EXPECT_LT(ms, 8000);
}

TEST_F(WorkerMainTest, FetchesTheModelThroughTheLoader) {
  const std::string dir = TmpDir() + "/worker_store";
  ::mkdir(dir.c_str(), 0755);
  {
    std::ifstream in(model_, std::ios::binary);
    std::ofstream out(dir + "/stories260K.gguf", std::ios::binary);
    out << in.rdbuf();
  }
  auto loader =
      Spawn({"services/loader/loader", "--models_dir=" + dir, "--host=127.0.0.1", "--port=0", "--metrics_port=-1"});
  ASSERT_NE(loader, nullptr);
  const int lport = ReadPort(loader->out, "loader listening on ");
  ASSERT_GT(lport, 0) << loader->Stderr();
  int port = 0, mport = 0;
  auto w = StartWorker({absl::StrCat("--loader=127.0.0.1:", lport), "--model=stories260K"}, &port, &mport);
  ASSERT_NE(w, nullptr);
  ASSERT_GT(port, 0);
  auto stub = Connect(port);
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub->Session(&ctx);
  ASSERT_TRUE(st->Write(StartReq()));
  ASSERT_TRUE(st->Write(StepReq(4)));
  v1::SessionResponse resp;
  int steps = 0;
  while (steps < 4 && st->Read(&resp)) steps += resp.has_step() ? 1 : 0;
  EXPECT_EQ(steps, 4);
  st->WritesDone();
  while (st->Read(&resp)) {
  }
  EXPECT_TRUE(st->Finish().ok());
  ::kill(w->pid, SIGTERM);
  EXPECT_EQ(w->Wait(std::chrono::seconds(10)), 0) << w->Stderr();
  ::kill(loader->pid, SIGTERM);
  EXPECT_EQ(loader->Wait(std::chrono::seconds(10)), 0);

  // An unknown model: the worker exits with the loader's error.
  auto loader2 =
      Spawn({"services/loader/loader", "--models_dir=" + dir, "--host=127.0.0.1", "--port=0", "--metrics_port=-1"});
  const int lport2 = ReadPort(loader2->out, "loader listening on ");
  ASSERT_GT(lport2, 0);
  auto bad = Spawn({"services/worker/worker", absl::StrCat("--loader=127.0.0.1:", lport2), "--model=nope", "--port=0",
                    "--metrics_port=-1"});
  EXPECT_EQ(bad->Wait(std::chrono::seconds(20)), 1);
  EXPECT_NE(bad->Stderr().find("nope"), std::string::npos) << bad->Stderr();
  ::kill(loader2->pid, SIGTERM);
  loader2->Wait(std::chrono::seconds(10));
}

// A worker started while its loader is down (not started yet, restarting) keeps asking
// with backoff and serves once the loader is up; with no loader before
// --load_timeout_ms it exits 1 naming the loader.
TEST_F(WorkerMainTest, WaitsForALoaderThatStartsLater) {
  const std::string dir = TmpDir() + "/late_store";
  ::mkdir(dir.c_str(), 0755);
  {
    std::ifstream in(model_, std::ios::binary);
    std::ofstream out(dir + "/stories260K.gguf", std::ios::binary);
    out << in.rdbuf();
  }
  // A free loopback port (nothing listens there until the loader starts).
  int lport = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    lport = ntohs(a.sin_port);
    ::close(fd);
  }
  auto w = Spawn({"services/worker/worker", absl::StrCat("--loader=127.0.0.1:", lport), "--model=stories260K",
                  "--port=0", "--metrics_port=-1", "--threads=1", "--n_ctx=256", "--load_timeout_ms=60000"});
  ASSERT_NE(w, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  int status = 0;
  ASSERT_EQ(::waitpid(w->pid, &status, WNOHANG), 0) << "the worker gave up on its loader: " << w->Stderr();
  auto loader =
      Spawn({"services/loader/loader", "--models_dir=" + dir, absl::StrCat("--port=", lport), "--metrics_port=-1"});
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(ReadPort(loader->out, "loader listening on "), lport);
  const auto t0 = Clock::now();
  const int port = ReadPort(w->out, "worker listening on ");
  ASSERT_GT(port, 0) << w->Stderr();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(w->Stderr().find("loader unavailable"), std::string::npos) << w->Stderr();
  ::kill(w->pid, SIGTERM);
  EXPECT_EQ(w->Wait(std::chrono::seconds(10)), 0) << w->Stderr();
  ::kill(loader->pid, SIGTERM);
  loader->Wait(std::chrono::seconds(10));

  // Nobody ever answers: exit 1 once --load_timeout_ms is spent.
  auto gone = Spawn({"services/worker/worker", absl::StrCat("--loader=127.0.0.1:", lport), "--model=stories260K",
                     "--port=0", "--metrics_port=-1", "--load_timeout_ms=1500"});
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->Wait(std::chrono::seconds(20)), 1) << gone->Stderr();
  EXPECT_NE(gone->Stderr().find(absl::StrCat("127.0.0.1:", lport)), std::string::npos) << gone->Stderr();
}

// worker_hip is the worker plus the hip kind; the generic worker has no hip. Without an
// AMD GPU, --backend hip exits 1 naming the kind and why it has no device.
TEST_F(WorkerMainTest, OnlyWorkerHipHasTheHipBackend) {
  auto plain =
      Spawn({"services/worker/worker", "--model_path=" + model_, "--port=0", "--metrics_port=-1", "--backend=hip"});
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->Wait(std::chrono::seconds(20)), 1) << plain->Stderr();
  EXPECT_NE(plain->Stderr().find("unknown backend 'hip'"), std::string::npos) << plain->Stderr();
  auto hip = Spawn({"services/worker/worker_hip", "--model_path=" + model_, "--port=0", "--metrics_port=-1",
                    "--threads=1", "--n_ctx=256", "--backend=hip", "--device=7"});
  ASSERT_NE(hip, nullptr);
  EXPECT_EQ(hip->Wait(std::chrono::seconds(30)), 1) << hip->Stderr();
  EXPECT_NE(hip->Stderr().find("--backend hip: backend hip has no device 7"), std::string::npos) << hip->Stderr();
  EXPECT_NE(hip->Stderr().find("; hip: "), std::string::npos) << hip->Stderr();
  // And it serves on the CPU like the generic worker.
  auto cpu = Spawn({"services/worker/worker_hip", "--model_path=" + model_, "--host=127.0.0.1", "--port=0",
                    "--metrics_port=-1", "--threads=1", "--n_ctx=256", "--max_sequences=2"});
  ASSERT_NE(cpu, nullptr);
  const int port = ReadPort(cpu->out, "worker listening on ");
  ASSERT_GT(port, 0) << cpu->Stderr();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WorkerInfo info;
  ASSERT_TRUE(Connect(port)->Info(&ctx, v1::WorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), "cpu");
  ASSERT_EQ(::kill(cpu->pid, SIGTERM), 0);
  EXPECT_EQ(cpu->Wait(std::chrono::seconds(20)), 0) << cpu->Stderr();
}

TEST_F(WorkerMainTest, BadFlagsExitWithAMessageNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "--model_path"},
      {{"--model_path=" + model_, "--queue_policy=later"}, "--queue_policy"},
      {{"--model_path=" + model_, "--kv_type=q4_0"}, "--kv_type"},
      {{"--model_path=" + model_, "--port=70000"}, "--port"},
      {{"--model_path=" + model_, "--max_sequences=0"}, "--max_sequences"},
      {{"--model_path=" + model_, "--n_batch=0"}, "--n_batch"},
      {{"--model_path=" + model_, "--n_ctx=64", "--n_ctx_seq=65"}, "n_ctx_seq"},
      {{"--model_path=/nonexistent.gguf"}, "/nonexistent.gguf"},
  };
  for (const auto& [flags, want] : cases) {
    std::vector<std::string> argv = {"services/worker/worker", "--port=0", "--metrics_port=-1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto c = Spawn(argv);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->Wait(std::chrono::seconds(20)), 1) << want;
    EXPECT_NE(c->Stderr().find(want), std::string::npos) << want << ": " << c->Stderr();
  }
}

}  // namespace
}  // namespace herd::worker
