// herd gateway: the public gRPC API (herd.v1.Gateway) and an OpenAI-compatible HTTP
// endpoint over a pool of compute workers. See services/gateway/README.md.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/mmap.h"
#include "libs/clients/address.h"
#include "libs/engine/spec/spec_config.h"
#include "libs/serving/api_keys.h"
#include "libs/serving/flags.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security_flags.h"
#include "libs/serving/server.h"
#include "libs/serving/service_flags.h"
#include "libs/serving/service_main.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"

ABSL_FLAG(std::string, loader, "", "loader address HOST:PORT (vocabularies for tokenization)");
ABSL_FLAG(std::string, workers, "", "comma-separated worker addresses \"h1:p1,h2:p2\"");
ABSL_FLAG(std::string, workers_dns, "",
          "NAME:PORT; every address NAME resolves to is a worker (e.g. a Kubernetes headless "
          "service); re-resolved every --dns_refresh_ms");
ABSL_FLAG(int, port, 50051, "gRPC port (0 = pick a free port)");
ABSL_FLAG(int, http_port, 8080, "OpenAI-compatible HTTP port (0 = pick a free port, -1 = off)");
ABSL_FLAG(int, metrics_port, 9090, "Prometheus /metrics port (0 = pick a free port, -1 = off)");
ABSL_FLAG(int64_t, max_prompt_bytes, 1 << 20, "largest prompt text in bytes");
ABSL_FLAG(int, request_timeout_ms, 600000, "upper bound of a request's lifetime (0 = none)");
ABSL_FLAG(int, default_n_predict, -1,
          "n_predict of requests that leave it unset (-1 = until EOS or the context is full, as llama.cpp)");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template FILE used for every model's chat prompts instead of the GGUF's "
          "tokenizer.chat_template (llama.cpp --chat-template-file); models without either use ChatML");
ABSL_FLAG(std::string, reasoning_format, "auto",
          "how chat output's <think> reasoning is returned when a request names none (llama-server "
          "--reasoning-format): auto or deepseek = split into message.reasoning_content for templates that use "
          "<think>; none = left in the content");
ABSL_FLAG(int, poll_ms, 500, "interval of the workers' Info polls");
ABSL_FLAG(
    std::string, route_policy, "prefix",
    "how a generation picks its worker: prefix (the worker whose KV cache holds the longest prefix of the prompt, "
    "from the workers' prefix-cache digests, unless it is busier than the least-loaded worker by more than "
    "--route_max_extra_load sequences) or least_loaded");
ABSL_FLAG(int, route_max_extra_load, 8,
          "route_policy=prefix: most extra sequences (active + queued) a worker may carry beyond the least-loaded one "
          "and still win a request by its cached prefix");
ABSL_FLAG(int, route_prefix_tokens_per_load, 50,
          "route_policy=prefix: cached prompt tokens that outweigh one more sequence on a worker (a worker's score is "
          "its cached prefix tokens minus this times its sequences beyond the least-loaded worker's); 0 = the longest "
          "prefix within --route_max_extra_load whatever the load");
ABSL_FLAG(int, info_timeout_ms, 1000, "deadline of each Info call");
ABSL_FLAG(int, dns_refresh_ms, 5000, "interval of --workers_dns re-resolution");
ABSL_FLAG(int, max_concurrent_requests, 256,
          "HTTP requests handled at once, streams in flight included (TGI's --max-concurrent-requests); more get 429 "
          "with Retry-After. A generation in flight holds no thread");
ABSL_FLAG(int, http_threads, 8,
          "threads running HTTP handlers (parsing, tokenization, the synchronous endpoints); generations wait on "
          "their workers without one");
ABSL_FLAG(int, http_max_connections, 4096, "open HTTP connections at most; more wait in the listen backlog");
ABSL_FLAG(int, http_header_timeout_ms, 10000, "a request's head must arrive within this (slow clients are closed)");
ABSL_FLAG(int, http_body_timeout_ms, 60000, "a request's body must arrive within this");
ABSL_FLAG(int, http_idle_timeout_ms, 30000, "a keep-alive connection may idle this long between requests");
ABSL_FLAG(int, http_max_header_bytes, 16384, "largest HTTP request head (431 beyond)");
ABSL_FLAG(int, http_max_headers, 100, "most HTTP header fields (431 beyond)");
ABSL_FLAG(std::string, api_key_file, "",
          "API keys for the public API, one per line (llama-server --api-key-file); also env HERD_API_KEYS "
          "(comma-separated). HTTP: Authorization: Bearer KEY (or X-Api-Key); unset = no authentication");
ABSL_FLAG(int, api_key_max_concurrent, 0, "per API key: requests handled at once (0 = no limit)");
ABSL_FLAG(int, api_key_requests_per_minute, 0, "per API key: requests per minute (0 = no limit)");
ABSL_FLAG(std::string, http_tls_cert_file, "",
          "HTTPS: PEM certificate chain (with --http_tls_key_file); re-read when it changes");
ABSL_FLAG(std::string, http_tls_key_file, "", "HTTPS: PEM private key");
ABSL_FLAG(std::string, http_tls_client_ca_file, "", "HTTPS: require client certificates signed by this CA (mTLS)");
ABSL_FLAG(int, malloc_trim_ms, 5000,
          "while no request is in flight, hand freed heap memory back to the OS (glibc malloc_trim) at most this "
          "often, so that RSS falls after large requests (0 = never)");
// Speculative decoding. Flag names use '_' (Abseil); llama.cpp spells them with '-'.
ABSL_FLAG(std::string, draft_workers, "",
          "comma-separated draft worker addresses \"h1:p1,h2:p2\" (herd.v1.Draft); the gateway picks one per "
          "sequence");
ABSL_FLAG(std::string, draft_workers_dns, "",
          "NAME:PORT; every address NAME resolves to is a draft worker (e.g. a Kubernetes headless service); "
          "re-resolved every --dns_refresh_ms");
ABSL_FLAG(int, draft_timeout_ms, 50,
          "deadline of each draft request; a late, failing or absent draft worker means an empty draft, never an "
          "error");
ABSL_FLAG(std::string, spec_type, "none",
          "default drafter of requests that name none (llama.cpp --spec-type): none, ngram-simple, ngram-map-k, "
          "ngram-map-k4v, ngram-cache, draft-model");
ABSL_FLAG(int, spec_ngram_size_n, 12, "default n-gram key size n, 1..1024 (llama.cpp --spec-ngram-size-n)");
ABSL_FLAG(int, spec_ngram_size_m, 48, "default n-gram draft size m, 1..1024 (llama.cpp --spec-ngram-size-m)");
ABSL_FLAG(int, spec_ngram_check_rate, 1,
          "default: search the history every this many new tokens, >= 1 (llama.cpp --spec-ngram-check-rate)");
ABSL_FLAG(int, spec_ngram_min_hits, 1,
          "default hits a key needs before it drafts (ngram-map-*), >= 1 (llama.cpp --spec-ngram-min-hits)");
ABSL_FLAG(int, draft_max, 16, "default most tokens per draft n_max, 0..1024 (llama.cpp --draft-max)");
ABSL_FLAG(int, draft_min, 0, "default: drafts shorter than this are dropped, n_min (llama.cpp --draft-min)");
ABSL_FLAG(double, draft_p_min, 0.75,
          "default: the draft model stops at a token less likely than this, p_min in [0, 1] (llama.cpp "
          "--draft-p-min)");

namespace {

int Fail(const std::string& msg) { return herd::serving::StartupFailure("gateway", msg); }

// The GatewayOptions of the flags (workers, loader, limits, timeouts); errors carry the
// message main prints.
absl::Status GeneralOptionsFromFlags(const herd::serving::ClientSecurity& client_security,
                                     herd::gateway::GatewayOptions* opts) {
  opts->loader_address = absl::GetFlag(FLAGS_loader);
  opts->loader_security = client_security;
  opts->pool.security = client_security;
  opts->drafts.security = client_security;
  if (!absl::GetFlag(FLAGS_workers).empty()) {
    auto list = herd::gateway::ParseWorkerList(absl::GetFlag(FLAGS_workers));
    if (!list.ok()) return absl::InvalidArgumentError(std::string(list.status().message()));
    opts->pool.addresses = *list;
  }
  opts->pool.dns = absl::GetFlag(FLAGS_workers_dns);
  if (opts->pool.addresses.empty() && opts->pool.dns.empty())
    return absl::InvalidArgumentError("--workers or --workers_dns is required");
  if (opts->loader_address.empty()) {
    HERD_LOG(Warning) << "no --loader: requests fail with FAILED_PRECONDITION (no vocabulary to tokenize with)";
  }
  opts->pool.poll_interval = absl::Milliseconds(std::max(10, absl::GetFlag(FLAGS_poll_ms)));
  opts->pool.info_timeout = absl::Milliseconds(std::max(10, absl::GetFlag(FLAGS_info_timeout_ms)));
  opts->pool.dns_interval = absl::Milliseconds(std::max(100, absl::GetFlag(FLAGS_dns_refresh_ms)));
  auto policy = herd::gateway::ParseRoutePolicy(absl::GetFlag(FLAGS_route_policy));
  if (!policy.ok()) return absl::InvalidArgumentError(std::string(policy.status().message()));
  opts->pool.route_policy = *policy;
  if (absl::GetFlag(FLAGS_route_max_extra_load) < 0)
    return absl::InvalidArgumentError("--route_max_extra_load must be >= 0");
  opts->pool.route_max_extra_load = absl::GetFlag(FLAGS_route_max_extra_load);
  if (absl::GetFlag(FLAGS_route_prefix_tokens_per_load) < 0)
    return absl::InvalidArgumentError("--route_prefix_tokens_per_load must be >= 0");
  opts->pool.route_prefix_tokens_per_load = absl::GetFlag(FLAGS_route_prefix_tokens_per_load);
  opts->max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  if (opts->max_prompt_bytes <= 0) return absl::InvalidArgumentError("--max_prompt_bytes must be > 0");
  opts->request_timeout = absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_request_timeout_ms)));
  opts->default_n_predict = absl::GetFlag(FLAGS_default_n_predict);
  if (opts->default_n_predict < -1 || opts->default_n_predict == 0)
    return absl::InvalidArgumentError("--default_n_predict must be -1 or >= 1");

  return absl::OkStatus();
}

// Speculative decoding: the draft workers and the defaults of requests.
absl::Status SpecOptionsFromFlags(herd::gateway::GatewayOptions* opts) {
  namespace spec = herd::engine::spec;
  if (!absl::GetFlag(FLAGS_draft_workers).empty()) {
    auto list = herd::clients::ParseAddressList(absl::GetFlag(FLAGS_draft_workers), "draft_workers");
    if (!list.ok()) return absl::InvalidArgumentError(absl::StrCat("--", list.status().message()));
    opts->drafts.addresses = *list;
  }
  opts->drafts.dns = absl::GetFlag(FLAGS_draft_workers_dns);
  if (!opts->drafts.dns.empty()) {
    auto r = herd::clients::ResolveAddresses(opts->drafts.dns, "draft_workers_dns");
    if (absl::IsInvalidArgument(r.status()))
      return absl::InvalidArgumentError(absl::StrCat("--", r.status().message()));
  }
  opts->drafts.dns_interval = std::chrono::milliseconds(std::max(100, absl::GetFlag(FLAGS_dns_refresh_ms)));
  if (absl::GetFlag(FLAGS_draft_timeout_ms) < 1) return absl::InvalidArgumentError("--draft_timeout_ms must be >= 1");
  opts->drafts.deadline = std::chrono::milliseconds(absl::GetFlag(FLAGS_draft_timeout_ms));
  auto type = spec::ParseSpecType(absl::GetFlag(FLAGS_spec_type), "--spec_type");
  if (!type.ok()) return absl::InvalidArgumentError(std::string(type.status().message()));
  opts->spec_defaults.type = *type;
  opts->spec_defaults.ngram_size_n = absl::GetFlag(FLAGS_spec_ngram_size_n);
  opts->spec_defaults.ngram_size_m = absl::GetFlag(FLAGS_spec_ngram_size_m);
  opts->spec_defaults.ngram_check_rate = absl::GetFlag(FLAGS_spec_ngram_check_rate);
  opts->spec_defaults.ngram_min_hits = absl::GetFlag(FLAGS_spec_ngram_min_hits);
  opts->spec_defaults.draft_max = absl::GetFlag(FLAGS_draft_max);
  opts->spec_defaults.draft_min = absl::GetFlag(FLAGS_draft_min);
  opts->spec_defaults.draft_p_min = static_cast<float>(absl::GetFlag(FLAGS_draft_p_min));
  if (absl::Status vs = spec::ValidateSpecConfig(opts->spec_defaults); !vs.ok()) {
    return absl::InvalidArgumentError(spec::SpecConfigMessageForFlags(std::string(vs.message())));
  }
  const bool have_drafts = !opts->drafts.addresses.empty() || !opts->drafts.dns.empty();
  if (!have_drafts && opts->spec_defaults.type != spec::SpecType::kNone) {
    HERD_LOG(Warning) << "--spec_type=" << spec::SpecTypeName(opts->spec_defaults.type)
                      << " without --draft_workers / --draft_workers_dns: requests run without speculation";
  }

  return absl::OkStatus();
}

// --chat_template: a Jinja template used for every model.
absl::Status ChatTemplateFromFlags(herd::gateway::GatewayOptions* opts) {
  if (const std::string path = absl::GetFlag(FLAGS_chat_template); !path.empty()) {
    auto text = herd::ReadFileToString(path);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--chat_template: ", text.status().message()));
    auto info = herd::gateway::MakeChatTemplateInfo("", *text);
    if (!info.ok())
      return absl::InvalidArgumentError(absl::StrCat("--chat_template ", path, ": ", info.status().message()));
    opts->chat_template = *std::move(text);
  }
  const std::string rf = absl::GetFlag(FLAGS_reasoning_format);
  if (rf != "auto" && rf != "deepseek" && rf != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--reasoning_format: '", rf, "' is not auto, deepseek or none"));
  }
  opts->reasoning_format = rf;

  return absl::OkStatus();
}

// The HTTP front end's options from the flags.
herd::gateway::HttpOptions HttpOptionsFromFlags(const herd::gateway::GatewayOptions& opts,
                                                const herd::serving::ApiKeys* api_keys,
                                                herd::serving::Registry* registry) {
  herd::gateway::HttpOptions hopts;
  auto& hs = hopts.server;
  hs.max_concurrent_requests = std::max(1, absl::GetFlag(FLAGS_max_concurrent_requests));
  hs.handler_threads = std::max(1, absl::GetFlag(FLAGS_http_threads));
  hs.max_connections = std::max(1, absl::GetFlag(FLAGS_http_max_connections));
  hs.max_body_bytes = static_cast<size_t>(opts.max_prompt_bytes) * 8 + (1 << 20);
  hs.max_header_bytes = static_cast<size_t>(std::max(1024, absl::GetFlag(FLAGS_http_max_header_bytes)));
  hs.max_header_count = std::max(8, absl::GetFlag(FLAGS_http_max_headers));
  hs.header_timeout = absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_http_header_timeout_ms)));
  hs.body_timeout = absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_http_body_timeout_ms)));
  hs.idle_timeout = absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_http_idle_timeout_ms)));
  hs.io_threads = 2;
  hs.api_keys = api_keys;
  hs.per_key_max_concurrent = absl::GetFlag(FLAGS_api_key_max_concurrent);
  hs.per_key_requests_per_minute = absl::GetFlag(FLAGS_api_key_requests_per_minute);
  hs.tls_cert_file = absl::GetFlag(FLAGS_http_tls_cert_file);
  hs.tls_key_file = absl::GetFlag(FLAGS_http_tls_key_file);
  hs.tls_client_ca_file = absl::GetFlag(FLAGS_http_tls_client_ca_file);
  hs.metrics = registry;
  hs.metrics_prefix = "herd_gateway_http";
  return hopts;
}

// glibc keeps freed memory of large requests (prompt texts, JSON bodies, token vectors)
// in its arenas: gives it back every `every_ms` once the gateway is idle (0 = never).
class MallocTrimmer {
 public:
  MallocTrimmer(herd::gateway::Gateway* gw, int every_ms) {
    if (every_ms <= 0) return;
    thread_ = std::thread([this, gw, every_ms] {
      uint64_t seen = 0;  // requests finished at the last trim
      auto last = std::chrono::steady_clock::now();
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(every_ms, 100)));
        if (std::chrono::steady_clock::now() - last < std::chrono::milliseconds(every_ms)) continue;
        last = std::chrono::steady_clock::now();
        const uint64_t done = gw->finished();
        if (gw->inflight() == 0 && done != seen) {
          ::malloc_trim(0);
          seen = done;
        }
      }
    });
  }
  ~MallocTrimmer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  MallocTrimmer(const MallocTrimmer&) = delete;
  MallocTrimmer& operator=(const MallocTrimmer&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// SIGTERM/SIGINT: stop accepting (health NOT_SERVING, HTTP listener closed), let
// in-flight streams finish for `grace`, then cancel them (their last message says
// FINISH_REASON_CANCELLED and their worker sequences are cancelled).
void ServeUntilSignal(herd::serving::ServiceMain& process, herd::gateway::Gateway& gw,
                      herd::gateway::HttpFrontEnd& http, std::chrono::milliseconds grace) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread canceller, http_stopper;
  process.Wait(grace, [&] {
    gw.BeginDrain();
    http_stopper = std::thread([&] { http.Stop(); });
    // Cancel a little before gRPC's own deadline so that the streams' last messages
    // (FINISH_REASON_CANCELLED) still reach their clients.
    const auto margin = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), grace / 5);
    canceller = std::thread([&, margin] {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, grace - margin, [&] { return done; })) gw.CancelAll();
    });
  });
  // The gRPC server has drained (or cancelled) its calls.
  gw.WaitIdle(absl::FromChrono(grace) + absl::Seconds(1));
  {
    std::lock_guard<std::mutex> l(mu);
    done = gw.inflight() == 0;
  }
  cv.notify_all();
  if (!done) gw.CancelAll();
  if (canceller.joinable()) canceller.join();
  if (http_stopper.joinable()) http_stopper.join();
}

}  // namespace

int main(int argc, char** argv) {
  herd::serving::ParseServiceFlags(
      argc, argv, "herd-gateway",
      "herd gateway: the public gRPC API (herd.v1.Gateway: Generate, Tokenize, Detokenize, ListModels) and an\n"
      "OpenAI-compatible HTTP endpoint (POST /v1/completions, /v1/chat/completions, GET /v1/models, /health,\n"
      "POST /tokenize, /detokenize) over compute workers.\n\n"
      "usage: gateway --loader HOST:PORT (--workers h1:p1,h2:p2 | --workers_dns NAME:PORT) [flags]\n"
      "       speculative decoding: --draft_workers h:p,... | --draft_workers_dns NAME:PORT, --spec_type TYPE,\n"
      "       --spec_ngram_size_n N, --spec_ngram_size_m M, --spec_ngram_check_rate R, --spec_ngram_min_hits H,\n"
      "       --draft_max N, --draft_min N, --draft_p_min P (llama.cpp's --spec-type, --draft-max, ... spelled\n"
      "       with '_'); requests override them with GenerateRequest.speculative.\n\n"
      "Prints \"gateway listening on HOST:PORT\", \"http on HOST:PORT\" and \"metrics on HOST:PORT\" on stdout.",
      "services/gateway/");
  using herd::gateway::Gateway;

  auto flags = herd::serving::ReadServiceFlags(absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port));
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  auto api_keys = herd::serving::ApiKeys::Load(absl::GetFlag(FLAGS_api_key_file), "HERD_API_KEYS");
  if (!api_keys.ok()) return Fail(absl::StrCat("API keys: ", api_keys.status().message()));
  auto security = herd::serving::ServerSecurityFromFlags(*api_keys);
  if (!security.ok()) return Fail(std::string(security.status().message()));
  auto client_security = herd::serving::ClientSecurityFromFlags();
  if (!client_security.ok()) return Fail(std::string(client_security.status().message()));

  herd::gateway::GatewayOptions opts;
  if (absl::Status st = GeneralOptionsFromFlags(*client_security, &opts); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  opts.pool.max_message_bytes = flags->max_message_bytes;
  if (absl::Status st = SpecOptionsFromFlags(&opts); !st.ok()) return Fail(std::string(st.message()));
  if (absl::Status st = ChatTemplateFromFlags(&opts); !st.ok()) return Fail(std::string(st.message()));
  namespace spec = herd::engine::spec;

  herd::serving::Registry registry;
  Gateway gw(opts, &registry);
  absl::Status s = gw.Start();
  if (!s.ok()) return Fail(std::string(s.message()));

  const std::string host = flags->host;
  herd::gateway::GatewayServiceImpl service(&gw);
  herd::serving::GrpcServerOptions gopts;
  gopts.address = absl::StrCat(host, ":", flags->port);
  gopts.max_message_bytes = flags->max_message_bytes;
  const auto grace = flags->grace;
  gopts.shutdown_grace = grace;
  gopts.security = *std::move(security);
  HERD_LOG(Info) << "gateway: gRPC " << herd::serving::DescribeServerSecurity(gopts.security);
  herd::serving::ServiceMain process("gateway");
  auto port = process.StartGrpc(gopts, {&service}, "");
  if (!port.ok()) return Fail(std::string(port.status().message()));
  std::printf("gateway listening on %s:%d\n", host.c_str(), *port);
  std::fflush(stdout);

  herd::gateway::HttpOptions hopts = HttpOptionsFromFlags(opts, &*api_keys, &registry);
  const auto& hs = hopts.server;
  herd::gateway::HttpFrontEnd http(&gw, hopts);
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    auto hp = http.Start(host, absl::GetFlag(FLAGS_http_port));
    if (!hp.ok()) return Fail(std::string(hp.status().message()));
    std::printf("%s on %s:%d\n", hs.tls_cert_file.empty() ? "http" : "https", host.c_str(), *hp);
    std::fflush(stdout);
  }
  auto mp = process.StartMetrics(&registry, herd::serving::MetricsServerOptions(&*api_keys), host, flags->metrics_port);
  if (!mp.ok()) return Fail(std::string(mp.status().message()));
  if (*mp >= 0) {
    std::printf("metrics on %s:%d\n", host.c_str(), *mp);
    std::fflush(stdout);
  }
  HERD_LOG(Info) << "gateway: " << gw.pool().live_count() << " live worker(s); loader "
                 << (opts.loader_address.empty() ? "none" : opts.loader_address) << "; draft workers "
                 << (gw.draft_client() == nullptr ? std::string("none") : absl::StrCat(gw.draft_client()->n_workers()))
                 << ", default speculative type " << spec::SpecTypeName(opts.spec_defaults.type);

  {
    MallocTrimmer trimmer(&gw, absl::GetFlag(FLAGS_malloc_trim_ms));
    ServeUntilSignal(process, gw, http, grace);
  }
  gw.Stop();
  process.StopMetrics();
  HERD_LOG(Info) << "gateway stopped";
  return 0;
}
