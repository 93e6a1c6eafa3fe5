#include "libs/serving/security.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/support/client_interceptor.h"

#include "libs/base/status_macros.h"

namespace herd::serving {
namespace {

constexpr char kUnauthenticated[] = "missing or invalid API key";

absl::Status Readable(const std::string& path, absl::string_view what) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  return absl::OkStatus();
}

// The decision, shared by the TLS (C++) and plaintext (C) processor adapters.
class KeyCheck {
 public:
  explicit KeyCheck(const ServerSecurity& s)
      : keys_(s.keys), method_keys_(s.method_keys), health_open_(s.health_open), reflection_open_(s.reflection_open) {}

  // `path` is the call's ":path" ("/pkg.Service/Method"); `authorization` and
  // `x_api_key` the metadata values ("" when absent).
  grpc::Status Check(absl::string_view path, absl::string_view authorization, absl::string_view x_api_key) const {
    if (health_open_ && absl::StartsWith(path, "/grpc.health.v1.Health/")) return grpc::Status::OK;
    if (reflection_open_ && absl::StartsWith(path, "/grpc.reflection.")) return grpc::Status::OK;
    absl::string_view key = ApiKeys::BearerToken(authorization);
    if (key.empty()) key = absl::StripAsciiWhitespace(x_api_key);
    auto m = method_keys_.find(std::string(path));
    if (m != method_keys_.end()) {
      if (m->second.Accepts(key)) return grpc::Status::OK;
      if (keys_.enabled() && keys_.Accepts(key)) {
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, absl::StrCat(path, " requires the admin key"));
      }
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticated);
    }
    if (!keys_.enabled() || keys_.Accepts(key)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticated);
  }

 private:
  ApiKeys keys_;
  std::map<std::string, ApiKeys> method_keys_;
  bool health_open_, reflection_open_;
};

// For TLS credentials (SecureServerCredentials::SetAuthMetadataProcessor).
class CppProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit CppProcessor(std::shared_ptr<const KeyCheck> check) : check_(std::move(check)) {}
  bool IsBlocking() const override { return false; }  // a few hashes: run inline
  grpc::Status Process(const InputMetadata& md, grpc::AuthContext*, OutputMetadata* consumed,
                       OutputMetadata*) override {
    absl::string_view path, auth, xkey;
    for (const auto& [k, v] : md) {
      absl::string_view key(k.data(), k.size()), val(v.data(), v.size());
      if (key == ":path")
        path = val;
      else if (key == "authorization")
        auth = val;
      else if (key == "x-api-key")
        xkey = val;
    }
    grpc::Status s = check_->Check(path, auth, xkey);
    if (s.ok()) {
      // The services never see the credential.
      if (!auth.empty()) consumed->emplace("authorization", std::string(auth));
      if (!xkey.empty()) consumed->emplace("x-api-key", std::string(xkey));
    }
    return s;
  }

 private:
  std::shared_ptr<const KeyCheck> check_;
};

absl::string_view SliceView(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s));
}

// For plaintext ports: the same check through the C core's processor hook, which gRPC
// runs for insecure server credentials too (the C++ InsecureServerCredentials() wrapper
// does not expose it).
void ProcessC(const void* state, grpc_auth_context*, const grpc_metadata* md, size_t n,
              grpc_process_auth_metadata_done_cb cb, void* user_data) {
  const KeyCheck* check = static_cast<const KeyCheck*>(state);
  absl::string_view path, auth, xkey;
  for (size_t i = 0; i < n; ++i) {
    absl::string_view key = SliceView(md[i].key);
    if (key == ":path")
      path = SliceView(md[i].value);
    else if (key == "authorization")
      auth = SliceView(md[i].value);
    else if (key == "x-api-key")
      xkey = SliceView(md[i].value);
  }
  grpc::Status s = check->Check(path, auth, xkey);
  if (s.ok()) {
    cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    cb(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(s.error_code()), s.error_message().c_str());
  }
}

void DestroyC(void* state) { delete static_cast<std::shared_ptr<const KeyCheck>*>(state); }

class InsecureWithAuthCredentials final : public grpc::ServerCredentials {
 public:
  explicit InsecureWithAuthCredentials(std::shared_ptr<const KeyCheck> check)
      : creds_(grpc_insecure_server_credentials_create()) {
    auto* holder = new std::shared_ptr<const KeyCheck>(std::move(check));
    grpc_auth_metadata_processor p;
    p.process = [](void* state, grpc_auth_context* ctx, const grpc_metadata* md, size_t n,
                   grpc_process_auth_metadata_done_cb cb, void* user_data) {
      ProcessC(static_cast<std::shared_ptr<const KeyCheck>*>(state)->get(), ctx, md, n, cb, user_data);
    };
    p.destroy = DestroyC;
    p.state = holder;
    grpc_server_credentials_set_auth_metadata_processor(creds_, p);
  }
  ~InsecureWithAuthCredentials() override { grpc_server_credentials_release(creds_); }
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* creds_;
};

// Adds the key to every outgoing call's metadata.
class KeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit KeyInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      m->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    m->Proceed();
  }

 private:
  const std::string* header_;
};

class KeyInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit KeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new KeyInterceptor(&header_);
  }

 private:
  const std::string header_;  // the factory lives as long as the channel
};

}  // namespace

absl::Status ValidateServerSecurity(const ServerSecurity& s) {
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate file and a key file");
  }
  if (!s.tls_ca_file.empty() && s.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("a TLS CA file (client verification) needs a server certificate and key");
  }
  if (s.tls() && s.tls_refresh_seconds == 0) return absl::InvalidArgumentError("TLS refresh interval must be >= 1 s");
  if (!s.tls_cert_file.empty()) {
    HERD_RETURN_IF_ERROR(Readable(s.tls_cert_file, "TLS certificate file"));
    HERD_RETURN_IF_ERROR(Readable(s.tls_key_file, "TLS key file"));
  }
  if (!s.tls_ca_file.empty()) {
    HERD_RETURN_IF_ERROR(Readable(s.tls_ca_file, "TLS CA file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerSecurity& s) {
  HERD_RETURN_IF_ERROR(ValidateServerSecurity(s));
  std::shared_ptr<const KeyCheck> check = s.auth() ? std::make_shared<const KeyCheck>(s) : nullptr;
  if (!s.tls()) {
    if (check == nullptr) return grpc::InsecureServerCredentials();
    return std::shared_ptr<grpc::ServerCredentials>(std::make_shared<InsecureWithAuthCredentials>(check));
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      s.tls_key_file, s.tls_cert_file, s.tls_ca_file, s.tls_refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions opts(provider);
  opts.watch_identity_key_cert_pairs();
  if (!s.tls_ca_file.empty()) {
    opts.watch_root_certs();
    opts.set_cert_request_type(s.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                     : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    opts.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::experimental::TlsServerCredentials(opts);
  if (creds == nullptr) return absl::InternalError("gRPC refused the TLS server options");
  if (check != nullptr) creds->SetAuthMetadataProcessor(std::make_shared<CppProcessor>(check));
  return creds;
}

std::string DescribeServerSecurity(const ServerSecurity& s) {
  std::string d = s.tls()
                      ? (s.tls_ca_file.empty()
                             ? "TLS"
                             : (s.require_client_cert ? "TLS (mTLS)" : "TLS (client certs verified when presented)"))
                      : "plaintext";
  absl::StrAppend(&d, s.keys.enabled() ? ", API key required" : ", no API key required");
  for (const auto& [method, keys] : s.method_keys) absl::StrAppend(&d, ", ", method, " needs its own key");
  if (s.auth()) {
    absl::StrAppend(&d, s.health_open ? ", health open" : ", health needs a key");
    absl::StrAppend(&d, s.reflection_open ? ", reflection open" : ", reflection needs a key");
  }
  return d;
}

absl::Status ValidateClientSecurity(const ClientSecurity& c) {
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError("a TLS client certificate needs both a certificate file and a key file");
  }
  if (!c.tls_cert_file.empty() && c.tls_ca_file.empty()) {
    return absl::InvalidArgumentError("a TLS client certificate needs a CA file to verify the server");
  }
  if (!c.tls_ca_file.empty()) {
    HERD_RETURN_IF_ERROR(Readable(c.tls_ca_file, "TLS CA file"));
  }
  if (!c.tls_cert_file.empty()) {
    HERD_RETURN_IF_ERROR(Readable(c.tls_cert_file, "TLS certificate file"));
    HERD_RETURN_IF_ERROR(Readable(c.tls_key_file, "TLS key file"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ClientSecurity& c,
                                           const grpc::ChannelArguments& args_in) {
  grpc::ChannelArguments args = args_in;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!c.tls()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> provider;
    if (c.tls_cert_file.empty()) {
      provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(c.tls_ca_file, 60);
    } else {
      provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(c.tls_key_file, c.tls_cert_file,
                                                                                      c.tls_ca_file, 60);
    }
    grpc::experimental::TlsChannelCredentialsOptions opts;
    opts.set_certificate_provider(provider);
    opts.watch_root_certs();
    if (!c.tls_cert_file.empty()) opts.watch_identity_key_cert_pairs();
    opts.set_verify_server_certs(true);
    opts.set_certificate_verifier(std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
    creds = grpc::experimental::TlsCredentials(opts);
    if (!c.tls_server_name.empty()) args.SetSslTargetNameOverride(c.tls_server_name);
  }
  if (c.key.empty()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<KeyInterceptorFactory>(c.key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args, std::move(interceptors));
}

absl::StatusOr<std::string> LoadClientKey(const std::string& file, const char* env_name) {
  std::string text, source;
  if (!file.empty()) {
    // Validates the whole file the way servers read it.
    HERD_ASSIGN_OR_RETURN(auto keys, ApiKeys::FromFile(file));
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    for (absl::string_view line : absl::StrSplit(ss.str(), '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (!line.empty() && line[0] != '#') return std::string(line);
    }
    return absl::InvalidArgumentError(absl::StrCat("key file ", file, " holds no key"));
  }
  const char* v = env_name != nullptr ? std::getenv(env_name) : nullptr;
  if (v == nullptr || *v == '\0') return std::string();
  const std::string src = absl::StrCat("environment variable ", env_name);
  HERD_ASSIGN_OR_RETURN(auto keys, ApiKeys::FromList(v, src));
  for (absl::string_view k : absl::StrSplit(v, ',')) {
    k = absl::StripAsciiWhitespace(k);
    if (!k.empty()) return std::string(k);
  }
  return absl::InvalidArgumentError(absl::StrCat(src, " holds no key"));
}

}  // namespace herd::serving
