// Gateway side of herd.v1.Draft: a pool of draft workers and one DraftSession per
// sequence that keeps the protocol's bookkeeping (only new tokens cross the wire, the
// `start` / history_len resynchronization, n_accepted of the last draft used), asks
// with a deadline, and turns every failure into an empty draft: a late, failing or
// absent draft worker costs speed, never correctness, and never ends a stream.
//
// Worker choice: a session sticks to one worker (hash of its id over the workers not
// marked down); a worker whose call fails is marked down for `down_for` (no calls go to
// it meanwhile) and the session moves to the next one, which is sent the whole history
// on its next call. A worker that refuses the session's configuration
// (FAILED_PRECONDITION, e.g. its draft model was checked against another target model)
// is skipped by that session only. The worker list is fixed (`addresses`) or resolved
// from DNS (`dns`, re-resolved every `dns_interval`), or both.
//
// Batching: DraftClient::ProposeBatch asks for many sessions' drafts with one
// ProposeBatch RPC per worker (in flight concurrently), e.g. once per target-worker
// iteration; DraftSession::Propose is the same path for one session.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/security.h"
#include "proto/herd/v1/draft.grpc.pb.h"

namespace herd::draft {

struct DraftClientOptions {
  /// Draft workers ("host:port"). With no addresses and no dns every draft is empty.
  std::vector<std::string> addresses;
  /// "NAME:PORT": every address NAME resolves to (getaddrinfo) is a draft worker too
  /// (e.g. a Kubernetes headless service); re-resolved every dns_interval.
  std::string dns;
  std::chrono::milliseconds dns_interval{5000};
  /// Deadline of each Propose call; a later answer is an empty draft.
  std::chrono::milliseconds deadline{100};
  /// A worker whose call failed is skipped this long.
  std::chrono::milliseconds down_for{2000};
  /// TLS and the cluster key for the draft workers' channels (default plaintext).
  serving::ClientSecurity security;
};

/// One draft as the gateway uses it.
struct DraftReply {
  std::vector<int32_t> tokens;
  /// Empty for deterministic drafts; else one DraftTokenProbs per token (draft-model
  /// drafts sampled at temperature > 0), for rejection sampling on the target worker.
  std::vector<herd::v1::DraftTokenProbs> probs;
  /// Why the draft is empty when it is: "" (the drafter had nothing), or the error /
  /// "deadline" / "no draft worker" / "draft worker down".
  std::string error;
};

class DraftClient;

/// One sequence's drafting. Not thread-safe (one generation loop drives it).
class DraftSession {
 public:
  ~DraftSession();  // ends the session on its worker (in the background)

  /// Adds tokens the target produced: the prompt first, then after each verification
  /// the accepted draft tokens followed by the target's own token.
  void Append(const std::vector<int32_t>& tokens);
  /// The target accepted `n_accepted` tokens of the last draft Propose returned (call
  /// it only when that draft was sent to the target; reported on the next Propose).
  void Accepted(int32_t n_accepted);
  /// Asks for a draft of at most `n_max` tokens (0 = the config's draft_max) to follow
  /// the history. Never fails: errors and missed deadlines give an empty draft.
  /// DraftClient::ProposeBatch of this session alone.
  DraftReply Propose(int32_t n_max);

  /// llama.cpp statistics as seen by the verifier: #calls = Propose calls, #gen
  /// drafts / tokens = non-empty drafts returned, #acc = what Accepted() reported.
  const herd::v1::SpeculativeStats& stats() const { return stats_; }
  /// The worker now serving the session ("" = none).
  std::string worker() const;
  int64_t history_size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  friend class DraftClient;
  struct Worker;
  DraftSession(DraftClient* client, std::string id, std::string model, herd::v1::SpeculativeConfig config,
               float temperature, uint32_t seed);
  void MoveTo(std::shared_ptr<Worker> next);
  // The start of a Propose: counts the call, takes the pending n_accepted, picks a
  // worker. False when there is nothing to ask (out->error says why).
  bool BeginPropose(DraftReply* out, int32_t* n_accepted);
  // The request for the worker: the tokens it lacks, from synced_.
  herd::v1::DraftRequest BuildRequest(int32_t n_max, int32_t n_accepted) const;
  // Handles the worker's answer `s` / `resp` (failures: mark-down, moves, disabling).
  // True when the worker lacks tokens and the request must be sent again now.
  bool HandleReply(const grpc::Status& s, const herd::v1::DraftResponse& resp, DraftReply* out);

  DraftClient* client_;
  std::string id_, model_;
  herd::v1::SpeculativeConfig config_;
  float temperature_;
  uint32_t seed_;
  std::vector<int32_t> tokens_;
  std::shared_ptr<Worker> worker_;  // null = not chosen yet
  std::set<std::string> refused_;   // workers that refused this session's configuration
  std::string disabled_;            // non-empty: the configuration is invalid; never ask again
  int64_t synced_ = 0;              // history tokens the worker has (its last history_len)
  int32_t pending_accepted_ = -1;
  int32_t last_draft_ = 0;  // size of the last draft returned (awaiting Accepted)
  herd::v1::SpeculativeStats stats_;
};

/// The pool of draft workers, shared by all sequences. Thread-safe.
class DraftClient {
 public:
  /// Resolves `dns` once (a failure is logged; the next resolution retries).
  explicit DraftClient(DraftClientOptions opts);
  ~DraftClient();

  /// Propose for each session (sessions[i] with cap n_max[i]; a missing n_max is 0):
  /// the same bookkeeping, statistics and failure handling as DraftSession::Propose,
  /// but one ProposeBatch RPC per draft worker (split in calls of at most 256) carries
  /// all its sessions, the calls to different workers in flight at once, all of them
  /// (a resend after a resync included) under one deadline (options().deadline).
  /// Result i is sessions[i]'s draft; never fails (errors are empty drafts with
  /// `error` set). A session listed twice gets, the second time, an empty draft with an
  /// error and no effect (a null session: "no session"). A worker that answers UNIMPLEMENTED (an older draft worker
  /// without ProposeBatch) is asked with one Propose per session instead, from then on.
  /// Sessions must be this client's; not thread-safe per session.
  /// `deadline` > 0 replaces options().deadline for this call.
  std::vector<DraftReply> ProposeBatch(const std::vector<DraftSession*>& sessions, const std::vector<int32_t>& n_max,
                                       std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
  /// A session for one sequence. `config` is the request's speculative configuration
  /// (unset fields: the worker's defaults); `temperature` > 0 asks a draft model for
  /// sampled drafts with distributions.
  std::unique_ptr<DraftSession> NewSession(const std::string& session_id, const std::string& model,
                                           const herd::v1::SpeculativeConfig& config, float temperature = 0.0f,
                                           uint32_t seed = 0);
  /// Draft workers known now (fixed and resolved).
  size_t n_workers() const;
  /// Their addresses.
  std::vector<std::string> addresses() const;
  const DraftClientOptions& options() const { return opts_; }
  /// Resolves `dns` now (tests; the background thread does it every dns_interval).
  void RefreshDns();

 private:
  friend class DraftSession;
  using Worker = DraftSession::Worker;
  // A worker for `session_id` (hash order over the workers), skipping `avoid`, those in
  // `refused` and those marked down; null when there is none.
  std::shared_ptr<Worker> Pick(const std::string& session_id, const Worker* avoid,
                               const std::set<std::string>& refused);
  bool IsDown(const Worker& w) const;
  void MarkDown(Worker* w);
  void EndLater(std::shared_ptr<Worker> w, const std::string& session_id);
  // One round of ProposeBatch: sends the requests of sessions[i] for i in `ask`, one
  // call per worker, handles the answers into `replies`; `ask` becomes the sessions to
  // resend (resync).
  void SendBatches(const std::vector<DraftSession*>& sessions, const std::vector<int32_t>& n_max,
                   const std::vector<int32_t>& n_accepted, std::vector<size_t>* ask, std::vector<DraftReply>* replies,
                   std::chrono::system_clock::time_point deadline);
  void BackgroundLoop();
  std::shared_ptr<Worker> MakeWorker(const std::string& address) const;

  DraftClientOptions opts_;
  mutable std::mutex mu_;  // workers_, each worker's down_until
  std::vector<std::shared_ptr<Worker>> workers_;
  std::mutex end_mu_;
  std::condition_variable end_cv_;
  std::deque<std::pair<std::shared_ptr<Worker>, std::string>> to_end_;
  bool stopping_ = false;
  std::thread background_;  // EndSession calls, DNS refresh
};

/// One draft worker (shared by the sessions that use it).
struct DraftSession::Worker {
  std::string address;
  std::unique_ptr<herd::v1::Draft::Stub> stub;
  std::chrono::steady_clock::time_point down_until{};  // guarded by DraftClient::mu_
  /// The worker answered ProposeBatch with UNIMPLEMENTED (an older draft worker): its
  /// sessions are asked with one Propose call each.
  std::atomic<bool> no_batch{false};
};

}  // namespace herd::draft
