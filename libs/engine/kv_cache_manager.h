// The KV-cache manager: the cache policy of the scheduler's one KV pool (vLLM's
// KVCacheManager role, over llama.cpp-style cell bookkeeping: KvCache).
//
// It owns the pool accounting and the prefix cache, and decides; the scheduler keeps the
// admission order (its queue), the planning of batches and their execution.
//
// - Prefix cache (vLLM's automatic prefix caching, llama-server's cache_prompt). An ended
//   sequence's cells stay in the pool as a cached prefix under a sequence id of the
//   manager's own (>= first_cache_seq): its tokens, up to max_cached_prefixes of them,
//   least recently used dropped first. A cached prefix that the ended sequence's tokens
//   extend is dropped (the new one covers it); one that already covers them is only
//   marked used.
// - Lookup. A new sequence shares the cells of the longest prefix of its tokens (all but
//   the last, the pending token) that a running sequence (its first n_past tokens) or a
//   cached prefix holds (KvCache::SeqCopy: the same tokens at the same positions have the
//   same K/V), and prefills only the rest. Ties go to the running sequences (in admission
//   order), then to the cached prefixes (oldest first).
// - Room. A sequence is admitted when its cells (tokens beyond the shared prefix, the
//   pending token's included) fit beside the running sequences' next steps in the free
//   cells plus the cells held only by cached prefixes (evicted on demand).
// - Eviction and preemption. When cells are needed, cached prefixes are evicted least
//   recently used first (their cells shared with running sequences stay theirs); when
//   that is not enough for the running sequences' next steps, the most recently admitted
//   sequence is preempted (vLLM's preemption by recomputation: its cells are freed, the
//   scheduler requeues it).
//
// Sequence ids below first_cache_seq belong to the caller (slots, temporary sequences);
// the manager never allocates them. Not thread-safe: the caller serializes calls (the
// scheduler holds its mutex), and reading methods may run concurrently only with each
// other.
#pragma once
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

#include "libs/engine/kv_cache.h"

namespace herd::engine {

/// A running sequence as the manager sees it; the caller passes all of them, in
/// admission order, to each call that needs them.
struct RunningSeq {
  int32_t kv_seq = -1;               // its KV sequence id (< first_cache_seq)
  absl::Span<const int32_t> tokens;  // tokens[i] is at position i
  int32_t n_past = 0;                // tokens[0..n_past) have their K/V in the cache
  int64_t next_step_cells = 0;       // cells its next decode / verification step takes (0: none)
};

struct KvCacheManagerConfig {
  /// Keep ended sequences' cells and share prompt prefixes.
  bool prefix_cache = true;
  /// Most cached prefixes kept (>= 0; least recently used dropped first).
  int32_t max_cached_prefixes = 64;
  /// First KV sequence id of cached prefixes (ids first_cache_seq, first_cache_seq + 1,
  /// ...); ids below it are the caller's.
  int32_t first_cache_seq = 0;
};

/// Cumulative counters of the manager (the scheduler reports them in SchedulerStats).
struct KvCacheManagerStats {
  uint64_t prefix_cache_lookups = 0;  // admissions with prefix caching on
  uint64_t prefix_cache_hits = 0;     // admissions that reused cached/running cells
  uint64_t prefix_tokens_reused = 0;  // tokens not recomputed thanks to them (admission and catch-up)
  uint64_t prefix_evictions = 0;      // cached prefixes dropped for room or for max_cached_prefixes
  uint64_t preemptions = 0;           // sequences preempted for room
};

/// A match of the prefix cache: tokens[0..n_tokens) are held by sequence `src`.
struct PrefixMatch {
  int32_t n_tokens = 0;
  int32_t src = -1;  // KV sequence id (a running sequence or a cached prefix); -1: none
};

class KvCacheManager {
 public:
  /// Manages `kv` (not owned; must outlive the manager), which it clears. Every cell
  /// change of cached prefixes goes through the manager; the caller may change its own
  /// sequences' cells directly (Allocate, SeqRemove of rejected drafts, ...).
  KvCacheManager(KvCache* kv, const KvCacheManagerConfig& cfg);

  /// The longest prefix of tokens[0..size-1) (the last token is pending, never shared)
  /// whose K/V a running sequence (among its first n_past tokens) or a cached prefix
  /// holds. {0, -1} with prefix caching off or fewer than 2 tokens.
  PrefixMatch FindPrefix(absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running) const;

  /// Cells the running sequences' next steps take: the sum of next_step_cells.
  static int64_t StepDemand(absl::Span<const RunningSeq> running);
  /// Cells a new sequence can count on: free cells plus cells held only by cached
  /// prefixes (evictable).
  int64_t AvailableCells() const;
  /// Whether a sequence of `tokens` (prefilled beyond the shared prefix, plus the pending
  /// token's cell) fits beside the running sequences' next steps in AvailableCells().
  bool CanAdmit(absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running) const;

  /// Admits `tokens` under the caller's id `kv_seq` (holding no cells): counts a lookup
  /// (with prefix caching on), shares the cells of FindPrefix's match (SeqCopy) and marks
  /// a matched cached prefix used. Returns the tokens shared (the sequence's n_past).
  /// Allocates nothing else: the caller prefills the rest.
  int32_t Admit(int32_t kv_seq, absl::Span<const int32_t> tokens, absl::Span<const RunningSeq> running);

  /// Catch-up of a prefilling running sequence: when another sequence (running or cached)
  /// now holds more of its tokens than its n_past, and sharing them keeps its cells in
  /// position order (KvCache::SeqCopyKeepsOrder), shares positions [n_past, match) and
  /// returns the new n_past; else returns n_past. `running` includes the sequence itself.
  int32_t CatchUp(int32_t kv_seq, absl::Span<const int32_t> tokens, int32_t n_past,
                  absl::Span<const RunningSeq> running);

  /// An ended sequence: with prefix caching its tokens[0..n_past) stay as a cached prefix
  /// (see the file comment), then its own cells are removed (the caller's id is free
  /// again).
  void Release(int32_t kv_seq, absl::Span<const int32_t> tokens, int32_t n_past);

  /// Evicts cached prefixes, least recently used first, until n cells are free. False
  /// when even with none cached fewer than n are free.
  bool EnsureFreeCells(int64_t n);

  /// Makes room for the running sequences' next steps (StepDemand): evicts cached
  /// prefixes LRU first; when the steps still do not fit, returns the index in `running`
  /// of the sequence to preempt, the most recently admitted (the last). -1 when they fit
  /// (or nothing runs). The caller preempts it (Preempt) and asks again.
  int32_t ChoosePreemption(absl::Span<const RunningSeq> running);
  /// Frees every cell of the caller's sequence `kv_seq` without caching them and counts a
  /// preemption.
  void Preempt(int32_t kv_seq);

  /// Drops every cached prefix (not counted as evictions) and clears the cache.
  void Clear();

  /// The cached prefixes' tokens, oldest first.
  std::vector<std::vector<int32_t>> CachedTokens() const;
  int32_t n_cached() const { return static_cast<int32_t>(cached_.size()); }
  /// Cells held only by cached prefixes (evictable).
  int64_t cells_cached() const;
  /// Changes whenever a prefix is cached or dropped.
  uint64_t version() const { return version_; }
  const KvCacheManagerStats& stats() const { return stats_; }
  const KvCacheManagerConfig& config() const { return cfg_; }
  KvCache& kv() const { return *kv_; }

 private:
  struct CachedPrefix {
    int32_t kv_seq = -1;
    std::vector<int32_t> tokens;
    uint64_t last_use = 0;
  };
  void Touch(int32_t kv_seq);
  void Drop(size_t i);
  bool EvictOne();
  int32_t NewCacheSeq();

  KvCache* kv_;
  KvCacheManagerConfig cfg_;
  std::vector<CachedPrefix> cached_;  // in caching order
  std::vector<int32_t> free_cache_seqs_;
  int32_t next_cache_seq_ = 0;
  uint64_t use_clock_ = 0;
  uint64_t version_ = 0;
  KvCacheManagerStats stats_;
};

}  // namespace herd::engine
