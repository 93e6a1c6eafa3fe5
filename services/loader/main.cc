// herd-loader: the model store service (herd.v1.Loader) over one directory of GGUF
// files, with grpc.health.v1, server reflection and Prometheus metrics.
//
//   loader --models_dir=/models --port=50052 --metrics_port=9092
//
// Prints "loader listening on HOST:PORT" and "loader metrics on HOST:PORT" on stdout
// once serving (port 0 picks a free port), so a launcher can read the ports. SIGTERM /
// SIGINT: health turns NOT_SERVING, in-flight streams get --grace_ms to finish.
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/serving/flags.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security_flags.h"
#include "libs/serving/server.h"
#include "libs/serving/service_flags.h"
#include "libs/serving/service_main.h"
#include "services/loader/loader_service.h"
#include "services/loader/quantize_backend.h"

ABSL_FLAG(std::string, models_dir, "", "Directory of *.gguf models served by this loader (required).");
ABSL_FLAG(int, port, 50052, "gRPC port (0 = pick a free port; the chosen one is printed).");
ABSL_FLAG(int, metrics_port, 9092, "Prometheus /metrics HTTP port (0 = pick a free port; -1 = disabled).");
ABSL_FLAG(int, max_chunk_bytes, 4 << 20,
          "Largest ReadTensors chunk sent, 4096..4194304; larger requested chunk sizes are cut to this.");
ABSL_FLAG(int, quantize_threads, 0, "Threads per Quantize job (0 = all hardware threads).");
ABSL_FLAG(int, max_concurrent_quantize, 1, "Quantize jobs allowed to run at once.");
ABSL_FLAG(std::string, admin_key_file, "",
          "File with the admin key(s) that Quantize (writes to the store) requires, one per line (else env "
          "HERD_ADMIN_KEY, comma-separated). Without one, Quantize takes the cluster key like every other call.");

namespace {

int Fail(const std::string& msg) { return herd::serving::StartupFailure("herd-loader", msg); }

}  // namespace

int main(int argc, char** argv) {
  herd::serving::ParseServiceFlags(argc, argv, "herd-loader",
                                   "herd-loader --models_dir=DIR [--port=N] [--metrics_port=N]: the herd model store",
                                   "services/loader/");

  auto flags = herd::serving::ReadServiceFlags(absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port));
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  const std::string host = flags->host;
  const int port = flags->port, metrics_port = flags->metrics_port;
  if (absl::GetFlag(FLAGS_models_dir).empty()) return Fail("--models_dir is required");
  if (absl::GetFlag(FLAGS_max_chunk_bytes) <= 0) return Fail("--max_chunk_bytes must be positive");
  if (flags->max_message_bytes < (4 << 20) + 4096) {
    return Fail("--max_message_bytes must admit a 4 MiB chunk (>= 4198400)");
  }

  auto security = herd::serving::InternalSecurityFromFlags();
  if (!security.ok()) return Fail(std::string(security.status().message()));
  auto admin_keys = herd::serving::ApiKeys::Load(absl::GetFlag(FLAGS_admin_key_file), "HERD_ADMIN_KEY");
  if (!admin_keys.ok()) return Fail(absl::StrCat("admin key: ", admin_keys.status().message()));
  if (admin_keys->enabled()) security->server.method_keys[herd::loader::kQuantizeMethod] = *admin_keys;

  herd::serving::Registry registry;
  herd::loader::LoaderOptions opts;
  opts.models_dir = absl::GetFlag(FLAGS_models_dir);
  opts.max_chunk_bytes = static_cast<uint32_t>(absl::GetFlag(FLAGS_max_chunk_bytes));
  opts.max_message_bytes = flags->max_message_bytes;
  opts.quantize_threads = absl::GetFlag(FLAGS_quantize_threads);
  opts.max_concurrent_quantize = absl::GetFlag(FLAGS_max_concurrent_quantize);
  opts.registry = &registry;
  auto service = herd::loader::LoaderServiceImpl::Create(opts);
  if (!service.ok()) return Fail(std::string(service.status().message()));
  // A Quantize killed mid-write leaves "<name>.gguf.tmp.<pid>.<n>" behind: remove those.
  auto stale = (*service)->store().RemoveStaleTempFiles();
  if (!stale.ok()) {
    HERD_LOG(Warning) << "loader: " << stale.status().message();
  }
  for (const std::string& f : stale.ok() ? *stale : std::vector<std::string>()) {
    HERD_LOG(Info) << "loader: removed stale temp file " << (*service)->store().root() << "/" << f;
  }

  herd::serving::ServiceMain process("loader");
  auto m =
      process.StartMetrics(&registry, herd::serving::MetricsServerOptions(&security->cluster_keys), host, metrics_port);
  if (!m.ok()) return Fail(std::string(m.status().message()));

  herd::serving::GrpcServerOptions gopts;
  gopts.address = herd::serving::ListenAddress(host, port);
  gopts.max_message_bytes = opts.max_message_bytes;
  gopts.shutdown_grace = flags->grace;
  gopts.security = std::move(security->server);
  auto server = process.StartGrpc(gopts, {service->get()}, "herd.v1.Loader");
  if (!server.ok()) return Fail(std::string(server.status().message()));

  auto models = (*service)->List();
  HERD_LOG(Info) << "loader: store " << (*service)->store().root() << ", " << (models.ok() ? models->models_size() : 0)
                 << " model(s); quantize " << (herd::loader::QuantizeAvailable() ? "available" : "not built in")
                 << "; gRPC " << herd::serving::DescribeServerSecurity(gopts.security);
  process.PrintListening(host);

  process.Wait(gopts.shutdown_grace);
  process.StopMetrics();
  HERD_LOG(Info) << "loader: stopped";
  return 0;
}
