// herd up: a local cluster (loader, N workers per model, gateway) on loopback.
#include <cstdio>

#include "absl/strings/str_split.h"
#include "tools/herd/args.h"
#include "tools/herd/cluster.h"
#include "tools/herd/commands.h"

namespace herd::cli {

int CmdUp(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = {
      {{"--models"}, true, "model directory served by the loader", ""},
      {{"--model"}, true, "comma-separated model names to serve (default: every *.gguf)", ""},
      {{"--workers"}, true, "workers per model", "1"},
      {{"-t", "--threads"}, true, "compute threads per worker", "1"},
      {{"-c", "--ctx-size"}, true, "KV cells per worker (0 = worker default)", "0"},
      {{"--max-seqs"}, true, "concurrent sequences per worker (0 = worker default)", "0"},
      {{"--bin-dir"}, true, "folder holding services/{loader,worker,gateway} (default: next to herd)", ""},
      {{"--host"}, true, "address to bind", "127.0.0.1"},
      {{"--no-restart"}, false, "do not restart workers that exit", ""},
      {{"-h", "--help"}, false, "show this help", ""},
  };
  const std::string usage = "usage: herd up --models DIR [--workers N] [flags]\n" + Args::Usage(specs);
  auto args = Args::Parse(specs, argc, argv, 2);
  if (!args.ok()) {
    std::fprintf(stderr, "herd: %s\n%s", std::string(args.status().message()).c_str(), usage.c_str());
    return 2;
  }
  if (args->Has("-h")) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (args->Get("--models").empty()) {
    std::fprintf(stderr, "herd: up: --models DIR is required\n%s", usage.c_str());
    return 2;
  }
  auto workers = args->GetInt("--workers");
  auto threads = args->GetInt("-t");
  auto n_ctx = args->GetInt("-c");
  auto max_seqs = args->GetInt("--max-seqs");
  for (const absl::Status& s : {workers.status(), threads.status(), n_ctx.status(), max_seqs.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "herd: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (*workers < 1 || *workers > 64) {
    std::fprintf(stderr, "herd: --workers must be in [1, 64]\n");
    return 2;
  }
  ClusterOptions opts;
  opts.models_dir = args->Get("--models");
  if (!args->Get("--model").empty()) opts.models = absl::StrSplit(args->Get("--model"), ',');
  opts.workers_per_model = static_cast<int>(*workers);
  opts.threads_per_worker = static_cast<int>(*threads);
  opts.n_ctx = *n_ctx;
  opts.max_sequences = static_cast<int>(*max_seqs);
  opts.bin_dir = args->Get("--bin-dir");
  opts.host = args->Get("--host");
  opts.restart_workers = !args->Has("--no-restart");
  LocalCluster cluster;
  absl::Status s = cluster.Start(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "herd: error: %s\n", std::string(s.message()).c_str());
    cluster.Stop();
    return 1;
  }
  std::printf("loader   %s\n", cluster.loader_addr().c_str());
  for (Process* w : cluster.workers()) std::printf("worker   %s (%s)\n", w->grpc_addr.c_str(), w->name.c_str());
  std::printf("gateway  %s (gRPC)\ngateway  %s (HTTP, OpenAI-compatible)\nmetrics  %s\n", cluster.gateway_addr().c_str(),
              cluster.gateway_http_addr().c_str(), cluster.gateway_metrics_addr().c_str());
  std::printf("ready; Ctrl-C stops all\n");
  std::fflush(stdout);
  cluster.WaitForSignal();
  std::fprintf(stderr, "herd up: stopping\n");
  cluster.Stop();
  return 0;
}

}  // namespace herd::cli
