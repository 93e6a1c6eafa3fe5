#include "services/gateway/gateway.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/clients/draft_source.h"
#include "libs/engine/sampling.h"
#include "libs/engine/spec/spec_loop.h"
#include "libs/engine/spec/spec_proto.h"
#include "libs/toolcall/forced_call.h"
#include "services/gateway/chat_prompt.h"
#include "services/gateway/completion.h"
#include "services/gateway/request_validation.h"
#include "services/gateway/run_state.h"
#include "services/gateway/text_stream.h"
#include "services/gateway/worker_session.h"

namespace herd::gateway {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
      return "EOS";
    case v1::FINISH_REASON_LENGTH:
      return "LENGTH";
    case v1::FINISH_REASON_STOP:
      return "STOP";
    case v1::FINISH_REASON_CANCELLED:
      return "CANCELLED";
    default:
      return "-";
  }
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

// ---------------------------------------------------------------------------------
// Generation: one request from Prepare to the end of Run.

Gateway::Gateway(GatewayOptions opts, serving::Registry* metrics) : opts_(std::move(opts)) {
  requests_total_ =
      metrics->Counter("herd_gateway_requests_total", "Requests by method and status code.", {"method", "code"});
  tokens_total_ = metrics->Counter("herd_gateway_tokens_generated_total", "Tokens generated, by model.", {"model"});
  request_seconds_ =
      metrics->Histogram("herd_gateway_request_seconds", "Request latency in seconds, by method.", {"method"});
  ttft_seconds_ = metrics->Histogram("herd_gateway_time_to_first_token_seconds",
                                     "Time from request to the first generated token, by model.", {"model"});
  live_workers_ = metrics->Gauge("herd_gateway_live_workers", "Workers whose last Info call succeeded.");
  inflight_gauge_ = metrics->Gauge("herd_gateway_inflight_requests", "Generations in flight.");
  spec_calls_ =
      metrics->Counter("herd_gateway_spec_calls_total", "Speculative drafts asked for (#calls), by type.", {"type"});
  spec_gen_drafts_ = metrics->Counter("herd_gateway_spec_gen_drafts_total",
                                      "Non-empty drafts received (#gen drafts), by type.", {"type"});
  spec_acc_drafts_ =
      metrics->Counter("herd_gateway_spec_acc_drafts_total",
                       "Drafts with at least one token accepted by the target (#acc drafts), by type.", {"type"});
  spec_gen_tokens_ =
      metrics->Counter("herd_gateway_spec_gen_tokens_total", "Tokens drafted (#gen tokens), by type.", {"type"});
  spec_acc_tokens_ = metrics->Counter("herd_gateway_spec_acc_tokens_total",
                                      "Drafted tokens the target accepted (#acc tokens), by type.", {"type"});
  spec_failures_ =
      metrics->Counter("herd_gateway_spec_draft_failures_total",
                       "Draft requests that failed or missed their deadline (an empty draft each).", {"type"});
  opts_.pool.live_gauge = live_workers_;
  opts_.pool.route_decisions = metrics->Counter(
      "herd_gateway_route_decisions_total",
      "Workers chosen for generations, by reason: least_loaded, prefix (longest cached prompt prefix within the load "
      "slack), prefix_overloaded (a longer prefix sat on a worker beyond the slack).",
      {"reason"});
  opts_.pool.prefix_tokens_expected = metrics->Counter(
      "herd_gateway_prefix_tokens_expected_total",
      "Prompt tokens the chosen worker's prefix cache was expected to supply (its digest and recent routing).");
  opts_.pool.sessions_by_worker =
      metrics->Counter("herd_gateway_worker_sessions_total",
                       "Sessions the gateway opened, by worker address (the load spread).", {"worker"});
  prefix_tokens_realized_ =
      metrics->Counter("herd_gateway_prefix_tokens_realized_total",
                       "Prompt tokens the workers' prefix caches supplied (SessionStarted.n_cached).");
  pool_ = std::make_unique<WorkerPool>(opts_.pool);
  vocabs_ = std::make_unique<VocabCache>(opts_.loader_address, opts_.loader_security);
  vocabs_->SetChatTemplateOverride(opts_.chat_template);
  if (!opts_.drafts.addresses.empty() || !opts_.drafts.dns.empty()) {
    draft_client_ = std::make_unique<draft::DraftClient>(opts_.drafts);
  }
}

Gateway::~Gateway() { Stop(); }

absl::Status Gateway::Start() {
  HERD_RETURN_IF_ERROR(pool_->Start());
  std::lock_guard<std::mutex> l(active_mu_);
  stopping_ = false;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watchdog(); });
  return absl::OkStatus();
}

void Gateway::Stop() {
  CancelAll();
  WaitIdle(absl::Seconds(5));
  // Asynchronous attempts return from their last callback just after their generation
  // ended.
  for (const absl::Time end = absl::Now() + absl::Seconds(5); async_attempts_.load() > 0 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
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

absl::Status Gateway::CheckModelServed(const std::string& model) const {
  switch (pool_->GetModelState(model)) {
    case WorkerPool::ModelState::kUnknown: {
      std::set<std::string> names;
      for (const WorkerSnapshot& w : pool_->Snapshot()) {
        if (w.live) names.insert(w.info.model());
      }
      return absl::NotFoundError(absl::StrCat("model '", ShortName(model), "' not found (served: ",
                                              names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
    }
    case WorkerPool::ModelState::kNoLiveWorker:
      return absl::UnavailableError(absl::StrCat("model '", ShortName(model), "': no live worker serves it"));
    case WorkerPool::ModelState::kLive:
      break;
  }
  return absl::OkStatus();
}

absl::Status Gateway::TokenizePrompt(const v1::GenerateRequest& req, Generation* g) {
  if (req.prompt_case() == v1::GenerateRequest::kText) {
    g->prompt = g->vocab->Tokenize(req.text(), /*add_special=*/true, /*parse_special=*/true);
    if (g->prompt.empty()) return Invalid("prompt.text: tokenizes to no tokens");
    return absl::OkStatus();
  }
  if (req.prompt_case() == v1::GenerateRequest::kChat) {
    HERD_ASSIGN_OR_RETURN(auto tmpl, vocabs_->GetChatTemplate(req.model(), g->deadline));
    HERD_ASSIGN_OR_RETURN(auto text, RenderChatPrompt(req.chat(), *tmpl, *g->vocab));
    HERD_RETURN_IF_ERROR(ChatOutputRules(req.chat(), tmpl->tmpl->source(), text, g));
    g->prompt = g->vocab->Tokenize(text, /*add_special=*/true, /*parse_special=*/true);
    if (g->prompt.empty()) return Invalid("chat: the rendered prompt tokenizes to no tokens");
    return absl::OkStatus();
  }
  g->prompt.assign(req.tokens().ids().begin(), req.tokens().ids().end());
  for (size_t i = 0; i < g->prompt.size(); ++i) {
    if (!g->vocab->IsValid(g->prompt[i])) {
      return Invalid(absl::StrCat("prompt.tokens.ids[", i, "]: ", g->prompt[i], " is outside the vocabulary [0, ",
                                  g->vocab->n_tokens(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Gateway::FitContext(const v1::GenerateRequest& req, Generation* g) {
  int64_t max_ctx = 0;    // the longest sequence a live worker of the model can hold
  int64_t max_n_ctx = 0;  // the largest KV cache of those workers (n_predict's bound)
  for (const WorkerSnapshot& w : pool_->LiveWorkersFor(req.model())) {
    max_ctx = std::max(max_ctx, w.info.n_ctx_seq() > 0 ? w.info.n_ctx_seq() : w.info.n_ctx());
    max_n_ctx = std::max(max_n_ctx, w.info.n_ctx());
    if (w.info.n_vocab() > 0 && w.info.n_vocab() != g->vocab->n_tokens()) {
      HERD_LOG(Warning) << "worker " << w.address << " reports n_vocab " << w.info.n_vocab()
                        << " but the vocabulary of " << ShortName(req.model()) << " has " << g->vocab->n_tokens()
                        << " tokens";
    }
  }
  // The context holds prompt and completion (llama.cpp's server): a prompt of n_ctx
  // tokens or more leaves no room for a token.
  if (max_ctx > 0 && static_cast<int64_t>(g->prompt.size()) >= max_ctx) {
    return Invalid(absl::StrCat("prompt: ", g->prompt.size(),
                                " tokens do not fit in the context of the model's workers (n_ctx ", max_ctx,
                                "; prompt + completion must fit)"));
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
  return absl::OkStatus();
}

absl::Status Gateway::PrepareSteps(const v1::GenerateRequest& req, Generation* g) {
  if (draining_) return absl::UnavailableError("gateway is shutting down");
  HERD_ASSIGN_OR_RETURN(g->spec, ValidateGenerateRequest(req, opts_.max_prompt_bytes, opts_.spec_defaults));
  HERD_RETURN_IF_ERROR(CheckModelServed(req.model()));
  HERD_ASSIGN_OR_RETURN(auto vocab, vocabs_->Get(req.model(), g->deadline));
  g->vocab = vocab;
  HERD_RETURN_IF_ERROR(TokenizePrompt(req, g));
  HERD_RETURN_IF_ERROR(FitContext(req, g));
  g->stops.assign(req.stop().begin(), req.stop().end());
  g->logprobs = req.has_logprobs() ? req.logprobs() : 0;
  g->ignore_eos = req.ignore_eos();
  HERD_RETURN_IF_ERROR(ValidateLogitBiasIds(req.sampling(), g->vocab->n_tokens()));
  g->sampling = req.sampling();
  if (!g->forced_grammar.empty()) {
    if (g->sampling.has_grammar() && !g->sampling.grammar().empty()) {
      return Invalid(absl::StrCat("chat.tool_choice: \"", req.chat().tool_choice(),
                                  "\" forces a grammar and cannot be combined with a grammar, json_schema or "
                                  "response_format"));
    }
    g->sampling.set_grammar(g->forced_grammar);
  }
  return absl::OkStatus();
}

absl::Status Gateway::ChatOutputRules(const v1::ChatPrompt& chat, const std::string& template_source,
                                      const std::string& rendered, Generation* g) {
  const std::string& choice = chat.tool_choice();
  if (!chat.tools_json().empty() && choice != "none") g->parse.format = toolcall::DetectFormat(template_source);
  const std::string& rf = chat.reasoning_format().empty() ? opts_.reasoning_format : chat.reasoning_format();
  g->parse.reasoning = rf != "none" && toolcall::TemplateHasThinking(template_source);
  g->parse.reasoning_open = g->parse.reasoning && toolcall::PromptOpensThinking(rendered);
  for (const std::string& marker : toolcall::MarkerTexts(g->parse)) {
    if (const int32_t id = g->vocab->TextToToken(marker); id >= 0) g->preserved_tokens.push_back(id);
  }
  if (choice != "required" && choice != "function") return absl::OkStatus();
  const nlohmann::json tools =
      nlohmann::json::parse(chat.tools_json(), nullptr, false);  // validated by ValidateChatPrompt
  auto gbnf = toolcall::ForcedCallGrammar(g->parse.format, tools,
                                          choice == "function" ? chat.tool_choice_function() : std::string(),
                                          !chat.has_parallel_tool_calls() || chat.parallel_tool_calls());
  if (!gbnf.ok()) return Invalid(std::string(gbnf.status().message()));
  g->forced_grammar = *std::move(gbnf);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Gateway::Generation>> Gateway::Prepare(const v1::GenerateRequest& req,
                                                                      absl::Time deadline, const std::string& method) {
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
  absl::Status st = PrepareSteps(req, g.get());
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
  HERD_ASSIGN_OR_RETURN(auto g, Prepare(req, deadline, method));
  return Run(*g, sink);
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

void Gateway::BeginRun(Active* active) {
  {
    std::lock_guard<std::mutex> l(active_mu_);
    active_.push_back(active);
    if (cancel_all_) active->cancel = kShutdown;
  }
  inflight_gauge_->Set(++inflight_);
}

absl::Status Gateway::EndRun(Generation& g, GenerateSink* sink, Active* active, absl::Status status) {
  // A request cut by its deadline or a shutdown before any worker ran still gets its
  // last message.
  const int reason = active->cancel.load();
  if (!status.ok() && g.finish == v1::FINISH_REASON_UNSPECIFIED && CutByGateway(g, reason)) {
    v1::GenerateResponse last;
    last.set_finish_reason(v1::FINISH_REASON_CANCELLED);
    FillUsage(g, last.mutable_usage());
    g.finish = v1::FINISH_REASON_CANCELLED;
    status = Emit(g, sink, &last) ? absl::OkStatus() : absl::CancelledError("client went away");
  }
  {
    std::lock_guard<std::mutex> l(active_mu_);
    active_.remove(active);
    if (active_.empty()) idle_cv_.notify_all();
  }
  inflight_gauge_->Set(--inflight_);
  if (g.completion > 0) tokens_total_->Add(g.completion, {g.model});
  const absl::Duration total = absl::Now() - g.start;
  RecordRequest(g.method, status, total);
  HERD_LOG(Info) << "request id=" << g.id << " method=" << g.method << " model=" << g.model
                 << " worker=" << (g.worker.empty() ? "-" : g.worker) << " prompt_tokens=" << g.prompt.size()
                 << " completion_tokens=" << g.completion << " finish=" << FinishName(g.finish)
                 << " code=" << absl::StatusCodeToString(status.code()) << " queue_ms=" << g.queue_ms << " ttft_ms="
                 << (g.first_token_time == absl::InfinitePast() ? -1.0 : Ms(g.first_token_time - g.start))
                 << " total_ms=" << Ms(total) << (status.ok() ? "" : absl::StrCat(" error=\"", status.message(), "\""));
  if (g.speculative) {
    // llama.cpp's common_speculative_print_stats line.
    HERD_LOG(Info) << "request id=" << g.id << " " << engine::spec::SpecStatsFromProto(g.spec_stats).ToString();
  }
  return status;
}

absl::Status Gateway::Run(Generation& g, GenerateSink* sink) {
  Active active;
  active.sink = sink;
  active.deadline = g.deadline;
  BeginRun(&active);
  std::set<std::string> tried;
  absl::Status status;
  absl::Status last_error;
  for (int attempt = 0;; ++attempt) {
    if (active.cancel.load() != kNotCancelled) {
      status = absl::CancelledError("cancelled before a worker was found");
      break;
    }
    auto lease = pool_->Acquire(g.model, static_cast<int64_t>(g.prompt.size()), tried, g.prompt);
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
  return EndRun(g, sink, &active, status);
}

std::unique_ptr<engine::spec::DraftSource> Gateway::MakeDrafter(const Generation& g, int attempt) {
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
  return std::make_unique<draft::DraftWorkerSource>(
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

// One attempt of a generation on one worker, as its parts see it.
struct Gateway::AttemptRun {
  Generation& g;
  WorkerSession& ws;
  CompletionTracker& tracker;
  GenerateSink* sink;
  Active* active;
  engine::spec::DraftSource* drafter;  // null: no speculation
  const v1::WorkerInfo& info;          // the worker's, at the time of the choice
  bool started = false;                // the worker sent Started
  bool client_gone = false;            // a message could not be delivered
};

namespace {

absl::Status Broken() { return absl::UnavailableError("the worker session ended"); }

}  // namespace

bool WorkerRunsSpec(const Gateway::Generation& g, const v1::WorkerInfo& info) {
  if (g.spec.type == engine::spec::SpecType::kNone) return false;
  const std::string type = engine::spec::SpecTypeName(g.spec.type);
  return std::find(info.spec_types().begin(), info.spec_types().end(), type) != info.spec_types().end();
}

v1::SessionStart SessionStartOf(const Gateway::Generation& g, const v1::WorkerInfo& info, int64_t remaining) {
  v1::SessionStart start;
  start.mutable_prompt()->Add(g.prompt.begin(), g.prompt.end());
  *start.mutable_sampling() = g.sampling;
  if (g.logprobs > 0) start.set_logprobs(g.logprobs);
  start.set_ignore_eos(g.ignore_eos);
  if (WorkerRunsSpec(g, info)) {
    engine::spec::SpecConfigToProto(g.spec, start.mutable_speculative());
    start.set_n_predict(static_cast<int32_t>(std::clamp<int64_t>(remaining, 0, INT32_MAX)));
    start.set_draft_seed(g.sampling.has_seed() ? g.sampling.seed()
                                               : static_cast<uint32_t>(std::hash<std::string>()(g.id)));
  }
  return start;
}

absl::Status Gateway::AwaitStarted(AttemptRun& a) {
  HERD_ASSIGN_OR_RETURN(v1::SessionStarted started, a.ws.ReadStarted());
  a.started = true;
  a.g.queue_ms = started.queue_ms();
  a.g.cached_tokens = started.n_cached();
  if (started.n_cached() > 0) prefix_tokens_realized_->Add(started.n_cached());
  return absl::OkStatus();
}

void Gateway::NoteCached(Generation& g, const v1::StepResult& sr) {
  if (sr.n_cached() <= g.cached_tokens) return;
  prefix_tokens_realized_->Add(static_cast<double>(sr.n_cached() - g.cached_tokens));
  g.cached_tokens = sr.n_cached();
}

absl::Status Gateway::Deliver(AttemptRun& a, const v1::StepResult& sr, bool* run_ended) {
  NoteCached(a.g, sr);
  v1::GenerateResponse msg = a.tracker.Consume(sr, run_ended);
  if (a.tracker.finished() && a.drafter != nullptr) {
    engine::spec::SpecStatsToProto(a.drafter->Stats(), msg.add_speculative());
  }
  if (!Emit(a.g, a.sink, &msg)) {
    a.client_gone = true;
    a.active->Cancel(kClientGone);
    return absl::CancelledError("client went away");
  }
  return absl::OkStatus();
}

absl::Status Gateway::RunPlain(AttemptRun& a) {
  // Without a drafter the whole generation is one Step: send it with the Start (the
  // worker accepts Steps before Started) to save a round trip before the first token.
  v1::SessionStep step;
  step.set_n_steps(ClampSteps(a.tracker.remaining()));
  if (!a.ws.Start(SessionStartOf(a.g, a.info, a.tracker.remaining()), &step)) return Broken();
  HERD_RETURN_IF_ERROR(AwaitStarted(a));
  for (;;) {
    const int64_t expected = ClampSteps(a.tracker.remaining());
    bool run_ended = false;
    for (int64_t k = 0; k < expected && !a.tracker.finished() && !run_ended; ++k) {
      HERD_ASSIGN_OR_RETURN(v1::StepResult sr, a.ws.ReadStep());
      HERD_RETURN_IF_ERROR(Deliver(a, sr, &run_ended));
    }
    if (a.tracker.finished()) return absl::OkStatus();
    // An end-of-generation token ended the worker's run of steps (ignore_eos): ask for
    // the rest.
    step.set_n_steps(ClampSteps(a.tracker.remaining()));
    if (!a.ws.Step(step)) return Broken();
  }
}

absl::Status Gateway::RunSpeculative(AttemptRun& a) {
  Generation& g = a.g;
  const int64_t n_ctx_seq = a.info.n_ctx_seq() > 0 ? a.info.n_ctx_seq() : a.info.n_ctx();
  // A sampled draft's distributions let the worker verify by rejection sampling (a
  // greedy target ignores them, so they are not sent then).
  const bool sampled = g.sampling.has_temperature() ? g.sampling.temperature() > 0 : true;
  const std::string spec_type = engine::spec::SpecTypeName(g.spec.type);
  if (!a.ws.Start(SessionStartOf(g, a.info, a.tracker.remaining()), nullptr)) return Broken();
  a.drafter->Append(g.prompt);

  engine::spec::SpecLoopLimits limits;
  limits.draft_min = g.spec.draft_min;
  limits.draft_max = g.spec.draft_max;
  limits.target_max_draft = a.info.max_draft();  // 0: not reported
  limits.n_vocab = a.info.n_vocab() > 0 ? a.info.n_vocab() : g.vocab->n_tokens();
  engine::spec::SpecLoopHooks hooks;
  // The pass a draft rides on produces no token past n_predict (accepted + 1 <=
  // remaining) and fits the sequence's context (pending token + draft). The first draft
  // continues the prompt itself: it is asked for while the worker admits the sequence.
  hooks.room = [&] {
    return std::min<int64_t>(a.tracker.remaining() - 1,
                             n_ctx_seq - static_cast<int64_t>(g.prompt.size()) - g.completion);
  };
  hooks.on_draft_error = [&](const absl::Status& s) {
    spec_failures_->Add(1, {spec_type});
    HERD_LOG(Debug) << "request id=" << g.id << ": empty draft: " << s;
  };
  v1::StepResult last;
  hooks.verify = [&](const engine::spec::DraftResult& d) -> absl::StatusOr<engine::spec::SpecPass> {
    if (!a.started) {
      HERD_RETURN_IF_ERROR(AwaitStarted(a));
    }
    v1::SessionStep step;
    step.mutable_draft()->Add(d.tokens.begin(), d.tokens.end());
    if (sampled) {
      for (const engine::spec::SparseDist& q : d.probs) engine::spec::SparseDistToProto(q, step.add_draft_probs());
    }
    step.set_n_steps(1);
    if (!a.ws.Step(step)) return Broken();
    HERD_ASSIGN_OR_RETURN(v1::StepResult sr, a.ws.ReadStep());
    last = std::move(sr);
    engine::spec::SpecPass pass;
    pass.tokens.assign(last.tokens().begin(), last.tokens().end());
    pass.n_accepted = last.n_accepted();
    return pass;
  };
  hooks.deliver = [&](engine::spec::SpecPass& pass) {
    bool run_ended = false;  // with one step per pass, the run ends anyway
    absl::Status s = Deliver(a, last, &run_ended);
    pass.end = a.tracker.finished();
    return s;
  };
  return engine::spec::RunSpecLoop(*a.drafter, limits, hooks);
}

Gateway::Attempt Gateway::RunOnWorker(Generation& g, WorkerPool::Lease& lease, GenerateSink* sink, Active* active,
                                      int attempt) {
  const int64_t budget = AttemptBudget(g, lease.info());
  WorkerSession ws(lease.stub(), lease.address(), g.deadline);
  active->SetContext(ws.context());
  // A worker that drafts the request's type itself gets the configuration in its
  // SessionStart and runs the plain protocol; otherwise the gateway drives the drafts.
  std::unique_ptr<engine::spec::DraftSource> drafter =
      WorkerRunsSpec(g, lease.info()) ? nullptr : MakeDrafter(g, attempt);
  g.worker_speculation = false;
  CompletionTracker tracker(g, budget);
  AttemptRun a{g, ws, tracker, sink, active, drafter.get(), lease.info()};
  const absl::Status loop = drafter != nullptr ? RunSpeculative(a) : RunPlain(a);
  if (drafter != nullptr) {
    drafter->End();
    g.speculative = true;
    g.spec_stats.Clear();
    engine::spec::SpecStatsToProto(drafter->Stats(), &g.spec_stats);
    RecordSpecStats(g.spec_stats);
  } else if (g.worker_speculation) {
    RecordSpecStats(g.spec_stats);
  }
  return EndAttempt(a, lease.address(), loop);
}

Gateway::Attempt Gateway::EndAttempt(AttemptRun& a, const std::string& addr, const absl::Status& loop) {
  // Close the worker sequence right away: Cancel, then end the call so that its KV
  // cells are freed even if the message is never read. After a broken stream the
  // worker's status says why.
  const bool finished = a.g.finish != v1::FINISH_REASON_UNSPECIFIED;
  AttemptEnd e;
  e.worker = a.ws.Close(/*collect_status=*/a.ws.broken() && !finished, a.active->cancel.load() != kNotCancelled);
  a.active->SetContext(nullptr);
  e.broken = a.ws.broken();
  e.started = a.started;
  e.client_gone = a.client_gone;
  e.speculative = a.drafter != nullptr || a.g.worker_speculation;
  e.loop = loop;
  return ClassifyAttempt(a.g, a.sink, a.active, addr, e);
}

Gateway::Attempt Gateway::ClassifyAttempt(Generation& g, GenerateSink* sink, Active* active, const std::string& addr,
                                          const AttemptEnd& e) {
  Attempt result;
  const bool finished = g.finish != v1::FINISH_REASON_UNSPECIFIED;
  if (finished && !e.client_gone) {
    result.finished = true;
    return result;
  }
  const int reason = active->cancel.load();
  if (e.client_gone || reason == kClientGone) {
    result.status = absl::CancelledError("client cancelled");
    return result;
  }
  if (reason == kDeadline || reason == kShutdown || (e.broken && absl::Now() >= g.deadline)) {
    return CutAttempt(g, sink, active, e.started, e.speculative, reason);
  }
  const bool nothing_produced = g.completion == 0 && !g.any_message;
  if (!e.loop.ok() && !e.broken) {  // protocol error
    pool_->ReportFailure(addr, std::string(e.loop.message()));
    result.status = absl::UnavailableError(std::string(e.loop.message()));
    result.retryable = nothing_produced;
    return result;
  }
  // The worker ended the call.
  const grpc::Status& wst = e.worker;
  const std::string wmsg = wst.ok() ? std::string("closed the session early") : wst.error_message();
  const grpc::StatusCode code = wst.error_code();
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
  result.status = absl::UnavailableError(absl::StrCat("worker ", addr,
                                                      !e.started         ? " unavailable: "
                                                      : nothing_produced ? " failed before its first token: "
                                                                         : " failed mid-stream: ",
                                                      wmsg));
  result.retryable = nothing_produced;
  return result;
}

Gateway::Attempt Gateway::CutAttempt(Generation& g, GenerateSink* sink, Active* active, bool started, bool speculative,
                                     int reason) {
  Attempt result;
  if (reason == kNotCancelled) active->cancel = kDeadline;
  result.status =
      absl::DeadlineExceededError(reason == kShutdown ? "gateway shutting down" : "request deadline exceeded");
  // Cut by the gateway (its request timeout, a shutdown): the client still gets a last
  // message with what there is. (EndRun sends it when no worker started.) At the
  // client's own deadline nobody is listening: DEADLINE_EXCEEDED.
  if (started && CutByGateway(g, active->cancel.load())) {
    v1::GenerateResponse last;
    last.set_finish_reason(v1::FINISH_REASON_CANCELLED);
    FillUsage(g, last.mutable_usage());
    if (speculative) *last.add_speculative() = g.spec_stats;
    g.finish = v1::FINISH_REASON_CANCELLED;
    result.status = Emit(g, sink, &last) ? absl::OkStatus() : absl::CancelledError("client went away");
    result.finished = true;
  }
  return result;
}

absl::StatusOr<v1::TokenizeResponse> Gateway::Tokenize(const v1::TokenizeRequest& req, absl::Time deadline) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::TokenizeResponse> out = [&]() -> absl::StatusOr<v1::TokenizeResponse> {
    if (req.model().empty()) return Invalid("model: required");
    if (static_cast<int64_t>(req.text().size()) > opts_.max_prompt_bytes) {
      return Invalid(
          absl::StrCat("text: ", req.text().size(), " bytes exceeds the limit of ", opts_.max_prompt_bytes, " bytes"));
    }
    size_t bad = 0;
    if (!IsValidUtf8(req.text(), &bad)) return Invalid(absl::StrCat("text: invalid UTF-8 at byte ", bad));
    HERD_ASSIGN_OR_RETURN(auto vocab, vocabs_->Get(req.model(), deadline));
    v1::TokenizeResponse resp;
    std::vector<int32_t> ids = vocab->Tokenize(req.text(), req.add_special(), req.parse_special());
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
    HERD_ASSIGN_OR_RETURN(auto vocab, vocabs_->Get(req.model(), deadline));
    std::vector<int32_t> ids(req.ids().begin(), req.ids().end());
    absl::Status s = vocab->ValidateTokens(ids);
    if (!s.ok()) return Invalid(absl::StrCat("ids: ", s.message()));
    v1::DetokenizeResponse resp;
    resp.set_text(SanitizeUtf8(vocab->Detokenize(ids)));
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
    c.set_pooling(w.info.pooling() == v1::POOLING_CLS ? "cls" : w.info.pooling() == v1::POOLING_LAST ? "last" : "mean");
    c.set_matryoshka(w.info.matryoshka());
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

}  // namespace herd::gateway
