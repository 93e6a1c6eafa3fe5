#include "libs/serving/service_main.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/serving/security_flags.h"

namespace herd::serving {
namespace {

volatile sig_atomic_t g_early_signal = 0;
std::atomic<bool> g_catching_early{false};

void OnEarlySignal(int) { g_early_signal = 1; }

}  // namespace

int StartupFailure(const std::string& program, const std::string& msg) {
  std::fprintf(stderr, "%s: error: %s\n", program.c_str(), msg.c_str());
  return 1;
}

absl::Status CheckPortFlags(int port, int metrics_port) {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("--port ", port, " is outside 0..65535"));
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port ", metrics_port, " is outside -1..65535"));
  }
  return absl::OkStatus();
}

std::string ListenAddress(const std::string& host, int port) {
  return absl::StrCat(host.find(':') != std::string::npos ? "[" + host + "]" : host, ":", port);
}

absl::StatusOr<InternalSecurity> InternalSecurityFromFlags() {
  HERD_ASSIGN_OR_RETURN(auto keys, ClusterKeysFromFlags());
  HERD_ASSIGN_OR_RETURN(auto server, ServerSecurityFromFlags(keys));
  InternalSecurity out;
  out.cluster_keys = std::move(keys);
  out.server = std::move(server);
  return out;
}

void CatchSignalsEarly() {
  struct sigaction sa = {};
  sa.sa_handler = OnEarlySignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  g_catching_early = true;
}

bool SignalledEarly() { return g_early_signal != 0; }

ServiceMain::ServiceMain(std::string name) : name_(std::move(name)) {}

ServiceMain::~ServiceMain() {
  ResetServer();
  StopMetrics();
}

absl::StatusOr<int> ServiceMain::StartMetrics(Registry* registry, http::ServerOptions opts, const std::string& host,
                                              int port) {
  metrics_ = std::make_unique<MetricsHttpServer>(registry, std::move(opts));
  metrics_port_ = -1;
  if (port < 0) return -1;
  HERD_ASSIGN_OR_RETURN(metrics_port_, metrics_->Start(host, port));
  return metrics_port_;
}

absl::StatusOr<int> ServiceMain::StartGrpc(const GrpcServerOptions& opts, const std::vector<grpc::Service*>& services,
                                           const std::string& health_service) {
  int bound = 0;
  HERD_ASSIGN_OR_RETURN(auto server, StartGrpcServer(opts, services, &bound));
  server_ = std::move(server);
  port_ = bound;
  // StartGrpcServer marks the server ("") SERVING; probes may also ask for the service.
  if (!health_service.empty()) server_->GetHealthCheckService()->SetServingStatus(health_service, true);
  return port_;
}

void ServiceMain::PrintListening(const std::string& host) const {
  std::printf("%s listening on %s:%d\n", name_.c_str(), host.c_str(), port_);
  if (metrics_port_ >= 0) std::printf("%s metrics on %s:%d\n", name_.c_str(), host.c_str(), metrics_port_);
  std::fflush(stdout);
}

void ServiceMain::Wait(std::chrono::milliseconds grace, const std::function<void()>& before_shutdown) {
  // A signal caught before the serving handlers were installed (CatchSignalsEarly) is
  // forwarded as RequestShutdown() from a watcher thread.
  std::atomic<bool> done{false};
  std::thread forward;
  if (g_catching_early) {
    forward = std::thread([&done] {
      while (!done.load()) {
        if (g_early_signal != 0) {
          RequestShutdown();
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  WaitForShutdown(server_.get(), grace, before_shutdown);
  done = true;
  if (forward.joinable()) forward.join();
}

void ServiceMain::ResetServer() { server_.reset(); }

void ServiceMain::StopMetrics() {
  if (metrics_ != nullptr) metrics_->Stop();
}

}  // namespace herd::serving
