#include "libs/clients/draft_source.h"

#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/engine/spec/spec_proto.h"

namespace herd::draft {

DraftWorkerSource::DraftWorkerSource(std::unique_ptr<DraftSession> s, DraftClientBatcher* batcher)
    : s_(std::move(s)), batcher_(batcher) {}

void DraftWorkerSource::Append(const std::vector<int32_t>& tokens) {
  if (s_ != nullptr) s_->Append(tokens);
}

absl::StatusOr<engine::spec::DraftResult> DraftWorkerSource::FromReply(DraftReply r) {
  if (!r.error.empty()) {
    return r.error == "deadline" ? absl::DeadlineExceededError("draft worker: deadline")
                                 : absl::UnavailableError(absl::StrCat("draft worker: ", r.error));
  }
  engine::spec::DraftResult d;
  d.tokens = std::move(r.tokens);
  d.probs.reserve(r.probs.size());
  for (const herd::v1::DraftTokenProbs& q : r.probs) {
    absl::StatusOr<engine::spec::SparseDist> p = engine::spec::SparseDistFromProto(q);
    if (!p.ok()) {  // malformed: verified as a deterministic draft (still exact)
      d.probs.clear();
      break;
    }
    d.probs.push_back(*std::move(p));
  }
  return d;
}

absl::StatusOr<engine::spec::DraftResult> DraftWorkerSource::Propose(int32_t n_max) {
  if (s_ == nullptr) return absl::FailedPreconditionError("the drafter has ended");
  return FromReply(s_->Propose(n_max));
}

void DraftWorkerSource::Accept(int32_t n_accepted) {
  if (s_ != nullptr) s_->Accepted(n_accepted);
}

void DraftWorkerSource::End() {
  if (s_ == nullptr) return;
  stats_ = s_->stats();
  s_.reset();  // ends the session on its worker in the background
}

engine::spec::SpecStats DraftWorkerSource::Stats() const {
  return engine::spec::SpecStatsFromProto(s_ != nullptr ? s_->stats() : stats_);
}

engine::spec::DraftBatcher* DraftWorkerSource::batcher() { return batcher_; }

void DraftClientBatcher::ProposeBatch(const std::vector<engine::spec::DraftJob*>& jobs) {
  std::vector<DraftSession*> sessions;
  std::vector<int32_t> n_max;
  std::vector<engine::spec::DraftJob*> asked;
  for (engine::spec::DraftJob* j : jobs) {
    auto* src = static_cast<DraftWorkerSource*>(j->source);
    if (src->session() == nullptr) {
      j->result = absl::FailedPreconditionError("the drafter has ended");
      continue;
    }
    sessions.push_back(src->session());
    n_max.push_back(j->n_max);
    asked.push_back(j);
  }
  if (sessions.empty()) return;
  std::vector<DraftReply> replies = client_->ProposeBatch(sessions, n_max, asked.front()->deadline);
  for (size_t i = 0; i < asked.size(); ++i) {
    asked[i]->result = i < replies.size() ? DraftWorkerSource::FromReply(std::move(replies[i]))
                                          : absl::InternalError("draft worker: no reply");
  }
}

}  // namespace herd::draft
