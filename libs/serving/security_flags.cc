#include "libs/serving/security_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of this service: its gRPC port serves TLS (with --tls_key_file); also presented "
          "as client certificate (mTLS) when it calls other services.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle: verifies the services this one calls (set = outgoing calls use TLS) and, with "
          "--tls_client_auth and a certificate, the client certificates of callers (mTLS).");
ABSL_FLAG(bool, tls_client_auth, true,
          "With --tls_ca_file and --tls_cert_file: require and verify client certificates (mTLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name checked against the certificates of called services instead of the host of their address.");
ABSL_FLAG(int, tls_refresh_s, 60, "How often the TLS certificate, key and CA files are re-read (seconds, >= 1).");
ABSL_FLAG(std::string, cluster_key_file, "",
          "File with the cluster key(s), one per line (else env HERD_CLUSTER_KEY, comma-separated). Internal "
          "services (loader, worker, draft) require one of them of every caller; every service sends the first "
          "when it calls another.");
ABSL_FLAG(bool, open_health, true, "grpc.health.v1.Health callable without a key (Kubernetes probes).");
ABSL_FLAG(bool, open_reflection, false, "gRPC server reflection callable without a key.");
ABSL_FLAG(bool, metrics_require_key, false,
          "The metrics HTTP port requires the cluster key (enforced by the HTTP front end where wired).");

namespace herd::serving {

absl::StatusOr<ApiKeys> ClusterKeysFromFlags() {
  auto keys = ApiKeys::Load(absl::GetFlag(FLAGS_cluster_key_file), "HERD_CLUSTER_KEY");
  if (!keys.ok()) return absl::Status(keys.status().code(), absl::StrCat("cluster key: ", keys.status().message()));
  return keys;
}

absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(ApiKeys keys) {
  ServerSecurity s;
  s.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  s.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  // Without a certificate the CA only verifies the services this one calls.
  if (!s.tls_cert_file.empty()) s.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  s.require_client_cert = absl::GetFlag(FLAGS_tls_client_auth);
  if (!s.require_client_cert) s.tls_ca_file.clear();
  const int refresh = absl::GetFlag(FLAGS_tls_refresh_s);
  if (refresh < 1) return absl::InvalidArgumentError("--tls_refresh_s must be >= 1");
  s.tls_refresh_seconds = static_cast<unsigned>(refresh);
  s.keys = std::move(keys);
  s.health_open = absl::GetFlag(FLAGS_open_health);
  s.reflection_open = absl::GetFlag(FLAGS_open_reflection);
  if (absl::Status v = ValidateServerSecurity(s); !v.ok()) {
    return absl::Status(v.code(), absl::StrCat("--tls_cert_file/--tls_key_file/--tls_ca_file: ", v.message()));
  }
  return s;
}

absl::StatusOr<ClientSecurity> ClientSecurityFromFlags() {
  ClientSecurity c;
  c.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  if (!c.tls_ca_file.empty()) {
    c.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
    c.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  }
  c.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (absl::Status v = ValidateClientSecurity(c); !v.ok()) {
    return absl::Status(v.code(), absl::StrCat("--tls_ca_file/--tls_cert_file/--tls_key_file: ", v.message()));
  }
  auto key = LoadClientKey(absl::GetFlag(FLAGS_cluster_key_file), "HERD_CLUSTER_KEY");
  if (!key.ok()) return absl::Status(key.status().code(), absl::StrCat("cluster key: ", key.status().message()));
  c.key = *std::move(key);
  return c;
}

MetricsSecurity MetricsSecurityFromFlags() {
  MetricsSecurity m;
  m.require_key = absl::GetFlag(FLAGS_metrics_require_key);
  return m;
}

http::ServerOptions MetricsServerOptions(const ApiKeys* keys) {
  http::ServerOptions o;
  if (MetricsSecurityFromFlags().require_key) {
    o.api_keys = keys;
    o.open_paths = {"/healthz"};
  }
  return o;
}

}  // namespace herd::serving
