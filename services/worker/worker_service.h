// herd.v1.Worker over an engine::Scheduler (continuous batching): Info, one
// bidirectional Session stream per sequence, and unary Embed.
//
// Session protocol (proto/herd/v1/worker.proto):
//   client Start -> worker Started{n_prompt, queue_ms} once the sequence is admitted
//   client Step{n_steps | draft} -> worker one StepResult per forward pass
//   client Cancel, half-close (WritesDone) or call cancellation -> the sequence and its
//   KV cells are freed at once (the scheduler's next iteration at the latest); Cancel
//   and half-close end the call with OK, cancellation with CANCELLED.
// Any invalid request ends the call with INVALID_ARGUMENT naming the field
// ("start.prompt[3]", "start.sampling.top_p", "step.draft[0]", "step.draft_probs[1]", ...); Step before Start
// and Step after context_full get FAILED_PRECONDITION, a refused admission
// RESOURCE_EXHAUSTED, a draining worker UNAVAILABLE. Other sessions are unaffected.
//
// The service uses gRPC's callback API: no thread is held per stream; results are
// written as the scheduler thread produces them, one write in flight per stream.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/clients/draft_client.h"
#include "libs/clients/draft_source.h"
#include "libs/engine/scheduler.h"
#include "libs/engine/spec/session.h"
#include "libs/serving/grpc_status.h"
#include "libs/serving/metrics.h"
#include "proto/herd/v1/worker.grpc.pb.h"

namespace herd::worker {

struct WorkerServiceOptions {
  std::string model_name;       // WorkerInfo.model
  std::string architecture;     // WorkerInfo.architecture (general.architecture)
  std::string backend = "cpu";  // WorkerInfo.backend
  /// Pooling of an Embed with POOLING_UNSPECIFIED (main: engine::DefaultPooling(model)).
  engine::Pooling default_pooling = engine::Pooling::kMean;
  /// Reported in WorkerInfo.matryoshka (the worker's --matryoshka).
  bool matryoshka = false;
  /// Block size of the prefix-cache digest in WorkerInfo (tokens; 0: no digest). The
  /// gateway hashes prompts with the block size the worker reports.
  int32_t prefix_block_tokens = 16;
  /// Most block hashes one digest carries (the first prompts' blocks win).
  int32_t prefix_digest_max_blocks = 65536;
  /// Speculation run by this worker (SessionStart.speculative, WorkerInfo.spec_types):
  /// the n-gram types always (their drafters run in-process, with these resources),
  /// "draft-model" when `draft_client` is set (drafts from the draft workers, one
  /// batched call per draft worker per scheduler pass). Both must outlive the service.
  engine::spec::SpecResources spec_resources;
  draft::DraftClient* draft_client = nullptr;
  /// Turns worker-run speculation off (WorkerInfo.spec_types empty: callers draft).
  bool worker_speculation = true;
};

/// herd.v1.Pooling -> engine::Pooling; UNSPECIFIED gives `dflt`. INVALID_ARGUMENT naming
/// "pooling" for a value outside the enum.
absl::StatusOr<engine::Pooling> FromProtoPooling(int pooling, engine::Pooling dflt);
/// engine::Pooling -> herd.v1.Pooling.
herd::v1::Pooling ToProtoPooling(engine::Pooling p);

// absl::Status -> grpc::Status (one implementation: libs/serving/grpc_status.h).
using serving::ToGrpcStatus;

/// SessionStart -> SequenceParams. Unset sampling fields take the engine defaults
/// (SamplingParams). Errors: INVALID_ARGUMENT naming "start.sampling.<field>" (proto
/// field names) or "start.logprobs". Prompt checks are the scheduler's (Start()).
absl::StatusOr<engine::SequenceParams> ToSequenceParams(const herd::v1::SessionStart& start, int32_t max_logprobs = 20);

class WorkerServiceImpl final : public herd::v1::Worker::CallbackService {
 public:
  /// `scheduler` must outlive the service and `registry` (may be null: no metrics) too.
  /// Registers the herd_worker_* metrics and installs the scheduler's iteration observer.
  WorkerServiceImpl(engine::Scheduler* scheduler, WorkerServiceOptions opts, serving::Registry* registry);
  /// Removes the iteration observer. Destroy only after the gRPC server has shut down.
  ~WorkerServiceImpl() override;

  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* ctx, const herd::v1::WorkerInfoRequest* req,
                                 herd::v1::WorkerInfo* resp) override;
  grpc::ServerBidiReactor<herd::v1::SessionRequest, herd::v1::SessionResponse>* Session(
      grpc::CallbackServerContext* ctx) override;
  /// Embed: validated here, run by the scheduler thread (Scheduler::Embed; see the
  /// comment in the implementation); answers when the job has run.
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const herd::v1::WorkerEmbedRequest* req,
                                  herd::v1::WorkerEmbedResponse* resp) override;

  /// Graceful shutdown, step 1: new Starts get UNAVAILABLE; running sessions continue;
  /// Info reports `draining` from now on, so routers stop sending sessions here.
  void StopAdmitting();
  /// StopAdmitting() was called.
  bool draining() const { return draining_.load(); }
  /// The backend's state, from the worker's device watch (a remote compute server of a
  /// layer split): while it is not OK, Info answers UNAVAILABLE with it (routers stop
  /// sending sessions here) and new sessions end with it. OK again restores both.
  void SetBackendStatus(const absl::Status& s);
  absl::Status BackendStatus() const;
  /// Session streams currently open.
  int open_sessions() const { return open_sessions_.load(); }

  /// Fills a WorkerInfo from the scheduler's current state.
  herd::v1::WorkerInfo MakeInfo() const;
  /// The speculative types this worker drafts itself (WorkerInfo.spec_types).
  std::vector<std::string> SpecTypes() const;
  /// The draft source of a SessionStart with `speculative` set (`session_id` names its
  /// draft-worker session). Errors: INVALID_ARGUMENT naming "start.speculative.<field>";
  /// FAILED_PRECONDITION for a type this worker does not draft (not in SpecTypes()).
  absl::StatusOr<std::shared_ptr<engine::spec::DraftSource>> MakeDraftSource(const herd::v1::SessionStart& start,
                                                                             const std::string& session_id);

 private:
  friend class SessionReactor;
  void CountRequest(grpc::StatusCode code);
  void UpdateGauges(int32_t active, int32_t queued, int64_t kv_used, int64_t kv_cached, int64_t kv_total);
  /// Adds the scheduler's cumulative prefix-cache and preemption counts since the last call.
  void UpdatePoolCounters();
  /// Sets the prefix digest fields of `info` for a caller that knows `known_version`.
  void FillPrefixDigest(uint64_t known_version, v1::WorkerInfo* info);

  engine::Scheduler* scheduler_;
  WorkerServiceOptions opts_;
  std::unique_ptr<draft::DraftClientBatcher> draft_batcher_;  // over opts_.draft_client
  std::atomic<uint64_t> next_draft_session_{1};
  std::atomic<int> open_sessions_{0};
  std::atomic<bool> draining_{false};
  mutable std::mutex backend_mu_;
  absl::Status backend_status_;         // SetBackendStatus; guarded by backend_mu_
  std::atomic<int> pending_embeds_{0};  // Embed calls whose scheduler job has not answered
  // The last digest computed (hashing every cached prompt once per version, not per caller).
  std::mutex digest_mu_;
  uint64_t digest_version_ = 0;
  std::vector<uint64_t> digest_;
  // Metrics (null when there is no registry).
  serving::MetricFamily* requests_ = nullptr;
  serving::MetricFamily* active_ = nullptr;
  serving::MetricFamily* queued_ = nullptr;
  serving::MetricFamily* kv_used_ = nullptr;
  serving::MetricFamily* kv_total_ = nullptr;
  serving::MetricFamily* kv_usage_ = nullptr;
  serving::MetricFamily* kv_cached_ = nullptr;
  serving::MetricFamily* prefix_lookups_ = nullptr;
  serving::MetricFamily* prefix_hits_ = nullptr;
  serving::MetricFamily* prefix_tokens_ = nullptr;
  serving::MetricFamily* prefix_evictions_ = nullptr;
  serving::MetricFamily* preemptions_ = nullptr;
  serving::MetricFamily* spec_draft_tokens_ = nullptr;
  serving::MetricFamily* spec_accepted_tokens_ = nullptr;
  serving::MetricFamily* spec_passes_ = nullptr;
  serving::MetricFamily* spec_draft_errors_ = nullptr;
  serving::MetricFamily* spec_offs_ = nullptr;
  serving::MetricFamily* spec_enabled_ = nullptr;
  serving::MetricFamily* spec_speedup_ = nullptr;
  engine::SchedulerStats counted_;  // what UpdatePoolCounters has added so far (scheduler thread)
  serving::MetricFamily* batch_tokens_ = nullptr;
  serving::MetricFamily* batch_sequences_ = nullptr;
  serving::MetricFamily* tokens_generated_ = nullptr;
  serving::MetricFamily* prompt_tokens_ = nullptr;
  serving::MetricFamily* step_seconds_ = nullptr;
};

}  // namespace herd::worker
