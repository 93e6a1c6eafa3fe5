#include "libs/base/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <set>
#include <utility>

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

// Binds the calling thread to `cpu` (best effort: a refusal is ignored).
void BindThisThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// One integer from a sysfs file, or -1.
int ReadSysfsInt(const std::string& path) {
  std::ifstream f(path);
  int v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// The CPUs the process was started on (read before main, while no thread is bound: a
// pinned pool's caller keeps its binding, and threads inherit their creator's).
const cpu_set_t& ProcessCpus() {
  static const cpu_set_t set = [] {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (sched_getaffinity(0, sizeof(s), &s) != 0) CPU_ZERO(&s);
    return s;
  }();
  return set;
}
[[maybe_unused]] const bool kProcessCpusRead = (ProcessCpus(), true);

}  // namespace

std::vector<int> PinningOrder() {
  const cpu_set_t& set = ProcessCpus();
  if (CPU_COUNT(&set) == 0) return {0};
  std::vector<int> first, rest;
  std::set<std::pair<int, int>> cores;  // (package, core) already given a CPU
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const int core = ReadSysfsInt(dir + "core_id");
    const int package = ReadSysfsInt(dir + "physical_package_id");
    // Without topology every CPU counts as its own core.
    if (core < 0 || cores.insert({package, core}).second) {
      first.push_back(cpu);
    } else {
      rest.push_back(cpu);
    }
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

ThreadPool::ThreadPool(int n_threads, bool pin) : n_threads_(n_threads < 1 ? 1 : n_threads), pin_(pin) {
  if (pin_) cpus_ = PinningOrder();
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  // The caller bound by Run gets its own CPUs back when it is the one destroying the pool.
  if (caller_bound_ && pthread_equal(pthread_self(), bound_caller_)) {
    (void)pthread_setaffinity_np(bound_caller_, sizeof(caller_cpus_), &caller_cpus_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (pin_ && !(caller_bound_ && pthread_equal(pthread_self(), bound_caller_))) {
    caller_bound_ = pthread_getaffinity_np(pthread_self(), sizeof(caller_cpus_), &caller_cpus_) == 0;
    bound_caller_ = pthread_self();
    BindThisThread(cpus_[0]);
  }
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
  if (pin_) BindThisThread(cpus_[static_cast<size_t>(ith) % cpus_.size()]);
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
