#include "libs/base/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HERD_CPU_RELAX() _mm_pause()
#else
#define HERD_CPU_RELAX() std::this_thread::yield()
#endif

namespace herd {
namespace {

// How long an idle worker polls for the next Run before it sleeps on the condition
// variable (a futex wake-up costs tens of microseconds; decode runs a graph node every
// few microseconds).
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
// Pause iterations between clock reads while spinning.
constexpr int kSpinBatch = 64;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  task_.store(&fn, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // Publishes task_ and pending_ (seq_cst: ordered before the sleepers_ check below, which
  // pairs with the worker's increment of sleepers_ before it re-checks generation_).
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  fn(0, n_threads_);
  // Wait for the workers: spin first, then yield.
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < 100000) {
      HERD_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop(int ith) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto deadline = std::chrono::steady_clock::now() + kWorkerSpin;
      do {
        for (int i = 0; i < kSpinBatch && gen == seen; ++i) {
          HERD_CPU_RELAX();
          gen = generation_.load(std::memory_order_acquire);
        }
      } while (gen == seen && std::chrono::steady_clock::now() < deadline);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*task_.load(std::memory_order_relaxed))(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace herd
