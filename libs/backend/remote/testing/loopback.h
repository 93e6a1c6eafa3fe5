// A compute server on 127.0.0.1 in this process (tests and benchmarks of the remote
// backend): a ComputeServer over a CPU backend behind a gRPC server without TLS or key.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/backend/remote/remote_backend.h"
#include "libs/backend/remote/remote_server.h"

namespace herd::remote::testing {

class LoopbackServer {
 public:
  /// Starts it on `port` (0: a free one) with a CPU backend of `n_threads`. Errors:
  /// UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<LoopbackServer>> Start(int n_threads = 1, ServerOptions opts = {},
                                                               uint64_t instance = 1, int port = 0);
  ~LoopbackServer();

  /// "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  ComputeServer* server() { return server_.get(); }
  /// A remote backend on it (insecure channel) with `timeout` per call.
  absl::StatusOr<std::unique_ptr<RemoteBackend>> Connect(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) const;
  /// Stops serving (calls in flight are cancelled); the backends connected see
  /// UNAVAILABLE from then on.
  void Shutdown();

 private:
  LoopbackServer() = default;
  std::unique_ptr<ComputeServer> server_;
  std::unique_ptr<RemoteComputeService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::string address_;
};

}  // namespace herd::remote::testing
