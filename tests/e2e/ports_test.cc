// Every service listens only on the ports it announces ("... listening on", "http on",
// "metrics on"), on loopback unless --host says otherwise. gRPC used to clone its
// listener per completion queue with SO_REUSEPORT, and a clone of "host:0" bound a
// second, unannounced ephemeral port serving the whole API.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "tests/child_process.h"
#include "tests/e2e/e2e_util.h"
#include "tests/listening_sockets.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

using testing::IsLoopback;
using testing::ListeningSocket;
using testing::ListeningSockets;

int PortOf(const std::string& addr) {
  int port = -1;
  if (addr.empty() || !absl::SimpleAtoi(addr.substr(addr.rfind(':') + 1), &port)) return -1;
  return port;
}

std::string Describe(const std::vector<ListeningSocket>& v) {
  std::vector<std::string> parts;
  for (const auto& s : v) parts.push_back(absl::StrCat(s.address, ":", s.port));
  return absl::StrJoin(parts, ", ");
}

// A service binary run directly; its stdout is read for the announced ports. nullptr when
// it cannot be started.
std::unique_ptr<ChildProcess> Spawn(const std::vector<std::string>& argv) {
  auto c = std::make_unique<ChildProcess>();
  if (!c->Start(argv).ok()) return nullptr;
  return c;
}

// Reads stdout until `n` lines announcing an address ("... on HOST:PORT") arrived;
// returns their ports (empty at EOF).
std::set<int> AnnouncedPorts(FILE* f, int n) {
  std::set<int> ports;
  char line[512];
  int seen = 0;
  while (seen < n && std::fgets(line, sizeof(line), f) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    const size_t on = s.find(" on ");
    if (on == std::string::npos) continue;
    const int port = PortOf(s.substr(on + 4));
    if (port <= 0) continue;
    ports.insert(port);
    ++seen;
  }
  return seen == n ? ports : std::set<int>();
}

std::set<int> Ports(const std::vector<ListeningSocket>& v) {
  std::set<int> out;
  for (const auto& s : v) out.insert(s.port);
  return out;
}

// herd up's cluster (loader and gateway on --port=0, workers and a draft worker): each
// process listens on exactly its announced ports, one socket each, on loopback.
TEST(Ports, ClusterProcessesListenOnlyOnAnnouncedPorts) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  cli::LocalCluster cluster;
  cli::ClusterOptions o = e2e::TinyClusterOptions(shared);
  o.draft_workers = 1;
  o.spec_type = "ngram-simple";
  absl::Status s = cluster.Start(o, std::chrono::seconds(120));
  ASSERT_TRUE(s.ok()) << s;
  std::vector<cli::Process*> procs = cluster.processes();
  ASSERT_EQ(procs.size(), 4u);
  for (cli::Process* p : procs) {
    std::set<int> announced;
    for (const std::string* a : {&p->grpc_addr, &p->http_addr, &p->metrics_addr}) {
      if (!a->empty()) announced.insert(PortOf(*a));
    }
    auto sockets = ListeningSockets(p->pid);
    ASSERT_TRUE(sockets.ok()) << p->name << ": " << sockets.status();
    EXPECT_EQ(Ports(*sockets), announced) << p->name << " listens on " << Describe(*sockets);
    EXPECT_EQ(sockets->size(), announced.size()) << p->name << " listens on " << Describe(*sockets);
    for (const ListeningSocket& ls : *sockets) {
      EXPECT_TRUE(IsLoopback(ls.address)) << p->name << " listens on " << ls.address << ":" << ls.port;
    }
  }
  EXPECT_EQ(procs[0]->name, "loader");
  EXPECT_EQ(procs.back()->name, "gateway");
  EXPECT_FALSE(procs.back()->http_addr.empty());

  // A killed gateway is restarted on the ports it announced first (gRPC, HTTP and
  // metrics were all picked with port 0), and again listens on those only.
  cli::Process* gw = procs.back();
  const pid_t old_pid = gw->pid;
  std::set<int> announced = {PortOf(gw->grpc_addr), PortOf(gw->http_addr), PortOf(gw->metrics_addr)};
  ASSERT_TRUE(cluster.KillGateway().ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::set<int> now;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    const pid_t pid = gw->pid;
    if (pid > 0 && pid != old_pid) {
      auto sockets = ListeningSockets(pid);
      if (sockets.ok()) now = Ports(*sockets);
      if (now == announced) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(now, announced) << "the restarted gateway does not listen on its first ports within 5 s";
  EXPECT_EQ(cluster.Restarts("gateway"), 1);
  EXPECT_EQ(cluster.Restarts("loader"), 0);
  cluster.Stop();
}

// Every binary without --host binds loopback only, and only the ports it prints;
// --host=0.0.0.0 opens the same ports on every interface.
TEST(Ports, ServicesBindLoopbackByDefault) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  struct Service {
    std::vector<std::string> argv;
    int lines;  // announced addresses
  };
  const std::string model = shared + "/models/stories260K.gguf";
  const std::vector<Service> services = {
      {{"services/loader/loader", "--models_dir=" + shared + "/models", "--port=0", "--metrics_port=0"}, 2},
      {{"services/worker/worker", "--model_path=" + model, "--port=0", "--metrics_port=0", "--threads=1"}, 2},
      {{"services/draft/draft", "--port=0", "--metrics_port=0", "--threads=1"}, 2},
      {{"services/gateway/gateway", "--workers=127.0.0.1:1", "--port=0", "--http_port=0", "--metrics_port=0"}, 3},
  };
  for (const bool everywhere : {false, true}) {
    for (Service svc : services) {
      if (everywhere) svc.argv.push_back("--host=0.0.0.0");
      SCOPED_TRACE(absl::StrJoin(svc.argv, " "));
      auto c = Spawn(svc.argv);
      ASSERT_NE(c, nullptr);
      const std::set<int> announced = AnnouncedPorts(c->out(), svc.lines);
      ASSERT_EQ(announced.size(), static_cast<size_t>(svc.lines));
      auto sockets = ListeningSockets(c->pid());
      ASSERT_TRUE(sockets.ok()) << sockets.status();
      EXPECT_EQ(Ports(*sockets), announced) << Describe(*sockets);
      EXPECT_EQ(sockets->size(), announced.size()) << Describe(*sockets);
      for (const ListeningSocket& ls : *sockets) {
        if (everywhere) {
          EXPECT_TRUE(ls.address == "0.0.0.0" || ls.address == "::") << ls.address << ":" << ls.port;
        } else {
          EXPECT_TRUE(IsLoopback(ls.address)) << ls.address << ":" << ls.port;
        }
      }
    }
  }
}

}  // namespace
}  // namespace herd
