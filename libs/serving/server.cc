#include "libs/serving/server.h"

#include <signal.h>

#include <condition_variable>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"

namespace herd::serving {
namespace {

std::mutex g_mu;
std::condition_variable g_cv;
bool g_shutdown = false;

void OnSignal(int) {
  // Only async-signal-safe work here: a self-pipe would be ideal; a detached thread
  // polls the flag instead (see WaitForShutdown).
  g_shutdown = true;
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(Registry* registry, http::ServerOptions opts) : registry_(registry) {
  if (opts.max_concurrent_requests > 4) opts.max_concurrent_requests = 4;  // every route runs inline
  http_ = std::make_unique<http::Server>(std::move(opts));
  http_->Get(
      "/metrics",
      [this](const http::Request&, http::Response& res) {
        res.SetContent(registry_->Render(), "text/plain; version=0.0.4");
      },
      /*run_inline=*/true);
  http_->Get(
      "/healthz", [](const http::Request&, http::Response& res) { res.SetContent("ok\n", "text/plain"); },
      /*run_inline=*/true);
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& host, int port) { return http_->Start(host, port); }

void MetricsHttpServer::Stop() { http_->Stop(absl::ZeroDuration()); }

void InstallShutdownSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& opts,
                                                              const std::vector<grpc::Service*>& services,
                                                              int* bound_port) {
  // From here on SIGTERM/SIGINT request a graceful shutdown instead of killing the process.
  InstallShutdownSignalHandlers();
  HERD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeServerCredentials(opts.security));
  if (opts.security.auth() && !opts.security.tls()) {
    HERD_LOG(Warning)
        << "gRPC on " << opts.address
        << ": API keys are checked but travel in plaintext; use --tls_cert_file/--tls_key_file off loopback";
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder b;
  // No SO_REUSEPORT: with it gRPC clones the listener once per completion queue, and a
  // clone of "host:0" binds a second ephemeral port that serves the whole API without
  // being announced (and any process of the same user could bind our port too).
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.AddListeningPort(opts.address, creds, bound_port);
  b.SetMaxReceiveMessageSize(opts.max_message_bytes);
  b.SetMaxSendMessageSize(opts.max_message_bytes);
  for (grpc::Service* s : services) b.RegisterService(s);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot start gRPC server on ", opts.address));
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

void RequestShutdown() {
  std::lock_guard<std::mutex> l(g_mu);
  g_shutdown = true;
  g_cv.notify_all();
}

void WaitForShutdown(grpc::Server* server, std::chrono::milliseconds grace,
                     const std::function<void()>& before_shutdown) {
  InstallShutdownSignalHandlers();
  {
    std::unique_lock<std::mutex> l(g_mu);
    while (!g_shutdown) g_cv.wait_for(l, std::chrono::milliseconds(100));
  }
  HERD_LOG(Info) << "shutting down: draining in-flight streams for up to " << grace.count() << " ms";
  server->GetHealthCheckService()->SetServingStatus(false);
  if (before_shutdown) before_shutdown();
  server->Shutdown(std::chrono::system_clock::now() + grace);
}

bool ParseHostPort(const std::string& s, std::string* host, int* port) {
  std::string h = "0.0.0.0", p = s;
  const size_t colon = s.rfind(':');
  if (colon != std::string::npos) {
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.empty()) h = "0.0.0.0";
  }
  int v;
  if (!absl::SimpleAtoi(p, &v) || v < 0 || v > 65535) return false;
  *host = h;
  *port = v;
  return true;
}

}  // namespace herd::serving
