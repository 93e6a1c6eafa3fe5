// Gateway::RunAsync: a generation that holds no thread while it waits on its worker.
//
// Each attempt is a grpc::ClientBidiReactor over the worker's Session call: Start and the
// whole generation's Step are written at once, every StepResult is consumed by the
// CompletionTracker and delivered to the sink on gRPC's callback thread, and the call's
// end is classified exactly as the blocking path does (Gateway::ClassifyAttempt), so a
// retry on another worker before the first token, cancellation, deadlines and the last
// message of a cut request behave the same. Speculative generations, whose loop waits on
// draft calls, run Gateway::Run on a small pool (BlockingRunner) instead.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "services/gateway/completion.h"
#include "services/gateway/gateway.h"
#include "services/gateway/run_state.h"

namespace herd::gateway {

// One asynchronous generation across its attempts.
struct Gateway::AsyncRun {
  std::shared_ptr<Generation> g;
  std::shared_ptr<GenerateSink> sink;
  std::function<void(absl::Status)> done;
  Active active;
  std::set<std::string> tried;
  absl::Status last_error;
  int attempt = 0;
};

// One attempt on one worker: the Session call as a callback reactor. Owned by two
// references: the call's (self_, dropped by OnDone) and Start's (dropped when StartCall has
// returned), so OnDone on a callback thread never frees the ClientContext while StartCall
// still reads it (gRPC orders the two with atomics ThreadSanitizer cannot see; a
// shared_ptr's count is an edge it can).
class Gateway::AsyncAttempt final : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  AsyncAttempt(Gateway* gw, std::shared_ptr<AsyncRun> run, WorkerPool::Lease lease)
      : gw_(gw),
        run_(std::move(run)),
        lease_(std::make_unique<WorkerPool::Lease>(std::move(lease))),
        address_(lease_->address()),
        tracker_(*run_->g, AttemptBudget(*run_->g, lease_->info())) {}

  // Creates the attempt and starts its call.
  static void Start(Gateway* gw, std::shared_ptr<AsyncRun> run, WorkerPool::Lease lease) {
    auto attempt = std::make_shared<AsyncAttempt>(gw, std::move(run), std::move(lease));
    attempt->self_ = attempt;
    attempt->Go();
  }

 private:
  // Starts the call. Touches nothing of this object after StartCall: the whole call
  // may end, and OnDone drop the call's reference, before StartCall returns.
  void Go() {
    Generation& g = *run_->g;
    ctx_.set_deadline(absl::ToChronoTime(g.deadline));
    gw_->async_attempts_.fetch_add(1);
    // A cancellation from now on ends the call (TryCancel before StartCall cancels it
    // as soon as it starts).
    run_->active.SetContext(&ctx_);
    lease_->stub()->async()->Session(&ctx_, this);
    // The whole generation is one Step, sent with the Start (the worker accepts Steps
    // before it has sent Started).
    v1::SessionRequest start;
    *start.mutable_start() = SessionStartOf(g, lease_->info(), tracker_.remaining());
    g.worker_speculation = false;
    v1::SessionRequest step;
    step.mutable_step()->set_n_steps(ClampSteps(tracker_.remaining()));
    const v1::SessionRequest* first = nullptr;
    {
      std::lock_guard<std::mutex> l(write_mu_);
      writes_.push_back(std::move(start));
      writes_.push_back(std::move(step));
      writing_ = true;
      first = &writes_.front();
    }
    StartWrite(first);
    StartRead(&resp_);
    started_call_.store(true, std::memory_order_release);
    StartCall();
  }

 public:
  void OnWriteDone(bool ok) override {
    Acquire();
    const v1::SessionRequest* next = nullptr;
    {
      std::lock_guard<std::mutex> l(write_mu_);
      writes_.pop_front();
      writing_ = false;
      if (!ok) {
        broken_ = true;
        writes_.clear();
        return;
      }
      if (!writes_.empty()) {
        writing_ = true;
        next = &writes_.front();
      }
    }
    // Outside the lock: a reaction may run on this thread.
    if (next != nullptr) StartWrite(next);
  }

  void OnReadDone(bool ok) override {
    Acquire();
    if (!ok) {
      broken_ = true;  // the call ended; OnDone has its status
      return;
    }
    if (Handle()) StartRead(&resp_);
  }

  void OnDone(const grpc::Status& status) override {
    Acquire();
    run_->active.SetContext(nullptr);
    // Ended by us (finished, client gone, protocol error): loop_ says which. Otherwise a
    // read failed: the worker (or a cancellation) ended the call and `status` says why.
    AttemptEnd e;
    e.broken = !ended_by_us_;
    e.started = started_;
    e.client_gone = client_gone_;
    e.worker = status;
    e.loop = loop_;
    Generation& g = *run_->g;
    e.speculative = g.worker_speculation;
    if (g.worker_speculation) gw_->RecordSpecStats(g.spec_stats);
    const Attempt a = gw_->ClassifyAttempt(g, run_->sink.get(), &run_->active, address_, e);
    lease_.reset();  // the worker's load, before the generation may end
    Gateway* gw = gw_;
    std::shared_ptr<AsyncRun> run = std::move(run_);
    const std::string addr = address_;
    self_.reset();  // may delete this
    gw->AfterAsyncAttempt(std::move(run), addr, a);
    gw->async_attempts_.fetch_sub(1);
  }

 private:
  // gRPC hands the reactor to its callback threads through lock-free queues that
  // ThreadSanitizer cannot see (Debian's gRPC is not instrumented): an explicit edge
  // from Go().
  void Acquire() const { (void)started_call_.load(std::memory_order_acquire); }

  // One message from the worker. Returns whether to read on.
  bool Handle() {
    Generation& g = *run_->g;
    if (!started_) {
      if (!resp_.has_started())
        return EndCall(absl::InternalError(absl::StrCat("worker ", address_, ": protocol error: expected Started")));
      started_ = true;
      g.queue_ms = resp_.started().queue_ms();
      g.cached_tokens = resp_.started().n_cached();
      if (g.cached_tokens > 0) gw_->prefix_tokens_realized_->Add(static_cast<double>(g.cached_tokens));
      return true;
    }
    if (!resp_.has_step()) {
      return EndCall(absl::InternalError(absl::StrCat("worker ", address_, ": protocol error: expected StepResult")));
    }
    gw_->NoteCached(g, resp_.step());
    bool run_ended = false;
    v1::GenerateResponse msg = tracker_.Consume(resp_.step(), &run_ended);
    if (!gw_->Emit(g, run_->sink.get(), &msg)) {
      client_gone_ = true;
      run_->active.Cancel(kClientGone);
      return EndCall(absl::CancelledError("client went away"));
    }
    if (tracker_.finished()) return EndCall(absl::OkStatus());
    if (run_ended) {
      // An end-of-generation token ended the worker's run of steps (ignore_eos): ask for
      // the rest.
      v1::SessionRequest step;
      step.mutable_step()->set_n_steps(ClampSteps(tracker_.remaining()));
      const v1::SessionRequest* first = nullptr;
      {
        std::lock_guard<std::mutex> l(write_mu_);
        if (!broken_) {
          writes_.push_back(std::move(step));
          if (!writing_) {
            writing_ = true;
            first = &writes_.front();
          }
        }
      }
      if (first != nullptr) StartWrite(first);
    }
    return true;
  }

  // Ends the call (the worker frees the sequence's KV cells at once); OnDone follows.
  bool EndCall(absl::Status loop) {
    loop_ = std::move(loop);
    ended_by_us_ = true;
    ctx_.TryCancel();
    return false;
  }

  Gateway* gw_;
  std::shared_ptr<AsyncRun> run_;
  std::unique_ptr<WorkerPool::Lease> lease_;
  const std::string address_;
  CompletionTracker tracker_;
  grpc::ClientContext ctx_;
  v1::SessionResponse resp_;
  std::mutex write_mu_;
  std::deque<v1::SessionRequest> writes_;  // front: being written (guarded by write_mu_)
  bool writing_ = false;
  std::atomic<bool> broken_{false};
  std::atomic<bool> started_call_{false};
  std::shared_ptr<AsyncAttempt> self_;  // the call's reference, dropped by OnDone
  // Reads are sequential: these are touched only by OnReadDone, then by OnDone.
  bool started_ = false;
  bool client_gone_ = false;
  bool ended_by_us_ = false;
  absl::Status loop_;
};

void Gateway::RunAsync(std::shared_ptr<Generation> g, std::shared_ptr<GenerateSink> sink,
                       std::function<void(absl::Status)> done) {
  // Speculative generations stay asynchronous where the workers draft themselves;
  // where the gateway must drive the drafts, its loop blocks on draft calls.
  if (g->spec.type != engine::spec::SpecType::kNone &&
      !pool_->AllLiveWorkersRunSpec(g->model, engine::spec::SpecTypeName(g->spec.type))) {
    {
      std::lock_guard<std::mutex> l(active_mu_);
      if (blocking_ == nullptr) blocking_ = std::make_unique<BlockingRunner>(opts_.blocking_threads);
    }
    blocking_->Submit([this, g, sink, done = std::move(done)] { done(Run(*g, sink.get())); });
    return;
  }
  auto run = std::make_shared<AsyncRun>();
  run->g = std::move(g);
  run->sink = std::move(sink);
  run->done = std::move(done);
  run->active.sink = run->sink.get();
  run->active.deadline = run->g->deadline;
  BeginRun(&run->active);
  NextAsyncAttempt(std::move(run));
}

void Gateway::NextAsyncAttempt(std::shared_ptr<AsyncRun> run) {
  Generation& g = *run->g;
  absl::Status status;
  if (run->active.cancel.load() != kNotCancelled) {
    status = absl::CancelledError("cancelled before a worker was found");
  } else {
    auto lease = pool_->Acquire(g.model, static_cast<int64_t>(g.prompt.size()), run->tried, g.prompt);
    if (lease.ok()) {
      g.worker = lease->address();
      AsyncAttempt::Start(this, run, *std::move(lease));
      return;
    }
    status = run->last_error.ok() ? lease.status() : run->last_error;
  }
  status = EndRun(g, run->sink.get(), &run->active, status);
  run->done(status);
}

void Gateway::AfterAsyncAttempt(std::shared_ptr<AsyncRun> run, const std::string& addr, const Attempt& a) {
  if (a.status.ok() || !a.retryable || run->attempt + 1 >= opts_.max_attempts) {
    const absl::Status status = EndRun(*run->g, run->sink.get(), &run->active, a.status);
    run->done(status);
    return;
  }
  HERD_LOG(Info) << "request id=" << run->g->id << ": worker " << addr << " failed before the first token ("
                 << a.status.message() << "); trying another worker";
  run->last_error = a.status;
  run->tried.insert(addr);
  ++run->attempt;
  NextAsyncAttempt(std::move(run));
}

}  // namespace herd::gateway
