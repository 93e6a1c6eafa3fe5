#include "tools/herd/client_security.h"

#include <cstdlib>

#include "libs/base/status_macros.h"

namespace herd::cli {

const std::vector<FlagSpec>& ClientSecurityFlags() {
  static const std::vector<FlagSpec> specs = {
      {{"--tls-ca-file", "--tls_ca_file"}, true, "PEM CA bundle verifying the server (set = TLS)", ""},
      {{"--tls-cert-file", "--tls_cert_file"}, true, "PEM client certificate for mTLS (with --tls-key-file)", ""},
      {{"--tls-key-file", "--tls_key_file"}, true, "PEM private key of --tls-cert-file", ""},
      {{"--tls-server-name", "--tls_server_name"}, true, "name to check the server certificate against", ""},
      {{"--api-key-file", "--api_key_file"},
       true,
       "file holding the key sent as 'authorization: Bearer KEY' (default: env HERD_API_KEY, then HERD_CLUSTER_KEY)",
       ""},
  };
  return specs;
}

std::vector<FlagSpec> WithClientSecurityFlags(std::vector<FlagSpec> specs) {
  for (const FlagSpec& f : ClientSecurityFlags()) specs.push_back(f);
  return specs;
}

absl::StatusOr<serving::ClientSecurity> ClientSecurityFromArgs(const Args& args,
                                                               std::initializer_list<const char*> key_envs) {
  serving::ClientSecurity c;
  c.tls_ca_file = args.Get("--tls-ca-file");
  c.tls_cert_file = args.Get("--tls-cert-file");
  c.tls_key_file = args.Get("--tls-key-file");
  c.tls_server_name = args.Get("--tls-server-name");
  HERD_RETURN_IF_ERROR(serving::ValidateClientSecurity(c));
  const std::string file = args.Get("--api-key-file");
  const char* env = nullptr;
  for (const char* e : key_envs) {
    const char* v = std::getenv(e);
    if (v != nullptr && *v != '\0') {
      env = e;
      break;
    }
  }
  HERD_ASSIGN_OR_RETURN(auto key, serving::LoadClientKey(file, file.empty() ? env : nullptr));
  c.key = std::move(key);
  return c;
}

}  // namespace herd::cli
