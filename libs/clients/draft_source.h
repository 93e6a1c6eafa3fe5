// A draft worker session as the speculative loops consume it: an
// engine::spec::DraftSource over one draft::DraftSession (libs/clients/draft_client.h).
// Only new tokens cross the wire, each Propose has the client's deadline, and failures
// are empty drafts reported as errors (so callers count them). Its batcher() proposes
// for every such source of one DraftClient together, so a target scheduler that asks
// all its sequences' drafts in one spec::ProposeAll sends one call per draft worker.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/clients/draft_client.h"
#include "libs/engine/spec/drafter.h"

namespace herd::draft {

class DraftClientBatcher;

/// One sequence's drafts from the draft workers. Not thread-safe (one loop drives it).
class DraftWorkerSource : public engine::spec::DraftSource {
 public:
  /// `batcher` (optional) must outlive the source; it is what batcher() returns.
  explicit DraftWorkerSource(std::unique_ptr<DraftSession> s, DraftClientBatcher* batcher = nullptr);
  void Append(const std::vector<int32_t>& tokens) override;
  /// UNAVAILABLE / DEADLINE_EXCEEDED ("draft worker: ...") when the draft is empty for a
  /// reason other than the drafter having nothing; FAILED_PRECONDITION after End().
  absl::StatusOr<engine::spec::DraftResult> Propose(int32_t n_max) override;
  void Accept(int32_t n_accepted) override;
  /// Ends the session on its worker (in the background); Stats() keeps the last figures.
  void End() override;
  engine::spec::SpecStats Stats() const override;
  engine::spec::DraftBatcher* batcher() override;

  /// The session (null after End()).
  DraftSession* session() { return s_.get(); }
  /// A draft worker's reply as a DraftResult or the error it stands for.
  static absl::StatusOr<engine::spec::DraftResult> FromReply(DraftReply r);

 private:
  std::unique_ptr<DraftSession> s_;
  DraftClientBatcher* batcher_;
  herd::v1::SpeculativeStats stats_;
};

/// Proposes for several DraftWorkerSources of one DraftClient in one go: the sessions
/// are asked together (DraftClient::ProposeBatch: one call per draft worker, the calls
/// in flight at once, one deadline).
class DraftClientBatcher : public engine::spec::DraftBatcher {
 public:
  /// `client` must outlive the batcher.
  explicit DraftClientBatcher(DraftClient* client) : client_(client) {}
  /// Every job's source must be a DraftWorkerSource made with this batcher.
  void ProposeBatch(const std::vector<engine::spec::DraftJob*>& jobs) override;

 private:
  DraftClient* client_;
};

}  // namespace herd::draft
