// The start-up and shutdown every service main (gateway, loader, worker, draft)
// shares, so that each main.cc keeps only its flags and its own service:
//   - failing start-up: "PROGRAM: error: MSG" on stderr, exit status 1;
//   - the --port / --metrics_port ranges and the gRPC listen address;
//   - the server security of internal services from the shared flags (cluster key,
//     TLS: security_flags.h);
//   - SIGTERM/SIGINT caught during start-up (model loading) instead of killing the
//     process, honoured once serving;
//   - the metrics HTTP port, the gRPC server with health for the service, the
//     "NAME listening on HOST:PORT" / "NAME metrics on HOST:PORT" lines that launchers
//     read, and the graceful wait for shutdown.
// The flags every service shares (--host, --grace_ms, --max_message_bytes) are defined
// once in service_flags.h; the others, --port and --metrics_port included (their defaults
// differ per service), stay in each main.cc.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/api_keys.h"
#include "libs/serving/security.h"
#include "libs/serving/server.h"

namespace herd::serving {

/// Prints "PROGRAM: error: MSG" on stderr and returns 1, the exit status of a main that
/// cannot start (`return StartupFailure("herd-loader", "...")`).
int StartupFailure(const std::string& program, const std::string& msg);

/// Checks --port (0..65535) and --metrics_port (-1..65535; -1 = no metrics port).
/// Errors: INVALID_ARGUMENT "--port N is outside 0..65535" or "--metrics_port N is
/// outside -1..65535".
absl::Status CheckPortFlags(int port, int metrics_port);

/// "HOST:PORT" for a gRPC listener; a host with ':' (IPv6) is bracketed: "[::1]:50052".
std::string ListenAddress(const std::string& host, int port);

/// The security of an internal service (loader, worker, draft) from the shared flags.
struct InternalSecurity {
  ApiKeys cluster_keys;   ///< --cluster_key_file / HERD_CLUSTER_KEY (callers must send one)
  ServerSecurity server;  ///< TLS from --tls_*, requiring `cluster_keys`
};

/// ClusterKeysFromFlags() and ServerSecurityFromFlags() of those keys
/// (security_flags.h; the binary must link //libs/serving:security_flags). Errors:
/// theirs (ApiKeys::Load, ValidateServerSecurity; the messages name the flags).
absl::StatusOr<InternalSecurity> InternalSecurityFromFlags();

/// From now on SIGTERM/SIGINT only set a flag (SignalledEarly()) instead of ending the
/// process, e.g. while a model loads; ServiceMain::Wait() then shuts down at once.
/// StartGrpcServer installs the serving handlers (server.h), which replace these.
void CatchSignalsEarly();

/// True once SIGTERM/SIGINT arrived while CatchSignalsEarly()'s handler was installed.
bool SignalledEarly();

/// One service process: its metrics port and gRPC server, in the order the main starts
/// them. Destroy it before the services and registry it serves (declare it after them):
/// the destructor destroys the gRPC server, then stops the metrics port.
class ServiceMain {
 public:
  /// `name`: the service's short name in the stdout lines ("loader").
  explicit ServiceMain(std::string name);
  ~ServiceMain();
  ServiceMain(const ServiceMain&) = delete;
  ServiceMain& operator=(const ServiceMain&) = delete;

  /// Serves GET /metrics of `registry` (not owned) on host:port with `opts`
  /// (MetricsServerOptions), unless port < 0. Returns the bound port, -1 when off.
  /// Errors: those of MetricsHttpServer::Start (UNAVAILABLE naming the address).
  absl::StatusOr<int> StartMetrics(Registry* registry, http::ServerOptions opts, const std::string& host, int port);

  /// StartGrpcServer(opts, services) (services not owned); then marks `health_service`
  /// (e.g. "herd.v1.Loader") SERVING in grpc.health.v1 unless it is empty. Returns the
  /// bound port. Errors: those of StartGrpcServer (UNAVAILABLE, INVALID_ARGUMENT,
  /// NOT_FOUND).
  absl::StatusOr<int> StartGrpc(const GrpcServerOptions& opts, const std::vector<grpc::Service*>& services,
                                const std::string& health_service);

  /// Prints "NAME listening on HOST:PORT" and, with a metrics port, "NAME metrics on
  /// HOST:PORT" on stdout (the ports StartGrpc / StartMetrics bound) and flushes.
  void PrintListening(const std::string& host) const;

  /// Blocks until SIGTERM/SIGINT or RequestShutdown(), or returns at once after a
  /// signal caught by CatchSignalsEarly(); then WaitForShutdown(server, grace,
  /// before_shutdown) (health NOT_SERVING, `before_shutdown`, shutdown with the grace
  /// deadline). Call after StartGrpc.
  void Wait(std::chrono::milliseconds grace, const std::function<void()>& before_shutdown = nullptr);

  /// Destroys the gRPC server (after Wait), e.g. before the services it calls into.
  void ResetServer();
  /// Stops the metrics port (idempotent).
  void StopMetrics();

  /// The running gRPC server (null before StartGrpc or after ResetServer).
  grpc::Server* server() const { return server_.get(); }

 private:
  std::string name_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = -1;
  int metrics_port_ = -1;
};

}  // namespace herd::serving
