// The security flags every herd service binary shares (link //libs/serving:security_flags):
//   --tls_cert_file, --tls_key_file   this service's certificate chain and key (PEM): its
//                                     gRPC port serves TLS; also its client certificate
//                                     (mTLS) when it calls other services
//   --tls_ca_file                     CA bundle (PEM) that verifies the services this one
//                                     calls (set = outgoing calls use TLS) and, with
//                                     --tls_client_auth, the certificates of its callers
//   --tls_client_auth                 with --tls_ca_file and a certificate: require and
//                                     verify client certificates (mTLS; default true)
//   --tls_server_name                 name checked against the certificates of called
//                                     services instead of their address's host
//   --tls_refresh_s                   how often the TLS files are re-read
//   --cluster_key_file                the cluster key (env HERD_CLUSTER_KEY): internal
//                                     services require it of callers; every service
//                                     sends the first key when it calls another
//   --open_health / --open_reflection grpc.health.v1 / reflection callable without a key
//   --metrics_require_key             exposed for the metrics HTTP port (MetricsSecurity)
#pragma once
#include "absl/status/statusor.h"

#include "libs/serving/api_keys.h"
#include "libs/serving/http_server.h"
#include "libs/serving/security.h"

namespace herd::serving {

/// --cluster_key_file, else env HERD_CLUSTER_KEY (comma-separated), else none.
/// Errors: those of ApiKeys::Load.
absl::StatusOr<ApiKeys> ClusterKeysFromFlags();

/// The server side from the flags, requiring `keys` of every caller (pass
/// ClusterKeysFromFlags() for internal services, the public keys for the gateway).
/// Errors: those of ValidateServerSecurity, naming the flags.
absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(ApiKeys keys);

/// The client side for calls to other herd services: TLS when --tls_ca_file is set (with
/// this service's certificate as client certificate when it has one) and the first
/// cluster key. Errors: those of ValidateClientSecurity and LoadClientKey.
absl::StatusOr<ClientSecurity> ClientSecurityFromFlags();

/// What the metrics HTTP port should require (wired by the HTTP side).
struct MetricsSecurity {
  bool require_key = false;  // --metrics_require_key
};
MetricsSecurity MetricsSecurityFromFlags();

/// Options of a service's metrics HTTP port (MetricsHttpServer): with
/// --metrics_require_key, GET /metrics needs one of `keys` (Authorization: Bearer KEY;
/// not owned, must outlive the server) while /healthz stays open.
http::ServerOptions MetricsServerOptions(const ApiKeys* keys);

}  // namespace herd::serving
