// A Quantize whose loader is killed (SIGKILL) while it writes the new model leaves a
// "<target>.gguf.tmp.<pid>.<n>" file in the store; the restarted loader removes it
// (and logs it), and the half-written model is never listed.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "libs/clients/loader_client.h"
#include "libs/gguf/gguf.h"
#include "services/loader/model_store.h"
#include "tests/shared_data.h"

namespace herd::loader {
namespace {

struct Loader {
  pid_t pid = -1;
  FILE* out = nullptr;  // stdout and stderr
  int port = -1;
  std::string log;  // the lines read so far
  ~Loader() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
    if (out != nullptr) std::fclose(out);
  }
};

// Starts the loader binary on `dir` and reads its output up to the gRPC port line.
std::unique_ptr<Loader> StartLoader(const std::string& dir) {
  auto l = std::make_unique<Loader>();
  int fds[2];
  if (::pipe(fds) != 0) return nullptr;
  const std::string models = "--models_dir=" + dir;
  const pid_t pid = ::fork();
  if (pid < 0) return nullptr;
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl("services/loader/loader", "loader", models.c_str(), "--port=0", "--metrics_port=-1", "--quantize_threads=1",
            static_cast<char*>(nullptr));
    std::perror("execl services/loader/loader");
    ::_exit(127);
  }
  ::close(fds[1]);
  l->pid = pid;
  l->out = ::fdopen(fds[0], "r");
  char line[1024];
  while (std::fgets(line, sizeof(line), l->out) != nullptr) {
    l->log += line;
    std::string s(line);
    if (s.rfind("loader listening on ", 0) == 0) {
      while (!s.empty() && s.back() == '\n') s.pop_back();
      if (absl::SimpleAtoi(s.substr(s.rfind(':') + 1), &l->port)) break;
    }
  }
  return l;
}

std::vector<std::string> TempFiles(const std::string& dir) {
  std::vector<std::string> out;
  // Everything with ".tmp." in its name, whatever the pattern.
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
  while (dirent* e = ::readdir(d.get())) {
    if (absl::StrContains(e->d_name, ".tmp.")) out.push_back(e->d_name);
  }
  return out;
}

TEST(QuantizeKill, RestartedLoaderRemovesTheTempFileOfAKilledWrite) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/kill_store";
  ::mkdir(dir.c_str(), 0755);
  // stories260K plus a 64 MiB 1-D F32 tensor (copied unchanged, like a norm): the
  // output takes long enough to write that the kill lands while it is written.
  {
    auto src = gguf::GgufFile::Open(shared + "/models/stories260K.gguf");
    ASSERT_TRUE(src.ok()) << src.status();
    gguf::GgufWriter w;
    for (const gguf::KeyValue& kv : (*src)->metadata()) w.SetValue(kv.key, kv.value);
    for (const gguf::TensorInfo& t : (*src)->tensors()) {
      std::vector<int64_t> ne(t.ne, t.ne + std::max<uint32_t>(1, t.n_dims));
      ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, t.data, t.nbytes).ok()) << t.name;
    }
    std::vector<float> big(size_t{16} << 20, 0.5f);
    ASSERT_TRUE(w.AddTensor("blk.0.big_norm.weight", GgmlType::F32, {static_cast<int64_t>(big.size())}, big.data(),
                            big.size() * sizeof(float))
                    .ok());
    ASSERT_TRUE(w.WriteFile(dir + "/big.gguf").ok());
  }

  const int ino = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(ino, 0);
  ASSERT_GE(::inotify_add_watch(ino, dir.c_str(), IN_CREATE), 0);

  std::string left;  // the temp file the killed write left
  for (int attempt = 0; attempt < 5 && left.empty(); ++attempt) {
    auto loader = StartLoader(dir);
    ASSERT_NE(loader, nullptr);
    ASSERT_GT(loader->port, 0) << loader->log;
    const std::string target = absl::StrCat("big-q8-", attempt);
    std::atomic<bool> client_done{false};
    grpc::Status client_status;
    std::thread client([port = loader->port, target, &client_done, &client_status] {
      auto stub = herd::v1::Loader::NewStub(MakeLoaderChannel(absl::StrCat("127.0.0.1:", port)));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      herd::v1::QuantizeRequest req;
      req.set_source("big");
      req.set_target(target);
      req.set_type("Q8_0");
      req.add_tensor_type("ffn_down=f16");  // 172 columns: not a multiple of 32
      auto reader = stub->Quantize(&ctx, req);
      herd::v1::QuantizeProgress p;
      while (reader->Read(&p)) {
      }
      client_status = reader->Finish();  // UNAVAILABLE once the loader is killed
      client_done = true;
    });
    // SIGKILL as soon as the output's temp file appears.
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool killed = false;
    while (!killed && !client_done) {
      pollfd pfd = {ino, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      const ssize_t n = ::read(ino, buf, sizeof(buf));
      if (n <= 0) break;
      for (char* p = buf; p < buf + n;) {
        auto* ev = reinterpret_cast<inotify_event*>(p);
        if (ev->len > 0 && absl::StartsWith(ev->name, target + ".gguf.tmp.")) {
          ::kill(loader->pid, SIGKILL);
          killed = true;
          break;
        }
        p += sizeof(inotify_event) + ev->len;
      }
    }
    if (!killed) {
      ADD_FAILURE() << "Quantize ended before its output appeared: " << client_status.error_message();
      ::kill(loader->pid, SIGKILL);
    }
    int st = 0;
    ASSERT_EQ(::waitpid(loader->pid, &st, 0), loader->pid);
    loader->pid = -1;
    client.join();
    std::vector<std::string> temps = TempFiles(dir);
    if (!temps.empty()) left = temps[0];  // else the rename won the race: again
    struct stat sb;
    if (!left.empty()) {
      EXPECT_NE(::stat((dir + "/" + target + ".gguf").c_str(), &sb), 0) << "a killed write published its model";
    }
  }
  ::close(ino);
  ASSERT_FALSE(left.empty()) << "every Quantize finished before the kill";
  EXPECT_TRUE(ModelStore::IsTempFileName(left)) << left;

  // The restarted loader removes it, says so, and lists only the source model.
  auto loader = StartLoader(dir);
  ASSERT_NE(loader, nullptr);
  ASSERT_GT(loader->port, 0) << loader->log;
  EXPECT_TRUE(TempFiles(dir).empty());
  EXPECT_NE(loader->log.find("removed stale temp file " + dir), std::string::npos) << loader->log;
  EXPECT_NE(loader->log.find(left), std::string::npos) << loader->log;
  auto stub = herd::v1::Loader::NewStub(MakeLoaderChannel(absl::StrCat("127.0.0.1:", loader->port)));
  auto models = ListModels(stub.get(), std::chrono::milliseconds(10000));
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name(), "big");
}

}  // namespace
}  // namespace herd::loader
