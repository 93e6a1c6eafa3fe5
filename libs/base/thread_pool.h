// A fixed pool of worker threads for data-parallel kernels.
#pragma once
#include <pthread.h>
#include <sched.h>

#include <algorithm>
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
  /// pin: bind each thread to one CPU for its life, as llama.cpp's --cpu-strict 1 or OpenMP's
  /// OMP_PROC_BIND=TRUE OMP_PLACES=cores do, so the kernel never migrates a thread or parks
  /// two on one core. Worker thread ith runs on PinningOrder()[ith % its size] (more threads
  /// than CPUs wrap around and share). The thread calling Run is thread 0: it is bound to
  /// PinningOrder()[0] on its first Run, and again when a different thread calls Run. The last
  /// bound caller gets its CPUs back if it destroys the pool; an earlier caller stays bound.
  /// Every pinned pool starts at the same CPU: two pools running at once share their cores.
  /// Best effort: a binding the kernel refuses (a changed cpuset) leaves the thread where it was.
  explicit ThreadPool(int n_threads, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  bool pinned() const { return pin_; }

  /// Calls fn(ith, nth) for ith in [0, nth) concurrently; returns when all are done.
  void Run(const std::function<void(int ith, int nth)>& fn);

 private:
  void WorkerLoop(int ith);

  int n_threads_;
  bool pin_;
  std::vector<int> cpus_;      // PinningOrder() when pin_
  bool caller_bound_ = false;  // pin_: bound_caller_ was bound by Run
  pthread_t bound_caller_{};   // and its CPUs before (restored by ~ThreadPool
  cpu_set_t caller_cpus_{};    // when it destroys the pool)
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

/// The CPUs this process started on (sched_getaffinity before main), one per physical core first (in
/// CPU order; cores told apart by sysfs topology physical_package_id / core_id), then the
/// cores' other hardware threads: the order of OMP_PLACES=cores. Never empty (CPU 0 when the
/// mask cannot be read).
std::vector<int> PinningOrder();

/// Splits [0, n) into nth contiguous parts of ceil(n / nth) (the last ones shorter, possibly
/// empty: n = 5, nth = 4 gives 2, 2, 1, 0); returns part ith as [begin, end).
inline void SplitRange(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = (n + nth - 1) / nth;
  *begin = std::min<int64_t>(n, per * ith);
  *end = std::min<int64_t>(n, *begin + per);
}

/// Guided self-scheduling (Polychronopoulos & Kuck, 1987; OpenMP's schedule(guided)):
/// splits [0, n) into chunks taken in order from a shared counter, each a 1/(2 nth) share
/// of what is left (rounded up to a multiple of `unit`, at least `min_chunk`), so the early
/// chunks are large and the last ones small: a thread that another tenant of its core
/// slows down holds the others at the end for at most a small chunk, in far fewer chunks
/// (calls) than an equal split into chunks that small would take. Returns the chunk starts followed by n (so chunk c
/// is [starts[c], starts[c + 1])). unit >= 1; min_chunk is rounded up to a multiple of unit.
inline std::vector<int64_t> GuidedChunks(int64_t n, int nth, int64_t unit, int64_t min_chunk) {
  if (unit < 1) unit = 1;
  if (nth < 1) nth = 1;
  min_chunk = std::max<int64_t>(unit, (min_chunk + unit - 1) / unit * unit);
  std::vector<int64_t> starts;
  int64_t at = 0;
  while (at < n) {
    starts.push_back(at);
    const int64_t share = (n - at + 2 * nth - 1) / (2 * nth);
    at = std::min<int64_t>(n, at + std::max<int64_t>(min_chunk, (share + unit - 1) / unit * unit));
  }
  starts.push_back(n);
  return starts;
}

}  // namespace herd
