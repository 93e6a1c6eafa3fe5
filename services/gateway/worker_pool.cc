#include "services/gateway/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/serving/prefix_blocks.h"
#include "services/gateway/vocab_cache.h"

namespace herd::gateway {

struct WorkerPool::Entry {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  // Guarded by WorkerPool::mu_.
  bool live = false;
  bool has_info = false;
  v1::WorkerInfo info;
  int sessions = 0;            // open sessions through this gateway
  int started_since_info = 0;  // sessions opened since the Info we last applied
  std::string last_error;
  int slow_polls = 0;  // consecutive Info polls of a live worker that missed info_timeout
  // Prefix-cache digest (info.prefix_block_hashes moved here, out of `info`).
  int32_t prefix_block_tokens = 0;
  uint64_t prefix_version = 0;
  absl::flat_hash_set<uint64_t> prefix_blocks;
  // Blocks of prompts routed here, with when: dropped once a digest fetched after that
  // time reflects them.
  absl::flat_hash_map<uint64_t, absl::Time> routed;
};

namespace {
// Bound on WorkerPool::Entry::routed (a worker whose Info keeps failing is still routed
// to between polls; past this the oldest knowledge is dropped wholesale).
constexpr size_t kMaxRoutedBlocks = 1 << 20;
// Entry::last_error of a worker whose Info says it is draining.
constexpr char kDraining[] = "draining (stopped admitting)";
// A live worker whose Info misses the poll deadline this many times in a row is taken
// out of rotation; fewer misses leave it live with its last Info (a worker whose passes
// run long under load answers late, but it is serving: sessions that fail on it are
// reported by ReportFailure at once).
constexpr int kMaxSlowPolls = 3;
}  // namespace

WorkerPool::Lease::Lease(std::shared_ptr<Entry> e, WorkerPool* pool) : e_(std::move(e)), pool_(pool) {
  std::lock_guard<std::mutex> l(pool_->mu_);
  ++e_->sessions;
  ++e_->started_since_info;
  info_ = e_->info;
}

WorkerPool::Lease::~Lease() {
  if (e_ == nullptr) return;  // moved from
  std::lock_guard<std::mutex> l(pool_->mu_);
  --e_->sessions;
}

const std::string& WorkerPool::Lease::address() const { return e_->address; }
v1::Worker::Stub* WorkerPool::Lease::stub() const { return e_->stub.get(); }

WorkerPool::WorkerPool(WorkerPoolOptions opts) : opts_(std::move(opts)) {}

WorkerPool::~WorkerPool() { Stop(); }

std::shared_ptr<WorkerPool::Entry> WorkerPool::MakeEntry(const std::string& address) const {
  auto e = std::make_shared<Entry>();
  e->address = address;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(opts_.max_message_bytes);
  args.SetMaxSendMessageSize(opts_.max_message_bytes);
  // A restarted worker (same address) must be found again within a poll or two, not
  // after gRPC's default exponential backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // One channel per worker address (no sharing of subchannels between entries).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  e->channel = serving::MakeChannel(address, opts_.security, args);
  e->stub = v1::Worker::NewStub(e->channel);
  return e;
}

absl::Status WorkerPool::Start() {
  if (opts_.addresses.empty() && opts_.dns.empty()) {
    return absl::InvalidArgumentError("workers: no workers configured (--workers or --workers_dns)");
  }
  PollNow();
  std::lock_guard<std::mutex> l(stop_mu_);
  stopping_ = false;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void WorkerPool::Stop() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkerPool::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(stop_mu_);
      if (stop_cv_.wait_for(l, absl::ToChronoMilliseconds(opts_.poll_interval), [this] { return stopping_; })) {
        return;
      }
    }
    PollNow();
  }
}

void WorkerPool::Discover() {
  std::vector<std::string> want = opts_.addresses;
  bool dns_ok = true;
  if (!opts_.dns.empty() && absl::Now() >= next_dns_) {
    next_dns_ = absl::Now() + opts_.dns_interval;
    auto resolved = ResolveDns(opts_.dns);
    if (resolved.ok()) {
      want.insert(want.end(), resolved->begin(), resolved->end());
    } else {
      dns_ok = false;
      HERD_LOG(Warning) << resolved.status().message() << " (keeping the previous worker list)";
    }
  } else if (!opts_.dns.empty()) {
    return;  // not time to re-resolve yet
  }
  if (!dns_ok) return;
  std::lock_guard<std::mutex> l(mu_);
  for (const std::string& a : want) {
    if (entries_.count(a) == 0) {
      entries_[a] = MakeEntry(a);
      HERD_LOG(Info) << "worker " << a << " added";
    }
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (std::find(want.begin(), want.end(), it->first) == want.end()) {
      HERD_LOG(Info) << "worker " << it->first << " removed (no longer in " << opts_.dns << ")";
      it = entries_.erase(it);  // open sessions keep their Entry alive through the Lease
    } else {
      ++it;
    }
  }
}

void WorkerPool::PollNow() {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  if (entries_.empty() || !opts_.dns.empty()) Discover();
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [a, e] : entries_) entries.push_back(e);
  }
  struct Call {
    std::shared_ptr<Entry> e;
    grpc::ClientContext ctx;
    v1::WorkerInfoRequest req;
    v1::WorkerInfo resp;
    grpc::Status status;
    int started_at_send = 0;
    absl::Time sent;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::mutex done_mu;
  std::condition_variable done_cv;
  size_t done = 0;
  for (auto& e : entries) {
    auto c = std::make_unique<Call>();
    c->e = e;
    c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + opts_.info_timeout));
    {
      std::lock_guard<std::mutex> l(mu_);
      c->started_at_send = e->started_since_info;
      c->req.set_known_prefix_version(e->prefix_version);
    }
    c->sent = absl::Now();
    Call* raw = c.get();
    calls.push_back(std::move(c));
    e->stub->async()->Info(&raw->ctx, &raw->req, &raw->resp, [raw, &done_mu, &done_cv, &done](grpc::Status s) {
      raw->status = std::move(s);
      std::lock_guard<std::mutex> l(done_mu);
      ++done;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> l(done_mu);
    done_cv.wait(l, [&] { return done == calls.size(); });
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto& c : calls) {
    Entry& e = *c->e;
    if (c->status.ok() && c->resp.draining()) {
      // SIGTERM'd: its open sessions finish there; new ones go elsewhere (a session that
      // raced this poll gets UNAVAILABLE and is retried on another worker).
      if (e.live || e.last_error != kDraining) {
        HERD_LOG(Info) << "worker " << e.address << " draining: no new sessions";
      }
      e.live = false;
      e.last_error = kDraining;
      continue;
    }
    if (c->status.ok()) {
      if (!e.live) {
        HERD_LOG(Info) << "worker " << e.address << " live: model " << c->resp.model() << ", backend "
                       << c->resp.backend() << ", n_ctx " << c->resp.n_ctx() << ", n_ctx_seq " << c->resp.n_ctx_seq()
                       << ", max_sequences " << c->resp.max_sequences();
      }
      e.live = true;
      e.has_info = true;
      e.slow_polls = 0;
      const v1::WorkerInfo& r = c->resp;
      const int32_t bt = r.prefix_block_tokens();
      if (bt <= 0 || bt > serving::kMaxPrefixBlockTokens) {
        e.prefix_block_tokens = 0;
        e.prefix_version = 0;
        e.prefix_blocks.clear();
      } else if (!r.prefix_unchanged() || bt != e.prefix_block_tokens) {
        e.prefix_block_tokens = bt;
        e.prefix_version = r.prefix_unchanged() ? 0 : r.prefix_version();
        e.prefix_blocks.clear();
        e.prefix_blocks.insert(r.prefix_block_hashes().begin(), r.prefix_block_hashes().end());
      }
      for (auto it = e.routed.begin(); it != e.routed.end();) {
        // Sessions opened just before the Info may not have reached the worker yet: keep
        // what was routed within a poll interval of it.
        if (it->second < c->sent - opts_.poll_interval) {
          e.routed.erase(it++);
        } else {
          ++it;
        }
      }
      e.info = c->resp;
      e.info.clear_prefix_block_hashes();
      e.started_since_info = std::max(0, e.started_since_info - c->started_at_send);
      e.last_error.clear();
      if (!c->resp.model().empty()) known_models_.insert(c->resp.model());
    } else if (e.live && c->status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
               ++e.slow_polls < kMaxSlowPolls) {
      HERD_LOG(Warning) << "worker " << e.address << " slow: Info missed its "
                        << absl::FormatDuration(opts_.info_timeout) << " deadline (" << e.slow_polls << " of "
                        << kMaxSlowPolls << " in a row); kept live with its last Info";
    } else {
      e.slow_polls = 0;
      if (e.live || e.last_error.empty()) {
        HERD_LOG(Warning) << "worker " << e.address << " not live: Info: "
                          << (c->status.error_message().empty() ? std::to_string(c->status.error_code())
                                                                : c->status.error_message());
      }
      e.live = false;
      e.last_error = c->status.error_message().empty() ? "Info failed" : c->status.error_message();
    }
  }
  if (opts_.live_gauge != nullptr) {
    int n = 0;
    for (auto& [a, e] : entries_) n += e->live ? 1 : 0;
    opts_.live_gauge->Set(n);
  }
}

void WorkerPool::UpdateGauge() {
  if (opts_.live_gauge == nullptr) return;
  opts_.live_gauge->Set(live_count());
}

WorkerPool::ModelState WorkerPool::GetModelState(const std::string& model) const {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [a, e] : entries_) {
    if (e->live && e->info.model() == model) return ModelState::kLive;
  }
  return known_models_.count(model) > 0 ? ModelState::kNoLiveWorker : ModelState::kUnknown;
}

std::vector<WorkerSnapshot> WorkerPool::LiveWorkersFor(const std::string& model) const {
  std::vector<WorkerSnapshot> out;
  for (WorkerSnapshot& s : Snapshot()) {
    if (s.live && s.info.model() == model) out.push_back(std::move(s));
  }
  return out;
}

bool WorkerPool::AllLiveWorkersRunSpec(const std::string& model, const std::string& type) const {
  const std::vector<WorkerSnapshot> live = LiveWorkersFor(model);
  if (live.empty()) return false;
  for (const WorkerSnapshot& s : live) {
    const auto& types = s.info.spec_types();
    if (std::find(types.begin(), types.end(), type) == types.end()) return false;
  }
  return true;
}

absl::StatusOr<WorkerPool::Lease> WorkerPool::Acquire(const std::string& model, int64_t min_ctx_seq,
                                                      const std::set<std::string>& exclude,
                                                      absl::Span<const int32_t> prompt) {
  // The prompt's block hashes per block size (workers normally share one).
  const absl::Span<const int32_t> reusable = prompt.empty() ? prompt : prompt.subspan(0, prompt.size() - 1);
  std::map<int32_t, std::vector<uint64_t>> hashes;
  std::vector<std::shared_ptr<Entry>> picked;
  std::vector<RouteCandidate> cands;
  std::shared_ptr<Entry> best;
  int64_t expected = 0;
  RouteReason reason = RouteReason::kLeastLoaded;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [a, e] : entries_) {
      if (!e->live || e->info.model() != model || exclude.count(a) > 0) continue;
      if (e->info.n_ctx_seq() > 0 && e->info.n_ctx_seq() < min_ctx_seq) continue;
      RouteCandidate c;
      c.address = a;
      c.load = int64_t{e->info.active_sequences()} + e->info.queued_sequences() + e->started_since_info;
      c.kv_cells_held = e->info.kv_cells_used() + e->info.kv_cells_cached();
      if (opts_.route_policy == RoutePolicy::kPrefix && e->prefix_block_tokens > 0 && !reusable.empty()) {
        auto it = hashes.find(e->prefix_block_tokens);
        if (it == hashes.end()) {
          it = hashes.emplace(e->prefix_block_tokens, serving::PrefixBlockHashes(reusable, e->prefix_block_tokens))
                   .first;
        }
        const Entry& en = *e;
        c.prefix_tokens =
            serving::LeadingBlocks(
                it->second, [&en](uint64_t h) { return en.prefix_blocks.contains(h) || en.routed.contains(h); }) *
            e->prefix_block_tokens;
      }
      cands.push_back(std::move(c));
      picked.push_back(e);
    }
    if (!cands.empty()) {
      const RouteDecision d =
          ChooseWorker(opts_.route_policy, cands, opts_.route_max_extra_load, opts_.route_prefix_tokens_per_load);
      best = picked[d.index];
      expected = cands[d.index].prefix_tokens;
      reason = d.reason;
      // Until its digest shows them, remember what this worker is about to cache.
      auto it = hashes.find(best->prefix_block_tokens);
      if (it != hashes.end()) {
        if (best->routed.size() + it->second.size() > kMaxRoutedBlocks) best->routed.clear();
        const absl::Time now = absl::Now();
        for (uint64_t h : it->second) best->routed[h] = now;
      }
    }
  }
  if (best == nullptr) {
    return absl::UnavailableError(absl::StrCat("no live worker serves model '", ShortName(model), "'",
                                               exclude.empty() ? "" : " (the others failed)"));
  }
  if (opts_.route_decisions != nullptr) opts_.route_decisions->Add(1, {RouteReasonName(reason)});
  if (opts_.prefix_tokens_expected != nullptr && expected > 0) opts_.prefix_tokens_expected->Add(expected);
  if (opts_.sessions_by_worker != nullptr) opts_.sessions_by_worker->Add(1, {best->address});
  Lease lease(best, this);
  lease.expected_prefix_tokens_ = expected;
  return lease;
}

void WorkerPool::ReportFailure(const std::string& address, const std::string& error) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(address);
    if (it == entries_.end()) return;
    if (it->second->live) {
      HERD_LOG(Warning) << "worker " << address << " not live: " << error;
    }
    it->second->live = false;
    it->second->last_error = error;
  }
  UpdateGauge();
}

std::vector<WorkerSnapshot> WorkerPool::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<WorkerSnapshot> out;
  for (auto& [a, e] : entries_) {
    WorkerSnapshot s;
    s.address = a;
    s.live = e->live;
    s.has_info = e->has_info;
    s.info = e->info;
    s.sessions = e->sessions;
    s.last_error = e->last_error;
    s.prefix_blocks = static_cast<int64_t>(e->prefix_blocks.size());
    out.push_back(std::move(s));
  }
  return out;
}

int WorkerPool::live_count() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (auto& [a, e] : entries_) n += e->live ? 1 : 0;
  return n;
}

}  // namespace herd::gateway
