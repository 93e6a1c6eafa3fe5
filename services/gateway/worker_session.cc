#include "services/gateway/worker_session.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace herd::gateway {

WorkerSession::WorkerSession(v1::Worker::Stub* stub, std::string address, absl::Time deadline)
    : address_(std::move(address)) {
  ctx_.set_deadline(absl::ToChronoTime(deadline));
  stream_ = stub->Session(&ctx_);
}

bool WorkerSession::Start(const v1::SessionStart& start, const v1::SessionStep* first_step) {
  v1::SessionRequest req;
  *req.mutable_start() = start;
  if (!stream_->Write(req)) {
    broken_ = true;
    return false;
  }
  return first_step == nullptr || Step(*first_step);
}

bool WorkerSession::Step(const v1::SessionStep& step) {
  v1::SessionRequest req;
  *req.mutable_step() = step;
  if (!stream_->Write(req)) broken_ = true;
  return !broken_;
}

absl::StatusOr<v1::SessionStarted> WorkerSession::ReadStarted() {
  v1::SessionResponse resp;
  if (!stream_->Read(&resp)) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("worker ", address_, ": the session ended"));
  }
  if (!resp.has_started()) {
    return absl::InternalError(absl::StrCat("worker ", address_, ": protocol error: expected Started"));
  }
  return resp.started();
}

absl::StatusOr<v1::StepResult> WorkerSession::ReadStep() {
  v1::SessionResponse resp;
  if (!stream_->Read(&resp)) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("worker ", address_, ": the session ended"));
  }
  if (!resp.has_step()) {
    return absl::InternalError(absl::StrCat("worker ", address_, ": protocol error: expected StepResult"));
  }
  return std::move(*resp.mutable_step());
}

grpc::Status WorkerSession::Close(bool collect_status, bool cancelled) {
  v1::SessionResponse resp;
  if (collect_status) {
    if (cancelled) ctx_.TryCancel();
    while (stream_->Read(&resp)) {
    }
    return stream_->Finish();
  }
  v1::SessionRequest cancel;
  cancel.mutable_cancel();
  stream_->Write(cancel);
  stream_->WritesDone();
  ctx_.TryCancel();
  while (stream_->Read(&resp)) {
  }
  stream_->Finish();
  return grpc::Status::OK;
}

}  // namespace herd::gateway
