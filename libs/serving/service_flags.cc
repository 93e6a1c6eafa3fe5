#include "libs/serving/service_flags.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"

#include "libs/base/status_macros.h"
#include "libs/serving/service_main.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to bind the service's ports on (gRPC, metrics and the gateway's HTTP port; loopback only by "
          "default; 0.0.0.0 = every interface, e.g. in a container).");
ABSL_FLAG(int, grace_ms, 5000,
          "On SIGTERM, how long in-flight streams, worker sessions and draft calls may run before they are "
          "cancelled (ms).");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "gRPC send/receive message limit in bytes.");

namespace herd::serving {

absl::StatusOr<ServiceFlags> ReadServiceFlags(int port, int metrics_port) {
  HERD_RETURN_IF_ERROR(CheckPortFlags(port, metrics_port));
  const int grace_ms = absl::GetFlag(FLAGS_grace_ms);
  if (grace_ms < 0) return absl::InvalidArgumentError("--grace_ms must be >= 0");
  ServiceFlags f;
  f.host = absl::GetFlag(FLAGS_host);
  f.port = port;
  f.metrics_port = metrics_port;
  f.grace = std::chrono::milliseconds(grace_ms);
  f.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  return f;
}

GrpcServerOptions GrpcOptions(const ServiceFlags& f, ServerSecurity security) {
  GrpcServerOptions o;
  o.address = ListenAddress(f.host, f.port);
  o.max_message_bytes = f.max_message_bytes;
  o.shutdown_grace = f.grace;
  o.security = std::move(security);
  return o;
}

}  // namespace herd::serving
