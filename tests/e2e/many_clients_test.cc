// 1,000 concurrent streaming HTTP clients against one gateway, over real processes
// (LocalCluster: loader, a stories260K worker, the gateway). The gateway's generations
// hold no thread while they wait on the worker (Gateway::RunAsync, asynchronous HTTP
// responders), so its thread count stays flat however many streams are open.
// Asserted: every request is answered in full (200 with every event and [DONE]) or
// refused with 429 (--max_concurrent_requests=800); at the peak far more were in flight
// than the gateway has threads, and never more than the bound; the gateway's
// threads at the peak are no more than before the load plus a small constant (gRPC's
// own pollers); its RSS is reported.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "libs/serving/testing/raw_http.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

constexpr int kClients = 1000;
constexpr int kTokens = 48;
constexpr int kMaxConcurrent = 800;

TEST(ManyClientsTest, ThousandStreamsHoldWithFlatGatewayThreads) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  cli::LocalCluster cluster;
  cli::ClusterOptions o = e2e::TinyClusterOptions(shared);
  o.max_sequences = 64;
  o.n_ctx = 4096;
  o.extra_worker_flags = {"--max_queue=2048"};
  // Bounded below the load: the requests beyond it get 429.
  o.extra_gateway_flags = {absl::StrCat("--max_concurrent_requests=", kMaxConcurrent), "--http_threads=4"};
  absl::Status s = cluster.Start(o, std::chrono::seconds(120));
  ASSERT_TRUE(s.ok()) << s;
  cli::Process* gw = nullptr;
  for (cli::Process* p : cluster.processes()) {
    if (p->name == "gateway") gw = p;
  }
  ASSERT_NE(gw, nullptr);
  const std::string http = cluster.gateway_http_addr();
  const int port = std::stoi(http.substr(http.rfind(':') + 1));
  const std::string metrics = cluster.gateway_metrics_addr();

  // Warm up (vocabulary fetched, channels connected), then the baseline.
  const std::string warm = serving::testing::Exchange(
      port, serving::testing::PostJsonRequest(
                "/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":4,"stream":true})"));
  ASSERT_EQ(serving::testing::StatusOf(warm), 200) << warm;
  const long threads0 = e2e::ProcStatus(gw->pid, "Threads");
  const long rss0 = e2e::ProcStatus(gw->pid, "VmRSS");
  ASSERT_GT(threads0, 0);

  std::atomic<bool> stop{false};
  std::atomic<long> peak_threads{threads0}, peak_rss{rss0};
  std::atomic<int> peak_inflight{0};
  std::thread watch([&] {
    while (!stop) {
      peak_threads = std::max(peak_threads.load(), e2e::ProcStatus(gw->pid, "Threads"));
      peak_rss = std::max(peak_rss.load(), e2e::ProcStatus(gw->pid, "VmRSS"));
      peak_inflight =
          std::max(peak_inflight.load(), static_cast<int>(e2e::MetricSum(metrics, "herd_gateway_inflight_requests")));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  // Every client: one streamed completion on its own connection, read by one poll loop.
  std::vector<int> fds(kClients, -1);
  std::vector<std::string> got(kClients);
  for (int i = 0; i < kClients; ++i) {
    fds[i] = serving::testing::Connect(port);
    ASSERT_GE(fds[i], 0) << "client " << i;
    const std::string body =
        absl::StrCat(R"({"model":"stories260K","prompt":"Once upon a time, client )", i, R"( saw","max_tokens":)",
                     kTokens, R"(,"temperature":0,"ignore_eos":true,"stream":true})");
    ASSERT_TRUE(serving::testing::SendAll(fds[i], serving::testing::PostJsonRequest("/v1/completions", body)));
    ::fcntl(fds[i], F_SETFL, ::fcntl(fds[i], F_GETFL) | O_NONBLOCK);
  }
  int open = kClients;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  std::vector<pollfd> pfds;
  char buf[65536];
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    pfds.clear();
    for (int i = 0; i < kClients; ++i) {
      if (fds[i] >= 0) pfds.push_back(pollfd{fds[i], POLLIN, 0});
    }
    if (::poll(pfds.data(), pfds.size(), 100) <= 0) continue;
    for (const pollfd& p : pfds) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const int i = static_cast<int>(std::find(fds.begin(), fds.end(), p.fd) - fds.begin());
      for (;;) {
        const ssize_t n = ::recv(p.fd, buf, sizeof buf, 0);
        if (n > 0) {
          got[i].append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        ::close(p.fd);  // EOF (Connection: close) or an error
        fds[i] = -1;
        --open;
        break;
      }
    }
  }
  stop = true;
  watch.join();
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(open, 0) << "clients still waiting at the deadline";

  int complete = 0, refused = 0;
  std::vector<std::string> bad;
  for (int i = 0; i < kClients; ++i) {
    const std::string& r = got[i];
    const int status = serving::testing::StatusOf(r);
    if (status == 429) {
      ++refused;
      continue;
    }
    // A whole stream: kTokens text events (ignore_eos), [DONE], the last chunk.
    if (status == 200 && absl::StrContains(r, "data: [DONE]") && absl::EndsWith(r, "0\r\n\r\n") &&
        absl::StrContains(r, "\"finish_reason\":\"length\"")) {
      ++complete;
      continue;
    }
    if (bad.size() < 3) bad.push_back(absl::StrCat("client ", i, ": ", r.substr(0, 400)));
  }
  std::printf(
      "%d streaming clients: %d complete, %d refused (429), %d other; gateway threads %ld before, %ld at most "
      "during; RSS %ld -> %ld kB at most; %d generations in flight at the peak\n",
      kClients, complete, refused, kClients - complete - refused, threads0, peak_threads.load(), rss0, peak_rss.load(),
      peak_inflight.load());
  EXPECT_EQ(complete + refused, kClients) << (bad.empty() ? "" : bad[0]) << (bad.size() > 1 ? "\n" + bad[1] : "");
  EXPECT_GE(complete, kClients / 2) << "most requests fit under --max_concurrent_requests";
  EXPECT_LE(peak_inflight.load(), kMaxConcurrent) << "the bound held";
  // Far more streams in flight than the gateway has threads.
  EXPECT_GE(peak_inflight.load(), 4 * threads0) << "the load never overlapped";
  // Flat: gRPC may add a poller or two under load; a thread per stream would add ~1000.
  EXPECT_LE(peak_threads.load(), threads0 + 8);
  cluster.Stop();
}

}  // namespace
}  // namespace herd
