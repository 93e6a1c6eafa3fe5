// Helpers shared by the end-to-end tests over real processes (LocalCluster).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>

#include "proto/herd/v1/gateway.pb.h"
#include "tools/herd/cluster.h"

namespace herd::e2e {

/// Sum of a metric's samples on the Prometheus text page at http://HOST:PORT/metrics
/// (`metrics_addr` is "HOST:PORT"): every line whose name (before any '{') is `name`
/// and, when `label` is not empty, whose key contains `label` (e.g. `type="ngram"`).
/// Returns -1 when the address does not parse or the page cannot be read (2 s connect,
/// 5 s read timeouts; e.g. the process is restarting).
double MetricSum(const std::string& metrics_addr, const std::string& name, const std::string& label = "");

/// Polls `done` every 20 ms until it returns true (true) or `timeout` passes (false).
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

/// A numeric field of /proc/PID/status ("Threads"; "VmRSS" in kB); -1 when unreadable.
long ProcStatus(pid_t pid, const std::string& field);

/// The grpc.health.v1 status of the server at `addr` (HOST:PORT) as a whole: 1 SERVING,
/// 2 NOT_SERVING, 0 UNKNOWN; -1 when the call fails (unreachable, `timeout`, malformed).
int HealthStatus(const std::string& addr, std::chrono::milliseconds timeout = std::chrono::seconds(2));

/// The usual test cluster: `models` (default stories260K) from SHARED/models, one worker
/// each, output of the processes suppressed. Callers set the rest.
cli::ClusterOptions TinyClusterOptions(const std::string& shared, std::vector<std::string> models = {"stories260K"});

/// A greedy (temperature 0) request of `n` tokens for `prompt` on `model`.
v1::GenerateRequest Greedy(const std::string& model, const std::string& prompt, int n);

}  // namespace herd::e2e
