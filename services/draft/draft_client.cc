#include "services/draft/draft_client.h"

#include <algorithm>
#include <functional>

namespace herd::draft {

DraftClient::DraftClient(DraftClientOptions opts) : opts_(std::move(opts)) {
  for (const std::string& a : opts_.addresses) {
    Worker w;
    w.address = a;
    w.stub = herd::v1::Draft::NewStub(grpc::CreateChannel(a, grpc::InsecureChannelCredentials()));
    workers_.push_back(std::move(w));
  }
  ender_ = std::thread([this] { EnderLoop(); });
}

DraftClient::~DraftClient() {
  {
    std::lock_guard<std::mutex> l(end_mu_);
    stopping_ = true;
  }
  end_cv_.notify_all();
  ender_.join();
}

std::unique_ptr<DraftSession> DraftClient::NewSession(const std::string& session_id, const std::string& model,
                                                      const herd::v1::SpeculativeConfig& config, float temperature,
                                                      uint32_t seed) {
  return std::unique_ptr<DraftSession>(new DraftSession(this, session_id, model, config, temperature, seed));
}

int DraftClient::Pick(const std::string& session_id, int avoid) {
  const int n = static_cast<int>(workers_.size());
  if (n == 0) return -1;
  const auto now = std::chrono::steady_clock::now();
  const int first = static_cast<int>(std::hash<std::string>()(session_id) % static_cast<size_t>(n));
  std::lock_guard<std::mutex> l(mu_);
  for (int k = 0; k < n; ++k) {
    const int w = (first + k) % n;
    if (w != avoid && workers_[static_cast<size_t>(w)].down_until <= now) return w;
  }
  return -1;
}

void DraftClient::MarkDown(int w) {
  std::lock_guard<std::mutex> l(mu_);
  workers_[static_cast<size_t>(w)].down_until = std::chrono::steady_clock::now() + opts_.down_for;
}

void DraftClient::EndLater(int w, const std::string& session_id) {
  {
    std::lock_guard<std::mutex> l(end_mu_);
    to_end_.emplace_back(w, session_id);
  }
  end_cv_.notify_one();
}

void DraftClient::EnderLoop() {
  std::unique_lock<std::mutex> l(end_mu_);
  for (;;) {
    end_cv_.wait(l, [this] { return stopping_ || !to_end_.empty(); });
    if (to_end_.empty() && stopping_) return;
    auto [w, id] = to_end_.front();
    to_end_.pop_front();
    const bool stopping = stopping_;
    l.unlock();
    if (!stopping) {  // best effort: idle sessions are evicted by the worker anyway
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + opts_.deadline);
      herd::v1::EndSessionRequest req;
      req.set_session_id(id);
      herd::v1::EndSessionResponse resp;
      (void)workers_[static_cast<size_t>(w)].stub->EndSession(&ctx, req, &resp);
    }
    l.lock();
  }
}

DraftSession::DraftSession(DraftClient* client, std::string id, std::string model,
                           herd::v1::SpeculativeConfig config, float temperature, uint32_t seed)
    : client_(client),
      id_(std::move(id)),
      model_(std::move(model)),
      config_(std::move(config)),
      temperature_(temperature),
      seed_(seed) {
  stats_.set_type(config_.type());
}

DraftSession::~DraftSession() {
  if (worker_ >= 0) client_->EndLater(worker_, id_);
}

std::string DraftSession::worker() const {
  return worker_ >= 0 ? client_->workers_[static_cast<size_t>(worker_)].address : std::string();
}

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

DraftReply DraftSession::Propose(int32_t n_max) {
  DraftReply out;
  stats_.set_calls(stats_.calls() + 1);
  last_draft_ = 0;
  const int32_t n_accepted = pending_accepted_;
  pending_accepted_ = -1;
  if (worker_ < 0) {
    worker_ = client_->Pick(id_, -1);
    synced_ = 0;
  }
  if (worker_ < 0) {
    out.error = "no draft worker";
    return out;
  }
  // Two tries: the second only when the worker asks for tokens it misses (resync).
  for (int attempt = 0; attempt < 2; ++attempt) {
    herd::v1::DraftRequest req;
    req.set_session_id(id_);
    req.set_model(model_);
    req.mutable_new_tokens()->Assign(tokens_.begin() + synced_, tokens_.end());
    req.set_n_accepted(attempt == 0 ? n_accepted : -1);
    *req.mutable_config() = config_;  // small; lets a worker that lost the session rebuild it
    req.set_start(synced_);
    req.set_n_max(std::max(n_max, 0));
    req.set_temperature(temperature_);
    req.set_seed(seed_);
    herd::v1::DraftResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + client_->opts_.deadline);
    grpc::Status s = client_->workers_[static_cast<size_t>(worker_)].stub->Propose(&ctx, req, &resp);
    if (!s.ok()) {
      out.error = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "deadline" : s.error_message();
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        return out;  // the request, not the worker: no drafts for this config, keep the worker
      }
      // A late answer may still have landed: the next call's `start` sorts that out
      // (the worker skips tokens it already has). Stay with a slow worker.
      if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return out;
      client_->MarkDown(worker_);
      // Move to another worker (if any is up); it is sent the whole history.
      const int next = client_->Pick(id_, worker_);
      if (next >= 0 && next != worker_) {
        client_->EndLater(worker_, id_);
        worker_ = next;
        synced_ = 0;
      }
      return out;
    }
    const int64_t have = resp.history_len();
    if (have < synced_ || have > static_cast<int64_t>(tokens_.size())) {
      synced_ = std::min<int64_t>(std::max<int64_t>(have, 0), static_cast<int64_t>(tokens_.size()));
    } else {
      synced_ = have;
    }
    if (synced_ < static_cast<int64_t>(tokens_.size())) continue;  // it missed tokens: resend now
    out.tokens.assign(resp.tokens().begin(), resp.tokens().end());
    if (resp.probs_size() == resp.tokens_size()) out.probs.assign(resp.probs().begin(), resp.probs().end());
    if (!out.tokens.empty()) {
      last_draft_ = static_cast<int32_t>(out.tokens.size());
      stats_.set_gen_drafts(stats_.gen_drafts() + 1);
      stats_.set_gen_tokens(stats_.gen_tokens() + last_draft_);
    }
    if (!resp.stats().type().empty()) stats_.set_type(resp.stats().type());
    return out;
  }
  return out;
}

}  // namespace herd::draft
