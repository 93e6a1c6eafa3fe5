// Transport security and API keys for every herd gRPC server and client, in one place.
//
// Server side (StartGrpcServer takes a ServerSecurity):
//  - TLS from PEM files through gRPC's FileWatcherCertificateProvider: the certificate,
//    key and CA files are re-read every `tls_refresh_seconds`, so a rotated certificate
//    (e.g. a Kubernetes Secret update) is served to new connections without a restart.
//  - mTLS: with a CA file the server requires a client certificate signed by that CA.
//  - API keys: every call must carry metadata `authorization: Bearer KEY` (or
//    `x-api-key: KEY`) accepted by `keys`, else it fails UNAUTHENTICATED ("missing or
//    invalid API key"). Methods listed in `method_keys` need one of their own keys
//    instead (a caller with a valid general key but not the method's gets
//    PERMISSION_DENIED). grpc.health.v1.Health is open by default (Kubernetes probes);
//    server reflection is closed by default when keys are on.
//    The check runs as an AuthMetadataProcessor, on TLS and on plaintext ports alike.
//
// Client side: MakeChannel(address, ClientSecurity) creates a channel with TLS (CA file
// verifying the server, optional client certificate for mTLS, both file-watched too)
// and an interceptor that adds `authorization: Bearer KEY` to every call.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/api_keys.h"

namespace herd::serving {

/// What a gRPC server requires of its peers. Default: plaintext, no keys.
struct ServerSecurity {
  /// PEM certificate chain and private key; both set = TLS, neither = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  /// PEM CA bundle; when set (with TLS) every client must present a certificate signed
  /// by it (mTLS), unless `require_client_cert` is false (then it is only verified when
  /// presented).
  std::string tls_ca_file;
  bool require_client_cert = true;
  /// How often the TLS files are re-read (seconds, >= 1).
  unsigned tls_refresh_seconds = 60;

  /// Keys every call must present (empty = no key needed, except for `method_keys`).
  ApiKeys keys;
  /// Full method name ("/herd.v1.Loader/Quantize") -> the keys that method needs
  /// instead of `keys` (stricter: e.g. the loader's admin key).
  std::map<std::string, ApiKeys> method_keys;
  /// grpc.health.v1.Health callable without a key.
  bool health_open = true;
  /// Server reflection callable without a key.
  bool reflection_open = false;

  bool tls() const { return !tls_cert_file.empty(); }
  bool auth() const { return keys.enabled() || !method_keys.empty(); }
};

/// Checks that the TLS settings are complete and their files readable.
/// Errors: INVALID_ARGUMENT (cert without key or the reverse, CA without cert, a
/// refresh interval of 0), NOT_FOUND naming an unreadable file.
absl::Status ValidateServerSecurity(const ServerSecurity& s);

/// Credentials for ServerBuilder::AddListeningPort, with the API-key check attached
/// when `s.auth()`. Errors: those of ValidateServerSecurity.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerSecurity& s);

/// One line for the logs: "TLS (mTLS), API key required, health open" and the like.
std::string DescribeServerSecurity(const ServerSecurity& s);

/// How a client reaches a herd gRPC server. Default: plaintext, no key.
struct ClientSecurity {
  /// PEM CA bundle that verifies the server's certificate; set = TLS.
  std::string tls_ca_file;
  /// The client's own certificate chain and key, presented for mTLS (both or neither).
  std::string tls_cert_file;
  std::string tls_key_file;
  /// Name checked against the server certificate instead of the address's host
  /// ("" = the host of the address).
  std::string tls_server_name;
  /// Sent as `authorization: Bearer KEY` on every call ("" = none).
  std::string key;

  bool tls() const { return !tls_ca_file.empty(); }
};

/// Checks that the client TLS settings are complete and their files readable.
/// Errors: INVALID_ARGUMENT (cert without key, client cert without a CA), NOT_FOUND.
absl::Status ValidateClientSecurity(const ClientSecurity& c);

/// A channel to `address` ("host:port") secured as `c` says, with `args` (message
/// limits etc.). Never fails: unreadable TLS files make calls fail UNAVAILABLE (check
/// them once with ValidateClientSecurity at startup).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ClientSecurity& c,
                                           const grpc::ChannelArguments& args = grpc::ChannelArguments());

/// The key a client sends: the first key in `file` when non-empty (format of
/// ApiKeys::FromFile), else the first of the comma-separated keys in environment
/// variable `env_name`, else "". Errors: those of ApiKeys::FromFile / FromList.
absl::StatusOr<std::string> LoadClientKey(const std::string& file, const char* env_name);

}  // namespace herd::serving
