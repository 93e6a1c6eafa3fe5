// KvCacheManager on a tiny model-free KV cache (one layer of 4-float rows on the CPU
// buffer type): only the cell bookkeeping matters here.
#include "libs/engine/kv_cache_manager.h"

#include <numeric>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"

namespace herd::engine {
namespace {

constexpr int32_t kFirstCacheSeq = 8;  // slots 0..7 belong to the "scheduler"

std::unique_ptr<KvCache> NewCache(int64_t n_cells) {
  model::Hparams hp;
  hp.n_layer = 1;
  hp.n_embd = 4;
  hp.n_head = 1;
  hp.n_head_kv = 1;
  hp.n_embd_head_k = 4;
  hp.n_embd_head_v = 4;
  auto kv = KvCache::Create(hp, n_cells, GgmlType::F32, CpuBufferType::Get());
  EXPECT_TRUE(kv.ok()) << kv.status();
  return kv.ok() ? *std::move(kv) : nullptr;
}

std::vector<int32_t> Iota(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

class KvCacheManagerTest : public ::testing::Test {
 protected:
  void Init(int64_t n_cells, int32_t max_cached = 64, bool prefix_cache = true) {
    kv_ = NewCache(n_cells);
    ASSERT_NE(kv_, nullptr);
    KvCacheManagerConfig cfg;
    cfg.prefix_cache = prefix_cache;
    cfg.max_cached_prefixes = max_cached;
    cfg.first_cache_seq = kFirstCacheSeq;
    m_ = std::make_unique<KvCacheManager>(kv_.get(), cfg);
  }
  // Computes ("prefills") positions [p0, p1) of sequence `seq`.
  void Fill(int32_t seq, int32_t p0, int32_t p1) {
    const std::vector<int32_t> seqs(static_cast<size_t>(p1 - p0), seq);
    ASSERT_TRUE(kv_->Allocate(seqs, Iota(p1 - p0, p0)).ok());
  }
  // A sequence that ran `tokens` entirely and ended: its cells become a cached prefix.
  void CacheTokens(int32_t seq, const std::vector<int32_t>& tokens) {
    Fill(seq, 0, static_cast<int32_t>(tokens.size()));
    m_->Release(seq, tokens, static_cast<int32_t>(tokens.size()));
  }
  static RunningSeq Running(int32_t seq, const std::vector<int32_t>& tokens, int32_t n_past, int64_t next = 0) {
    RunningSeq r;
    r.kv_seq = seq;
    r.tokens = tokens;
    r.n_past = n_past;
    r.next_step_cells = next;
    return r;
  }

  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCacheManager> m_;
};

TEST_F(KvCacheManagerTest, LongestPrefixAmongCachedAndRunning) {
  Init(64);
  const std::vector<int32_t> cached = {1, 2, 3, 4, 5};
  CacheTokens(0, cached);
  ASSERT_EQ(m_->n_cached(), 1);
  // A running sequence's tokens beyond its n_past have no K/V yet: they never match.
  const std::vector<int32_t> run = {1, 2, 3, 9, 9, 9, 9, 9};
  Fill(1, 0, 6);
  const std::vector<RunningSeq> running = {Running(1, run, 6)};

  PrefixMatch m = m_->FindPrefix(std::vector<int32_t>{1, 2, 3, 9, 9, 9, 9, 9, 7}, running);
  EXPECT_EQ(m.n_tokens, 6);  // run[0..6), not 8
  EXPECT_EQ(m.src, 1);
  m = m_->FindPrefix(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, running);
  EXPECT_EQ(m.n_tokens, 5);
  EXPECT_GE(m.src, kFirstCacheSeq);
  // The last token is pending: never shared, even when a prefix holds it.
  m = m_->FindPrefix(std::vector<int32_t>{1, 2, 3, 4, 5}, running);
  EXPECT_EQ(m.n_tokens, 4);
  EXPECT_GE(m.src, kFirstCacheSeq);
  // A tie goes to the running sequence.
  m = m_->FindPrefix(std::vector<int32_t>{1, 2, 3, 7}, running);
  EXPECT_EQ(m.n_tokens, 3);
  EXPECT_EQ(m.src, 1);
  m = m_->FindPrefix(std::vector<int32_t>{7, 1, 2}, running);
  EXPECT_EQ(m.n_tokens, 0);
  EXPECT_EQ(m.src, -1);
  m = m_->FindPrefix(std::vector<int32_t>{1}, running);
  EXPECT_EQ(m.n_tokens, 0);
}

TEST_F(KvCacheManagerTest, PrefixCacheOffCachesAndSharesNothing) {
  Init(16, 64, /*prefix_cache=*/false);
  CacheTokens(0, {1, 2, 3, 4});
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(kv_->used(), 0);
  EXPECT_EQ(m_->Admit(1, std::vector<int32_t>{1, 2, 3, 4, 5}, {}), 0);
  EXPECT_EQ(m_->stats().prefix_cache_lookups, 0u);
  EXPECT_EQ(m_->version(), 0u);
}

TEST_F(KvCacheManagerTest, HitSharesCellsAndOnlyTheRestNeedsCells) {
  Init(12);
  const std::vector<int32_t> prefix = Iota(8, 100);
  CacheTokens(0, prefix);
  const std::vector<int32_t> other = {7, 7};
  Fill(1, 0, 2);
  const std::vector<RunningSeq> running = {Running(1, other, 2)};
  EXPECT_EQ(kv_->n_free(), 2);
  EXPECT_EQ(m_->cells_cached(), 8);
  EXPECT_EQ(m_->AvailableCells(), 10);

  std::vector<int32_t> prompt = prefix;  // 8 shared + 3 new: needs 3 cells
  prompt.insert(prompt.end(), {1, 2, 3});
  EXPECT_TRUE(m_->CanAdmit(prompt, running));
  EXPECT_FALSE(m_->CanAdmit(Iota(11, 500), running));  // nothing shared: 11 > 10

  EXPECT_EQ(m_->Admit(2, prompt, running), 8);
  EXPECT_EQ(kv_->SeqCells(2), 8);
  EXPECT_EQ(kv_->SeqPosMax(2), 7);
  EXPECT_EQ(kv_->used(), 10);        // no new cell: shared
  EXPECT_EQ(m_->cells_cached(), 0);  // the prefix's cells are a running sequence's now
  EXPECT_EQ(m_->stats().prefix_cache_lookups, 1u);
  EXPECT_EQ(m_->stats().prefix_cache_hits, 1u);
  EXPECT_EQ(m_->stats().prefix_tokens_reused, 8u);

  EXPECT_EQ(m_->Admit(3, Iota(3, 900), running), 0);  // a miss: a lookup, no hit
  EXPECT_EQ(m_->stats().prefix_cache_lookups, 2u);
  EXPECT_EQ(m_->stats().prefix_cache_hits, 1u);
  EXPECT_EQ(kv_->SeqCells(3), 0);
}

TEST_F(KvCacheManagerTest, LruEvictionOrderAndMaxCachedPrefixes) {
  Init(64, /*max_cached=*/2);
  const std::vector<int32_t> a = {1, 1, 1}, b = {2, 2, 2}, c = {3, 3, 3};
  CacheTokens(0, a);
  CacheTokens(0, b);
  ASSERT_EQ(m_->n_cached(), 2);
  // A hit on `a` makes `b` the least recently used.
  EXPECT_EQ(m_->Admit(1, std::vector<int32_t>{1, 1, 1, 5}, {}), 3);
  m_->Preempt(1);
  CacheTokens(0, c);  // the third: max_cached_prefixes drops `b`
  EXPECT_EQ(m_->CachedTokens(), (std::vector<std::vector<int32_t>>{a, c}));
  EXPECT_EQ(m_->stats().prefix_evictions, 1u);
  EXPECT_EQ(kv_->used(), 6);  // b's cells are free again
  // Evictions for room: `a` (used before `c` was cached) goes first.
  EXPECT_TRUE(m_->EnsureFreeCells(61));
  EXPECT_EQ(m_->CachedTokens(), (std::vector<std::vector<int32_t>>{c}));
  EXPECT_TRUE(m_->EnsureFreeCells(64));
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(m_->stats().prefix_evictions, 3u);
  EXPECT_FALSE(m_->EnsureFreeCells(65));
}

TEST_F(KvCacheManagerTest, ZeroMaxCachedPrefixesFreesEndedSequences) {
  Init(16, /*max_cached=*/0);
  CacheTokens(0, {1, 2, 3});
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(kv_->used(), 0);
}

TEST_F(KvCacheManagerTest, EndedSequencesReplaceThePrefixesTheyExtend) {
  Init(64);
  CacheTokens(0, {1, 2, 3});
  const uint64_t v = m_->version();
  // Covered by the cached prefix: nothing new is cached, the cells are freed.
  Fill(1, 0, 2);
  m_->Release(1, std::vector<int32_t>{1, 2, 9}, 2);
  EXPECT_EQ(m_->n_cached(), 1);
  EXPECT_EQ(m_->version(), v);
  EXPECT_EQ(kv_->used(), 3);
  // Extends it: the longer one replaces it (not an eviction).
  CacheTokens(0, {1, 2, 3, 4, 5});
  EXPECT_EQ(m_->CachedTokens(), (std::vector<std::vector<int32_t>>{{1, 2, 3, 4, 5}}));
  EXPECT_EQ(m_->stats().prefix_evictions, 0u);
  EXPECT_EQ(kv_->used(), 5);
  EXPECT_EQ(m_->cells_cached(), 5);
}

TEST_F(KvCacheManagerTest, CellsHeldOnlyByCachedPrefixesCountAsFree) {
  Init(8);
  CacheTokens(0, Iota(6, 10));
  EXPECT_EQ(kv_->n_free(), 2);
  EXPECT_EQ(m_->AvailableCells(), 8);
  EXPECT_TRUE(m_->CanAdmit(Iota(8, 50), {}));  // evictable cells are free for admission
  EXPECT_FALSE(m_->CanAdmit(Iota(9, 50), {}));
  EXPECT_EQ(m_->Admit(1, Iota(8, 50), {}), 0);
  EXPECT_TRUE(m_->EnsureFreeCells(8));
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(m_->stats().prefix_evictions, 1u);
}

TEST_F(KvCacheManagerTest, RoomCheckRefusesWhenRunningStepsDoNotFit) {
  Init(10);
  const std::vector<int32_t> run = Iota(4, 0);
  Fill(0, 0, 4);
  const std::vector<int32_t> prompt = Iota(4, 100);
  // 6 free cells: 4 for the prompt + a 3-cell verification step do not fit; 2 do.
  EXPECT_FALSE(m_->CanAdmit(prompt, std::vector<RunningSeq>{Running(0, run, 4, 3)}));
  EXPECT_TRUE(m_->CanAdmit(prompt, std::vector<RunningSeq>{Running(0, run, 4, 2)}));
  EXPECT_EQ(KvCacheManager::StepDemand(std::vector<RunningSeq>{Running(0, run, 4, 2), Running(1, run, 0, 5)}), 7);
}

TEST_F(KvCacheManagerTest, EvictsCachedPrefixesBeforePreempting) {
  Init(8);
  CacheTokens(0, Iota(4, 10));
  const std::vector<int32_t> r0 = Iota(2, 100), r1 = Iota(2, 200);
  Fill(1, 0, 2);
  Fill(2, 0, 2);
  ASSERT_EQ(kv_->n_free(), 0);
  const std::vector<RunningSeq> running = {Running(1, r0, 2, 1), Running(2, r1, 2, 1)};
  EXPECT_EQ(m_->ChoosePreemption(running), -1);
  EXPECT_EQ(m_->stats().prefix_evictions, 1u);
  EXPECT_EQ(m_->stats().preemptions, 0u);
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(kv_->n_free(), 4);
}

TEST_F(KvCacheManagerTest, PreemptionPicksTheMostRecentlyAdmitted) {
  Init(6);
  const std::vector<int32_t> r = Iota(3, 0);
  Fill(2, 0, 3);  // admitted first
  Fill(0, 0, 3);  // admitted second (a lower slot id)
  const std::vector<RunningSeq> running = {Running(2, r, 3, 1), Running(0, r, 3, 1)};
  EXPECT_EQ(m_->ChoosePreemption(running), 1);
  m_->Preempt(0);
  EXPECT_EQ(kv_->SeqCells(0), 0);
  EXPECT_EQ(kv_->SeqCells(2), 3);
  EXPECT_EQ(m_->n_cached(), 0);  // preempted cells are not cached
  EXPECT_EQ(m_->stats().preemptions, 1u);
  EXPECT_EQ(m_->ChoosePreemption(std::vector<RunningSeq>{running[0]}), -1);
  EXPECT_EQ(m_->ChoosePreemption({}), -1);
}

TEST_F(KvCacheManagerTest, VersionChangesWhenTheCachedSetChanges) {
  Init(16, /*max_cached=*/1);
  uint64_t v = m_->version();
  CacheTokens(0, {1, 2, 3});
  EXPECT_NE(m_->version(), v);
  v = m_->version();
  EXPECT_EQ(m_->Admit(1, std::vector<int32_t>{1, 2, 3, 4}, {}), 3);  // a hit changes nothing cached
  m_->Preempt(1);
  EXPECT_EQ(m_->version(), v);
  CacheTokens(0, {5, 6, 7});  // evicts {1, 2, 3} and caches {5, 6, 7}
  EXPECT_NE(m_->version(), v);
  v = m_->version();
  EXPECT_TRUE(m_->EnsureFreeCells(16));
  EXPECT_NE(m_->version(), v);
  v = m_->version();
  CacheTokens(0, {8});
  m_->Clear();
  EXPECT_NE(m_->version(), v);
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(kv_->used(), 0);
}

TEST_F(KvCacheManagerTest, EvictionNeverTouchesCellsARunningSequenceShares) {
  Init(16);
  const std::vector<int32_t> prefix = Iota(6, 40);
  CacheTokens(0, prefix);
  std::vector<int32_t> prompt = prefix;
  prompt.push_back(99);
  EXPECT_EQ(m_->Admit(1, prompt, {}), 6);
  EXPECT_FALSE(m_->EnsureFreeCells(16));  // evicts the prefix; the shared cells stay
  EXPECT_EQ(m_->n_cached(), 0);
  EXPECT_EQ(kv_->SeqCells(1), 6);
  EXPECT_EQ(kv_->SeqPosMax(1), 5);
  EXPECT_EQ(kv_->used(), 6);
  EXPECT_EQ(m_->cells_cached(), 0);
}

TEST_F(KvCacheManagerTest, CatchUpSharesCellsOnlyInPositionOrder) {
  Init(32);
  const std::vector<int32_t> prompt = Iota(10, 0);
  // Sequence 1 prefilled 2 tokens first (cells 0-1), then sequence 0 computed 8 (2-9):
  // sequence 1 may take positions 2..7 (cells after its own).
  Fill(1, 0, 2);
  Fill(0, 0, 8);
  std::vector<RunningSeq> running = {Running(0, prompt, 8), Running(1, prompt, 2)};
  EXPECT_EQ(m_->CatchUp(1, prompt, 2, running), 8);
  EXPECT_EQ(kv_->SeqCells(1), 8);
  EXPECT_EQ(m_->stats().prefix_tokens_reused, 6u);
  EXPECT_EQ(m_->stats().prefix_cache_hits, 0u);  // catch-up is not an admission
  // Sequence 3 holds cells after sequence 0's: sharing would break its order.
  Fill(3, 0, 2);
  running.push_back(Running(3, prompt, 2));
  EXPECT_EQ(m_->CatchUp(3, prompt, 2, running), 2);
  EXPECT_EQ(kv_->SeqCells(3), 2);
  // Nothing longer than its own.
  EXPECT_EQ(m_->CatchUp(0, prompt, 8, running), 8);
}

}  // namespace
}  // namespace herd::engine
