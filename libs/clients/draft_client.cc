#include "libs/clients/draft_client.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "libs/clients/address.h"

namespace herd::draft {

std::shared_ptr<DraftClient::Worker> DraftClient::MakeWorker(const std::string& address) const {
  auto w = std::make_shared<Worker>();
  w->address = address;
  w->stub = herd::v1::Draft::NewStub(serving::MakeChannel(address, opts_.security));
  return w;
}

DraftClient::DraftClient(DraftClientOptions opts) : opts_(std::move(opts)) {
  for (const std::string& a : opts_.addresses) workers_.push_back(MakeWorker(a));
  if (!opts_.dns.empty()) RefreshDns();
  background_ = std::thread([this] { BackgroundLoop(); });
}

DraftClient::~DraftClient() {
  {
    std::lock_guard<std::mutex> l(end_mu_);
    stopping_ = true;
  }
  end_cv_.notify_all();
  background_.join();
}

void DraftClient::RefreshDns() {
  if (opts_.dns.empty()) return;
  auto resolved = clients::ResolveAddresses(opts_.dns, "draft_workers_dns");
  if (!resolved.ok()) return;  // keep the workers we have; try again later
  std::vector<std::string> want = opts_.addresses;
  for (const std::string& a : *resolved) {
    if (std::find(want.begin(), want.end(), a) == want.end()) want.push_back(a);
  }
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::shared_ptr<Worker>> next;
  for (const std::string& a : want) {
    auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& w) { return w->address == a; });
    next.push_back(it != workers_.end() ? *it : MakeWorker(a));
  }
  workers_ = std::move(next);  // sessions keep the workers they hold until they move
}

size_t DraftClient::n_workers() const {
  std::lock_guard<std::mutex> l(mu_);
  return workers_.size();
}

std::vector<std::string> DraftClient::addresses() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& w : workers_) out.push_back(w->address);
  return out;
}

std::unique_ptr<DraftSession> DraftClient::NewSession(const std::string& session_id, const std::string& model,
                                                      const herd::v1::SpeculativeConfig& config, float temperature,
                                                      uint32_t seed) {
  return std::unique_ptr<DraftSession>(new DraftSession(this, session_id, model, config, temperature, seed));
}

std::shared_ptr<DraftClient::Worker> DraftClient::Pick(const std::string& session_id, const Worker* avoid,
                                                       const std::set<std::string>& refused) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu_);
  const size_t n = workers_.size();
  if (n == 0) return nullptr;
  const size_t first = std::hash<std::string>()(session_id) % n;
  for (size_t k = 0; k < n; ++k) {
    const std::shared_ptr<Worker>& w = workers_[(first + k) % n];
    if (w.get() != avoid && w->down_until <= now && refused.count(w->address) == 0) return w;
  }
  return nullptr;
}

bool DraftClient::IsDown(const Worker& w) const {
  std::lock_guard<std::mutex> l(mu_);
  return w.down_until > std::chrono::steady_clock::now();
}

void DraftClient::MarkDown(Worker* w) {
  std::lock_guard<std::mutex> l(mu_);
  w->down_until = std::chrono::steady_clock::now() + opts_.down_for;
}

void DraftClient::EndLater(std::shared_ptr<Worker> w, const std::string& session_id) {
  {
    std::lock_guard<std::mutex> l(end_mu_);
    to_end_.emplace_back(std::move(w), session_id);
  }
  end_cv_.notify_one();
}

void DraftClient::BackgroundLoop() {
  auto next_dns = std::chrono::steady_clock::now() + opts_.dns_interval;
  std::unique_lock<std::mutex> l(end_mu_);
  for (;;) {
    if (opts_.dns.empty()) {
      end_cv_.wait(l, [this] { return stopping_ || !to_end_.empty(); });
    } else {
      end_cv_.wait_until(l, next_dns, [this] { return stopping_ || !to_end_.empty(); });
    }
    if (to_end_.empty() && stopping_) return;
    if (!opts_.dns.empty() && std::chrono::steady_clock::now() >= next_dns && !stopping_) {
      l.unlock();
      RefreshDns();
      l.lock();
      next_dns = std::chrono::steady_clock::now() + opts_.dns_interval;
    }
    if (to_end_.empty()) continue;
    auto [w, id] = std::move(to_end_.front());
    to_end_.pop_front();
    const bool stopping = stopping_;
    l.unlock();
    if (!stopping && !IsDown(*w)) {  // best effort: idle sessions are evicted by the worker anyway
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + opts_.deadline);
      herd::v1::EndSessionRequest req;
      req.set_session_id(id);
      herd::v1::EndSessionResponse resp;
      (void)w->stub->EndSession(&ctx, req, &resp);
    }
    w.reset();
    l.lock();
  }
}

DraftSession::DraftSession(DraftClient* client, std::string id, std::string model, herd::v1::SpeculativeConfig config,
                           float temperature, uint32_t seed)
    : client_(client),
      id_(std::move(id)),
      model_(std::move(model)),
      config_(std::move(config)),
      temperature_(temperature),
      seed_(seed) {
  stats_.set_type(config_.type());
}

DraftSession::~DraftSession() {
  if (worker_ != nullptr) client_->EndLater(std::move(worker_), id_);
}

std::string DraftSession::worker() const { return worker_ != nullptr ? worker_->address : std::string(); }

void DraftSession::Append(const std::vector<int32_t>& tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void DraftSession::Accepted(int32_t n_accepted) {
  if (last_draft_ <= 0) return;
  const int32_t n = std::clamp(n_accepted, 0, last_draft_);
  last_draft_ = 0;
  pending_accepted_ = n;
  stats_.set_acc_tokens(stats_.acc_tokens() + n);
  if (n > 0) stats_.set_acc_drafts(stats_.acc_drafts() + 1);
}

void DraftSession::MoveTo(std::shared_ptr<Worker> next) {
  if (next == worker_) return;
  if (worker_ != nullptr) client_->EndLater(worker_, id_);
  worker_ = std::move(next);
  synced_ = 0;  // the new worker is sent the whole history
}

DraftReply DraftSession::Propose(int32_t n_max) { return client_->ProposeBatch({this}, {n_max})[0]; }

bool DraftSession::BeginPropose(DraftReply* out, int32_t* n_accepted) {
  stats_.set_calls(stats_.calls() + 1);
  last_draft_ = 0;
  *n_accepted = pending_accepted_;
  pending_accepted_ = -1;
  if (!disabled_.empty()) {
    out->error = disabled_;
    return false;
  }
  if (worker_ == nullptr || client_->IsDown(*worker_) || refused_.count(worker_->address) > 0) {
    // First call, or the worker is marked down: another one if there is one.
    std::shared_ptr<Worker> next = client_->Pick(id_, worker_.get(), refused_);
    if (next != nullptr) {
      MoveTo(std::move(next));
    } else if (worker_ == nullptr) {
      out->error = "no draft worker";
      return false;
    } else {
      out->error = "draft worker down";  // no call until down_for has passed
      return false;
    }
  }
  return true;
}

herd::v1::DraftRequest DraftSession::BuildRequest(int32_t n_max, int32_t n_accepted) const {
  herd::v1::DraftRequest req;
  req.set_session_id(id_);
  req.set_model(model_);
  req.mutable_new_tokens()->Assign(tokens_.begin() + synced_, tokens_.end());
  req.set_n_accepted(n_accepted);
  *req.mutable_config() = config_;  // small; lets a worker that lost the session rebuild it
  req.set_start(synced_);
  req.set_n_max(std::max(n_max, 0));
  req.set_temperature(temperature_);
  req.set_seed(seed_);
  return req;
}

bool DraftSession::HandleReply(const grpc::Status& s, const herd::v1::DraftResponse& resp, DraftReply* out) {
  if (!s.ok()) {
    out->error = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "deadline" : s.error_message();
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // The request's configuration is invalid (on every worker): stop asking.
      disabled_ = out->error;
      return false;
    }
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // This worker cannot run the configuration (e.g. a draft model checked against
      // another target): try another one next time; the worker itself is fine.
      refused_.insert(worker_->address);
      std::shared_ptr<Worker> next = client_->Pick(id_, worker_.get(), refused_);
      if (next != nullptr) {
        MoveTo(std::move(next));
      } else {
        disabled_ = out->error;  // no worker accepts it
      }
      return false;
    }
    // A late answer may still have landed: the next call's `start` sorts that out
    // (the worker skips tokens it already has). Stay with a slow worker.
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return false;
    client_->MarkDown(worker_.get());
    // Move to another worker (if any is up); it is sent the whole history.
    std::shared_ptr<Worker> next = client_->Pick(id_, worker_.get(), refused_);
    if (next != nullptr) MoveTo(std::move(next));
    return false;
  }
  const int64_t have = resp.history_len();
  if (have < synced_ || have > static_cast<int64_t>(tokens_.size())) {
    synced_ = std::min<int64_t>(std::max<int64_t>(have, 0), static_cast<int64_t>(tokens_.size()));
  } else {
    synced_ = have;
  }
  if (synced_ < static_cast<int64_t>(tokens_.size())) return true;  // it missed tokens: resend now
  out->tokens.assign(resp.tokens().begin(), resp.tokens().end());
  if (resp.probs_size() == resp.tokens_size()) out->probs.assign(resp.probs().begin(), resp.probs().end());
  if (!out->tokens.empty()) {
    last_draft_ = static_cast<int32_t>(out->tokens.size());
    stats_.set_gen_drafts(stats_.gen_drafts() + 1);
    stats_.set_gen_tokens(stats_.gen_tokens() + last_draft_);
  }
  if (!resp.stats().type().empty()) stats_.set_type(resp.stats().type());
  return false;
}

namespace {

// Most requests per ProposeBatch call (the draft worker's bound).
constexpr size_t kMaxBatchRequests = 256;

// One unary Propose in flight (to a worker without ProposeBatch).
struct UnaryCall {
  grpc::ClientContext ctx;
  herd::v1::DraftResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<herd::v1::DraftResponse>> reader;
};

// One ProposeBatch RPC in flight, or its requests sent one by one (`unary`).
struct BatchCall {
  herd::v1::Draft::Stub* stub = nullptr;  // the worker's
  std::atomic<bool>* no_batch = nullptr;  // the worker's Worker::no_batch
  grpc::ClientContext ctx;
  herd::v1::DraftBatchRequest req;
  herd::v1::DraftBatchResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<herd::v1::DraftBatchResponse>> reader;
  std::vector<std::unique_ptr<UnaryCall>> unary;
  std::vector<size_t> members;  // indices into the caller's session list, in request order
};

// Waits for `n` calls started on `cq` (each tagged with the grpc::Status* it fills),
// then drains and shuts it down.
void WaitAll(grpc::CompletionQueue* cq, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq->Next(&tag, &ok)) break;
    if (!ok) *static_cast<grpc::Status*>(tag) = grpc::Status(grpc::StatusCode::UNKNOWN, "call failed");
  }
  cq->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
  }
}

// Sends call->req's requests as unary Propose calls (a worker without ProposeBatch).
void StartUnary(BatchCall* call, std::chrono::system_clock::time_point deadline, grpc::CompletionQueue* cq) {
  for (const herd::v1::DraftRequest& r : call->req.requests()) {
    auto u = std::make_unique<UnaryCall>();
    u->ctx.set_deadline(deadline);
    u->reader = call->stub->AsyncPropose(&u->ctx, r, cq);
    u->reader->Finish(&u->resp, &u->status, &u->status);
    call->unary.push_back(std::move(u));
  }
}

}  // namespace

void DraftClient::SendBatches(const std::vector<DraftSession*>& sessions, const std::vector<int32_t>& n_max,
                              const std::vector<int32_t>& n_accepted, std::vector<size_t>* ask,
                              std::vector<DraftReply>* replies, std::chrono::system_clock::time_point deadline) {
  // One call per worker (chunks of kMaxBatchRequests), all in flight at once.
  std::map<Worker*, std::vector<size_t>> by_worker;
  for (size_t i : *ask) by_worker[sessions[i]->worker_.get()].push_back(i);
  std::vector<std::unique_ptr<BatchCall>> calls;
  grpc::CompletionQueue cq;
  size_t started = 0;
  for (auto& [worker, members] : by_worker) {
    for (size_t b = 0; b < members.size(); b += kMaxBatchRequests) {
      auto call = std::make_unique<BatchCall>();
      call->stub = worker->stub.get();
      call->no_batch = &worker->no_batch;
      for (size_t k = b; k < std::min(members.size(), b + kMaxBatchRequests); ++k) {
        const size_t i = members[k];
        *call->req.add_requests() = sessions[i]->BuildRequest(i < n_max.size() ? n_max[i] : 0, n_accepted[i]);
        call->members.push_back(i);
      }
      if (worker->no_batch.load()) {
        StartUnary(call.get(), deadline, &cq);
        started += call->unary.size();
      } else {
        call->ctx.set_deadline(deadline);
        call->reader = worker->stub->AsyncProposeBatch(&call->ctx, call->req, &cq);
        call->reader->Finish(&call->resp, &call->status, &call->status);
        ++started;
      }
      calls.push_back(std::move(call));
    }
  }
  WaitAll(&cq, started);
  // Workers without ProposeBatch (older draft workers): the same requests one by one.
  grpc::CompletionQueue unary_cq;
  size_t unary_started = 0;
  for (const auto& call : calls) {
    if (call->unary.empty() && call->status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      call->no_batch->store(true);
      StartUnary(call.get(), deadline, &unary_cq);
      unary_started += call->unary.size();
    }
  }
  WaitAll(&unary_cq, unary_started);

  std::vector<size_t> again;
  const herd::v1::DraftResponse no_response;
  for (const auto& call : calls) {
    const bool whole_ok = call->status.ok() && call->resp.items_size() == static_cast<int>(call->members.size());
    for (size_t k = 0; k < call->members.size(); ++k) {
      const size_t i = call->members[k];
      DraftSession* s = sessions[i];
      DraftReply* out = &(*replies)[i];
      bool resend;
      if (!call->unary.empty()) {
        resend = s->HandleReply(call->unary[k]->status, call->unary[k]->resp, out);
      } else if (!whole_ok) {
        const grpc::Status st = call->status.ok()
                                    ? grpc::Status(grpc::StatusCode::INTERNAL, "draft worker answered the wrong count")
                                    : call->status;
        resend = s->HandleReply(st, no_response, out);
      } else {
        const herd::v1::DraftBatchItem& item = call->resp.items(static_cast<int>(k));
        resend = item.code() == 0
                     ? s->HandleReply(grpc::Status::OK, item.response(), out)
                     : s->HandleReply(grpc::Status(static_cast<grpc::StatusCode>(item.code()), item.error()),
                                      no_response, out);
      }
      if (resend) again.push_back(i);
    }
  }
  *ask = std::move(again);
}

std::vector<DraftReply> DraftClient::ProposeBatch(const std::vector<DraftSession*>& sessions,
                                                  const std::vector<int32_t>& n_max,
                                                  std::chrono::milliseconds deadline_override) {
  std::vector<DraftReply> replies(sessions.size());
  std::vector<int32_t> n_accepted(sessions.size(), -1);
  std::vector<size_t> ask;  // sessions to send a request for
  std::set<const DraftSession*> seen;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i] == nullptr) {
      replies[i].error = "no session";
      continue;
    }
    if (!seen.insert(sessions[i]).second) {
      replies[i].error = "session listed twice in one batch";
      continue;
    }
    if (sessions[i]->BeginPropose(&replies[i], &n_accepted[i])) ask.push_back(i);
  }
  const auto deadline =
      std::chrono::system_clock::now() + (deadline_override.count() > 0 ? deadline_override : opts_.deadline);
  // Two rounds: the second only for sessions whose worker asks for tokens it misses.
  for (int attempt = 0; attempt < 2 && !ask.empty(); ++attempt) {
    SendBatches(sessions, n_max, n_accepted, &ask, &replies, deadline);
    std::fill(n_accepted.begin(), n_accepted.end(), -1);  // a resend reports nothing
  }
  return replies;
}

}  // namespace herd::draft
