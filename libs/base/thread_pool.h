// A fixed pool of worker threads for data-parallel kernels.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace herd {

/// Runs `fn(ith, nth)` on `nth` threads (the caller is thread 0) and waits for all.
/// Workers spin (with pause) for a while before sleeping, so back-to-back calls (one per
/// graph node) cost a couple of cache-line transfers rather than a futex wake-up; the
/// mutex and condition variable are touched only when a worker actually sleeps.
/// Not reentrant: one Run at a time per pool.
class ThreadPool {
 public:
  /// n_threads >= 1; values < 1 are treated as 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// Calls fn(ith, nth) for ith in [0, nth) concurrently; returns when all are done.
  void Run(const std::function<void(int ith, int nth)>& fn);

 private:
  void WorkerLoop(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<const std::function<void(int, int)>*> task_{nullptr};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  // Written by the caller once per Run, polled by spinning workers: own cache line.
  alignas(64) std::atomic<uint64_t> generation_{0};
  // Decremented by each worker when done, polled by the caller: own cache line.
  // (alignas(64) also rounds the object up to whole cache lines: nothing follows it on its line.)
  alignas(64) std::atomic<int> pending_{0};
};

/// Splits [0, n) into nth near-equal contiguous parts; returns part ith as [begin, end).
inline void SplitRange(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = (n + nth - 1) / nth;
  *begin = std::min<int64_t>(n, per * ith);
  *end = std::min<int64_t>(n, *begin + per);
}

}  // namespace herd
