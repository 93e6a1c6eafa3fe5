// What every herd service shares: a gRPC server with grpc.health.v1 and server
// reflection, a Prometheus /metrics HTTP endpoint, and graceful shutdown on
// SIGTERM/SIGINT (stop accepting, let in-flight streams finish or cancel them at a
// deadline).
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/http_server.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security.h"

namespace herd::serving {

/// Serves GET /metrics (Prometheus text) and GET /healthz on host:port (http::Server:
/// its limits, TLS and API keys come with `opts`).
class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(Registry* registry, http::ServerOptions opts = {});
  ~MetricsHttpServer();
  /// Binds `host:port` (port 0 = any free port). Errors: UNAVAILABLE naming the address.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  Registry* registry_;
  std::unique_ptr<http::Server> http_;
};

struct GrpcServerOptions {
  std::string address = "0.0.0.0:0";               // host:port; port 0 = any free port
  int max_message_bytes = 64 << 20;                // send and receive limit
  std::chrono::milliseconds shutdown_grace{5000};  // in-flight streams get this long
  ServerSecurity security;                         // TLS / mTLS and API keys (security.h); default none
};

/// Builds and starts a gRPC server with `services`, health checking (every service
/// SERVING) and reflection, secured as `opts.security` says. Returns the server and sets
/// *bound_port. Errors: UNAVAILABLE when the address cannot be bound; those of
/// ValidateServerSecurity (INVALID_ARGUMENT, NOT_FOUND) for bad TLS settings.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const GrpcServerOptions& opts,
                                                              const std::vector<grpc::Service*>& services,
                                                              int* bound_port);

/// Blocks until SIGTERM or SIGINT (or RequestShutdown()), then marks health
/// NOT_SERVING, calls `before_shutdown` (e.g. cancel workers' sequences), and shuts the
/// server down with the grace deadline.
void WaitForShutdown(grpc::Server* server, std::chrono::milliseconds grace,
                     const std::function<void()>& before_shutdown = nullptr);

/// Routes SIGTERM/SIGINT to a graceful shutdown (WaitForShutdown returns). Called by
/// StartGrpcServer; call it earlier if the process should not die on a signal before that.
void InstallShutdownSignalHandlers();

/// Makes WaitForShutdown return (as a signal would). Safe from any thread.
void RequestShutdown();

/// Parses "host:port" / ":port" / "port"; returns false if malformed.
bool ParseHostPort(const std::string& s, std::string* host, int* port);

}  // namespace herd::serving
