#include "services/draft/draft_service.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/engine/spec/spec_proto.h"
#include "libs/serving/grpc_status.h"

namespace herd::draft {

using engine::spec::SpecConfig;
using engine::spec::SpecSession;
using engine::spec::SpecStats;
using engine::spec::SpecType;
using engine::spec::SpecTypeName;

namespace {
constexpr size_t kMaxSessionIdBytes = 256;

const char* StatusCodeLabel(absl::StatusCode c) {
  switch (c) {
    case absl::StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case absl::StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case absl::StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case absl::StatusCode::kCancelled:
      return "CANCELLED";
    default:
      return "OTHER";
  }
}
constexpr std::chrono::system_clock::time_point kNoDeadline = std::chrono::system_clock::time_point::max();

// When a draft must be ready to answer before the caller's `deadline`: a tenth of the
// time left (at least 2 ms) is kept for the answer's way back. No limit for deadlines
// an hour or more away (or none).
std::chrono::steady_clock::time_point DraftStopBy(std::chrono::system_clock::time_point deadline) {
  const auto now = std::chrono::system_clock::now();
  if (deadline >= now + std::chrono::hours(1)) return std::chrono::steady_clock::time_point::max();
  const auto left = deadline - now;
  const auto margin = std::max<std::chrono::system_clock::duration>(std::chrono::milliseconds(2), left / 10);
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left - margin);
}

}  // namespace

DraftServiceImpl::DraftServiceImpl(DraftServiceOptions opts) : opts_(std::move(opts)) {
  if (opts_.max_sessions < 1) opts_.max_sessions = 1;
  if (serving::Registry* r = opts_.registry) {
    m_calls_ = r->Counter("herd_draft_calls_total", "Draft proposals asked for (#calls).", {"type"});
    m_gen_drafts_ = r->Counter("herd_draft_gen_drafts_total", "Non-empty drafts returned (#gen drafts).", {"type"});
    m_acc_drafts_ = r->Counter("herd_draft_acc_drafts_total",
                               "Drafts with at least one token accepted by the target (#acc drafts).", {"type"});
    m_gen_tokens_ = r->Counter("herd_draft_gen_tokens_total", "Tokens drafted (#gen tokens).", {"type"});
    m_acc_tokens_ =
        r->Counter("herd_draft_acc_tokens_total", "Drafted tokens the target accepted (#acc tokens).", {"type"});
    m_sessions_ = r->Gauge("herd_draft_sessions", "Speculative sessions held.");
    m_evictions_ =
        r->Counter("herd_draft_evictions_total", "Sessions evicted (lru: to make room; idle: unused).", {"reason"});
    m_resyncs_ = r->Counter("herd_draft_resyncs_total",
                            "Calls whose start did not match the session history (lost calls, evicted sessions).");
    m_errors_ = r->Counter("herd_draft_errors_total", "Propose calls that failed, by status code.", {"code"});
    m_latency_ = r->Histogram("herd_draft_propose_seconds", "Propose latency in seconds.", {"type"},
                              {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1});
  }
  if (opts_.reaper) reaper_ = std::thread([this] { ReaperLoop(); });
}

DraftServiceImpl::~DraftServiceImpl() {
  {
    std::lock_guard<std::mutex> l(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  std::vector<std::shared_ptr<Session>> graveyard;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, e] : sessions_) graveyard.push_back(std::move(e.session));
    sessions_.clear();
    lru_.clear();
  }
}

void DraftServiceImpl::ReaperLoop() {
  const auto period = std::clamp<std::chrono::milliseconds>(opts_.session_idle / 4, std::chrono::milliseconds(10),
                                                            std::chrono::milliseconds(1000));
  std::unique_lock<std::mutex> l(reaper_mu_);
  while (!stopping_) {
    reaper_cv_.wait_for(l, period);
    if (stopping_) break;
    l.unlock();
    EvictIdle();
    l.lock();
  }
}

size_t DraftServiceImpl::n_sessions() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

void DraftServiceImpl::EraseLocked(std::unordered_map<std::string, Entry>::iterator it,
                                   std::vector<std::shared_ptr<Session>>* graveyard) {
  lru_.erase(it->second.lru);
  graveyard->push_back(std::move(it->second.session));
  sessions_.erase(it);
}

size_t DraftServiceImpl::EvictIdle() {
  std::vector<std::shared_ptr<Session>> graveyard;  // destroyed outside the lock
  const auto cutoff = std::chrono::steady_clock::now() - opts_.session_idle;
  {
    std::lock_guard<std::mutex> l(mu_);
    while (!lru_.empty()) {
      auto it = sessions_.find(lru_.back());
      if (it->second.last_use > cutoff) break;
      EraseLocked(it, &graveyard);
    }
    if (m_sessions_) m_sessions_->Set(static_cast<double>(sessions_.size()));
  }
  if (!graveyard.empty()) {
    evictions_ += static_cast<int64_t>(graveyard.size());
    if (m_evictions_) m_evictions_->Add(static_cast<double>(graveyard.size()), {"idle"});
    HERD_LOG(Debug) << "draft: evicted " << graveyard.size() << " idle session(s)";
  }
  return graveyard.size();
}

absl::StatusOr<std::shared_ptr<DraftServiceImpl::Session>> DraftServiceImpl::GetOrCreate(const std::string& id,
                                                                                         const SpecConfig& config,
                                                                                         uint32_t seed, bool* created) {
  *created = false;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      it->second.last_use = now;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.session;
    }
  }
  // Build the drafter outside the lock (a draft model's lock may be busy drafting).
  HERD_ASSIGN_OR_RETURN(auto spec, SpecSession::Create(config, opts_.resources, seed));
  auto s = std::make_shared<Session>();
  s->id = id;
  s->spec = std::move(spec);
  s->reported.type = config.type;
  std::vector<std::shared_ptr<Session>> graveyard;
  std::shared_ptr<Session> result;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {  // created concurrently: use that one
      it->second.last_use = now;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      result = it->second.session;
      graveyard.push_back(std::move(s));
    } else {
      while (static_cast<int>(sessions_.size()) >= opts_.max_sessions && !lru_.empty()) {
        EraseLocked(sessions_.find(lru_.back()), &graveyard);
        evictions_ += 1;
        if (m_evictions_) m_evictions_->Add(1, {"lru"});
      }
      lru_.push_front(id);
      sessions_.emplace(id, Entry{s, now, lru_.begin()});
      result = std::move(s);
      *created = true;
    }
    if (m_sessions_) m_sessions_->Set(static_cast<double>(sessions_.size()));
  }
  return result;
}

void DraftServiceImpl::ReportStats(Session* s) {
  const SpecStats& now = s->spec->stats();
  if (now.type != s->reported.type) {  // reconfigured to another type: counters restart
    s->reported = SpecStats();
    s->reported.type = now.type;
  }
  if (m_calls_ != nullptr) {
    const std::vector<std::string> label = {SpecTypeName(now.type)};
    m_calls_->Add(static_cast<double>(now.calls - s->reported.calls), label);
    m_gen_drafts_->Add(static_cast<double>(now.gen_drafts - s->reported.gen_drafts), label);
    m_acc_drafts_->Add(static_cast<double>(now.acc_drafts - s->reported.acc_drafts), label);
    m_gen_tokens_->Add(static_cast<double>(now.gen_tokens - s->reported.gen_tokens), label);
    m_acc_tokens_->Add(static_cast<double>(now.acc_tokens - s->reported.acc_tokens), label);
  }
  s->reported = now;
}

absl::Status DraftServiceImpl::Validate(const herd::v1::DraftRequest& req, const std::string& prefix,
                                        SpecConfig* config) const {
  if (req.session_id().empty())
    return absl::InvalidArgumentError(absl::StrCat(prefix, "session_id: must not be empty"));
  if (req.session_id().size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "session_id: ", req.session_id().size(), " bytes, more than ", kMaxSessionIdBytes));
  }
  for (int i = 0; i < req.new_tokens_size(); ++i) {
    const int32_t t = req.new_tokens(i);
    if (t < 0 || (opts_.target_n_vocab > 0 && t >= opts_.target_n_vocab)) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "new_tokens[", i, "]: token ", t, " is outside [0, ",
                       opts_.target_n_vocab > 0 ? absl::StrCat(opts_.target_n_vocab) : std::string("inf"), ")"));
    }
  }
  if (!std::isfinite(req.temperature()) || req.temperature() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "temperature: ", req.temperature(), " must be finite and >= 0"));
  }
  if (req.has_start() && req.start() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "start: ", req.start(), " must be >= 0"));
  }
  if (req.n_max() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "n_max: ", req.n_max(), " must be >= 0"));
  }
  *config = opts_.defaults;
  if (req.has_config()) {
    HERD_ASSIGN_OR_RETURN(*config, engine::spec::SpecConfigFromProto(req.config(), opts_.defaults, prefix + "config."));
  }
  if (config->type == SpecType::kDraftModel && !opts_.target_model.empty() && !req.model().empty() &&
      req.model() != opts_.target_model) {
    return absl::FailedPreconditionError(absl::StrCat(prefix,
                                                      "model: this draft worker's draft model was checked against \"",
                                                      opts_.target_model, "\", not \"", req.model(), "\""));
  }
  return absl::OkStatus();
}

absl::Status DraftServiceImpl::Prepare(Item* it) {
  const herd::v1::DraftRequest& req = *it->req;
  Session* s = it->session.get();
  SpecSession* spec = s->spec.get();
  if (!it->created && req.has_config() && spec->config() != it->config) {
    HERD_RETURN_IF_ERROR(spec->Reconfigure(it->config, opts_.resources));
  }
  // Lost-call recovery: reconcile the caller's view of the history with ours.
  const int64_t have = static_cast<int64_t>(spec->history().size());
  int64_t skip = 0;  // leading new tokens we already have
  bool duplicate = false;
  if (req.has_start() && req.start() != have) {
    if (m_resyncs_) m_resyncs_->Add(1);
    if (req.start() > have) {  // we miss tokens: ask for them
      it->resp->set_history_len(have);
      engine::spec::SpecStatsToProto(spec->stats(), it->resp->mutable_stats());
      it->answered = true;
      return absl::OkStatus();
    }
    const int64_t overlap = std::min<int64_t>(have - req.start(), req.new_tokens_size());
    bool same = true;
    for (int64_t i = 0; i < overlap && same; ++i) {
      same = spec->history()[static_cast<size_t>(req.start() + i)] == req.new_tokens(static_cast<int>(i));
    }
    if (!same) {  // not expected: start the session over from the caller's view
      std::vector<int32_t> kept(spec->history().begin(), spec->history().begin() + req.start());
      HERD_ASSIGN_OR_RETURN(auto fresh, SpecSession::Create(spec->config(), opts_.resources, req.seed()));
      s->spec = std::move(fresh);
      s->reported = SpecStats();
      s->reported.type = s->spec->config().type;
      spec = s->spec.get();
      spec->Append(kept);
    } else {
      skip = overlap;
      duplicate = true;
    }
  }
  const int64_t n_new = req.new_tokens_size() - skip;
  if (static_cast<int64_t>(spec->history().size()) + n_new > opts_.max_history) {
    return absl::ResourceExhaustedError(
        absl::StrCat(it->prefix, "new_tokens: the session history would exceed ", opts_.max_history, " tokens"));
  }
  if (!duplicate && req.n_accepted() >= 0) spec->Accept(req.n_accepted());
  if (n_new > 0) spec->Append(std::vector<int32_t>(req.new_tokens().begin() + skip, req.new_tokens().end()));
  if (!spec->BeginDraft(req.n_max(), req.temperature(), &it->params)) {
    it->answered = true;  // nothing to draft: an empty draft
    Finish(it, engine::spec::DraftResult());
  }
  return absl::OkStatus();
}

void DraftServiceImpl::Finish(Item* it, engine::spec::DraftResult proposal) {
  Session* s = it->session.get();
  SpecSession* spec = s->spec.get();
  engine::spec::DraftResult d = it->answered ? std::move(proposal) : spec->FinishDraft(std::move(proposal), it->params);
  herd::v1::DraftResponse* resp = it->resp;
  resp->mutable_tokens()->Assign(d.tokens.begin(), d.tokens.end());
  for (const engine::spec::SparseDist& q : d.probs) engine::spec::SparseDistToProto(q, resp->add_probs());
  resp->set_history_len(static_cast<int64_t>(spec->history().size()));
  engine::spec::SpecStatsToProto(spec->stats(), resp->mutable_stats());
  ReportStats(s);
}

void DraftServiceImpl::RunItems(std::vector<Item>* items, std::chrono::system_clock::time_point deadline) {
  const std::chrono::steady_clock::time_point stop_by = DraftStopBy(deadline);
  std::map<std::string, size_t> first;  // session id -> its item
  for (size_t i = 0; i < items->size(); ++i) {
    Item& it = (*items)[i];
    if (!it.status.ok()) continue;
    auto [pos, fresh] = first.emplace(it.req->session_id(), i);
    if (!fresh) {
      it.status = absl::InvalidArgumentError(
          absl::StrCat(it.prefix, "session_id: \"", it.req->session_id(), "\" is already requests[", pos->second, "]"));
      continue;
    }
    auto got = GetOrCreate(it.req->session_id(), it.config, it.req->seed(), &it.created);
    if (!got.ok()) {
      it.status = got.status();
      continue;
    }
    it.session = *std::move(got);
  }
  // One call at a time per session: claim all of this call's sessions at once.
  std::vector<Session*> claimed;
  for (Item& it : *items) {
    if (it.status.ok()) claimed.push_back(it.session.get());
  }
  ClaimSessions(claimed);

  std::vector<engine::spec::DraftModelJob> jobs;
  std::vector<Item*> batched;
  for (Item& it : *items) {
    if (!it.status.ok()) continue;
    it.status = Prepare(&it);
    if (!it.status.ok() || it.answered) continue;
    SpecSession* spec = it.session->spec.get();
    engine::spec::Drafter* drafter = spec->drafter();
    auto* dmd = dynamic_cast<engine::spec::DraftModelDrafter*>(drafter);
    if (dmd != nullptr && opts_.resources.draft_model != nullptr) {
      engine::spec::DraftModelJob job;
      job.seq = dmd->seq();
      job.history = &spec->history();
      job.params = it.params;
      job.params.stop_by = stop_by;
      jobs.push_back(job);
      batched.push_back(&it);
    } else {
      Finish(&it, drafter->Draft(spec->history(), it.params));
    }
  }
  if (!jobs.empty()) {
    std::vector<engine::spec::DraftResult> drafts = opts_.resources.draft_model->DraftBatch(jobs);
    for (size_t i = 0; i < batched.size(); ++i) Finish(batched[i], std::move(drafts[i]));
  }
  ReleaseSessions(claimed);
}

void DraftServiceImpl::ClaimSessions(const std::vector<Session*>& sessions) {
  std::unique_lock<std::mutex> l(claim_mu_);
  claim_cv_.wait(
      l, [&] { return std::none_of(sessions.begin(), sessions.end(), [](const Session* s) { return s->busy; }); });
  for (Session* s : sessions) s->busy = true;
}

void DraftServiceImpl::ReleaseSessions(const std::vector<Session*>& sessions) {
  {
    std::lock_guard<std::mutex> l(claim_mu_);
    for (Session* s : sessions) s->busy = false;
  }
  claim_cv_.notify_all();
}

absl::Status DraftServiceImpl::DoPropose(const herd::v1::DraftRequest& req, herd::v1::DraftResponse* resp,
                                         std::chrono::system_clock::time_point deadline) {
  std::vector<Item> items(1);
  items[0].req = &req;
  items[0].resp = resp;
  items[0].status = Validate(req, "", &items[0].config);
  RunItems(&items, deadline);
  return items[0].status;
}

absl::Status DraftServiceImpl::DoProposeBatch(const herd::v1::DraftBatchRequest& req,
                                              herd::v1::DraftBatchResponse* resp,
                                              std::chrono::system_clock::time_point deadline) {
  if (req.requests_size() > kMaxBatchRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("requests: ", req.requests_size(), " requests, more than ", kMaxBatchRequests));
  }
  resp->Clear();
  std::vector<Item> items(static_cast<size_t>(req.requests_size()));
  for (int i = 0; i < req.requests_size(); ++i) {
    Item& it = items[static_cast<size_t>(i)];
    it.req = &req.requests(i);
    it.resp = resp->add_items()->mutable_response();
    it.prefix = absl::StrCat("requests[", i, "].");
    it.status = Validate(*it.req, it.prefix, &it.config);
  }
  RunItems(&items, deadline);
  for (int i = 0; i < req.requests_size(); ++i) {
    const absl::Status& s = items[static_cast<size_t>(i)].status;
    if (s.ok()) continue;
    herd::v1::DraftBatchItem* item = resp->mutable_items(i);
    item->clear_response();
    item->set_code(static_cast<int32_t>(s.code()));
    item->set_error(std::string(s.message()));
  }
  return absl::OkStatus();
}

grpc::Status DraftServiceImpl::Propose(grpc::ServerContext* ctx, const herd::v1::DraftRequest* req,
                                       herd::v1::DraftResponse* resp) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = ctx != nullptr && ctx->IsCancelled()
                       ? absl::CancelledError("the caller cancelled")
                       : DoPropose(*req, resp, ctx != nullptr ? ctx->deadline() : kNoDeadline);
  if (!s.ok()) {
    resp->Clear();
    if (m_errors_) m_errors_->Add(1, {StatusCodeLabel(s.code())});
    HERD_LOG(Debug) << "draft: Propose " << req->session_id() << ": " << s;
  }
  if (m_latency_) {
    m_latency_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        {s.ok() ? resp->stats().type() : std::string("error")});
  }
  return serving::ToGrpcStatus(s);
}

grpc::Status DraftServiceImpl::ProposeBatch(grpc::ServerContext* ctx, const herd::v1::DraftBatchRequest* req,
                                            herd::v1::DraftBatchResponse* resp) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = ctx != nullptr && ctx->IsCancelled()
                       ? absl::CancelledError("the caller cancelled")
                       : DoProposeBatch(*req, resp, ctx != nullptr ? ctx->deadline() : kNoDeadline);
  if (!s.ok()) {
    resp->Clear();
    if (m_errors_) m_errors_->Add(1, {StatusCodeLabel(s.code())});
    HERD_LOG(Debug) << "draft: ProposeBatch: " << s;
    return serving::ToGrpcStatus(s);
  }
  // Per item, as if each were a Propose call that took the batch's time.
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const herd::v1::DraftBatchItem& item : resp->items()) {
    const bool ok = item.code() == 0;
    if (!ok && m_errors_) m_errors_->Add(1, {StatusCodeLabel(static_cast<absl::StatusCode>(item.code()))});
    if (m_latency_) m_latency_->Observe(secs, {ok ? item.response().stats().type() : std::string("error")});
  }
  return grpc::Status::OK;
}

grpc::Status DraftServiceImpl::EndSession(grpc::ServerContext* ctx, const herd::v1::EndSessionRequest* req,
                                          herd::v1::EndSessionResponse* resp) {
  (void)ctx;
  (void)resp;
  std::vector<std::shared_ptr<Session>> graveyard;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(req->session_id());
    if (it != sessions_.end()) EraseLocked(it, &graveyard);
    if (m_sessions_) m_sessions_->Set(static_cast<double>(sessions_.size()));
  }
  return grpc::Status::OK;
}

}  // namespace herd::draft
