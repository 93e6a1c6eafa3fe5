// herd up: a local cluster (loader, N workers per model, optional draft workers,
// optional compute servers of a layer split, gateway) on loopback.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "tools/herd/args.h"
#include "tools/herd/client_security.h"
#include "tools/herd/cluster.h"
#include "tools/herd/commands.h"

namespace herd::cli {

namespace {

// An early end of `herd up`: its exit status, the message already printed.
// std::nullopt: carry on.
using EarlyExit = std::optional<int>;

// The flags of `herd up`.
const std::vector<FlagSpec>& UpFlags() {
  static const std::vector<FlagSpec> specs = {
      {{"--models"}, true, "model directory served by the loader", ""},
      {{"--model"}, true, "comma-separated model names to serve (default: every *.gguf)", ""},
      {{"--workers"}, true, "workers per model", "1"},
      {{"-t", "--threads"}, true, "compute threads per worker", "1"},
      {{"-c", "--ctx-size"},
       true,
       "KV cells per worker, split evenly: each sequence may use ctx-size / max-seqs",
       "8192"},
      {{"-np", "--parallel", "--max-seqs"}, true, "concurrent sequences per worker (llama-server -np)", "4"},
      {{"--port"}, true, "gateway gRPC port (0 = a free port)", "0"},
      {{"--http-port"}, true, "gateway OpenAI-compatible HTTP port (0 = a free port)", "0"},
      {{"-ctk", "--cache-type-k"}, true, "KV cache type of the workers: f16 or f32", "f16"},
      {{"--chat-template"}, true, "Jinja chat template FILE for chat requests (default: each model's own)", ""},
      {{"--pooling"},
       true,
       "embeddings pooling when a request names none: mean|cls|last (default: the GGUF's, else mean)",
       ""},
      {{"--reasoning-format"}, true, "chat <think> reasoning: auto|deepseek (into reasoning_content) or none", "auto"},
      {{"-ngl", "--n-gpu-layers"},
       true,
       "accepted for llama.cpp compatibility: herd workers run the whole model on their backend (CPU here); "
       "--remote-split splits its layers instead",
       ""},
      {{"--remote-split"},
       false,
       "two-host layer split on loopback: one herd-compute per worker, each worker --backend "
       "cpu,remote://127.0.0.1:PORT (first half of the layers on its CPU, second half on its compute server)",
       ""},
      {{"--remote-timeout-ms"},
       true,
       "with --remote-split: the workers' deadline per call to their compute server (worker default 30000)",
       ""},
      {{"--bin-dir"}, true, "folder holding services/{loader,worker,gateway} (default: next to herd)", ""},
      {{"--host"}, true, "address to bind", "127.0.0.1"},
      {{"--no-restart"}, false, "do not restart services (loader, workers, draft workers, gateway) that exit", ""},
      {{"--draft-workers"}, true, "speculative-draft workers to start (0 = none)", "0"},
      {{"--spec-type"},
       true,
       "default speculative type of requests: none, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-cache, "
       "draft-model (requests override it)",
       ""},
      {{"--model-draft", "-md"}, true, "GGUF draft model for the draft workers (draft-model type)", ""},
      {{"--draft-target"}, true, "model the draft model drafts for (default: the first model)", ""},
      {{"--spec-ngram-size-n"}, true, "gateway default n-gram key size n", ""},
      {{"--spec-ngram-size-m"}, true, "gateway default n-gram draft size m", ""},
      {{"--spec-ngram-check-rate"}, true, "gateway default n-gram check rate", ""},
      {{"--spec-ngram-min-hits"}, true, "gateway default n-gram min hits", ""},
      {{"--draft-max"}, true, "gateway default most tokens per draft", ""},
      {{"--draft-min"}, true, "gateway default fewest tokens per draft", ""},
      {{"--draft-p-min"}, true, "gateway default draft-model p_min", ""},
      {{"--draft-timeout-ms"}, true, "gateway deadline of each draft request", ""},
      {{"--tls-cert-file", "--tls_cert_file"},
       true,
       "PEM certificate (SANs: the --host address) every service serves TLS with and presents as client",
       ""},
      {{"--tls-key-file", "--tls_key_file"}, true, "PEM key of --tls-cert-file", ""},
      {{"--tls-ca-file", "--tls_ca_file"},
       true,
       "PEM CA that signed it: services verify each other with it (mTLS). Keys come from the environment: "
       "HERD_CLUSTER_KEY (between services), HERD_API_KEYS (gateway gRPC), HERD_ADMIN_KEY (Quantize)",
       ""},
      {{"-h", "--help"}, false, "show this help", ""},
  };
  return specs;
}

// "herd: error: MSG" on stderr; the exit status of a usage error.
int UpUsageError(const std::string& msg) {
  std::fprintf(stderr, "herd: error: %s\n", msg.c_str());
  return 2;
}

// The numeric flags of `herd up`.
struct UpNumbers {
  int64_t workers = 0;
  int64_t threads = 0;
  int64_t n_ctx = 0;
  int64_t max_seqs = 0;
  int64_t drafts = 0;
  int64_t port = 0;
  int64_t http_port = 0;
};

// Parses and range-checks the numeric flags (parse errors first, in flag order).
EarlyExit ReadUpNumbers(const Args& args, UpNumbers* n) {
  auto workers = args.GetInt("--workers");
  auto threads = args.GetInt("-t");
  auto n_ctx = args.GetInt("-c");
  auto max_seqs = args.GetInt("-np");
  auto drafts = args.GetInt("--draft-workers");
  auto port = args.GetInt("--port");
  auto http_port = args.GetInt("--http-port");
  for (const absl::Status& s : {workers.status(), threads.status(), n_ctx.status(), max_seqs.status(), drafts.status(),
                                port.status(), http_port.status()}) {
    if (!s.ok()) return UpUsageError(std::string(s.message()));
  }
  if (*workers < 1 || *workers > 64) {
    std::fprintf(stderr, "herd: --workers must be in [1, 64]\n");
    return 2;
  }
  if (*drafts < 0 || *drafts > 64) {
    std::fprintf(stderr, "herd: --draft-workers must be in [0, 64]\n");
    return 2;
  }
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"--port", *port}, {"--http-port", *http_port}}) {
    if (v < 0 || v > 65535) return UpUsageError(absl::StrCat(flag, " must be in [0, 65535]"));
  }
  n->workers = *workers;
  n->threads = *threads;
  n->n_ctx = *n_ctx;
  n->max_seqs = *max_seqs;
  n->drafts = *drafts;
  n->port = *port;
  n->http_port = *http_port;
  return std::nullopt;
}

// Draft workers and the gateway's speculative defaults of requests (llama.cpp's
// spelling here, Abseil's there).
void SetUpSpecOptions(const Args& args, int64_t drafts, ClusterOptions* opts) {
  opts->draft_workers = static_cast<int>(drafts);
  opts->spec_type = args.Get("--spec-type");
  opts->model_draft = args.Get("--model-draft");
  opts->draft_target_model = args.Get("--draft-target");
  if (!opts->model_draft.empty() && opts->draft_workers == 0) opts->draft_workers = 1;
  for (const auto& [flag, gw_flag] :
       std::vector<std::pair<std::string, std::string>>{{"--spec-ngram-size-n", "--spec_ngram_size_n"},
                                                        {"--spec-ngram-size-m", "--spec_ngram_size_m"},
                                                        {"--spec-ngram-check-rate", "--spec_ngram_check_rate"},
                                                        {"--spec-ngram-min-hits", "--spec_ngram_min_hits"},
                                                        {"--draft-max", "--draft_max"},
                                                        {"--draft-min", "--draft_min"},
                                                        {"--draft-p-min", "--draft_p_min"},
                                                        {"--draft-timeout-ms", "--draft_timeout_ms"}}) {
    if (args.Has(flag) && !args.Get(flag).empty()) {
      opts->extra_gateway_flags.push_back(gw_flag + "=" + args.Get(flag));
    }
  }
}

// Security: TLS files to every service (keys through the inherited environment), and
// what `herd up` itself uses to reach the gateway.
EarlyExit SetUpSecurity(const Args& args, ClusterOptions* opts) {
  for (const auto& [flag, svc_flag] :
       std::vector<std::pair<std::string, std::string>>{{"--tls-cert-file", "--tls_cert_file"},
                                                        {"--tls-key-file", "--tls_key_file"},
                                                        {"--tls-ca-file", "--tls_ca_file"}}) {
    if (!args.Get(flag).empty()) opts->extra_flags.push_back(svc_flag + "=" + args.Get(flag));
  }
  opts->gateway_security.tls_ca_file = args.Get("--tls-ca-file");
  if (!opts->gateway_security.tls_ca_file.empty()) {
    opts->gateway_security.tls_cert_file = args.Get("--tls-cert-file");
    opts->gateway_security.tls_key_file = args.Get("--tls-key-file");
  }
  if (absl::Status v = serving::ValidateClientSecurity(opts->gateway_security); !v.ok()) {
    return UpUsageError(std::string(v.message()));
  }
  auto probe_key = serving::LoadClientKey("", "HERD_API_KEYS");
  if (!probe_key.ok()) return UpUsageError(std::string(probe_key.status().message()));
  opts->gateway_security.key = *probe_key;
  return std::nullopt;
}

// Every flag of `herd up` but -h and --models' presence into *opts; errors exit 2.
EarlyExit ParseUpOptions(const Args& args, ClusterOptions* opts) {
  UpNumbers n;
  if (EarlyExit e = ReadUpNumbers(args, &n)) return e;
  const std::string kv = args.Get("-ctk");
  if (kv != "f16" && kv != "f32") return UpUsageError(absl::StrCat("-ctk: '", kv, "' is not f16 or f32"));
  if (args.Has("-ngl")) {
    std::fprintf(stderr,
                 "herd: note: -ngl is accepted for llama.cpp compatibility; herd workers run the whole model "
                 "on their backend (CPU workers here), so there are no layers to offload (--remote-split splits "
                 "each worker's layers with a herd-compute server)\n");
  }
  opts->remote_split = args.Has("--remote-split");
  if (const std::string t = args.Get("--remote-timeout-ms"); !t.empty()) {
    auto ms = args.GetInt("--remote-timeout-ms");
    if (!ms.ok()) return UpUsageError(std::string(ms.status().message()));
    if (*ms <= 0) return UpUsageError("--remote-timeout-ms must be positive");
    if (!opts->remote_split) return UpUsageError("--remote-timeout-ms needs --remote-split");
    opts->extra_worker_flags.push_back(absl::StrCat("--remote_timeout_ms=", *ms));
  }
  opts->gateway_port = static_cast<int>(n.port);
  opts->http_port = static_cast<int>(n.http_port);
  opts->extra_worker_flags.push_back("--kv_type=" + kv);
  if (!args.Get("--chat-template").empty()) {
    opts->extra_gateway_flags.push_back("--chat_template=" + args.Get("--chat-template"));
  }
  const std::string rf = args.Get("--reasoning-format");
  if (rf != "auto" && rf != "deepseek" && rf != "none") {
    return UpUsageError(absl::StrCat("--reasoning-format: '", rf, "' is not auto, deepseek or none"));
  }
  opts->extra_gateway_flags.push_back("--reasoning_format=" + rf);
  if (const std::string p = args.Get("--pooling"); !p.empty()) {
    if (p != "mean" && p != "cls" && p != "last")
      return UpUsageError(absl::StrCat("--pooling: '", p, "' is not mean, cls or last"));
    opts->extra_worker_flags.push_back("--pooling=" + p);
  }
  SetUpSpecOptions(args, n.drafts, opts);
  opts->models_dir = args.Get("--models");
  if (!args.Get("--model").empty()) opts->models = absl::StrSplit(args.Get("--model"), ',');
  opts->workers_per_model = static_cast<int>(n.workers);
  opts->threads_per_worker = static_cast<int>(n.threads);
  opts->n_ctx = n.n_ctx;
  opts->max_sequences = static_cast<int>(n.max_seqs);
  opts->bin_dir = args.Get("--bin-dir");
  opts->host = args.Get("--host");
  opts->restart = !args.Has("--no-restart");
  return SetUpSecurity(args, opts);
}

// Starts the cluster, prints its addresses and runs until SIGINT/SIGTERM: exit 0, or 1
// when it does not start.
int RunCluster(const ClusterOptions& opts) {
  LocalCluster cluster;
  absl::Status s = cluster.Start(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "herd: error: %s\n", std::string(s.message()).c_str());
    cluster.Stop();
    return 1;
  }
  std::printf("loader   %s\n", cluster.loader_addr().c_str());
  for (Process* c : cluster.computes()) std::printf("compute  %s (%s)\n", c->grpc_addr.c_str(), c->name.c_str());
  for (Process* w : cluster.workers()) std::printf("worker   %s (%s)\n", w->grpc_addr.c_str(), w->name.c_str());
  for (Process* d : cluster.draft_workers()) std::printf("draft    %s (%s)\n", d->grpc_addr.c_str(), d->name.c_str());
  std::printf("gateway  %s (gRPC)\ngateway  %s (HTTP, OpenAI-compatible)\nmetrics  %s\n",
              cluster.gateway_addr().c_str(), cluster.gateway_http_addr().c_str(),
              cluster.gateway_metrics_addr().c_str());
  std::printf("ready; Ctrl-C stops all\n");
  std::fflush(stdout);
  cluster.WaitForSignal();
  std::fprintf(stderr, "herd up: stopping\n");
  cluster.Stop();
  return 0;
}

}  // namespace

// herd up: flags, then the cluster until a signal.
int CmdUp(int argc, char** argv) {
  const std::vector<FlagSpec>& specs = UpFlags();
  const std::string usage =
      "usage: herd up --models DIR [--workers N] [--remote-split] [--draft-workers N [--spec-type T] "
      "[--model-draft GGUF]] [flags]\n" +
      Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->Get("--models").empty()) {
    std::fprintf(stderr, "herd: up: --models DIR is required\n%s", usage.c_str());
    return 2;
  }
  ClusterOptions opts;
  if (EarlyExit e = ParseUpOptions(*args, &opts)) return *e;
  return RunCluster(opts);
}

}  // namespace herd::cli
