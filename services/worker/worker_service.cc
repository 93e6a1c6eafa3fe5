#include "services/worker/worker_service.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/engine/sampling_proto.h"
#include "libs/engine/spec/spec_proto.h"
#include "libs/serving/prefix_blocks.h"

namespace herd::worker {
namespace {

namespace v1 = herd::v1;

// "field: message" from the scheduler -> "<prefix>.field: message" (INVALID_ARGUMENT only).
absl::Status Prefixed(const absl::Status& s, const char* prefix) {
  if (!absl::IsInvalidArgument(s)) return s;
  return absl::InvalidArgumentError(absl::StrCat(prefix, ".", s.message()));
}

const grpc::Status kCancelledOk = grpc::Status::OK;

}  // namespace

absl::StatusOr<engine::SequenceParams> ToSequenceParams(const v1::SessionStart& start, int32_t max_logprobs) {
  engine::SequenceParams p;
  p.prompt.assign(start.prompt().begin(), start.prompt().end());
  HERD_ASSIGN_OR_RETURN(auto sampling, engine::SamplingParamsFromProto(start.sampling(), "start.sampling."));
  p.sampling = std::move(sampling);
  if (start.has_logprobs()) {
    if (start.logprobs() < 0 || start.logprobs() > max_logprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("start.logprobs: ", start.logprobs(), " is outside [0, ", max_logprobs, "]"));
    }
    p.logprobs = start.logprobs();
  }
  p.ignore_eos = start.ignore_eos();
  return p;
}

// One Session stream. Lives from Session() until OnDone(). Lock order: mu_, then the
// scheduler's locks (Start/Step/Cancel). The scheduler calls Pump() through the
// sequence's notify callback without holding any of its locks.
class SessionReactor : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  explicit SessionReactor(WorkerServiceImpl* svc) : svc_(svc) {
    svc_->open_sessions_.fetch_add(1);
    constructed_.store(true, std::memory_order_release);
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!ok) {
        // The client half-closed (or the call ended): no more requests, free the sequence.
        FinishLocked(grpc::Status::OK);
        return;
      }
      if (finishing_) return;
      switch (req_.kind_case()) {
        case v1::SessionRequest::kStart:
          HandleStartLocked();
          break;
        case v1::SessionRequest::kStep:
          HandleStepLocked();
          break;
        case v1::SessionRequest::kCancel:
          FinishLocked(kCancelledOk);
          break;
        default:
          FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "request: empty SessionRequest (set one of start, step, cancel)"));
          break;
      }
      if (!finishing_) StartRead(&req_);
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      writing_ = false;
      if (!ok) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed: the client went away"));
      if (finishing_) {
        FinishNowLocked();
        return;
      }
    }
    Pump();
  }

  void OnCancel() override {
    // gRPC hands the reactor to this thread through its own lock-free queues, which
    // ThreadSanitizer (Debian's gRPC is not instrumented) cannot see: make the edge
    // from the constructor explicit.
    (void)constructed_.load(std::memory_order_acquire);
    std::lock_guard<std::mutex> l(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "session cancelled"));
  }

  void OnDone() override {
    std::unique_ptr<engine::Sequence> seq;
    grpc::StatusCode code;
    {
      std::lock_guard<std::mutex> l(mu_);
      seq = std::move(seq_);
      code = final_.error_code();
    }
    seq.reset();  // detaches the notify callback (waits out a running one), cancels
    svc_->CountRequest(code);
    svc_->open_sessions_.fetch_sub(1);
    delete this;
  }

  // Writes the next event of the sequence if no write is in flight.
  void Pump() {
    std::lock_guard<std::mutex> l(mu_);
    if (writing_ || finishing_ || seq_ == nullptr) return;
    engine::SequenceEvent ev;
    if (!seq_->TryNext(&ev)) return;
    resp_.Clear();
    switch (ev.kind) {
      case engine::SequenceEvent::Kind::kStarted: {
        v1::SessionStarted* s = resp_.mutable_started();
        s->set_n_prompt(ev.n_prompt);
        s->set_queue_ms(ev.queue_ms);
        s->set_n_cached(ev.n_cached);
        break;
      }
      case engine::SequenceEvent::Kind::kStep: {
        v1::StepResult* r = resp_.mutable_step();
        const engine::StepResult& st = ev.step;
        r->mutable_tokens()->Add(st.tokens.begin(), st.tokens.end());
        r->set_n_accepted(st.n_accepted);
        for (const engine::TokenLogprobs& lp : st.logprobs) {
          v1::TokenLogprobs* o = r->add_logprobs();
          o->set_token_id(lp.id);
          o->set_logprob(lp.logprob);
          for (const engine::TokenLogprob& t : lp.top) {
            v1::TokenLogprob* x = o->add_top();
            x->set_token_id(t.id);
            x->set_logprob(t.logprob);
          }
        }
        r->set_eos(st.eos);
        r->set_context_full(st.context_full);
        r->set_prompt_ms(st.prompt_ms);
        r->set_generation_ms(st.generation_ms);
        r->set_n_cached(st.n_cached);
        if (st.spec_stats.type != engine::spec::SpecType::kNone || st.spec_stats.calls > 0) {
          engine::spec::SpecStatsToProto(st.spec_stats, r->mutable_spec_stats());
        }
        break;
      }
      case engine::SequenceEvent::Kind::kEnded:
        // Cancel/close paths finish before this arrives; here the scheduler ended the
        // sequence (shutdown: UNAVAILABLE; engine failure).
        FinishLocked(ToGrpcStatus(ev.status.ok() ? absl::InternalError("sequence ended") : ev.status));
        return;
    }
    writing_ = true;
    StartWrite(&resp_);
  }

 private:
  void HandleStartLocked() {
    if (seq_ != nullptr) {
      FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "start: the session has already started"));
      return;
    }
    auto params = ToSequenceParams(req_.start());
    if (!params.ok()) {
      FinishLocked(ToGrpcStatus(params.status()));
      return;
    }
    absl::Status ids =
        engine::CheckLogitBiasIds(req_.start().sampling(), svc_->scheduler_->n_vocab(), "start.sampling.");
    if (!ids.ok()) {
      FinishLocked(ToGrpcStatus(ids));
      return;
    }
    if (req_.start().has_speculative() && req_.start().speculative().type() != "none" &&
        !req_.start().speculative().type().empty()) {
      auto source = svc_->MakeDraftSource(
          req_.start(), absl::StrCat(svc_->opts_.model_name, "-", svc_->next_draft_session_.fetch_add(1)));
      if (!source.ok()) {
        FinishLocked(ToGrpcStatus(source.status()));
        return;
      }
      params->draft_source = *std::move(source);
      params->draft_min = req_.start().speculative().draft_min();
      params->draft_max = std::min(req_.start().speculative().draft_max(), svc_->scheduler_->max_draft());
      params->draft_min = std::min(params->draft_min, params->draft_max);
    }
    if (req_.start().n_predict() < 0) {
      FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                absl::StrCat("start.n_predict: ", req_.start().n_predict(), " is negative")));
      return;
    }
    params->n_predict = req_.start().n_predict();
    // The callback may run (on the scheduler thread) as soon as Start returns; it blocks
    // on mu_ until seq_ is set below.
    params->on_event = [this] { Pump(); };
    if (absl::Status b = svc_->BackendStatus(); !b.ok()) {
      FinishLocked(ToGrpcStatus(absl::UnavailableError(absl::StrCat("backend unavailable: ", b.message()))));
      return;
    }
    auto seq = svc_->scheduler_->Start(*std::move(params));
    if (!seq.ok()) {
      FinishLocked(ToGrpcStatus(Prefixed(seq.status(), "start")));
      return;
    }
    seq_ = *std::move(seq);
  }

  void HandleStepLocked() {
    if (seq_ == nullptr) {
      FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "step: Step before Start"));
      return;
    }
    const v1::SessionStep& step = req_.step();
    std::vector<engine::spec::SparseDist> probs;
    probs.reserve(static_cast<size_t>(step.draft_probs_size()));
    for (int i = 0; i < step.draft_probs_size(); ++i) {
      absl::StatusOr<engine::spec::SparseDist> d = engine::spec::SparseDistFromProto(step.draft_probs(i));
      if (!d.ok()) {
        FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  absl::StrCat("step.draft_probs[", i, "]: ", d.status().message())));
        return;
      }
      probs.push_back(*std::move(d));
    }
    absl::Status s =
        seq_->Step(step.n_steps(), std::vector<int32_t>(step.draft().begin(), step.draft().end()), std::move(probs));
    if (!s.ok()) FinishLocked(ToGrpcStatus(Prefixed(s, "step")));
  }

  // Ends the call with `s` (the first status wins): cancels the sequence (its KV cells
  // are freed by the scheduler), drops unsent events, and finishes once no write is in
  // flight.
  void FinishLocked(grpc::Status s) {
    if (finishing_) return;
    finishing_ = true;
    final_ = std::move(s);
    if (seq_ != nullptr) seq_->Cancel();
    if (!writing_) FinishNowLocked();
  }

  void FinishNowLocked() {
    if (finished_) return;
    finished_ = true;
    Finish(final_);
  }

  std::atomic<bool> constructed_{false};
  WorkerServiceImpl* svc_;
  std::mutex mu_;
  v1::SessionRequest req_;    // the read in flight (one at a time)
  v1::SessionResponse resp_;  // the write in flight (one at a time)
  std::unique_ptr<engine::Sequence> seq_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status final_;
};

WorkerServiceImpl::WorkerServiceImpl(engine::Scheduler* scheduler, WorkerServiceOptions opts,
                                     serving::Registry* registry)
    : scheduler_(scheduler), opts_(std::move(opts)) {
  if (opts_.draft_client != nullptr) draft_batcher_ = std::make_unique<draft::DraftClientBatcher>(opts_.draft_client);
  if (registry != nullptr) {
    spec_draft_tokens_ = registry->Counter("herd_worker_spec_draft_tokens_total",
                                           "Draft tokens this worker's scheduler verified (worker-run speculation).");
    spec_accepted_tokens_ =
        registry->Counter("herd_worker_spec_accepted_tokens_total", "Of those draft tokens, the ones accepted.");
    spec_passes_ = registry->Counter("herd_worker_spec_passes_total", "Sequence passes that verified a draft.");
    spec_draft_errors_ = registry->Counter("herd_worker_spec_draft_errors_total",
                                           "Drafts that failed or missed their deadline (verified as plain steps).");
    spec_offs_ = registry->Counter("herd_worker_spec_switch_offs_total",
                                   "Times the worker paused drafting because it measured no speedup.");
    spec_enabled_ = registry->Gauge("herd_worker_spec_enabled", "1 while the worker asks for drafts, 0 while paused.");
    spec_speedup_ = registry->Gauge("herd_worker_spec_speedup",
                                    "Recent measured speedup of passes with drafts over plain passes (1 = none).");
    requests_ = registry->Counter("herd_worker_requests_total",
                                  "Worker RPCs (Info, Session, Embed) by final status code.", {"code"});
    active_ = registry->Gauge("herd_worker_active_sequences", "Sequences admitted (prefilling or generating).");
    queued_ = registry->Gauge("herd_worker_queued_sequences", "Sequences waiting for admission.");
    kv_used_ = registry->Gauge("herd_worker_kv_cells_used",
                               "KV cache cells running sequences hold (a shared prefix counts once).");
    kv_total_ = registry->Gauge("herd_worker_kv_cells_capacity", "KV cache cells in total (n_ctx).");
    // With herd_worker_queued_sequences (TotalQueuedRequests) and herd_worker_active_sequences
    // (TotalRunningRequests): the Gateway API Inference Extension's model-server metrics.
    kv_usage_ = registry->Gauge("herd_worker_kv_cache_usage_perc",
                                "Fraction (0..1) of the KV cache's cells running sequences hold; cells only cached "
                                "prefixes hold count as free (vLLM's kv_cache_usage_perc, the Gateway API Inference "
                                "Extension's KVCacheUtilization).");
    kv_cached_ = registry->Gauge("herd_worker_kv_cells_cached",
                                 "KV cache cells only cached prompt prefixes hold (evicted on demand).");
    prefix_lookups_ = registry->Counter("herd_worker_prefix_cache_lookups_total",
                                        "Admitted sequences whose prompt was looked up in the prefix cache.");
    prefix_hits_ = registry->Counter("herd_worker_prefix_cache_hits_total",
                                     "Admitted sequences that reused cached or running sequences' KV cells.");
    prefix_tokens_ = registry->Counter("herd_worker_prefix_cache_tokens_total",
                                       "Prompt tokens not recomputed thanks to the prefix cache.");
    prefix_evictions_ = registry->Counter("herd_worker_prefix_cache_evictions_total",
                                          "Cached prompt prefixes dropped (least recently used) for room.");
    preemptions_ = registry->Counter("herd_worker_preemptions_total",
                                     "Sequences sent back to the queue (cells freed, recomputed later) for room.");
    std::vector<double> pow2;
    for (double b = 1; b <= 8192; b *= 2) pow2.push_back(b);
    batch_tokens_ = registry->Histogram("herd_worker_batch_tokens", "Tokens per forward pass.", {}, pow2);
    batch_sequences_ = registry->Histogram("herd_worker_batch_sequences", "Sequences per forward pass.", {},
                                           std::vector<double>(pow2.begin(), pow2.begin() + 10));
    // vLLM's cache_config_info (the Gateway API Inference Extension's cache-info metric,
    // EPP --cache-info-metric): the prefix-cache block size of WorkerInfo's digest (1 with
    // the digest off: the KV cache is per token) and the KV capacity in such blocks.
    const bool prefix_caching = scheduler_->PrefixCacheVersion() != 0;
    const int64_t block = opts_.prefix_block_tokens > 0 ? opts_.prefix_block_tokens : 1;
    registry
        ->Gauge("herd_worker_cache_config_info",
                "Constant 1; labels: block_size (tokens per prefix-cache block), num_gpu_blocks (KV capacity "
                "in blocks), enable_prefix_caching (vLLM's cache_config_info).",
                {"block_size", "num_gpu_blocks", "enable_prefix_caching"})
        ->Set(1,
              {std::to_string(block), std::to_string(scheduler_->n_ctx() / block), prefix_caching ? "true" : "false"});
    tokens_generated_ = registry->Counter("herd_worker_tokens_generated_total", "Tokens delivered in StepResults.");
    prompt_tokens_ = registry->Counter("herd_worker_prompt_tokens_total", "Prompt tokens evaluated.");
    step_seconds_ = registry->Histogram("herd_worker_step_seconds",
                                        "Wall time of one scheduler iteration (forward pass + sampling).");
    const engine::SchedulerStats st = scheduler_->Stats();
    UpdateGauges(st.active, st.queued, st.kv_cells_used, st.kv_cells_cached, st.kv_cells_total);
    UpdatePoolCounters();
    scheduler_->SetIterationObserver([this](const engine::IterationStats& it) {
      if (it.batch_tokens > 0) {
        batch_tokens_->Observe(it.batch_tokens);
        batch_sequences_->Observe(it.batch_sequences);
        step_seconds_->Observe(it.seconds);
        tokens_generated_->Add(it.generated_tokens);
        prompt_tokens_->Add(it.prompt_tokens);
      }
      UpdateGauges(it.active, it.queued, it.kv_cells_used, it.kv_cells_cached, it.kv_cells_total);
      UpdatePoolCounters();  // the observer runs without scheduler locks held
    });
  }
}

WorkerServiceImpl::~WorkerServiceImpl() {
  if (requests_ != nullptr) scheduler_->SetIterationObserver(nullptr);
  // After the server's shutdown no reactor is left; wait out any OnDone still running.
  for (int i = 0; i < 5000 && (open_sessions_.load() != 0 || pending_embeds_.load() != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (open_sessions_.load() != 0) {
    HERD_LOG(Error) << "worker service destroyed with " << open_sessions_.load() << " open sessions";
  }
}

void WorkerServiceImpl::UpdatePoolCounters() {
  if (prefix_hits_ == nullptr) return;
  const engine::SchedulerStats st = scheduler_->Stats();
  const auto add = [](serving::MetricFamily* m, uint64_t now, uint64_t* seen) {
    if (now > *seen) m->Add(static_cast<double>(now - *seen));
    *seen = std::max(*seen, now);
  };
  add(prefix_lookups_, st.prefix_cache_lookups, &counted_.prefix_cache_lookups);
  add(prefix_hits_, st.prefix_cache_hits, &counted_.prefix_cache_hits);
  add(prefix_tokens_, st.prefix_tokens_reused, &counted_.prefix_tokens_reused);
  add(prefix_evictions_, st.prefix_evictions, &counted_.prefix_evictions);
  add(preemptions_, st.preemptions, &counted_.preemptions);
  add(spec_draft_tokens_, st.spec_draft_tokens, &counted_.spec_draft_tokens);
  add(spec_accepted_tokens_, st.spec_accepted_tokens, &counted_.spec_accepted_tokens);
  add(spec_passes_, st.spec_passes, &counted_.spec_passes);
  add(spec_draft_errors_, st.spec_draft_errors, &counted_.spec_draft_errors);
  add(spec_offs_, st.spec_switch_offs, &counted_.spec_switch_offs);
  spec_enabled_->Set(st.spec_enabled ? 1 : 0);
  spec_speedup_->Set(st.spec_speedup);
}

void WorkerServiceImpl::UpdateGauges(int32_t active, int32_t queued, int64_t kv_used, int64_t kv_cached,
                                     int64_t kv_total) {
  if (active_ == nullptr) return;
  active_->Set(active);
  queued_->Set(queued);
  kv_used_->Set(static_cast<double>(kv_used - kv_cached));
  kv_cached_->Set(static_cast<double>(kv_cached));
  kv_total_->Set(static_cast<double>(kv_total));
  kv_usage_->Set(kv_total > 0 ? static_cast<double>(kv_used - kv_cached) / static_cast<double>(kv_total) : 0.0);
}

void WorkerServiceImpl::CountRequest(grpc::StatusCode code) {
  // The label is the code's canonical name ("UNAVAILABLE"); gRPC's codes are absl's.
  if (requests_ != nullptr) requests_->Add(1, {absl::StatusCodeToString(static_cast<absl::StatusCode>(code))});
}

void WorkerServiceImpl::SetBackendStatus(const absl::Status& s) {
  std::lock_guard<std::mutex> l(backend_mu_);
  backend_status_ = s;
}

absl::Status WorkerServiceImpl::BackendStatus() const {
  std::lock_guard<std::mutex> l(backend_mu_);
  return backend_status_;
}

void WorkerServiceImpl::StopAdmitting() {
  draining_ = true;
  scheduler_->StopAdmitting();
}

v1::WorkerInfo WorkerServiceImpl::MakeInfo() const {
  v1::WorkerInfo info;
  const engine::SchedulerStats st = scheduler_->Stats();
  info.set_model(opts_.model_name);
  info.set_architecture(opts_.architecture);
  info.set_backend(opts_.backend);
  info.set_n_ctx(scheduler_->n_ctx());
  info.set_n_ctx_seq(scheduler_->n_ctx_seq());
  info.set_n_vocab(scheduler_->n_vocab());
  info.set_max_sequences(scheduler_->capacity());
  info.set_active_sequences(st.active);
  info.set_queued_sequences(st.queued);
  info.set_kv_cells_used(st.kv_cells_used - st.kv_cells_cached);
  info.set_kv_cells_cached(st.kv_cells_cached);
  info.set_max_draft(scheduler_->max_draft());
  info.set_pooling(ToProtoPooling(opts_.default_pooling));
  info.set_matryoshka(opts_.matryoshka);
  info.set_draining(draining_.load());
  for (const std::string& t : SpecTypes()) info.add_spec_types(t);
  return info;
}

std::vector<std::string> WorkerServiceImpl::SpecTypes() const {
  std::vector<std::string> out;
  if (!opts_.worker_speculation) return out;
  for (engine::spec::SpecType t : {engine::spec::SpecType::kNgramSimple, engine::spec::SpecType::kNgramMapK,
                                   engine::spec::SpecType::kNgramMapK4v, engine::spec::SpecType::kNgramCache}) {
    out.push_back(engine::spec::SpecTypeName(t));
  }
  if (opts_.draft_client != nullptr) out.push_back(engine::spec::SpecTypeName(engine::spec::SpecType::kDraftModel));
  return out;
}

absl::StatusOr<std::shared_ptr<engine::spec::DraftSource>> WorkerServiceImpl::MakeDraftSource(
    const v1::SessionStart& start, const std::string& session_id) {
  const std::vector<std::string> types = SpecTypes();
  const std::string& type = start.speculative().type();
  if (std::find(types.begin(), types.end(), type) == types.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "start.speculative.type: '", type,
        "' is not drafted by this worker (it drafts: ", types.empty() ? "none" : absl::StrJoin(types, ", "), ")"));
  }
  // Every field is set by the caller; unset ones take llama.cpp's defaults.
  auto config =
      engine::spec::SpecConfigFromProto(start.speculative(), engine::spec::SpecConfig(), "start.speculative.");
  if (!config.ok()) return config.status();
  if (config->type == engine::spec::SpecType::kDraftModel) {
    const float temp =
        start.sampling().has_temperature() ? start.sampling().temperature() : engine::SamplingParams().temp;
    return std::shared_ptr<engine::spec::DraftSource>(std::make_shared<draft::DraftWorkerSource>(
        opts_.draft_client->NewSession(session_id, opts_.model_name, start.speculative(), temp, start.draft_seed()),
        draft_batcher_.get()));
  }
  auto session = engine::spec::SpecSession::Create(*config, opts_.spec_resources, start.draft_seed());
  if (!session.ok()) return Prefixed(session.status(), "start.speculative");
  return std::shared_ptr<engine::spec::DraftSource>(std::move(*session));
}

void WorkerServiceImpl::FillPrefixDigest(uint64_t known_version, v1::WorkerInfo* info) {
  if (opts_.prefix_block_tokens <= 0) return;
  uint64_t version = scheduler_->PrefixCacheVersion();
  if (version == 0) return;  // prefix caching off
  info->set_prefix_block_tokens(opts_.prefix_block_tokens);
  info->set_prefix_version(version);
  if (known_version == version) {
    info->set_prefix_unchanged(true);
    return;
  }
  std::lock_guard<std::mutex> l(digest_mu_);
  if (version != digest_version_) {
    const std::vector<std::vector<int32_t>> prompts = scheduler_->CachedPrompts(&version);
    absl::flat_hash_set<uint64_t> seen;
    digest_.clear();
    for (const std::vector<int32_t>& p : prompts) {
      for (uint64_t h : serving::PrefixBlockHashes(p, opts_.prefix_block_tokens)) {
        if (static_cast<int64_t>(digest_.size()) >= opts_.prefix_digest_max_blocks) break;
        if (seen.insert(h).second) digest_.push_back(h);
      }
    }
    digest_version_ = version;
    info->set_prefix_version(version);
  }
  info->mutable_prefix_block_hashes()->Add(digest_.begin(), digest_.end());
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Info(grpc::CallbackServerContext* ctx, const v1::WorkerInfoRequest* req,
                                                  v1::WorkerInfo* resp) {
  if (absl::Status b = BackendStatus(); !b.ok()) {
    CountRequest(grpc::StatusCode::UNAVAILABLE);
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("backend unavailable: ", b.message())));
    return r;
  }
  *resp = MakeInfo();
  FillPrefixDigest(req->known_prefix_version(), resp);
  CountRequest(grpc::StatusCode::OK);
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

absl::StatusOr<engine::Pooling> FromProtoPooling(int pooling, engine::Pooling dflt) {
  switch (pooling) {
    case v1::POOLING_UNSPECIFIED:
      return dflt;
    case v1::POOLING_MEAN:
      return engine::Pooling::kMean;
    case v1::POOLING_CLS:
      return engine::Pooling::kCls;
    case v1::POOLING_LAST:
      return engine::Pooling::kLast;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("pooling: ", pooling, " is not a Pooling value (MEAN, CLS, LAST or UNSPECIFIED)"));
  }
}

v1::Pooling ToProtoPooling(engine::Pooling p) {
  switch (p) {
    case engine::Pooling::kMean:
      return v1::POOLING_MEAN;
    case engine::Pooling::kCls:
      return v1::POOLING_CLS;
    case engine::Pooling::kLast:
      return v1::POOLING_LAST;
  }
  return v1::POOLING_UNSPECIFIED;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Embed(grpc::CallbackServerContext* ctx, const v1::WorkerEmbedRequest* req,
                                                   v1::WorkerEmbedResponse* resp) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  auto fail = [&](const absl::Status& s) {
    CountRequest(static_cast<grpc::StatusCode>(s.code()));
    r->Finish(ToGrpcStatus(s));
    return r;
  };
  auto pooling = FromProtoPooling(req->pooling(), opts_.default_pooling);
  if (!pooling.ok()) return fail(pooling.status());
  const int32_t n = req->tokens_size();
  // The Engine and its KV cache belong to the scheduler thread: running Engine::Embed
  // from this gRPC thread would race with the forward passes of the running sessions
  // (shared KV cache, backend buffers, the engine's output arrays). So the job is queued
  // into the scheduler, which runs it between two batches on a temporary sequence and
  // frees its cells before the next batch; sessions never see it. The callback runs on
  // the scheduler thread and only copies the vector and finishes the call.
  pending_embeds_.fetch_add(1);
  absl::Status s = scheduler_->Embed(std::vector<int32_t>(req->tokens().begin(), req->tokens().end()), *pooling,
                                     [this, r, resp, n, p = *pooling](absl::StatusOr<std::vector<float>> v) {
                                       if (v.ok()) {
                                         resp->mutable_embedding()->Assign(v->begin(), v->end());
                                         resp->set_n_prompt_tokens(n);
                                         resp->set_pooling(ToProtoPooling(p));
                                         CountRequest(grpc::StatusCode::OK);
                                         r->Finish(grpc::Status::OK);
                                       } else {
                                         CountRequest(static_cast<grpc::StatusCode>(v.status().code()));
                                         r->Finish(ToGrpcStatus(v.status()));
                                       }
                                       pending_embeds_.fetch_sub(1);
                                     });
  if (!s.ok()) {
    pending_embeds_.fetch_sub(1);
    return fail(s);
  }
  return r;
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext*) {
  return new SessionReactor(this);
}

}  // namespace herd::worker
