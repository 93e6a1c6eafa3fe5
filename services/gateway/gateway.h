// The gateway: herd's public API (service herd.v1.Gateway) over the compute workers.
//
// Gateway holds the request path shared by the gRPC service and the OpenAI-compatible
// HTTP front end (http_server.h): validation, tokenization (vocabularies from the
// loader), routing to the least-loaded live worker, the per-sequence step loop over a
// worker Session (with speculative decoding: drafts from the draft workers, verified by
// the target worker), streaming detokenization with stop strings, cancellation and
// metrics. GatewayServiceImpl adapts it to gRPC.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

#include "libs/clients/draft_client.h"
#include "libs/engine/spec/drafter.h"
#include "libs/engine/spec/spec_config.h"
#include "libs/serving/grpc_status.h"
#include "libs/serving/metrics.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "proto/herd/v1/worker.grpc.pb.h"
#include "services/gateway/generation.h"
#include "services/gateway/vocab_cache.h"
#include "services/gateway/worker_pool.h"

namespace herd::gateway {

/// What a drafter is made for: one sequence (one attempt on one target worker).
struct DrafterParams {
  std::string session_id;        // unique per sequence attempt
  std::string model;             // the target model
  v1::SpeculativeConfig config;  // the request's resolved configuration (every field set)
  float temperature = 0;         // the request's sampling temperature (0 = greedy)
  uint32_t seed = 0;             // the request's seed (a random one when it set none)
};

/// Creates the drafter of one request; nullptr = no speculation for it.
/// A drafter is an engine::spec::DraftSource (the interface the shared speculative loop,
/// libs/engine/spec/spec_loop.h, consumes); the default one is a draft-worker session.
using DrafterFactory = std::function<std::unique_ptr<engine::spec::DraftSource>(const DrafterParams& params)>;

struct GatewayOptions {
  /// Loader "host:port" serving vocabularies; "" = none (then only vocabularies added
  /// with Gateway::vocabs().Add() are known).
  std::string loader_address;
  /// TLS and the cluster key for the loader channel (the pool's and the draft workers'
  /// are pool.security and drafts.security).
  serving::ClientSecurity loader_security;
  WorkerPoolOptions pool;
  /// Largest GenerateRequest.text / TokenizeRequest.text in bytes.
  int64_t max_prompt_bytes = 1 << 20;
  /// Upper bound of every request's lifetime (the client's deadline may be shorter);
  /// zero = none.
  absl::Duration request_timeout = absl::Minutes(10);
  /// n_predict of requests that leave it unset; -1 (llama.cpp's default) = until EOS or
  /// the context (prompt + completion = n_ctx) is full.
  int32_t default_n_predict = -1;
  /// Workers tried for one request while no token has been produced (a worker that
  /// fails or refuses admission before the first token is skipped).
  int max_attempts = 3;
  /// How often in-flight requests are checked for client cancellation and deadlines.
  absl::Duration cancel_poll = absl::Milliseconds(10);
  /// Speculative decoding defaults: the configuration of requests that leave
  /// GenerateRequest.speculative (or some of its fields) unset (--spec_type,
  /// --spec_ngram_size_n, ..., --draft_max, --draft_min, --draft_p_min). Type none: no
  /// speculation unless a request asks for it.
  engine::spec::SpecConfig spec_defaults;
  /// Draft workers (--draft_workers, --draft_workers_dns; `deadline` = --draft_timeout_ms).
  /// None configured: requests asking for speculation run without it.
  draft::DraftClientOptions drafts;
  /// A Jinja chat template (the text of --chat_template) used for every model instead of
  /// its GGUF tokenizer.chat_template; "" = the models' own (ChatML where none).
  std::string chat_template;
  /// Makes the drafters instead of draft-worker sessions (tests); unset = DraftClient.
  DrafterFactory drafter_factory;
  /// llama-server's --reasoning-format default for chat requests that name none:
  /// "auto" / "deepseek" split <think> text of templates that use it into
  /// reasoning_content; "none" leaves it in the content.
  std::string reasoning_format = "auto";
  /// Threads running speculative generations for RunAsync (their loop blocks on draft
  /// and verify calls); more wait in a queue. Plain generations need none.
  int blocking_threads = 16;
};

/// Receives the messages of one generation.
class GenerateSink {
 public:
  virtual ~GenerateSink() = default;
  /// Delivers one message; returns false when the client is gone (the generation is
  /// then cancelled and its worker sequence freed).
  virtual bool Write(const v1::GenerateResponse& msg) = 0;
  /// Polled from another thread while the generation waits on its worker: true once the
  /// client has hung up. Must be thread-safe.
  virtual bool Cancelled() { return false; }
};

// Status conversions, one implementation for every service (libs/serving/grpc_status.h).
using serving::FromGrpcStatus;
using serving::ToGrpcStatus;

class Gateway {
 public:
  /// A validated, tokenized request bound to a model (generation.h).
  using Generation = gateway::Generation;

  /// `metrics` (not owned) receives the herd_gateway_* families; it must outlive this.
  Gateway(GatewayOptions opts, serving::Registry* metrics);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  /// Starts worker discovery/polling and the cancellation watchdog.
  /// Errors: INVALID_ARGUMENT when no workers are configured.
  absl::Status Start();
  /// Cancels in-flight generations, stops polling (idempotent).
  void Stop();

  /// Validates `req` (INVALID_ARGUMENT naming the field), resolves the model (NOT_FOUND /
  /// UNAVAILABLE), fetches its vocabulary and tokenizes the prompt. `deadline`: the
  /// client's (InfiniteFuture when none; the gateway's request timeout also applies).
  /// `method` labels metrics and logs ("Generate", "http_completions"). Failures are
  /// counted in the metrics here.
  absl::StatusOr<std::unique_ptr<Generation>> Prepare(const v1::GenerateRequest& req, absl::Time deadline,
                                                      const std::string& method);
  /// Runs a prepared generation to its end, streaming to `sink`. The last message has
  /// finish_reason and usage. Returns OK after a last message was delivered (finish
  /// reasons EOS, LENGTH, STOP, and CANCELLED for the gateway's request timeout or a
  /// shutdown); CANCELLED when the client went away; DEADLINE_EXCEEDED at the client's
  /// deadline; UNAVAILABLE naming the worker when it died
  /// mid-stream (or no worker could take the request); other worker errors keep their
  /// code (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
  absl::Status Run(Generation& g, GenerateSink* sink);
  /// Run without a thread waiting on the worker: the worker Session is a gRPC callback
  /// reactor, `sink` is written from gRPC's threads (its Write must not block: queue
  /// and return), and `done` receives what Run would return, once, after the last
  /// message. Speculative generations (whose loop waits on draft calls) run Run on the
  /// gateway's own pool of GatewayOptions::blocking_threads instead. `g` and `sink`
  /// are kept alive until `done` returns.
  void RunAsync(std::shared_ptr<Generation> g, std::shared_ptr<GenerateSink> sink,
                std::function<void(absl::Status)> done);
  /// Prepare + Run.
  absl::Status Generate(const v1::GenerateRequest& req, absl::Time deadline, GenerateSink* sink,
                        const std::string& method = "Generate");

  /// Text -> ids with the model's tokenizer.
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& req, absl::Time deadline);
  /// Ids -> text. INVALID_ARGUMENT for an id outside the vocabulary.
  absl::StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& req, absl::Time deadline);
  /// Models served by at least one live worker.
  v1::ListModelsResponse ListModels() const;

  /// Counts a finished request in herd_gateway_requests_total / _request_seconds.
  void RecordRequest(const std::string& method, const absl::Status& status, absl::Duration elapsed);

  /// New requests fail with UNAVAILABLE from now on (graceful shutdown).
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  /// Ends every in-flight generation now: their streams get a last message with
  /// FINISH_REASON_CANCELLED and their worker sequences are cancelled.
  void CancelAll();
  /// Generations in flight.
  int inflight() const { return inflight_.load(); }
  /// Requests finished so far (every method, any outcome: RecordRequest calls).
  uint64_t finished() const { return finished_.load(); }
  /// Waits until no generation is in flight; false on timeout.
  bool WaitIdle(absl::Duration timeout);

  WorkerPool& pool() { return *pool_; }
  VocabCache& vocabs() { return *vocabs_; }
  /// The draft-worker pool (nullptr when no draft workers are configured).
  draft::DraftClient* draft_client() { return draft_client_.get(); }
  const GatewayOptions& options() const { return opts_; }

 private:
  struct Active;
  struct Attempt;
  enum CancelReason : int { kNotCancelled = 0, kClientGone = 1, kDeadline = 2, kShutdown = 3 };

  struct AttemptRun;
  struct AttemptEnd;
  struct AsyncRun;
  class AsyncAttempt;
  class BlockingRunner;

  void Watchdog();
  // Prepare's steps: the request's fields, the model, the prompt, the context bounds.
  absl::Status PrepareSteps(const v1::GenerateRequest& req, Generation* g);
  absl::Status CheckModelServed(const std::string& model) const;
  absl::Status TokenizePrompt(const v1::GenerateRequest& req, Generation* g);
  // The output rules of a chat prompt rendered with `template_source` into `rendered`:
  // g->parse (tool-call family, reasoning split) and, for tool_choice "required" or
  // "function", g->forced_grammar. INVALID_ARGUMENT naming the field.
  absl::Status ChatOutputRules(const v1::ChatPrompt& chat, const std::string& template_source,
                               const std::string& rendered, Generation* g);
  absl::Status FitContext(const v1::GenerateRequest& req, Generation* g);
  // One attempt on one worker: the session (worker_session.h), a plain or speculative
  // loop (libs/engine/spec/spec_loop.h) delivering messages through a CompletionTracker
  // (completion.h), then the outcome (finished, retryable, the error).
  Attempt RunOnWorker(Generation& g, WorkerPool::Lease& lease, GenerateSink* sink, Active* active, int attempt);
  absl::Status AwaitStarted(AttemptRun& a);
  absl::Status Deliver(AttemptRun& a, const v1::StepResult& sr, bool* run_ended);
  // Raises g.cached_tokens (and the realized prefix-token counter) to a step's n_cached:
  // the worker counts tokens shared in flight only once the prompt is done.
  void NoteCached(Generation& g, const v1::StepResult& sr);
  absl::Status RunPlain(AttemptRun& a);
  absl::Status RunSpeculative(AttemptRun& a);
  Attempt EndAttempt(AttemptRun& a, const std::string& addr, const absl::Status& loop);
  // The outcome of an attempt that ended as `e` says (both paths).
  Attempt ClassifyAttempt(Generation& g, GenerateSink* sink, Active* active, const std::string& addr,
                          const AttemptEnd& e);
  Attempt CutAttempt(Generation& g, GenerateSink* sink, Active* active, bool started, bool speculative, int reason);
  // A generation's start and end, both paths: the in-flight list and gauge; at the end
  // the last message of a cut request, metrics and the request's log line.
  void BeginRun(Active* active);
  absl::Status EndRun(Generation& g, GenerateSink* sink, Active* active, absl::Status status);
  // The asynchronous path (async_run.cc).
  void NextAsyncAttempt(std::shared_ptr<AsyncRun> run);
  void AfterAsyncAttempt(std::shared_ptr<AsyncRun> run, const std::string& addr, const Attempt& a);
  std::unique_ptr<engine::spec::DraftSource> MakeDrafter(const Generation& g, int attempt);
  void RecordSpecStats(const v1::SpeculativeStats& s);
  bool Emit(Generation& g, GenerateSink* sink, v1::GenerateResponse* msg);
  /// Whether a request cancelled for `reason` was cut by the gateway (request timeout,
  /// shutdown) rather than by its client, and so still gets a last message.
  static bool CutByGateway(const Generation& g, int reason);

  GatewayOptions opts_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<VocabCache> vocabs_;
  std::unique_ptr<draft::DraftClient> draft_client_;

  serving::MetricFamily* requests_total_;
  serving::MetricFamily* tokens_total_;
  serving::MetricFamily* request_seconds_;
  serving::MetricFamily* ttft_seconds_;
  serving::MetricFamily* live_workers_;
  serving::MetricFamily* prefix_tokens_realized_;
  serving::MetricFamily* inflight_gauge_;
  serving::MetricFamily* spec_calls_;
  serving::MetricFamily* spec_gen_drafts_;
  serving::MetricFamily* spec_acc_drafts_;
  serving::MetricFamily* spec_gen_tokens_;
  serving::MetricFamily* spec_acc_tokens_;
  serving::MetricFamily* spec_failures_;

  std::atomic<bool> draining_{false};
  std::atomic<bool> cancel_all_{false};
  std::atomic<int> inflight_{0};
  std::atomic<uint64_t> finished_{0};
  std::atomic<uint64_t> next_id_{1};

  mutable std::mutex active_mu_;
  std::condition_variable idle_cv_;
  std::list<Active*> active_;
  bool stopping_ = false;
  std::condition_variable stop_cv_;
  std::thread watchdog_;
  std::unique_ptr<BlockingRunner> blocking_;  // speculative RunAsync generations
  std::atomic<int> async_attempts_{0};        // AsyncAttempt reactors alive
};

/// herd.v1.Gateway over a Gateway (grpc_service.cc). The methods are registered by hand
/// (same names and wire format as gateway.proto's generated Gateway::Service) so that
/// requests are parsed from their bytes by ParseRequestBytes: a malformed message, or a
/// string field with invalid UTF-8, gets INVALID_ARGUMENT naming it instead of the
/// transport's bare INTERNAL. Generate is a callback method: its generation runs through
/// Gateway::RunAsync and holds no thread while it waits on a worker (speculative ones
/// excepted); its messages are queued and written one at a time.
class GatewayServiceImpl final : public grpc::Service {
 public:
  explicit GatewayServiceImpl(Gateway* gateway);
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* raw);
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req, v1::TokenizeResponse* resp);
  grpc::Status Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest& req, v1::DetokenizeResponse* resp);
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req, v1::ListModelsResponse* resp);
  /// Defined in embeddings.cc (gateway::Embed).
  grpc::Status Embed(grpc::ServerContext* ctx, const v1::EmbedRequest* req, v1::EmbedResponse* resp);

 private:
  Gateway* gw_;
};

/// Parses a herd.v1 request from its wire bytes, once. When the bytes do not parse, says
/// why: INVALID_ARGUMENT naming the string field that is not UTF-8 ("model",
/// "prompt.text", "stop[2]", "chat.messages[0].content", ...; found through the
/// bytes-typed view in lenient.proto, on this failure path only), else that the bytes
/// are not a valid message of `type`.
absl::Status ParseRequestBytes(absl::string_view bytes, v1::GenerateRequest* out);
absl::Status ParseRequestBytes(absl::string_view bytes, v1::TokenizeRequest* out);
absl::Status ParseRequestBytes(absl::string_view bytes, v1::DetokenizeRequest* out);

}  // namespace herd::gateway
