#include "services/gateway/gateway.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/method_handler.h"
#include "libs/base/log.h"
#include "libs/engine/sampling.h"
#include "libs/engine/sampling_proto.h"
#include "libs/grammar/gbnf.h"
#include "libs/engine/spec/spec_proto.h"
#include "services/gateway/chat_prompt.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxLogprobs = 20;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS: return "EOS";
    case v1::FINISH_REASON_LENGTH: return "LENGTH";
    case v1::FINISH_REASON_STOP: return "STOP";
    case v1::FINISH_REASON_CANCELLED: return "CANCELLED";
    default: return "-";
  }
}

// sampling.* checks: the converter shared with the worker (libs/engine/sampling_proto.h).
absl::Status ValidateSampling(const v1::SamplingParams& s) { return engine::SamplingParamsFromProto(s).status(); }

// logit_bias token ids against the model's vocabulary.
absl::Status ValidateLogitBiasIds(const v1::SamplingParams& s, int32_t n_vocab) {
  return engine::CheckLogitBiasIds(s, n_vocab);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// A Drafter over one draft-worker session (services/draft/draft_client.h): only new
// tokens cross the wire, each Propose has the client's deadline, failures are empty
// drafts (reported as errors so that the gateway counts them).
class DraftWorkerDrafter : public Drafter {
 public:
  explicit DraftWorkerDrafter(std::unique_ptr<draft::DraftSession> s) : s_(std::move(s)) {}
  absl::StatusOr<DraftProposal> Propose(const std::vector<int32_t>& new_tokens, int n_max) override {
    if (s_ == nullptr) return absl::FailedPreconditionError("the drafter has ended");
    s_->Append(new_tokens);
    draft::DraftReply r = s_->Propose(n_max);
    stats_ = s_->stats();
    if (!r.error.empty()) {
      return r.error == "deadline" ? absl::DeadlineExceededError("draft worker: deadline")
                                   : absl::UnavailableError(absl::StrCat("draft worker: ", r.error));
    }
    DraftProposal p;
    p.tokens = std::move(r.tokens);
    p.probs = std::move(r.probs);
    return p;
  }
  void Accepted(int n_accepted) override {
    if (s_ != nullptr) s_->Accepted(n_accepted);
  }
  void End() override {
    if (s_ == nullptr) return;
    stats_ = s_->stats();
    s_.reset();  // ends the session on its worker in the background
  }
  v1::SpeculativeStats Stats() const override { return s_ != nullptr ? s_->stats() : stats_; }

 private:
  std::unique_ptr<draft::DraftSession> s_;
  v1::SpeculativeStats stats_;
};

// Drops what the target worker would refuse (ending the whole sequence) from a draft: it
// is cut before its first token outside [0, n_vocab) and to `n_max` tokens; its
// distributions are kept only when there is a valid one per token (a draft without
// them is still verified exactly, by sample and match).
void SanitizeDraft(DraftProposal* d, int64_t n_vocab, int64_t n_max) {
  size_t n = std::min<size_t>(d->tokens.size(), static_cast<size_t>(std::max<int64_t>(0, n_max)));
  for (size_t i = 0; i < n; ++i) {
    if (d->tokens[i] < 0 || (n_vocab > 0 && d->tokens[i] >= n_vocab)) {
      n = i;
      break;
    }
  }
  d->tokens.resize(n);
  if (d->probs.empty()) return;
  bool ok = d->probs.size() >= n;
  for (size_t i = 0; ok && i < n; ++i) {
    const v1::DraftTokenProbs& q = d->probs[i];
    if (q.ids_size() == 0) continue;  // deterministic token
    if (q.ids_size() != q.p_size()) {
      ok = false;
      break;
    }
    double sum = 0, q_x = 0;
    for (int j = 0; j < q.ids_size(); ++j) {
      const float p = q.p(j);
      if (q.ids(j) < 0 || (n_vocab > 0 && q.ids(j) >= n_vocab) || !std::isfinite(p) || p < 0) {
        ok = false;
        break;
      }
      sum += p;
      if (q.ids(j) == d->tokens[i]) q_x += p;
    }
    ok = ok && sum > 0 && q_x > 0;
  }
  if (ok) {
    d->probs.resize(n);
  } else {
    d->probs.clear();
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// ---------------------------------------------------------------------------------
// Generation: one request from Prepare to the end of Run.


struct Gateway::Active {
  GenerateSink* sink = nullptr;
  absl::Time deadline;
  std::atomic<int> cancel{kNotCancelled};
  std::mutex mu;
  grpc::ClientContext* ctx = nullptr;  // the worker call in progress (guarded by mu)

  void SetContext(grpc::ClientContext* c) {
    std::lock_guard<std::mutex> l(mu);
    ctx = c;
    if (c != nullptr && cancel.load() != kNotCancelled) c->TryCancel();
  }
  void Cancel(int reason) {
    int expected = kNotCancelled;
    cancel.compare_exchange_strong(expected, reason);
    std::lock_guard<std::mutex> l(mu);
    if (ctx != nullptr) ctx->TryCancel();
  }
};

struct Gateway::Attempt {
  absl::Status status;
  bool retryable = false;  // nothing was produced; another worker may take the request
  bool finished = false;   // a last message was delivered
};

Gateway::Gateway(GatewayOptions opts, serving::Registry* metrics) : opts_(std::move(opts)) {
  requests_total_ = metrics->Counter("herd_gateway_requests_total", "Requests by method and status code.",
                                     {"method", "code"});
  tokens_total_ = metrics->Counter("herd_gateway_tokens_generated_total", "Tokens generated, by model.", {"model"});
  request_seconds_ = metrics->Histogram("herd_gateway_request_seconds", "Request latency in seconds, by method.",
                                        {"method"});
  ttft_seconds_ = metrics->Histogram("herd_gateway_time_to_first_token_seconds",
                                     "Time from request to the first generated token, by model.", {"model"});
  live_workers_ = metrics->Gauge("herd_gateway_live_workers", "Workers whose last Info call succeeded.");
  inflight_gauge_ = metrics->Gauge("herd_gateway_inflight_requests", "Generations in flight.");
  spec_calls_ = metrics->Counter("herd_gateway_spec_calls_total", "Speculative drafts asked for (#calls), by type.",
                                 {"type"});
  spec_gen_drafts_ = metrics->Counter("herd_gateway_spec_gen_drafts_total",
                                      "Non-empty drafts received (#gen drafts), by type.", {"type"});
  spec_acc_drafts_ = metrics->Counter("herd_gateway_spec_acc_drafts_total",
                                      "Drafts with at least one token accepted by the target (#acc drafts), by type.",
                                      {"type"});
  spec_gen_tokens_ = metrics->Counter("herd_gateway_spec_gen_tokens_total", "Tokens drafted (#gen tokens), by type.",
                                      {"type"});
  spec_acc_tokens_ = metrics->Counter("herd_gateway_spec_acc_tokens_total",
                                      "Drafted tokens the target accepted (#acc tokens), by type.", {"type"});
  spec_failures_ = metrics->Counter("herd_gateway_spec_draft_failures_total",
                                    "Draft requests that failed or missed their deadline (an empty draft each).",
                                    {"type"});
  opts_.pool.live_gauge = live_workers_;
  pool_ = std::make_unique<WorkerPool>(opts_.pool);
  vocabs_ = std::make_unique<VocabCache>(opts_.loader_address, opts_.loader_security);
  vocabs_->SetChatTemplateOverride(opts_.chat_template);
  if (!opts_.drafts.addresses.empty() || !opts_.drafts.dns.empty()) {
    draft_client_ = std::make_unique<draft::DraftClient>(opts_.drafts);
  }
}

Gateway::~Gateway() { Stop(); }

absl::Status Gateway::Start() {
  absl::Status s = pool_->Start();
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(active_mu_);
  stopping_ = false;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watchdog(); });
  return absl::OkStatus();
}

void Gateway::Stop() {
  CancelAll();
  WaitIdle(absl::Seconds(5));
  {
    std::lock_guard<std::mutex> l(active_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  pool_->Stop();
}

void Gateway::Watchdog() {
  std::unique_lock<std::mutex> l(active_mu_);
  while (!stopping_) {
    stop_cv_.wait_for(l, absl::ToChronoMilliseconds(opts_.cancel_poll));
    const absl::Time now = absl::Now();
    const bool all = cancel_all_.load();
    for (Active* a : active_) {
      if (a->cancel.load() != kNotCancelled) continue;
      if (all) {
        a->Cancel(kShutdown);
      } else if (a->sink != nullptr && a->sink->Cancelled()) {
        a->Cancel(kClientGone);
      } else if (now >= a->deadline) {
        a->Cancel(kDeadline);
      }
    }
  }
}

void Gateway::BeginDrain() { draining_ = true; }

void Gateway::CancelAll() {
  draining_ = true;
  cancel_all_ = true;
  std::lock_guard<std::mutex> l(active_mu_);
  for (Active* a : active_) a->Cancel(kShutdown);
}

bool Gateway::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> l(active_mu_);
  return idle_cv_.wait_for(l, absl::ToChronoMilliseconds(timeout), [this] { return active_.empty(); });
}

void Gateway::RecordRequest(const std::string& method, const absl::Status& status, absl::Duration elapsed) {
  finished_.fetch_add(1);
  requests_total_->Add(1, {method, absl::StatusCodeToString(status.code())});
  request_seconds_->Observe(absl::ToDoubleSeconds(elapsed), {method});
}

absl::StatusOr<std::unique_ptr<Gateway::Generation>> Gateway::Prepare(const v1::GenerateRequest& req,
                                                                      absl::Time deadline,
                                                                      const std::string& method) {
  auto g = std::make_unique<Generation>();
  g->start = absl::Now();
  g->id = absl::StrCat("gen-", next_id_.fetch_add(1));
  g->method = method;
  g->model = req.model();
  g->deadline = deadline;
  g->client_deadline = deadline;
  if (opts_.request_timeout > absl::ZeroDuration()) {
    g->deadline = std::min(g->deadline, g->start + opts_.request_timeout);
  }
  absl::Status st = [&]() -> absl::Status {
    if (draining_) return absl::UnavailableError("gateway is shutting down");
    // Fields first, in declaration order.
    if (req.model().empty()) return Invalid("model: required (a name from ListModels)");
    switch (req.prompt_case()) {
      case v1::GenerateRequest::kText: {
        // llama.cpp's server generates from BOS alone; herd asks for a prompt (protocol.md).
        if (req.text().empty()) return Invalid("prompt.text: empty (a prompt is required)");
        if (static_cast<int64_t>(req.text().size()) > opts_.max_prompt_bytes) {
          return Invalid(absl::StrCat("prompt.text: ", req.text().size(), " bytes exceeds the limit of ",
                                      opts_.max_prompt_bytes, " bytes"));
        }
        size_t bad = 0;
        if (!IsValidUtf8(req.text(), &bad)) return Invalid(absl::StrCat("prompt.text: invalid UTF-8 at byte ", bad));
        break;
      }
      case v1::GenerateRequest::kTokens: {
        if (req.tokens().ids().empty()) return Invalid("prompt.tokens: no token ids");
        for (int i = 0; i < req.tokens().ids_size(); ++i) {
          if (req.tokens().ids(i) < 0) {
            return Invalid(absl::StrCat("prompt.tokens.ids[", i, "]: ", req.tokens().ids(i), " is not a token id"));
          }
        }
        break;
      }
      case v1::GenerateRequest::kChat: {
        absl::Status cs = ValidateChatPrompt(req.chat(), opts_.max_prompt_bytes);
        if (!cs.ok()) return cs;
        break;
      }
      default:
        return Invalid("prompt: required (text, tokens or chat)");
    }
    absl::Status s = ValidateSampling(req.sampling());
    if (!s.ok()) return s;
    if (req.has_n_predict() && (req.n_predict() < -1 || req.n_predict() == 0)) {
      return Invalid(absl::StrCat("n_predict: must be -1 or 1..n_ctx (got ", req.n_predict(), ")"));
    }
    if (req.stop_size() > kMaxStops) {
      return Invalid(absl::StrCat("stop: at most ", kMaxStops, " strings (got ", req.stop_size(), ")"));
    }
    for (int i = 0; i < req.stop_size(); ++i) {
      const std::string& stop = req.stop(i);
      if (stop.empty() || stop.size() > kMaxStopBytes) {
        return Invalid(absl::StrCat("stop[", i, "]: must be 1..", kMaxStopBytes, " bytes (got ", stop.size(), ")"));
      }
      if (!IsValidUtf8(stop)) return Invalid(absl::StrCat("stop[", i, "]: invalid UTF-8"));
    }
    if (req.has_logprobs() && (req.logprobs() < 0 || req.logprobs() > kMaxLogprobs)) {
      return Invalid(absl::StrCat("logprobs: must be in 0..", kMaxLogprobs, " (got ", req.logprobs(), ")"));
    }
    auto spec = engine::spec::SpecConfigFromProto(req.speculative(), opts_.spec_defaults, "speculative.");
    if (!spec.ok()) return spec.status();
    g->spec = *spec;

    // The model.
    switch (pool_->GetModelState(req.model())) {
      case WorkerPool::ModelState::kUnknown: {
        std::set<std::string> names;
        for (const WorkerSnapshot& w : pool_->Snapshot()) {
          if (w.live) names.insert(w.info.model());
        }
        return absl::NotFoundError(absl::StrCat("model '", ShortName(req.model()), "' not found (served: ",
                                                names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
      }
      case WorkerPool::ModelState::kNoLiveWorker:
        return absl::UnavailableError(absl::StrCat("model '", ShortName(req.model()), "': no live worker serves it"));
      case WorkerPool::ModelState::kLive:
        break;
    }
    auto vocab = vocabs_->Get(req.model(), g->deadline);
    if (!vocab.ok()) return vocab.status();
    g->vocab = *vocab;

    // The prompt.
    if (req.prompt_case() == v1::GenerateRequest::kText) {
      g->prompt = g->vocab->Tokenize(req.text(), /*add_special=*/true, /*parse_special=*/true);
      if (g->prompt.empty()) return Invalid("prompt.text: tokenizes to no tokens");
    } else if (req.prompt_case() == v1::GenerateRequest::kChat) {
      auto tmpl = vocabs_->GetChatTemplate(req.model(), g->deadline);
      if (!tmpl.ok()) return tmpl.status();
      auto text = RenderChatPrompt(req.chat(), **tmpl, *g->vocab);
      if (!text.ok()) return text.status();
      g->prompt = g->vocab->Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
      if (g->prompt.empty()) return Invalid("chat: the rendered prompt tokenizes to no tokens");
    } else {
      g->prompt.assign(req.tokens().ids().begin(), req.tokens().ids().end());
      for (size_t i = 0; i < g->prompt.size(); ++i) {
        if (!g->vocab->IsValid(g->prompt[i])) {
          return Invalid(absl::StrCat("prompt.tokens.ids[", i, "]: ", g->prompt[i], " is outside the vocabulary [0, ",
                                      g->vocab->n_tokens(), ")"));
        }
      }
    }
    int64_t max_ctx = 0;   // the longest sequence a live worker of the model can hold
    int64_t max_n_ctx = 0; // the largest KV cache of those workers (n_predict's bound)
    for (const WorkerSnapshot& w : pool_->LiveWorkersFor(req.model())) {
      max_ctx = std::max(max_ctx, w.info.n_ctx_seq() > 0 ? w.info.n_ctx_seq() : w.info.n_ctx());
      max_n_ctx = std::max(max_n_ctx, w.info.n_ctx());
      if (w.info.n_vocab() > 0 && w.info.n_vocab() != g->vocab->n_tokens()) {
        HERD_LOG(Warning) << "worker " << w.address << " reports n_vocab " << w.info.n_vocab() << " but the vocabulary of "
                          << ShortName(req.model()) << " has " << g->vocab->n_tokens() << " tokens";
      }
    }
    // The context holds prompt and completion (llama.cpp's server): a prompt of n_ctx
    // tokens or more leaves no room for a token.
    if (max_ctx > 0 && static_cast<int64_t>(g->prompt.size()) >= max_ctx) {
      return Invalid(absl::StrCat("prompt: ", g->prompt.size(), " tokens do not fit in the context of the model's workers (n_ctx ",
                                  max_ctx, "; prompt + completion must fit)"));
    }
    // n_predict is bounded by n_ctx (the proto's 1..n_ctx); a sequence whose context
    // (n_ctx_seq) fills up first ends with FINISH_REASON_LENGTH.
    max_n_ctx = std::max(max_n_ctx, max_ctx);
    g->n_predict = req.has_n_predict() ? req.n_predict() : opts_.default_n_predict;
    if (max_n_ctx > 0 && g->n_predict > max_n_ctx) {
      if (req.has_n_predict()) {
        return Invalid(absl::StrCat("n_predict: ", g->n_predict, " exceeds the context (n_ctx ", max_n_ctx, ")"));
      }
      g->n_predict = -1;  // the default is only a default: until the context is full
    }
    g->stops.assign(req.stop().begin(), req.stop().end());
    g->logprobs = req.has_logprobs() ? req.logprobs() : 0;
    g->ignore_eos = req.ignore_eos();
    if (absl::Status b = ValidateLogitBiasIds(req.sampling(), g->vocab->n_tokens()); !b.ok()) return b;
    g->sampling = req.sampling();
    return absl::OkStatus();
  }();
  if (!st.ok()) {
    RecordRequest(method, st, absl::Now() - g->start);
    HERD_LOG(Info) << "request id=" << g->id << " method=" << method << " model=" << ShortName(req.model())
                   << " code=" << absl::StatusCodeToString(st.code()) << " error=\"" << st.message() << "\"";
    return st;
  }
  return g;
}

absl::Status Gateway::Generate(const v1::GenerateRequest& req, absl::Time deadline, GenerateSink* sink,
                               const std::string& method) {
  auto g = Prepare(req, deadline, method);
  if (!g.ok()) return g.status();
  return Run(**g, sink);
}

bool Gateway::CutByGateway(const Generation& g, int reason) {
  return reason == kShutdown || (reason == kDeadline && g.deadline < g.client_deadline);
}

bool Gateway::Emit(Generation& g, GenerateSink* sink, v1::GenerateResponse* msg) {
  if (msg->token_ids_size() > 0 && g.first_token_time == absl::InfinitePast()) {
    g.first_token_time = absl::Now();
    ttft_seconds_->Observe(absl::ToDoubleSeconds(g.first_token_time - g.start), {g.model});
  }
  g.any_message = true;
  return sink->Write(*msg);
}

absl::Status Gateway::Run(Generation& g, GenerateSink* sink) {
  Active active;
  active.sink = sink;
  active.deadline = g.deadline;
  {
    std::lock_guard<std::mutex> l(active_mu_);
    active_.push_back(&active);
    if (cancel_all_) active.cancel = kShutdown;
  }
  inflight_gauge_->Set(++inflight_);

  std::set<std::string> tried;
  absl::Status status;
  absl::Status last_error;
  for (int attempt = 0;; ++attempt) {
    if (active.cancel.load() != kNotCancelled) {
      status = absl::CancelledError("cancelled before a worker was found");
      break;
    }
    auto lease = pool_->Acquire(g.model, static_cast<int64_t>(g.prompt.size()), tried);
    if (!lease.ok()) {
      status = last_error.ok() ? lease.status() : last_error;
      break;
    }
    g.worker = lease->address();
    Attempt a = RunOnWorker(g, *lease, sink, &active, attempt);
    status = a.status;
    if (a.status.ok() || !a.retryable || attempt + 1 >= opts_.max_attempts) break;
    HERD_LOG(Info) << "request id=" << g.id << ": worker " << lease->address() << " failed before the first token ("
                   << a.status.message() << "); trying another worker";
    last_error = a.status;
    tried.insert(lease->address());
  }
  // A request cut by its deadline or a shutdown before any worker ran still gets its
  // last message.
  const int reason = active.cancel.load();
  if (!status.ok() && g.finish == v1::FINISH_REASON_UNSPECIFIED && CutByGateway(g, reason)) {
    v1::GenerateResponse last;
    last.set_finish_reason(v1::FINISH_REASON_CANCELLED);
    v1::Usage* u = last.mutable_usage();
    u->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
    u->set_total_ms(Ms(absl::Now() - g.start));
    g.finish = v1::FINISH_REASON_CANCELLED;
    status = Emit(g, sink, &last) ? absl::OkStatus() : absl::CancelledError("client went away");
  }

  {
    std::lock_guard<std::mutex> l(active_mu_);
    active_.remove(&active);
    if (active_.empty()) idle_cv_.notify_all();
  }
  inflight_gauge_->Set(--inflight_);
  if (g.completion > 0) tokens_total_->Add(g.completion, {g.model});
  const absl::Duration total = absl::Now() - g.start;
  RecordRequest(g.method, status, total);
  HERD_LOG(Info) << "request id=" << g.id << " method=" << g.method << " model=" << g.model
                 << " worker=" << (g.worker.empty() ? "-" : g.worker) << " prompt_tokens=" << g.prompt.size()
                 << " completion_tokens=" << g.completion << " finish=" << FinishName(g.finish)
                 << " code=" << absl::StatusCodeToString(status.code()) << " queue_ms=" << g.queue_ms
                 << " ttft_ms="
                 << (g.first_token_time == absl::InfinitePast() ? -1.0 : Ms(g.first_token_time - g.start))
                 << " total_ms=" << Ms(total) << (status.ok() ? "" : absl::StrCat(" error=\"", status.message(), "\""));
  if (g.speculative) {
    // llama.cpp's common_speculative_print_stats line.
    HERD_LOG(Info) << "request id=" << g.id << " " << engine::spec::SpecStatsFromProto(g.spec_stats).ToString();
  }
  return status;
}

std::unique_ptr<Drafter> Gateway::MakeDrafter(const Generation& g, int attempt) {
  if (g.spec.type == engine::spec::SpecType::kNone) return nullptr;
  DrafterParams p;
  p.session_id = absl::StrCat(g.id, "-", attempt);
  p.model = g.model;
  engine::spec::SpecConfigToProto(g.spec, &p.config);
  p.temperature = g.sampling.has_temperature() ? g.sampling.temperature() : engine::SamplingParams().temp;
  if (g.sampling.has_seed()) {
    p.seed = g.sampling.seed();
  } else {
    p.seed = static_cast<uint32_t>(absl::ToUnixNanos(g.start)) ^ static_cast<uint32_t>(std::hash<std::string>()(g.id));
  }
  if (opts_.drafter_factory) return opts_.drafter_factory(p);
  if (draft_client_ == nullptr) return nullptr;
  return std::make_unique<DraftWorkerDrafter>(
      draft_client_->NewSession(p.session_id, p.model, p.config, p.temperature, p.seed));
}

void Gateway::RecordSpecStats(const v1::SpeculativeStats& s) {
  const std::vector<std::string> label = {s.type().empty() ? std::string("none") : s.type()};
  spec_calls_->Add(static_cast<double>(s.calls()), label);
  spec_gen_drafts_->Add(static_cast<double>(s.gen_drafts()), label);
  spec_acc_drafts_->Add(static_cast<double>(s.acc_drafts()), label);
  spec_gen_tokens_->Add(static_cast<double>(s.gen_tokens()), label);
  spec_acc_tokens_->Add(static_cast<double>(s.acc_tokens()), label);
}

Gateway::Attempt Gateway::RunOnWorker(Generation& g, WorkerPool::Lease& lease, GenerateSink* sink, Active* active,
                                      int attempt) {
  Attempt result;
  const std::string& addr = lease.address();
  const int64_t n_ctx_seq = lease.info().n_ctx_seq() > 0 ? lease.info().n_ctx_seq() : lease.info().n_ctx();
  const int64_t max_draft = lease.info().max_draft();  // 0: not reported
  const int64_t n_vocab = lease.info().n_vocab() > 0 ? lease.info().n_vocab() : g.vocab->n_tokens();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(g.deadline));
  active->SetContext(&ctx);
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream =
      lease.stub()->Session(&ctx);

  std::unique_ptr<Drafter> drafter = MakeDrafter(g, attempt);
  const std::string spec_type = engine::spec::SpecTypeName(g.spec.type);

  bool started = false;
  bool stream_broken = false;  // a Read/Write failed (the worker or we ended the call)
  bool client_gone = false;
  v1::SessionResponse resp;

  do {
    v1::SessionRequest start_req;
    v1::SessionStart* start = start_req.mutable_start();
    start->mutable_prompt()->Add(g.prompt.begin(), g.prompt.end());
    *start->mutable_sampling() = g.sampling;
    if (g.logprobs > 0) start->set_logprobs(g.logprobs);
    start->set_ignore_eos(g.ignore_eos);
    const int64_t budget =
        g.n_predict > 0 ? g.n_predict : std::max<int64_t>(1, n_ctx_seq - static_cast<int64_t>(g.prompt.size()));
    // Without a drafter the whole generation is one Step: send it with the Start (the
    // worker accepts Steps before Started) to save a round trip before the first token.
    const bool pipelined = drafter == nullptr;
    v1::SessionRequest first_step;
    first_step.mutable_step()->set_n_steps(
        static_cast<int32_t>(std::min<int64_t>(budget, std::numeric_limits<int32_t>::max())));

    // The speculative loop's state: tokens the drafter has not seen yet (the prompt
    // first).
    std::vector<int32_t> unsent = g.prompt;
    // Asks the drafter for the next draft, capped so that the pass it rides on produces
    // no token past n_predict (accepted + 1 <= remaining) and fits the sequence's
    // context (pending token + draft). Too little room for draft_min tokens: no call
    // (llama.cpp's server skips drafting there too). Failures are empty drafts.
    auto propose = [&]() -> DraftProposal {
      DraftProposal d;
      const int64_t remaining = budget - g.completion;
      const int64_t room = n_ctx_seq - static_cast<int64_t>(g.prompt.size()) - g.completion;
      int64_t cap = std::min<int64_t>({remaining - 1, room, static_cast<int64_t>(g.spec.draft_max)});
      if (max_draft > 0) cap = std::min(cap, max_draft);
      if (cap < std::max<int64_t>(1, g.spec.draft_min)) return d;
      auto r = drafter->Propose(unsent, static_cast<int>(cap));
      unsent.clear();
      if (!r.ok()) {
        spec_failures_->Add(1, {spec_type});
        HERD_LOG(Debug) << "request id=" << g.id << ": empty draft: " << r.status();
        return d;
      }
      d = *std::move(r);
      SanitizeDraft(&d, n_vocab, cap);
      return d;
    };

    if (!stream->Write(start_req) || (pipelined && !stream->Write(first_step))) {
      stream_broken = true;
      break;
    }
    // With a drafter, the first draft continues the prompt itself: ask for it while the
    // worker admits the sequence and processes the prompt.
    DraftProposal first_draft;
    if (drafter != nullptr) first_draft = propose();
    if (!stream->Read(&resp)) {
      stream_broken = true;
      break;
    }
    if (!resp.has_started()) {
      result.status = absl::InternalError(absl::StrCat("worker ", addr, ": protocol error: expected Started"));
      break;
    }
    started = true;
    g.queue_ms = resp.started().queue_ms();

    tokenizer::StreamingDetokenizer detok(*g.vocab, /*special=*/false);
    StopStringMatcher stops(g.stops);
    const bool sampled = g.sampling.has_temperature() ? g.sampling.temperature() > 0 : true;

    for (int iteration = 0; g.finish == v1::FINISH_REASON_UNSPECIFIED; ++iteration) {
      const int64_t remaining = budget - g.completion;
      // One iteration: optionally a draft (verified in one pass), else n_steps passes.
      DraftProposal draft;
      if (drafter != nullptr) draft = iteration == 0 ? std::move(first_draft) : propose();
      v1::SessionRequest step_req;
      v1::SessionStep* step = step_req.mutable_step();
      int64_t expected;
      if (!draft.tokens.empty()) {
        step->mutable_draft()->Add(draft.tokens.begin(), draft.tokens.end());
        // A sampled draft's distributions let the worker verify by rejection sampling
        // (a greedy target ignores them, so they are not sent then).
        if (sampled) {
          for (v1::DraftTokenProbs& q : draft.probs) *step->add_draft_probs() = std::move(q);
        }
        step->set_n_steps(1);
        expected = 1;
      } else {
        expected = drafter != nullptr ? 1 : std::min<int64_t>(remaining, std::numeric_limits<int32_t>::max());
        step->set_n_steps(static_cast<int32_t>(expected));
      }
      if (!(pipelined && iteration == 0) && !stream->Write(step_req)) {
        stream_broken = true;
        break;
      }
      for (int64_t k = 0; k < expected && g.finish == v1::FINISH_REASON_UNSPECIFIED; ++k) {
        if (!stream->Read(&resp)) {
          stream_broken = true;
          break;
        }
        if (!resp.has_step()) {
          result.status = absl::InternalError(absl::StrCat("worker ", addr, ": protocol error: expected StepResult"));
          break;
        }
        const v1::StepResult& sr = resp.step();
        g.prompt_ms = sr.prompt_ms();
        g.generation_ms = sr.generation_ms();
        if (!draft.tokens.empty()) drafter->Accepted(sr.n_accepted());
        unsent.insert(unsent.end(), sr.tokens().begin(), sr.tokens().end());
        v1::GenerateResponse msg;
        std::string piece;
        const int64_t take = std::min<int64_t>(sr.tokens_size(), budget - g.completion);
        for (int64_t i = 0; i < take; ++i) {
          const int32_t id = sr.tokens(static_cast<int>(i));
          msg.add_token_ids(id);
          ++g.completion;
          piece += detok.Push(id);
          if (g.logprobs > 0 && i < sr.logprobs_size()) {
            v1::TokenLogprobs* lp = msg.add_logprobs();
            *lp = sr.logprobs(static_cast<int>(i));
            for (v1::TokenLogprob& t : *lp->mutable_top()) {
              t.set_text(SanitizeUtf8(g.vocab->TokenToPiece(t.token_id(), false)));
            }
          }
        }
        std::string text = stops.Push(piece);
        if (stops.matched()) {
          g.finish = v1::FINISH_REASON_STOP;
        } else if (sr.eos() && !g.ignore_eos) {
          g.finish = v1::FINISH_REASON_EOS;
        } else if (sr.context_full() || g.completion >= budget) {
          g.finish = v1::FINISH_REASON_LENGTH;
        }
        // An eos result ends the worker's current run of steps even with ignore_eos
        // (worker.proto): the next iteration asks for the rest.
        const bool run_ended = sr.eos() && g.finish == v1::FINISH_REASON_UNSPECIFIED;
        if (g.finish != v1::FINISH_REASON_UNSPECIFIED && g.finish != v1::FINISH_REASON_STOP) {
          // End of the stream: release what the detokenizer and the stop matcher hold.
          text += stops.Push(detok.Flush());
          if (stops.matched()) {
            g.finish = v1::FINISH_REASON_STOP;
          } else {
            text += stops.Flush();
          }
        }
        msg.set_text(std::move(text));
        if (g.finish != v1::FINISH_REASON_UNSPECIFIED) {
          msg.set_finish_reason(g.finish);
          v1::Usage* u = msg.mutable_usage();
          u->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
          u->set_completion_tokens(g.completion);
          u->set_prompt_ms(g.prompt_ms);
          u->set_generation_ms(g.generation_ms);
          u->set_queue_ms(g.queue_ms);
          u->set_total_ms(Ms(absl::Now() - g.start));
          if (drafter != nullptr) *msg.add_speculative() = drafter->Stats();
        }
        if (!Emit(g, sink, &msg)) {
          client_gone = true;
          active->Cancel(kClientGone);
          break;
        }
        if (run_ended) break;
      }
      if (stream_broken || client_gone || !result.status.ok()) break;
    }
  } while (false);

  if (drafter != nullptr) {
    drafter->End();
    g.speculative = true;
    g.spec_stats = drafter->Stats();
    RecordSpecStats(g.spec_stats);
  }
  // Close the worker sequence right away: Cancel, then end the call so that its KV
  // cells are freed even if the message is never read.
  const bool finished = g.finish != v1::FINISH_REASON_UNSPECIFIED;
  grpc::Status wst;
  if (stream_broken && !finished) {
    // The worker (or our cancel) ended the call: collect its status.
    if (active->cancel.load() != kNotCancelled) ctx.TryCancel();
    while (stream->Read(&resp)) {
    }
    wst = stream->Finish();
  } else {
    v1::SessionRequest cancel;
    cancel.mutable_cancel();
    stream->Write(cancel);
    stream->WritesDone();
    ctx.TryCancel();
    while (stream->Read(&resp)) {
    }
    stream->Finish();
  }
  active->SetContext(nullptr);

  if (finished && !client_gone) {
    result.finished = true;
    result.status = absl::OkStatus();
    return result;
  }
  const int reason = active->cancel.load();
  if (client_gone || reason == kClientGone) {
    result.status = absl::CancelledError("client cancelled");
    return result;
  }
  if (reason == kDeadline || reason == kShutdown || (stream_broken && absl::Now() >= g.deadline)) {
    if (reason == kNotCancelled) active->cancel = kDeadline;
    result.status = absl::DeadlineExceededError(
        reason == kShutdown ? "gateway shutting down" : "request deadline exceeded");
    // Cut by the gateway (its request timeout, a shutdown): the client still gets a
    // last message with what there is. (Run() sends it when no worker started.) At the
    // client's own deadline nobody is listening: DEADLINE_EXCEEDED.
    if (started && CutByGateway(g, active->cancel.load())) {
      v1::GenerateResponse last;
      last.set_finish_reason(v1::FINISH_REASON_CANCELLED);
      v1::Usage* u = last.mutable_usage();
      u->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
      u->set_completion_tokens(g.completion);
      u->set_prompt_ms(g.prompt_ms);
      u->set_generation_ms(g.generation_ms);
      u->set_queue_ms(g.queue_ms);
      u->set_total_ms(Ms(absl::Now() - g.start));
      if (drafter != nullptr) *last.add_speculative() = g.spec_stats;
      g.finish = v1::FINISH_REASON_CANCELLED;
      result.status = Emit(g, sink, &last) ? absl::OkStatus() : absl::CancelledError("client went away");
      result.finished = true;
    }
    return result;
  }
  if (!result.status.ok()) {  // protocol error
    pool_->ReportFailure(addr, std::string(result.status.message()));
    result.status = absl::UnavailableError(std::string(result.status.message()));
    result.retryable = g.completion == 0 && !g.any_message;
    return result;
  }
  // The worker ended the call.
  const std::string wmsg = wst.ok() ? std::string("closed the session early") : wst.error_message();
  const grpc::StatusCode code = wst.error_code();
  const bool nothing_produced = g.completion == 0 && !g.any_message;
  if (code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::FAILED_PRECONDITION ||
      code == grpc::StatusCode::OUT_OF_RANGE) {
    result.status = absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat("worker ", addr, ": ", wmsg));
    return result;
  }
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    result.status = absl::ResourceExhaustedError(absl::StrCat("worker ", addr, ": ", wmsg));
    result.retryable = nothing_produced;
    return result;
  }
  pool_->ReportFailure(addr, wmsg);
  result.status = absl::UnavailableError(
      absl::StrCat("worker ", addr, started ? " failed mid-stream: " : " unavailable: ", wmsg));
  result.retryable = nothing_produced;
  return result;
}

absl::StatusOr<v1::TokenizeResponse> Gateway::Tokenize(const v1::TokenizeRequest& req, absl::Time deadline) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::TokenizeResponse> out = [&]() -> absl::StatusOr<v1::TokenizeResponse> {
    if (req.model().empty()) return Invalid("model: required");
    if (static_cast<int64_t>(req.text().size()) > opts_.max_prompt_bytes) {
      return Invalid(absl::StrCat("text: ", req.text().size(), " bytes exceeds the limit of ", opts_.max_prompt_bytes,
                                  " bytes"));
    }
    size_t bad = 0;
    if (!IsValidUtf8(req.text(), &bad)) return Invalid(absl::StrCat("text: invalid UTF-8 at byte ", bad));
    auto vocab = vocabs_->Get(req.model(), deadline);
    if (!vocab.ok()) return vocab.status();
    v1::TokenizeResponse resp;
    std::vector<int32_t> ids = (*vocab)->Tokenize(req.text(), req.add_special(), req.parse_special());
    resp.mutable_ids()->Add(ids.begin(), ids.end());
    return resp;
  }();
  RecordRequest("Tokenize", out.status(), absl::Now() - t0);
  return out;
}

absl::StatusOr<v1::DetokenizeResponse> Gateway::Detokenize(const v1::DetokenizeRequest& req, absl::Time deadline) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::DetokenizeResponse> out = [&]() -> absl::StatusOr<v1::DetokenizeResponse> {
    if (req.model().empty()) return Invalid("model: required");
    auto vocab = vocabs_->Get(req.model(), deadline);
    if (!vocab.ok()) return vocab.status();
    std::vector<int32_t> ids(req.ids().begin(), req.ids().end());
    absl::Status s = (*vocab)->ValidateTokens(ids);
    if (!s.ok()) return Invalid(absl::StrCat("ids: ", s.message()));
    v1::DetokenizeResponse resp;
    resp.set_text(SanitizeUtf8((*vocab)->Detokenize(ids)));
    return resp;
  }();
  RecordRequest("Detokenize", out.status(), absl::Now() - t0);
  return out;
}

v1::ListModelsResponse Gateway::ListModels() const {
  std::map<std::string, v1::ModelCard> cards;
  std::map<std::string, std::set<std::string>> backends;
  for (const WorkerSnapshot& w : pool_->Snapshot()) {
    if (!w.live || w.info.model().empty()) continue;
    v1::ModelCard& c = cards[w.info.model()];
    c.set_name(w.info.model());
    if (c.architecture().empty()) c.set_architecture(w.info.architecture());
    c.set_n_ctx(std::max(c.n_ctx(), w.info.n_ctx_seq() > 0 ? w.info.n_ctx_seq() : w.info.n_ctx()));
    c.set_n_vocab(w.info.n_vocab());
    c.set_workers(c.workers() + 1);
    if (!w.info.backend().empty()) backends[w.info.model()].insert(w.info.backend());
  }
  for (auto& [name, c] : cards) c.set_chat_template(vocabs_->ChatTemplateOrigin(name));
  v1::ListModelsResponse resp;
  for (auto& [name, card] : cards) {
    for (const std::string& b : backends[name]) card.add_backends(b);
    *resp.add_models() = card;
  }
  return resp;
}

// ---------------------------------------------------------------------------------
// gRPC adapter.

namespace {

absl::Time DeadlineOf(const grpc::ServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

class GrpcSink : public GenerateSink {
 public:
  GrpcSink(grpc::ServerContext* ctx, grpc::ServerWriter<v1::GenerateResponse>* w) : ctx_(ctx), w_(w) {}
  bool Write(const v1::GenerateResponse& msg) override { return w_->Write(msg); }
  bool Cancelled() override { return ctx_->IsCancelled(); }

 private:
  grpc::ServerContext* ctx_;
  grpc::ServerWriter<v1::GenerateResponse>* w_;
};

}  // namespace

namespace {

template <typename Lenient, typename Public>
absl::StatusOr<Public> Reparse(const Lenient& req) {
  std::string wire;
  Public out;
  if (!req.SerializeToString(&wire) || !out.ParseFromString(wire)) {
    return absl::InvalidArgumentError("request: cannot be parsed");
  }
  return out;
}

absl::Status CheckUtf8(const std::string& field, const std::string& s) {
  size_t bad = 0;
  if (IsValidUtf8(s, &bad)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": invalid UTF-8 at byte ", bad));
}

}  // namespace

absl::StatusOr<v1::GenerateRequest> FromLenient(const lenient::GenerateRequest& req) {
  absl::Status s = CheckUtf8("model", req.model());
  if (s.ok() && req.has_text()) s = CheckUtf8("prompt.text", req.text());
  for (int i = 0; s.ok() && i < req.chat().messages_size(); ++i) {
    const lenient::ChatMessage& m = req.chat().messages(i);
    const std::string f = absl::StrCat("chat.messages[", i, "].");
    s = CheckUtf8(f + "role", m.role());
    if (s.ok()) s = CheckUtf8(f + "content", m.content());
    if (s.ok()) s = CheckUtf8(f + "name", m.name());
    if (s.ok()) s = CheckUtf8(f + "tool_call_id", m.tool_call_id());
    if (s.ok()) s = CheckUtf8(f + "tool_calls_json", m.tool_calls_json());
  }
  if (s.ok()) s = CheckUtf8("chat.tools_json", req.chat().tools_json());
  for (int i = 0; s.ok() && i < req.stop_size(); ++i) s = CheckUtf8(absl::StrCat("stop[", i, "]"), req.stop(i));
  if (s.ok()) s = CheckUtf8("speculative.type", req.speculative().type());
  if (s.ok()) s = CheckUtf8("sampling.grammar", req.sampling().grammar());
  if (!s.ok()) return s;
  return Reparse<lenient::GenerateRequest, v1::GenerateRequest>(req);
}

absl::StatusOr<v1::TokenizeRequest> FromLenient(const lenient::TokenizeRequest& req) {
  absl::Status s = CheckUtf8("model", req.model());
  if (s.ok()) s = CheckUtf8("text", req.text());
  if (!s.ok()) return s;
  return Reparse<lenient::TokenizeRequest, v1::TokenizeRequest>(req);
}

absl::StatusOr<v1::DetokenizeRequest> FromLenient(const lenient::DetokenizeRequest& req) {
  absl::Status s = CheckUtf8("model", req.model());
  if (!s.ok()) return s;
  return Reparse<lenient::DetokenizeRequest, v1::DetokenizeRequest>(req);
}

namespace {

// Requests arrive as raw bytes and are parsed here: when gRPC parses them itself, a
// malformed message ends the call with INTERNAL and an empty message (its
// SerializationTraits cannot say more), which reads as a server bug.
template <typename Msg>
absl::Status ParseRequest(const grpc::ByteBuffer& raw, absl::string_view type, Msg* out) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (raw.Dump(&slices).ok()) {
    bytes.reserve(raw.Length());
    for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  if (!out->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request: ", bytes.size(), " bytes are not a valid ", type, " protobuf message"));
  }
  return absl::OkStatus();
}

}  // namespace

GatewayServiceImpl::GatewayServiceImpl(Gateway* gateway) : gw_(gateway) {
  using grpc::internal::RpcMethod;
  using grpc::internal::RpcServiceMethod;
  // Every handler takes the raw request (ParseRequest above) and records a malformed
  // one like any other INVALID_ARGUMENT.
  auto bad = [](GatewayServiceImpl* s, const char* method, const absl::Status& st) {
    s->gw_->RecordRequest(method, st, absl::ZeroDuration());
    return ToGrpcStatus(st);
  };
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Generate", RpcMethod::SERVER_STREAMING,
      new grpc::internal::ServerStreamingHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::GenerateResponse>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                grpc::ServerWriter<v1::GenerateResponse>* w) {
            lenient::GenerateRequest req;
            if (absl::Status st = ParseRequest(*raw, "herd.v1.GenerateRequest", &req); !st.ok()) {
              return bad(s, "Generate", st);
            }
            return s->Generate(ctx, &req, w);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Tokenize", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::TokenizeResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::TokenizeResponse* resp) {
            lenient::TokenizeRequest req;
            if (absl::Status st = ParseRequest(*raw, "herd.v1.TokenizeRequest", &req); !st.ok()) {
              return bad(s, "Tokenize", st);
            }
            return s->Tokenize(ctx, &req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Detokenize", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::DetokenizeResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::DetokenizeResponse* resp) {
            lenient::DetokenizeRequest req;
            if (absl::Status st = ParseRequest(*raw, "herd.v1.DetokenizeRequest", &req); !st.ok()) {
              return bad(s, "Detokenize", st);
            }
            return s->Detokenize(ctx, &req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/ListModels", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::ListModelsResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::ListModelsResponse* resp) {
            v1::ListModelsRequest req;
            if (absl::Status st = ParseRequest(*raw, "herd.v1.ListModelsRequest", &req); !st.ok()) {
              return bad(s, "ListModels", st);
            }
            return s->ListModels(ctx, &req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Embed", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::EmbedResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::EmbedResponse* resp) {
            v1::EmbedRequest req;
            if (absl::Status st = ParseRequest(*raw, "herd.v1.EmbedRequest", &req); !st.ok()) {
              return bad(s, "Embed", st);
            }
            return s->Embed(ctx, &req, resp);
          },
          this)));
}

grpc::Status GatewayServiceImpl::Generate(grpc::ServerContext* ctx, const lenient::GenerateRequest* lreq,
                                          grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto req = FromLenient(*lreq);
  if (!req.ok()) {
    gw_->RecordRequest("Generate", req.status(), absl::ZeroDuration());
    return ToGrpcStatus(req.status());
  }
  GrpcSink sink(ctx, writer);
  return ToGrpcStatus(gw_->Generate(*req, DeadlineOf(ctx), &sink, "Generate"));
}

grpc::Status GatewayServiceImpl::Tokenize(grpc::ServerContext* ctx, const lenient::TokenizeRequest* lreq,
                                          v1::TokenizeResponse* resp) {
  auto req = FromLenient(*lreq);
  if (!req.ok()) {
    gw_->RecordRequest("Tokenize", req.status(), absl::ZeroDuration());
    return ToGrpcStatus(req.status());
  }
  auto r = gw_->Tokenize(*req, DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GatewayServiceImpl::Detokenize(grpc::ServerContext* ctx, const lenient::DetokenizeRequest* lreq,
                                            v1::DetokenizeResponse* resp) {
  auto req = FromLenient(*lreq);
  if (!req.ok()) {
    gw_->RecordRequest("Detokenize", req.status(), absl::ZeroDuration());
    return ToGrpcStatus(req.status());
  }
  auto r = gw_->Detokenize(*req, DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GatewayServiceImpl::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* resp) {
  const absl::Time t0 = absl::Now();
  v1::ListModelsResponse models = gw_->ListModels();
  resp->Swap(&models);
  gw_->RecordRequest("ListModels", absl::OkStatus(), absl::Now() - t0);
  return grpc::Status::OK;
}

}  // namespace herd::gateway
