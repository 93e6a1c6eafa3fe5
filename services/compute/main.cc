// herd-compute: the remote compute server (herd.v1.RemoteCompute, proto/herd/v1/remote.proto)
// that a worker on another host uses as its `remote` backend, so that a model too large
// for one host is split by layers across hosts (`herd-worker --backend
// cpu,remote://HOST:50061`). It computes on this host's CPU (threads --threads) with at
// most --max_buffer_bytes of buffers; every message is validated (libs/backend/remote/
// remote_server.h). Like every internal service it requires the cluster key
// (--cluster_key_file / HERD_CLUSTER_KEY) and serves TLS / mTLS with --tls_* flags:
// never expose it without them.
//
//   compute --port=50061 --metrics_port=9096 --threads=8
//
// Prints "compute listening on HOST:PORT" once serving (port 0 picks a free port).
#include <random>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/remote/remote_server.h"
#include "libs/base/log.h"
#include "libs/serving/flags.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security_flags.h"
#include "libs/serving/server.h"
#include "libs/serving/service_flags.h"
#include "libs/serving/service_main.h"

ABSL_FLAG(int, port, 50061, "gRPC port (0 = pick a free port; the chosen one is printed).");
ABSL_FLAG(int, metrics_port, 9096, "Prometheus /metrics HTTP port (0 = pick a free port; -1 = disabled).");
ABSL_FLAG(int, threads, 0, "CPU threads computing graphs (0 = all hardware threads).");
ABSL_FLAG(int64_t, max_buffer_bytes, int64_t{16} << 30,
          "Bytes of buffers (weights, KV cache, activations) held at once over every client.");
ABSL_FLAG(int, client_idle_s, 60,
          "A client (worker) not heard from for this long has its buffers released (a worker probes once a "
          "second; one that died or restarted frees its half of the model this way).");

namespace {
int Fail(const std::string& msg) { return herd::serving::StartupFailure("herd-compute", msg); }
}  // namespace

int main(int argc, char** argv) {
  herd::serving::ParseServiceFlags(argc, argv, "herd-compute",
                                   "herd-compute [--port=N] [--threads=N] [--max_buffer_bytes=N]: the remote compute "
                                   "server of herd's remote backend",
                                   "services/compute/");
  auto flags = herd::serving::ReadServiceFlags(absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port));
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  if (absl::GetFlag(FLAGS_max_buffer_bytes) <= 0) return Fail("--max_buffer_bytes must be positive");
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return Fail("--threads must be >= 0");
  if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto security = herd::serving::InternalSecurityFromFlags();
  if (!security.ok()) return Fail(std::string(security.status().message()));

  herd::remote::ServerOptions opts;
  opts.max_buffer_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_buffer_bytes));
  if (absl::GetFlag(FLAGS_client_idle_s) < 1) return Fail("--client_idle_s must be >= 1");
  opts.client_idle = std::chrono::seconds(absl::GetFlag(FLAGS_client_idle_s));
  std::random_device rd;
  const uint64_t instance = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 1;
  herd::remote::ComputeServer state(std::make_unique<herd::CpuBackend>(threads), opts, instance);
  herd::serving::Registry registry;
  herd::serving::MetricFamily* calls =
      registry.Counter("herd_compute_calls_total", "Calls answered, by method and gRPC code.", {"method", "code"});
  herd::serving::MetricFamily* bytes = registry.Gauge("herd_compute_buffer_bytes", "Bytes of buffers held.");
  herd::serving::MetricFamily* buffers = registry.Gauge("herd_compute_buffers", "Buffers held.");
  herd::remote::RemoteComputeService service(&state, [&](const char* method, const absl::Status& s) {
    calls->Add(1, {method, absl::StatusCodeToString(s.code())});
    bytes->Set(static_cast<double>(state.bytes_allocated()));
    buffers->Set(static_cast<double>(state.n_buffers()));
  });
  herd::serving::ServiceMain process("compute");
  auto m = process.StartMetrics(&registry, herd::serving::MetricsServerOptions(&security->cluster_keys), flags->host,
                                flags->metrics_port);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  herd::serving::GrpcServerOptions gopts = herd::serving::GrpcOptions(*flags, std::move(security->server));
  auto server = process.StartGrpc(gopts, {&service}, "herd.v1.RemoteCompute");
  if (!server.ok()) return Fail(std::string(server.status().message()));
  HERD_LOG(Info) << "compute: " << threads << " CPU thread(s), up to " << opts.max_buffer_bytes
                 << " buffer bytes; gRPC " << herd::serving::DescribeServerSecurity(gopts.security);
  process.PrintListening(flags->host);
  process.Wait(gopts.shutdown_grace);
  process.StopMetrics();
  HERD_LOG(Info) << "compute: stopped";
  return 0;
}
