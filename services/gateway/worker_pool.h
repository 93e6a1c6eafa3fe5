// The gateway's view of the compute workers: discovery (a static list or a DNS name
// resolving to many addresses, as a Kubernetes headless service does), liveness from
// periodic Info calls, and routing by model: least-loaded or prefix-aware (routing.h), from
// each worker's prefix-cache digest (WorkerInfo.prefix_block_hashes, fetched only when its
// version changes) plus the prompts this gateway routed to it since that digest.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/grpcpp.h"

#include "libs/clients/address.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security.h"
#include "proto/herd/v1/worker.grpc.pb.h"
#include "services/gateway/routing.h"

namespace herd::gateway {

struct WorkerPoolOptions {
  /// Static worker addresses ("host:port").
  std::vector<std::string> addresses;
  /// "NAME:PORT": every address NAME resolves to (getaddrinfo) is a worker; re-resolved
  /// every dns_interval. May be combined with `addresses`.
  std::string dns;
  absl::Duration poll_interval = absl::Milliseconds(500);
  /// Deadline of each Info call.
  absl::Duration info_timeout = absl::Milliseconds(1000);
  absl::Duration dns_interval = absl::Seconds(5);
  /// gRPC message size limit of the worker channels.
  int max_message_bytes = 64 << 20;
  /// TLS and the cluster key for the worker channels (default plaintext).
  serving::ClientSecurity security;
  /// Optional gauge set to the number of live workers after every poll.
  serving::MetricFamily* live_gauge = nullptr;
  /// --route_policy, --route_max_extra_load and --route_prefix_tokens_per_load (routing.h
  /// ChooseWorker).
  RoutePolicy route_policy = RoutePolicy::kPrefix;
  int64_t route_max_extra_load = 8;
  int64_t route_prefix_tokens_per_load = kRoutePrefixTokensPerLoad;
  /// Optional counters: decisions by reason (label "reason"), and prompt tokens the chosen
  /// worker's prefix cache was expected to supply.
  serving::MetricFamily* route_decisions = nullptr;
  serving::MetricFamily* prefix_tokens_expected = nullptr;
  /// Optional counter of sessions opened, by worker address (label "worker").
  serving::MetricFamily* sessions_by_worker = nullptr;
};

/// What the pool knows about one worker.
struct WorkerSnapshot {
  std::string address;
  bool live = false;
  bool has_info = false;  // Info succeeded at least once
  v1::WorkerInfo info;    // the last successful Info
  int sessions = 0;       // sessions the gateway has open on it now
  std::string last_error;
  int64_t prefix_blocks = 0;  // block hashes in its last prefix-cache digest
};

/// --workers: splits "h1:p1,h2:p2" (clients::ParseAddressList). Errors: INVALID_ARGUMENT
/// "workers: 'ITEM' is not HOST:PORT".
inline absl::StatusOr<std::vector<std::string>> ParseWorkerList(const std::string& s) {
  return clients::ParseAddressList(s, "workers");
}

/// --workers_dns: resolves "NAME:PORT" to "ip:port" / "[ipv6]:port" strings, deduplicated
/// and sorted (clients::ResolveAddresses). Errors: INVALID_ARGUMENT for a malformed
/// target, UNAVAILABLE when resolution fails (both prefixed "workers_dns: ").
inline absl::StatusOr<std::vector<std::string>> ResolveDns(const std::string& target) {
  return clients::ResolveAddresses(target, "workers_dns");
}

class WorkerPool {
 public:
  struct Entry;

  /// A worker chosen for one session. While it lives, the worker counts one more
  /// session in the pool's load estimate.
  class Lease {
   public:
    Lease(std::shared_ptr<Entry> e, WorkerPool* pool);
    ~Lease();
    Lease(Lease&&) = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const std::string& address() const;
    v1::Worker::Stub* stub() const;
    /// Info at the time of the choice (without the prefix digest).
    const v1::WorkerInfo& info() const { return info_; }
    /// Prompt tokens the worker's prefix cache was expected to supply (0 when unknown).
    int64_t expected_prefix_tokens() const { return expected_prefix_tokens_; }

   private:
    std::shared_ptr<Entry> e_;
    WorkerPool* pool_;
    v1::WorkerInfo info_;
    int64_t expected_prefix_tokens_ = 0;
    friend class WorkerPool;
  };

  explicit WorkerPool(WorkerPoolOptions opts);
  ~WorkerPool();

  /// Resolves the workers, polls them once (blocking up to info_timeout) and starts the
  /// background poller. Errors: INVALID_ARGUMENT when neither addresses nor dns is set.
  absl::Status Start();
  /// Stops the poller (idempotent).
  void Stop();
  /// One discovery + poll round, synchronously (also used by tests).
  void PollNow();

  enum class ModelState { kUnknown, kNoLiveWorker, kLive };
  /// kUnknown: no worker of the pool ever reported the model; kNoLiveWorker: known,
  /// but no worker serving it is live.
  ModelState GetModelState(const std::string& model) const;

  /// Live workers serving `model`.
  std::vector<WorkerSnapshot> LiveWorkersFor(const std::string& model) const;

  /// Picks a live worker serving `model` among those whose n_ctx_seq >= min_ctx_seq,
  /// skipping `exclude`, by the pool's route_policy (routing.h ChooseWorker): load is
  /// active + queued sequences at its last Info plus sessions opened since; a worker's
  /// prefix for `prompt` is the leading blocks of prompt[0, size - 1) (the scheduler
  /// recomputes at least the last token) found in its last digest or among the prompts
  /// routed to it since. Records the chosen prompt's blocks as routed to that worker.
  /// Errors: UNAVAILABLE naming the model when there is none.
  absl::StatusOr<Lease> Acquire(const std::string& model, int64_t min_ctx_seq,
                                const std::set<std::string>& exclude = {}, absl::Span<const int32_t> prompt = {});

  /// Marks a worker not live after a failed call (until its next successful Info).
  void ReportFailure(const std::string& address, const std::string& error);

  std::vector<WorkerSnapshot> Snapshot() const;
  /// Whether every live worker serving `model` drafts `type` itself
  /// (WorkerInfo.spec_types); false when none is live.
  bool AllLiveWorkersRunSpec(const std::string& model, const std::string& type) const;
  int live_count() const;

 private:
  void Loop();
  void Discover();
  std::shared_ptr<Entry> MakeEntry(const std::string& address) const;
  void UpdateGauge();

  WorkerPoolOptions opts_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;  // by address
  std::set<std::string> known_models_;
  absl::Time next_dns_ = absl::InfinitePast();
  std::mutex poll_mu_;  // one poll round at a time
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace herd::gateway
