// The gateway's per-generation bookkeeping shared by the blocking (Gateway::Run) and
// the asynchronous (Gateway::RunAsync, async_run.cc) paths. Internal to the gateway.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

#include "services/gateway/gateway.h"

namespace herd::gateway {

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

// Runs tasks on up to `n` threads, started on first use; more tasks wait in order.
class Gateway::BlockingRunner {
 public:
  explicit BlockingRunner(int n) : n_(std::max(1, n)) {}
  ~BlockingRunner() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void Submit(std::function<void()> task) {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(task));
    if (idle_ == 0 && static_cast<int>(threads_.size()) < n_) {
      threads_.emplace_back([this] { Loop(); });
    } else {
      cv_.notify_one();
    }
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(l, [this] { return stop_ || !q_.empty(); });
      --idle_;
      if (q_.empty()) return;
      std::function<void()> task = std::move(q_.front());
      q_.pop_front();
      l.unlock();
      task();
      l.lock();
    }
  }
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

// How one attempt on a worker ended, as the attempt's loop saw it.
struct Gateway::AttemptEnd {
  bool broken = false;       // a read or write on the session failed (the call ended)
  bool started = false;      // the worker sent Started
  bool client_gone = false;  // a message could not be delivered
  bool speculative = false;  // the attempt ran with a drafter
  grpc::Status worker;       // the call's final status (meaningful when broken)
  absl::Status loop;         // the loop's own status (protocol errors)
};

/// Whether `info`'s worker drafts g's speculative type itself (WorkerInfo.spec_types).
bool WorkerRunsSpec(const Gateway::Generation& g, const v1::WorkerInfo& info);
/// The SessionStart of g on a worker with `info`, `remaining` tokens to generate (with
/// the speculative configuration when the worker drafts it: WorkerRunsSpec).
v1::SessionStart SessionStartOf(const Gateway::Generation& g, const v1::WorkerInfo& info, int64_t remaining);

/// A Step's n_steps for `n` tokens still wanted.
inline int32_t ClampSteps(int64_t n) {
  return static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

/// Tokens one attempt may generate: n_predict, or (-1) what the worker's per-sequence
/// context leaves after the prompt.
inline int64_t AttemptBudget(const Gateway::Generation& g, const v1::WorkerInfo& info) {
  const int64_t n_ctx_seq = info.n_ctx_seq() > 0 ? info.n_ctx_seq() : info.n_ctx();
  return g.n_predict > 0 ? g.n_predict : std::max<int64_t>(1, n_ctx_seq - static_cast<int64_t>(g.prompt.size()));
}

}  // namespace herd::gateway
