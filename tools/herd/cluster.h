// A local herd cluster of processes on loopback: one loader, N workers per model,
// optionally M speculative-draft workers, one gateway (the layout of
// docs/ARCHITECTURE.md, on one machine). Used by `herd up`, the main job and the
// end-to-end tests.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/serving/security.h"

namespace herd::cli {

struct ClusterOptions {
  std::string models_dir;           // served by the loader
  std::vector<std::string> models;  // model names; empty = every *.gguf in models_dir
  int workers_per_model = 1;
  int threads_per_worker = 1;
  int64_t n_ctx = 0;      // worker KV cells (0 = worker default)
  int max_sequences = 0;  // 0 = worker default
  std::string bin_dir;    // folder with services/{loader,worker,gateway}/..; "" = find
  std::string host = "127.0.0.1";
  int gateway_port = 0;  // gateway gRPC port (0 = a free port)
  int http_port = 0;     // gateway HTTP port (0 = a free port)
  /// Supervision: restart any process (loader, workers, draft workers, gateway) that
  /// exits while the cluster runs, on the same ports, forever, after a delay that starts
  /// at restart_backoff_initial, doubles per consecutive failure up to
  /// restart_backoff_max, and starts over once a process stayed up restart_backoff_reset.
  bool restart = true;
  std::chrono::milliseconds restart_backoff_initial{100};
  std::chrono::milliseconds restart_backoff_max{5000};
  std::chrono::milliseconds restart_backoff_reset{10000};
  std::vector<std::string> extra_worker_flags;
  /// Compute backend of each worker of a model (--backend): worker i gets
  /// worker_backends[i % size]; empty = every worker on the CPU. E.g. {"cpu", "vulkan"}
  /// with workers_per_model = 2 serves each model from a CPU and a Vulkan worker.
  std::vector<std::string> worker_backends;
  /// Two-host layer split on loopback: start one herd-compute process per worker
  /// (services/compute/compute, --threads threads_per_worker, on a free port, supervised
  /// like the rest: restarted on the same port) and give worker i `--backend
  /// cpu,remote://HOST:PORT` of compute i, its layers split half/half (extra_worker_flags
  /// may add --tensor_split or --remote_timeout_ms). Exclusive with worker_backends
  /// (Start refuses both: INVALID_ARGUMENT).
  bool remote_split = false;
  std::vector<std::string> extra_compute_flags;
  std::vector<std::string> extra_gateway_flags;
  /// Appended to every service's command line (loader, workers, draft workers, gateway),
  /// e.g. --tls_cert_file=... --tls_key_file=... --tls_ca_file=... Keys travel in the
  /// environment, which the services inherit (HERD_CLUSTER_KEY, HERD_API_KEYS,
  /// HERD_ADMIN_KEY).
  std::vector<std::string> extra_flags;
  /// How the readiness probe reaches the gateway (TLS CA, client certificate, API key).
  serving::ClientSecurity gateway_security;
  bool quiet = false;  // do not forward the services' logs to stderr

  // Speculative decoding.
  /// Draft workers (services/draft/draft) to start; the gateway gets them as
  /// --draft_workers. 0 = none.
  int draft_workers = 0;
  /// Default drafter type: the gateway's --spec_type (requests override it), also the
  /// draft workers' --spec_type (not draft-model without `model_draft`). "" = none at
  /// the gateway (requests must ask), the draft workers' own default.
  std::string spec_type;
  /// GGUF path of a draft model for the draft workers (--model_draft); its
  /// compatibility is checked against `draft_target_model`'s vocabulary, fetched from
  /// the loader. "" = n-gram drafters only.
  std::string model_draft;
  /// The target model of the draft model ("" = the first model served).
  std::string draft_target_model;
  std::vector<std::string> extra_draft_flags;
};

/// What a child printed on its output so far: its addresses ("listening on", "http on",
/// "metrics on"). Written by the reader thread of one Spawn, read by Launch, under `mu`.
struct Announcement {
  std::mutex mu;
  std::condition_variable cv;
  std::string grpc_addr, http_addr, metrics_addr;
  bool closed = false;  // the child's output reached EOF
};

/// One child process and the addresses it printed. The address fields are written only by
/// LocalCluster::Launch (on the thread that calls Start/Restart*), never by reader threads.
struct Process {
  std::string name;  // "loader", "worker-stories260K-0", "gateway"
  std::vector<std::string> argv;
  pid_t pid = -1;
  std::string grpc_addr, http_addr, metrics_addr;
  std::atomic<bool> expected_exit{false};
  // Supervision state (LocalCluster::Supervise, under LocalCluster::mu_).
  std::chrono::steady_clock::time_point started{};     // last start
  std::chrono::steady_clock::time_point restart_at{};  // next start while restart_pending
  std::chrono::milliseconds backoff{0};                // delay before the next restart
  bool restart_pending = false;
  int restarts = 0;  // restarts so far
};

class LocalCluster {
 public:
  ~LocalCluster();
  /// Starts loader, workers and gateway and waits until each printed its address
  /// (and the gateway sees every worker). Errors: NOT_FOUND for missing binaries or
  /// models; UNAVAILABLE when a process exits or does not come up within `timeout`.
  absl::Status Start(const ClusterOptions& opts, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Sends SIGTERM to every process (gateway first, loader last) and waits up to
  /// `grace`, then SIGKILL.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));

  std::string gateway_addr() const;
  std::string gateway_http_addr() const;
  std::string gateway_metrics_addr() const;
  std::string loader_addr() const;
  /// Every process: loader, compute servers, workers, draft workers, gateway.
  std::vector<Process*> processes();
  /// Workers in start order.
  std::vector<Process*> workers();
  /// Draft workers in start order.
  std::vector<Process*> draft_workers();
  /// Compute servers (remote_split) in start order: compute i serves worker i.
  std::vector<Process*> computes();
  /// The current pid of the process named `name` (-1 when unknown or not running; it
  /// changes when the supervisor restarts it). Read under the supervisor's lock.
  pid_t Pid(const std::string& name) const;
  /// Sends `sig` to the process named `name` (e.g. SIGSTOP / SIGCONT to a compute server
  /// to cut and restore its link, SIGKILL to crash it: with `restart` the supervisor
  /// starts it again on the same ports). Errors: NOT_FOUND for no such process;
  /// FAILED_PRECONDITION when it is not running.
  absl::Status Signal(const std::string& name, int sig);
  /// Kills the loader with SIGKILL, as a crash would. With `restart` the supervisor starts
  /// it again on the same ports. Errors: FAILED_PRECONDITION when it is not running.
  absl::Status KillLoader();
  /// Kills the gateway with SIGKILL (restarted on the same ports with `restart`).
  absl::Status KillGateway();
  /// Restarts so far of the process named `name` ("loader", "gateway", ...); -1 if unknown.
  int Restarts(const std::string& name) const;
  /// Kills worker i with SIGKILL, as a crash would. With `restart` the supervisor
  /// starts it again on the same port (the gateway's worker list stays valid).
  absl::Status KillWorker(size_t i);
  /// Sends worker i SIGTERM, as Kubernetes does in a rolling update: the worker reports
  /// draining, finishes its open sessions within its --grace_ms and exits; with `restart`
  /// the supervisor starts it again on the same port. Returns once the signal is sent.
  /// Errors: OUT_OF_RANGE for no worker i; FAILED_PRECONDITION when it is not running.
  absl::Status TerminateWorker(size_t i);
  /// Starts worker i again on its previous port (after KillWorker with restarts off).
  absl::Status RestartWorker(size_t i, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Kills draft worker i with SIGKILL (restarted on the same port with
  /// `restart`, like a worker).
  absl::Status KillDraftWorker(size_t i);
  /// Starts draft worker i again on its previous port (after KillDraftWorker with
  /// restarts off).
  absl::Status RestartDraftWorker(size_t i, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Blocks until SIGINT/SIGTERM; the supervisor thread restarts exited processes meanwhile.
  void WaitForSignal();

 private:
  absl::StatusOr<std::string> FindBinary(const std::string& rel) const;
  /// Forks and execs p->argv; a reader thread (which owns only copies and the shared
  /// announcement, never `p`) parses the printed addresses into `*announced` and forwards
  /// the output. Errors: INTERNAL (pipe, fork).
  absl::Status Spawn(Process* p, std::shared_ptr<Announcement>* announced);
  /// Spawn, then waits until the process printed its gRPC address (UNAVAILABLE when it
  /// exits first or `timeout` passes).
  absl::Status Launch(Process* p, std::chrono::milliseconds timeout);
  /// Replaces "--port=0", "--http_port=0" and "--metrics_port=0" in p->argv by the
  /// ports it printed, so that restarts keep its addresses.
  static void PinPorts(Process* p);
  static absl::StatusOr<std::vector<std::string>> ModelsIn(const std::string& dir);
  absl::Status WaitForGateway(int n_models, std::chrono::milliseconds timeout);
  void Supervise();
  absl::Status Kill(Process* p);
  absl::StatusOr<Process*> ProcAt(size_t first, size_t count, size_t i, const char* what);

  ClusterOptions opts_;
  /// loader, computes..., workers..., draft workers..., gateway
  std::vector<std::unique_ptr<Process>> procs_;
  size_t n_computes_ = 0;
  size_t n_workers_ = 0;
  size_t n_drafts_ = 0;
  std::vector<int> worker_ports_;
  std::thread supervisor_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
};

}  // namespace herd::cli
