#include "libs/engine/kv_cache_manager.h"

#include <algorithm>

namespace herd::engine {
namespace {

// Length of the common prefix of a and b[0..b_len).
int32_t CommonPrefix(absl::Span<const int32_t> a, absl::Span<const int32_t> b, size_t b_len) {
  const size_t n = std::min({a.size(), b.size(), b_len});
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int32_t>(i);
}

}  // namespace

KvCacheManager::KvCacheManager(KvCache* kv, const KvCacheManagerConfig& cfg) : kv_(kv), cfg_(cfg) { kv_->Clear(); }

PrefixMatch KvCacheManager::FindPrefix(absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running) const {
  PrefixMatch m;
  if (!cfg_.prefix_cache || tokens.size() < 2) return m;
  const size_t limit = tokens.size() - 1;
  for (const RunningSeq& r : running) {
    const int32_t n = CommonPrefix(tokens, r.tokens, std::min<size_t>(limit, static_cast<size_t>(r.n_past)));
    if (n > m.n_tokens) m = {n, r.kv_seq};
  }
  for (const CachedPrefix& e : cached_) {
    const int32_t n = CommonPrefix(tokens, e.tokens, limit);
    if (n > m.n_tokens) m = {n, e.kv_seq};
  }
  return m;
}

int64_t KvCacheManager::StepDemand(absl::Span<const RunningSeq> running) {
  int64_t n = 0;
  for (const RunningSeq& r : running) n += r.next_step_cells;
  return n;
}

int64_t KvCacheManager::AvailableCells() const { return kv_->n_free() + cells_cached(); }

bool KvCacheManager::CanAdmit(absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running) const {
  const int64_t need = static_cast<int64_t>(tokens.size()) - FindPrefix(tokens, running).n_tokens;
  return need + StepDemand(running) <= AvailableCells();
}

int32_t KvCacheManager::Admit(int32_t kv_seq, absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running) {
  const PrefixMatch m = FindPrefix(tokens, running);
  if (cfg_.prefix_cache) ++stats_.prefix_cache_lookups;
  if (m.n_tokens == 0) return 0;
  // The prefix's cells hold this sequence's K/V too: same tokens at the same positions.
  kv_->SeqCopy(m.src, kv_seq, 0, m.n_tokens);
  ++stats_.prefix_cache_hits;
  stats_.prefix_tokens_reused += static_cast<uint64_t>(m.n_tokens);
  Touch(m.src);
  return m.n_tokens;
}

int32_t KvCacheManager::CatchUp(int32_t kv_seq, absl::Span<const int32_t> tokens, int32_t n_past,
                                absl::Span<const RunningSeq> running) {
  if (!cfg_.prefix_cache) return n_past;
  const PrefixMatch m = FindPrefix(tokens, running);
  if (m.n_tokens <= n_past || m.src < 0 || m.src == kv_seq ||
      !kv_->SeqCopyKeepsOrder(m.src, kv_seq, n_past, m.n_tokens)) {
    return n_past;
  }
  kv_->SeqCopy(m.src, kv_seq, n_past, m.n_tokens);
  stats_.prefix_tokens_reused += static_cast<uint64_t>(m.n_tokens - n_past);
  Touch(m.src);
  return m.n_tokens;
}

void KvCacheManager::Release(int32_t kv_seq, absl::Span<const int32_t> tokens, int32_t n_past) {
  n_past = std::min<int32_t>(n_past, static_cast<int32_t>(tokens.size()));
  if (cfg_.prefix_cache && cfg_.max_cached_prefixes > 0 && n_past > 0) {
    const size_t n = static_cast<size_t>(n_past);
    bool covered = false;
    for (size_t i = cached_.size(); i-- > 0;) {
      const size_t common = static_cast<size_t>(CommonPrefix(tokens, cached_[i].tokens, n));
      if (common == n && cached_[i].tokens.size() >= n) {  // a cached prefix covers them
        covered = true;
        cached_[i].last_use = ++use_clock_;
        break;
      }
      if (common == cached_[i].tokens.size()) Drop(i);  // the new prefix covers this one
    }
    if (!covered) {
      while (static_cast<int32_t>(cached_.size()) >= cfg_.max_cached_prefixes && EvictOne()) {
      }
      CachedPrefix e;
      e.kv_seq = NewCacheSeq();
      e.tokens.assign(tokens.begin(), tokens.begin() + static_cast<long>(n));
      e.last_use = ++use_clock_;
      kv_->SeqCopy(kv_seq, e.kv_seq, 0, n_past);
      cached_.push_back(std::move(e));
      ++version_;
    }
  }
  kv_->SeqRemove(kv_seq, 0, -1);
}

bool KvCacheManager::EnsureFreeCells(int64_t n) {
  while (kv_->n_free() < n) {
    if (!EvictOne()) return false;
  }
  return true;
}

int32_t KvCacheManager::ChoosePreemption(absl::Span<const RunningSeq> running) {
  if (running.empty() || EnsureFreeCells(StepDemand(running))) return -1;
  return static_cast<int32_t>(running.size()) - 1;
}

void KvCacheManager::Preempt(int32_t kv_seq) {
  kv_->SeqRemove(kv_seq, 0, -1);
  ++stats_.preemptions;
}

void KvCacheManager::Clear() {
  if (!cached_.empty()) ++version_;
  cached_.clear();
  free_cache_seqs_.clear();
  next_cache_seq_ = 0;
  kv_->Clear();
}

std::vector<std::vector<int32_t>> KvCacheManager::CachedTokens() const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(cached_.size());
  for (const CachedPrefix& e : cached_) out.push_back(e.tokens);
  return out;
}

int64_t KvCacheManager::cells_cached() const { return kv_->CellsOnlyInSeqsFrom(cfg_.first_cache_seq); }

void KvCacheManager::Touch(int32_t kv_seq) {
  for (CachedPrefix& e : cached_) {
    if (e.kv_seq == kv_seq) e.last_use = ++use_clock_;
  }
}

void KvCacheManager::Drop(size_t i) {
  kv_->SeqRemove(cached_[i].kv_seq, 0, -1);
  free_cache_seqs_.push_back(cached_[i].kv_seq);
  cached_.erase(cached_.begin() + static_cast<long>(i));
  ++version_;
}

// Drops the least recently used cached prefix (its cells shared with running sequences
// stay theirs). False when none is cached.
bool KvCacheManager::EvictOne() {
  if (cached_.empty()) return false;
  size_t lru = 0;
  for (size_t i = 1; i < cached_.size(); ++i) {
    if (cached_[i].last_use < cached_[lru].last_use) lru = i;
  }
  Drop(lru);
  ++stats_.prefix_evictions;
  return true;
}

int32_t KvCacheManager::NewCacheSeq() {
  if (!free_cache_seqs_.empty()) {
    const int32_t id = free_cache_seqs_.back();
    free_cache_seqs_.pop_back();
    return id;
  }
  return cfg_.first_cache_seq + next_cache_seq_++;
}

}  // namespace herd::engine
