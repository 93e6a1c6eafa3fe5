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
#include "libs/engine/spec/spec_config.h"
#include "libs/serving/grpc_status.h"
#include "libs/serving/metrics.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "proto/herd/v1/worker.grpc.pb.h"
#include "services/gateway/lenient.pb.h"
#include "services/gateway/vocab_cache.h"
#include "services/gateway/worker_pool.h"

namespace herd::gateway {

/// One draft for the speculative loop.
struct DraftProposal {
  std::vector<int32_t> tokens;
  /// Empty for a deterministic draft; else one distribution per token, the one it was
  /// drawn from (a draft model sampling at temperature > 0). Sent to the target worker
  /// (SessionStep.draft_probs), which then verifies by rejection sampling.
  std::vector<v1::DraftTokenProbs> probs;
};

/// What a drafter is made for: one sequence (one attempt on one target worker).
struct DrafterParams {
  std::string session_id;          // unique per sequence attempt
  std::string model;               // the target model
  v1::SpeculativeConfig config;    // the request's resolved configuration (every field set)
  float temperature = 0;           // the request's sampling temperature (0 = greedy)
  uint32_t seed = 0;               // the request's seed (a random one when it set none)
};

/// Proposes draft tokens for the speculative loop. One instance per sequence; the
/// default one is a draft-worker session (libs/clients/draft_client.h). A drafter
/// that fails costs speed, never correctness: errors and empty drafts make the gateway
/// step without a draft.
class Drafter {
 public:
  virtual ~Drafter() = default;
  /// `new_tokens`: tokens appended to the sequence since the previous call (the whole
  /// prompt on the first call: the accepted draft tokens and the target's own token
  /// after each pass); `n_max` >= 1: the most tokens wanted (the room left before
  /// n_predict and the end of the context). Returns the next draft (possibly empty); an
  /// error counts as an empty draft (and in herd_gateway_spec_draft_failures_total).
  virtual absl::StatusOr<DraftProposal> Propose(const std::vector<int32_t>& new_tokens, int n_max) = 0;
  /// The target verified the last (non-empty) draft and accepted its first
  /// `n_accepted` tokens. Not called for drafts that were not sent.
  virtual void Accepted(int n_accepted) { (void)n_accepted; }
  /// The sequence ended (the drafter may release its resources; Stats() still works).
  virtual void End() {}
  /// Cumulative llama.cpp-style statistics (type set), reported on the last message.
  virtual v1::SpeculativeStats Stats() const { return {}; }
};

/// Creates the drafter of one request; nullptr = no speculation for it.
using DrafterFactory = std::function<std::unique_ptr<Drafter>(const DrafterParams& params)>;

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
  /// A validated, tokenized request bound to a model (made by Prepare, consumed by Run).
  class Generation {
   public:
    std::string id;
    std::string method;
    std::string model;
    absl::Time start;
    absl::Time deadline;         // the earlier of the client's and the request timeout
    absl::Time client_deadline;  // the client's (InfiniteFuture when none)
    std::shared_ptr<const tokenizer::Vocab> vocab;
    std::vector<int32_t> prompt;
    int32_t n_predict = -1;  // -1: until EOS or the context is full
    std::vector<std::string> stops;
    int32_t logprobs = 0;
    bool ignore_eos = false;
    v1::SamplingParams sampling;
    /// The speculative configuration: the gateway's defaults with the request's fields
    /// laid over them (validated).
    engine::spec::SpecConfig spec;

    // Run state.
    int completion = 0;
    bool any_message = false;   // a message went to the client
    absl::Time first_token_time = absl::InfinitePast();
    double queue_ms = 0, prompt_ms = 0, generation_ms = 0;
    std::string worker;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    bool speculative = false;      // a drafter ran (spec_stats is meaningful)
    v1::SpeculativeStats spec_stats;  // of the last attempt
  };

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

  void Watchdog();
  Attempt RunOnWorker(Generation& g, WorkerPool::Lease& lease, GenerateSink* sink, Active* active, int attempt);
  std::unique_ptr<Drafter> MakeDrafter(const Generation& g, int attempt);
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
};

/// herd.v1.Gateway over a Gateway. The methods are registered by hand (same names and
/// wire format as gateway.proto's generated Gateway::Service) so that Generate,
/// Tokenize and Detokenize parse their requests leniently (lenient.proto): a string
/// field with invalid UTF-8 gets INVALID_ARGUMENT naming it instead of the transport's
/// parse failure.
class GatewayServiceImpl final : public grpc::Service {
 public:
  explicit GatewayServiceImpl(Gateway* gateway);
  grpc::Status Generate(grpc::ServerContext* ctx, const lenient::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer);
  grpc::Status Tokenize(grpc::ServerContext* ctx, const lenient::TokenizeRequest* req, v1::TokenizeResponse* resp);
  grpc::Status Detokenize(grpc::ServerContext* ctx, const lenient::DetokenizeRequest* req,
                          v1::DetokenizeResponse* resp);
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req, v1::ListModelsResponse* resp);
  /// Defined in embeddings.cc (gateway::Embed).
  grpc::Status Embed(grpc::ServerContext* ctx, const v1::EmbedRequest* req, v1::EmbedResponse* resp);

 private:
  Gateway* gw_;
};

/// The herd.v1 request a lenient one stands for. INVALID_ARGUMENT naming the field
/// ("model", "prompt.text", "stop[2]", "speculative.type") when a string is not UTF-8.
absl::StatusOr<v1::GenerateRequest> FromLenient(const lenient::GenerateRequest& req);
absl::StatusOr<v1::TokenizeRequest> FromLenient(const lenient::TokenizeRequest& req);
absl::StatusOr<v1::DetokenizeRequest> FromLenient(const lenient::DetokenizeRequest& req);

}  // namespace herd::gateway
