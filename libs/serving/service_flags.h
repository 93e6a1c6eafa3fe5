// The flags every service binary (gateway, loader, worker, draft) shares, defined once in
// service_flags.cc (link //libs/serving:service_flags; the mains only):
//   --host               bind address of all the service's ports (default 127.0.0.1)
//   --grace_ms           on SIGTERM, how long in-flight work may run (default 5000)
//   --max_message_bytes  gRPC send/receive message limit (default 64 MiB)
// --port and --metrics_port stay in each main.cc: their defaults differ per service
// (loader 50052/9092, worker 50053/9093, draft 50055/9095, gateway 50051/9090).
#pragma once
#include <chrono>
#include <string>

#include "absl/status/statusor.h"

#include "libs/serving/security.h"
#include "libs/serving/server.h"

namespace herd::serving {

/// A service's listening and shutdown settings, from its flags.
struct ServiceFlags {
  std::string host;                   ///< --host: bind address of every port
  int port = 0;                       ///< --port: gRPC port (0 = pick a free one)
  int metrics_port = -1;              ///< --metrics_port (0 = pick a free one, -1 = none)
  std::chrono::milliseconds grace{};  ///< --grace_ms: drain time on SIGTERM (>= 0)
  int max_message_bytes = 0;          ///< --max_message_bytes: gRPC message limit in bytes
};

/// --host, --grace_ms and --max_message_bytes with the service's own `port` and
/// `metrics_port` flag values. Errors: INVALID_ARGUMENT "--port N is outside 0..65535",
/// "--metrics_port N is outside -1..65535" (CheckPortFlags) or "--grace_ms must be >= 0".
absl::StatusOr<ServiceFlags> ReadServiceFlags(int port, int metrics_port);

/// The gRPC server options of `f` (ListenAddress(host, port), max_message_bytes, grace)
/// with `security`.
GrpcServerOptions GrpcOptions(const ServiceFlags& f, ServerSecurity security);

}  // namespace herd::serving
