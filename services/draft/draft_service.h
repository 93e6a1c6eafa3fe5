// herd.v1.Draft: the speculative-draft worker. Keeps one speculative session per
// sequence (session_id chosen by the gateway): the token history, built from only the
// new tokens each call carries, and the drafter of the requested type
// (libs/engine/spec). Memory is bounded: at most max_sessions sessions (the least
// recently used one is evicted to make room) and sessions idle for session_idle are
// evicted; a draft model's KV cells are shared and bounded on their own.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

#include "libs/engine/spec/session.h"
#include "libs/serving/metrics.h"
#include "proto/herd/v1/draft.grpc.pb.h"

namespace herd::draft {

/// Most requests in one ProposeBatch call.
inline constexpr int kMaxBatchRequests = 256;

struct DraftServiceOptions {
  /// Configuration for requests that leave fields unset (the --spec_* / --draft_* flags).
  engine::spec::SpecConfig defaults;
  /// Draft model and n-gram cache files shared by all sessions (may be empty).
  engine::spec::SpecResources resources;
  /// The target model the draft model was checked against ("" = not checked): a
  /// draft-model request naming another model gets FAILED_PRECONDITION.
  std::string target_model;
  /// Token ids must be below this (the target's vocabulary size; 0 = only >= 0).
  int64_t target_n_vocab = 0;
  /// Most sessions held at once; a new one evicts the least recently used.
  int max_sessions = 1024;
  /// Sessions unused this long are evicted.
  std::chrono::milliseconds session_idle{std::chrono::minutes(5)};
  /// Most history tokens per session (a call that would exceed it is refused).
  int64_t max_history = 1 << 20;
  /// Metrics (herd_draft_*); nullptr = none.
  serving::Registry* registry = nullptr;
  /// Run a background thread that evicts idle sessions (else only calls do).
  bool reaper = true;
};

class DraftServiceImpl final : public herd::v1::Draft::Service {
 public:
  explicit DraftServiceImpl(DraftServiceOptions opts);
  ~DraftServiceImpl() override;

  /// Appends the request's new tokens to the session (created on first use), records
  /// n_accepted for the previous draft, and returns the next draft with the session's
  /// cumulative statistics and history length. See draft.proto for `start` (lost-call
  /// recovery). Errors: INVALID_ARGUMENT naming the field (session_id, new_tokens[i],
  /// start, temperature, config.<field>); FAILED_PRECONDITION when the type cannot run
  /// here; RESOURCE_EXHAUSTED past max_history; CANCELLED when the caller gave up.
  grpc::Status Propose(grpc::ServerContext* ctx, const herd::v1::DraftRequest* req,
                       herd::v1::DraftResponse* resp) override;
  /// Propose for each of req->requests (at most kMaxBatchRequests): items[i] answers
  /// requests[i] with its own code / error (fields named requests[i].<field>), the
  /// others still served; all draft-model drafts are made in one DraftModel::DraftBatch.
  /// A session repeated in one call gets INVALID_ARGUMENT in the repeat's item. Errors
  /// of the whole call: INVALID_ARGUMENT ("requests: ...") past the bound; CANCELLED.
  grpc::Status ProposeBatch(grpc::ServerContext* ctx, const herd::v1::DraftBatchRequest* req,
                            herd::v1::DraftBatchResponse* resp) override;
  /// Forgets a session (unknown ids are fine).
  grpc::Status EndSession(grpc::ServerContext* ctx, const herd::v1::EndSessionRequest* req,
                          herd::v1::EndSessionResponse* resp) override;

  /// Propose without gRPC (the same checks and effects). A draft model stops drafting
  /// in time to answer before `deadline` (the caller's; a shorter draft, not none).
  absl::Status DoPropose(const herd::v1::DraftRequest& req, herd::v1::DraftResponse* resp,
                         std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max());
  /// ProposeBatch without gRPC (the same checks and effects; no metrics of errors).
  absl::Status DoProposeBatch(
      const herd::v1::DraftBatchRequest& req, herd::v1::DraftBatchResponse* resp,
      std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max());
  /// Evicts sessions idle longer than session_idle; returns how many.
  size_t EvictIdle();

  size_t n_sessions() const;
  int64_t n_evictions() const { return evictions_.load(); }
  const DraftServiceOptions& options() const { return opts_; }

 private:
  struct Session {
    std::string id;
    bool busy = false;  // a call is using it (guarded by claim_mu_): one call at a time
    std::unique_ptr<engine::spec::SpecSession> spec;
    engine::spec::SpecStats reported;  // already added to the metrics counters
  };
  struct Entry {
    std::shared_ptr<Session> session;
    std::chrono::steady_clock::time_point last_use;
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recent)
  };

  // One request of a Propose / ProposeBatch call in progress.
  struct Item {
    const herd::v1::DraftRequest* req = nullptr;
    herd::v1::DraftResponse* resp = nullptr;
    std::string prefix;  // "" or "requests[i]." (error messages)
    absl::Status status;
    engine::spec::SpecConfig config;
    std::shared_ptr<Session> session;
    bool created = false;
    bool answered = false;  // resp is complete (resync) or status is an error
    engine::spec::DraftParams params;
  };

  // Checks the request's fields and resolves its configuration (errors name the field).
  absl::Status Validate(const herd::v1::DraftRequest& req, const std::string& prefix,
                        engine::spec::SpecConfig* config) const;
  // Runs items whose status is OK: sessions, history bookkeeping, drafting (the
  // draft-model ones in one batch), responses. Sets each item's status.
  // Draft-model drafts stop in time to answer by `deadline`.
  void RunItems(std::vector<Item>* items, std::chrono::system_clock::time_point deadline);
  // With the session locked: reconfiguration, lost-call recovery, n_accepted, new
  // tokens; then either answers (resync) or prepares the draft (params).
  absl::Status Prepare(Item* it);
  // Records the drafter's proposal and fills the response.
  void Finish(Item* it, engine::spec::DraftResult proposal);
  // Waits until none of `sessions` (distinct) is busy, then marks them all busy at once
  // (all or nothing: concurrent calls cannot deadlock on each other's sessions, and at
  // most one mutex is held). ReleaseSessions clears the marks.
  void ClaimSessions(const std::vector<Session*>& sessions);
  void ReleaseSessions(const std::vector<Session*>& sessions);

  // The session for `id`, created with `config` if absent (evicting as needed).
  absl::StatusOr<std::shared_ptr<Session>> GetOrCreate(const std::string& id, const engine::spec::SpecConfig& config,
                                                       uint32_t seed, bool* created);
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it,
                   std::vector<std::shared_ptr<Session>>* graveyard);
  void ReportStats(Session* s);
  void ReaperLoop();

  DraftServiceOptions opts_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> sessions_;
  std::list<std::string> lru_;
  std::atomic<int64_t> evictions_{0};

  std::mutex claim_mu_;  // every Session::busy
  std::condition_variable claim_cv_;

  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::thread reaper_;

  // Metrics (null when there is no registry).
  serving::MetricFamily* m_calls_ = nullptr;
  serving::MetricFamily* m_gen_drafts_ = nullptr;
  serving::MetricFamily* m_acc_drafts_ = nullptr;
  serving::MetricFamily* m_gen_tokens_ = nullptr;
  serving::MetricFamily* m_acc_tokens_ = nullptr;
  serving::MetricFamily* m_sessions_ = nullptr;
  serving::MetricFamily* m_evictions_ = nullptr;
  serving::MetricFamily* m_resyncs_ = nullptr;
  serving::MetricFamily* m_errors_ = nullptr;
  serving::MetricFamily* m_latency_ = nullptr;
};

}  // namespace herd::draft
