#include "libs/base/thread_pool.h"

#include <chrono>

namespace herd {

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &fn;
    pending_.store(n_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, n_threads_);
  // Wait for the workers: spin first, then yield.
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins > 2000) std::this_thread::yield();
  }
}

void ThreadPool::WorkerLoop(int ith) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little for the next generation, then sleep on the condition variable.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < 20000; ++i) gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    const std::function<void(int, int)>* task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      task = task_;
    }
    (*task)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace herd
