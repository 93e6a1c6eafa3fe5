// The gateway's side of one worker Session call (worker.proto: Start, Step, Cancel in;
// Started, StepResult out), for one generation attempt on one target worker.
#pragma once
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

#include "proto/herd/v1/worker.grpc.pb.h"

namespace herd::gateway {

/// One Session stream. The call's deadline is the generation's; context() can be
/// cancelled from another thread (grpc::ClientContext::TryCancel). Not thread-safe
/// otherwise.
class WorkerSession {
 public:
  /// Opens the stream on `stub` (the worker at `address`, named in errors).
  WorkerSession(v1::Worker::Stub* stub, std::string address, absl::Time deadline);
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  grpc::ClientContext* context() { return &ctx_; }

  /// Writes Start, then `first_step` when not null (the worker accepts Steps before it
  /// has sent Started: a whole plain generation saves a round trip). False when the
  /// stream broke (broken() is then true).
  bool Start(const v1::SessionStart& start, const v1::SessionStep* first_step);
  /// Writes a Step. False when the stream broke.
  bool Step(const v1::SessionStep& step);
  /// Reads Started. UNAVAILABLE when the stream broke (broken() true; the worker's
  /// status comes from Close); INTERNAL "protocol error" for another message.
  absl::StatusOr<v1::SessionStarted> ReadStarted();
  /// Reads a StepResult; errors as ReadStarted.
  absl::StatusOr<v1::StepResult> ReadStep();

  /// A Read or Write failed: the worker (or a cancellation) ended the call.
  bool broken() const { return broken_; }

  /// Ends the call so that the worker frees the sequence's KV cells at once. After a
  /// broken stream of an unfinished generation (`collect_status`): drains it and returns
  /// the worker's final status (cancelling first when `cancelled`). Otherwise sends
  /// Cancel and WritesDone, cancels the call and returns OK.
  grpc::Status Close(bool collect_status, bool cancelled);

 private:
  std::string address_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream_;
  bool broken_ = false;
};

}  // namespace herd::gateway
