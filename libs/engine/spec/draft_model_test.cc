// The draft-model drafter on the real models: vocabulary compatibility (stories260K vs
// llama-2-tiny-random is refused), and stories260K drafting for itself proposes
// exactly the target's greedy continuation (acceptance would be 100%), with KV reuse
// between calls, KV eviction among sequences, and sampled drafts.
#include "libs/engine/spec/draft_model.h"

#include <cmath>
#include <iostream>
#include <thread>

#include "gtest/gtest.h"

#include "libs/engine/generate.h"
#include "libs/engine/spec/session.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd::engine::spec {
namespace {

using Tokens = std::vector<int32_t>;

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    stories_path_ = shared_ + "/models/stories260K.gguf";
    auto m = model::Model::Load(stories_path_);
    ASSERT_TRUE(m.ok()) << m.status();
    target_ = *std::move(m);
    auto v = tokenizer::Vocab::FromGguf(target_->file());
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = *std::move(v);
    // The target's greedy continuation of a story prompt.
    EngineParams ep;
    ep.n_ctx = 256;
    auto eng = Engine::Create(*target_, ep, &backend_);
    ASSERT_TRUE(eng.ok()) << eng.status();
    GenerateParams gp;
    gp.prompt = "Once upon a time, there was a little girl named Lily.";
    gp.n_predict = 48;
    gp.sampling.temp = 0.0f;
    auto res = Generate(**eng, *vocab_, gp);
    ASSERT_TRUE(res.ok()) << res.status();
    prompt_ = res->prompt_ids;
    out_ = res->output_ids;
    ASSERT_GE(out_.size(), 24u);
  }

  std::unique_ptr<DraftModel> LoadDraft(int64_t n_ctx = 1024) {
    DraftModelParams p;
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    auto dm = DraftModel::Load(stories_path_, p);
    EXPECT_TRUE(dm.ok()) << dm.status();
    if (!dm.ok()) return nullptr;
    EXPECT_TRUE((*dm)->AttachTarget(*vocab_).ok());
    return *std::move(dm);
  }

  // prompt + the first k generated tokens.
  Tokens History(size_t k) const {
    Tokens h = prompt_;
    h.insert(h.end(), out_.begin(), out_.begin() + static_cast<ptrdiff_t>(k));
    return h;
  }
  Tokens Expected(size_t k, size_t n) const {
    const size_t end = std::min(out_.size(), k + n);
    return Tokens(out_.begin() + static_cast<ptrdiff_t>(k), out_.begin() + static_cast<ptrdiff_t>(end));
  }

  std::string shared_, stories_path_;
  std::unique_ptr<Backend> backend_owner_ = CpuBackendForTests(2);
  Backend& backend_ = *backend_owner_;
  std::unique_ptr<model::Model> target_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
  Tokens prompt_, out_;
};

TEST_F(DraftModelTest, IncompatibleVocabularyIsRefused) {
  auto f = gguf::GgufFile::Open(shared_ + "/models/llama-2-tiny-random.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  auto tiny = tokenizer::Vocab::FromGguf(**f);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_TRUE(CheckVocabCompatible(*vocab_, *vocab_).ok());
  absl::Status s = CheckVocabCompatible(**tiny, *vocab_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("draft model vocabulary is incompatible with the target's"), std::string::npos) << s;
  EXPECT_NE(s.message().find("sizes 512 (draft) and 32000 (target)"), std::string::npos) << s;

  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  absl::Status a = dm->AttachTarget(**tiny);
  EXPECT_EQ(a.code(), absl::StatusCode::kFailedPrecondition) << a;

  EXPECT_FALSE(DraftModel::Load(shared_ + "/models/missing.gguf", DraftModelParams()).ok());
}

TEST_F(DraftModelTest, SelfDraftIsTheTargetsGreedyContinuation) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  auto drafter = dm->NewDrafter();
  DraftParams p;
  p.n_max = 8;
  p.p_min = 0.0f;  // never stop early
  // Growing one token at a time: the KV cache keeps the common prefix between calls.
  for (size_t k = 1; k + 1 < out_.size(); ++k) {
    const Tokens d = drafter->Draft(History(k), p).tokens;
    ASSERT_EQ(d.size(), 8u);
    const Tokens want = Expected(k, 8);  // shorter near the end of the generated text
    EXPECT_EQ(Tokens(d.begin(), d.begin() + static_cast<ptrdiff_t>(want.size())), want) << "k=" << k;
  }
  // Jumping back and forth (as after partial acceptance) and a fresh sequence agree.
  auto fresh = dm->NewDrafter();
  for (size_t k : {20u, 3u, 11u, 12u, 19u}) {
    EXPECT_EQ(drafter->Draft(History(k), p).tokens, Expected(k, 8)) << k;
    EXPECT_EQ(fresh->Draft(History(k), p).tokens, Expected(k, 8)) << k;
  }
}

// A stop_by that has passed: no draft step starts, the draft is the token the history's
// evaluation gives (the continuation's first); one far ahead changes nothing.
TEST_F(DraftModelTest, StopByEndsTheDraftBeforeTheNextStep) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  auto drafter = dm->NewDrafter();
  DraftParams p;
  p.n_max = 8;
  p.p_min = 0.0f;
  EXPECT_EQ(drafter->Draft(History(4), p).tokens, Expected(4, 8));  // no stop_by: the whole history at once
  p.stop_by = std::chrono::steady_clock::now();
  EXPECT_EQ(drafter->Draft(History(5), p).tokens, Expected(5, 1));
  p.stop_by = std::chrono::steady_clock::now() + std::chrono::hours(1);
  EXPECT_EQ(drafter->Draft(History(9), p).tokens, Expected(9, 8));
}

// A stop_by that has passed bounds the history's evaluation to kMinCatchUpTokens per
// call: a long new history is evaluated over several calls (empty drafts meanwhile,
// its KV kept), a sequence with fewer new tokens in the same batch goes first and
// drafts, and once caught up the drafts are the continuation as without a bound.
TEST_F(DraftModelTest, StopByBoundsTheHistorysEvaluation) {
  constexpr size_t kMin = DraftModel::kMinCatchUpTokens;
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  auto warm = dm->NewDrafter(), fresh = dm->NewDrafter();
  auto* warm_seq = static_cast<DraftModelDrafter*>(warm.get());
  auto* fresh_seq = static_cast<DraftModelDrafter*>(fresh.get());
  DraftParams p;
  p.n_max = 8;
  p.p_min = 0.0f;
  ASSERT_EQ(warm->Draft(History(4), p).tokens, Expected(4, 8));
  const Tokens warm_h = History(5), fresh_h = History(30);
  ASSERT_GT(fresh_h.size(), 4 * kMin);
  p.stop_by = std::chrono::steady_clock::now();
  std::vector<DraftModelJob> jobs(2);
  jobs[0].seq = fresh_seq->seq();
  jobs[0].history = &fresh_h;
  jobs[0].params = p;
  jobs[1].seq = warm_seq->seq();
  jobs[1].history = &warm_h;
  jobs[1].params = p;
  std::vector<DraftResult> r = dm->DraftBatch(jobs);
  EXPECT_TRUE(r[0].tokens.empty());        // kMin - 2 of its tokens evaluated
  EXPECT_EQ(r[1].tokens, Expected(5, 1));  // 2 new tokens: it went first
  // The fresh sequence alone: kMin more tokens per call until the last ones fit.
  int calls = 0;
  Tokens d;
  while (d.empty() && calls < 100) {
    d = fresh->Draft(fresh_h, p).tokens;
    ++calls;
  }
  const int want_calls = static_cast<int>((fresh_h.size() - (kMin - 2) + kMin - 1) / kMin);
  EXPECT_EQ(calls, want_calls);
  EXPECT_EQ(d, Expected(30, 1));
  // Caught up: without a bound, the whole draft, as a fresh sequence gives it.
  p.stop_by = std::chrono::steady_clock::time_point::max();
  EXPECT_EQ(fresh->Draft(History(31), p).tokens, Expected(31, 8));
}

TEST_F(DraftModelTest, SessionWithPMinProposesPrefixesOfTheContinuation) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  SpecConfig c;
  c.type = SpecType::kDraftModel;
  c.draft_max = 6;
  SpecResources r;
  r.draft_model = dm.get();
  auto s = SpecSession::Create(c, r);
  ASSERT_TRUE(s.ok()) << s.status();
  SpecSession& ss = **s;
  ss.Append(History(1));
  size_t k = 1;
  int64_t accepted = 0;
  while (k + 8 < out_.size()) {
    const Tokens d = ss.Draft().tokens;
    const Tokens want = Expected(k, d.size());
    EXPECT_EQ(d, want) << "k=" << k;
    // Verification by the target: every drafted token matches, plus one of its own.
    ss.Accept(static_cast<int32_t>(d.size()));
    accepted += static_cast<int64_t>(d.size());
    Tokens next(out_.begin() + static_cast<ptrdiff_t>(k),
                out_.begin() + static_cast<ptrdiff_t>(std::min(out_.size(), k + d.size() + 1)));
    ss.Append(next);
    k += next.size();
  }
  EXPECT_GT(ss.stats().gen_tokens, 0);
  EXPECT_EQ(ss.stats().acc_tokens, ss.stats().gen_tokens);
  EXPECT_EQ(ss.stats().acc_tokens, accepted);
  EXPECT_DOUBLE_EQ(ss.stats().acceptance_rate(), 1.0);
}

TEST_F(DraftModelTest, KvEvictionAmongSequencesKeepsDraftsRight) {
  auto dm = LoadDraft(/*n_ctx=*/64);  // room for one sequence at a time
  ASSERT_NE(dm, nullptr);
  auto a = dm->NewDrafter(), b = dm->NewDrafter();
  DraftParams p;
  p.n_max = 4;
  p.p_min = 0.0f;
  for (size_t k = 10; k < 30; k += 3) {
    EXPECT_EQ(a->Draft(History(k), p).tokens, Expected(k, 4)) << k;
    EXPECT_EQ(b->Draft(History(k + 1), p).tokens, Expected(k + 1, 4)) << k;
  }
  EXPECT_GT(dm->n_kv_evictions(), 0);
  EXPECT_LE(dm->n_cached_seqs(), 2u);
  a.reset();
  b.reset();
  EXPECT_EQ(dm->n_cached_seqs(), 0u);
}

TEST_F(DraftModelTest, LongHistoriesSlideTheWindow) {
  auto dm = LoadDraft(/*n_ctx=*/40);  // window: 40 - 4 - 1 = 35 history tokens
  ASSERT_NE(dm, nullptr);
  EXPECT_EQ(dm->seq_window(), 40);
  auto d = dm->NewDrafter();
  DraftParams p;
  p.n_max = 4;
  p.p_min = 0.0f;
  for (size_t k = 1; k + 4 < out_.size(); ++k) {
    const Tokens t = d->Draft(History(k), p).tokens;
    EXPECT_EQ(t.size(), 4u) << k;  // always drafts, whatever the history length
  }
}

TEST_F(DraftModelTest, SampledDraftsCarryTheirDistributions) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  auto d = dm->NewDrafter();
  DraftParams p;
  p.n_max = 8;
  p.p_min = 0.0f;
  p.temp = 0.8f;
  p.seed = 17;
  for (size_t k = 1; k < 12; ++k) {
    const DraftResult r = d->Draft(History(k), p);
    ASSERT_EQ(r.tokens.size(), 8u);
    ASSERT_EQ(r.probs.size(), r.tokens.size());
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      double sum = 0, p_tok = 0;
      for (const TokenProb& t : r.probs[i]) {
        sum += t.p;
        if (t.id == r.tokens[i]) p_tok = t.p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-4);
      EXPECT_GT(p_tok, 0.0) << "token " << i << " not in its distribution";
      EXPECT_LE(r.probs[i].size(), 10u);
    }
  }
}

// A sampled draft is a function of the seed, the history and its length: calls before it
// whose drafts were dropped (a prompt's warm-up, a repeated or late call) and the
// drafter it runs on change nothing; another seed draws other tokens.
TEST_F(DraftModelTest, SampledDraftsDependOnTheSeedAndHistoryOnly) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  DraftParams p;
  p.n_max = 8;
  p.p_min = 0.0f;
  p.temp = 1.5f;  // flat enough that another seed draws other tokens
  p.seed = 42;
  const Tokens h = History(12);
  const Tokens alone = dm->NewDrafter()->Draft(h, p).tokens;
  ASSERT_EQ(alone.size(), 8u);
  auto d = dm->NewDrafter();
  DraftParams warm = p;
  warm.n_max = 1;
  for (size_t k : {4, 9, 12}) (void)d->Draft(History(k), warm);  // dropped drafts
  (void)d->Draft(h, p);                                          // and a repeated call
  EXPECT_EQ(d->Draft(h, p).tokens, alone);
  // A shorter draft is the longer one's start.
  DraftParams shorter = p;
  shorter.n_max = 3;
  EXPECT_EQ(dm->NewDrafter()->Draft(h, shorter).tokens, Tokens(alone.begin(), alone.begin() + 3));
  int differs = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    DraftParams other = p;
    other.seed = seed;
    differs += dm->NewDrafter()->Draft(h, other).tokens != alone ? 1 : 0;
  }
  EXPECT_GT(differs, 0);
}

// Several sequences with different histories drafted in one DraftBatch give what each
// drafted alone gives, through growth, rejection (jumping back) and p_min stops.
TEST_F(DraftModelTest, DraftBatchEqualsOneAtATime) {
  auto solo = LoadDraft(), batched = LoadDraft();
  ASSERT_NE(solo, nullptr);
  ASSERT_NE(batched, nullptr);
  constexpr int kSeqs = 5;
  std::vector<std::unique_ptr<Drafter>> solo_d, batch_d;
  for (int i = 0; i < kSeqs; ++i) {
    solo_d.push_back(solo->NewDrafter());
    batch_d.push_back(batched->NewDrafter());
  }
  // Per round, the history length of each sequence (some grow, some jump back).
  const std::vector<std::vector<size_t>> rounds = {
      {1, 4, 9, 15, 22}, {2, 5, 12, 16, 7}, {3, 9, 12, 20, 8}, {10, 2, 13, 21, 23}};
  int64_t drafted = 0;
  for (size_t r = 0; r < rounds.size(); ++r) {
    std::vector<Tokens> hist(kSeqs);
    std::vector<DraftModelJob> jobs(kSeqs);
    std::vector<DraftParams> params(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      hist[static_cast<size_t>(i)] = History(rounds[r][static_cast<size_t>(i)]);
      DraftParams& p = params[static_cast<size_t>(i)];
      p.n_max = 3 + i;                     // different lengths
      p.p_min = i % 2 == 0 ? 0.0f : 0.6f;  // some stop early
      DraftModelJob& j = jobs[static_cast<size_t>(i)];
      j.seq = static_cast<DraftModelDrafter*>(batch_d[static_cast<size_t>(i)].get())->seq();
      j.history = &hist[static_cast<size_t>(i)];
      j.params = p;
    }
    const int64_t batches_before = batched->n_batches();
    const std::vector<DraftResult> got = batched->DraftBatch(jobs);
    EXPECT_EQ(batched->n_batches(), batches_before + 1) << "one batch for all sequences";
    ASSERT_EQ(got.size(), static_cast<size_t>(kSeqs));
    for (int i = 0; i < kSeqs; ++i) {
      const size_t u = static_cast<size_t>(i);
      const Tokens want = solo_d[u]->Draft(hist[u], params[u]).tokens;
      EXPECT_EQ(got[u].tokens, want) << "round " << r << " seq " << i;
      EXPECT_TRUE(got[u].probs.empty());
      if (params[u].p_min == 0.0f) {
        EXPECT_EQ(got[u].tokens, Expected(rounds[r][u], params[u].n_max)) << "round " << r << " seq " << i;
      }
      drafted += static_cast<int64_t>(got[u].tokens.size());
    }
  }
  EXPECT_GT(drafted, 40);
  EXPECT_EQ(batched->n_cached_seqs(), static_cast<size_t>(kSeqs));
}

TEST_F(DraftModelTest, DraftBatchHandlesBadAndRepeatedJobs) {
  auto dm = LoadDraft();
  ASSERT_NE(dm, nullptr);
  auto a = dm->NewDrafter(), b = dm->NewDrafter();
  const int32_t sa = static_cast<DraftModelDrafter*>(a.get())->seq();
  const int32_t sb = static_cast<DraftModelDrafter*>(b.get())->seq();
  const Tokens h5 = History(5), h9 = History(9), bad = {1, 2, 100000}, empty;
  DraftParams p;
  p.n_max = 4;
  p.p_min = 0.0f;
  std::vector<DraftModelJob> jobs(5);
  jobs[0] = {sa, &h5, p};
  jobs[1] = {sb, &bad, p};    // not in the vocabulary: empty, the others still draft
  jobs[2] = {sa, &h9, p};     // the same sequence again: drafted after jobs[0]
  jobs[3] = {sb, &empty, p};  // nothing to continue
  jobs[4] = {sb, nullptr, p};
  const std::vector<DraftResult> got = dm->DraftBatch(jobs);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].tokens, Expected(5, 4));
  EXPECT_TRUE(got[1].tokens.empty());
  EXPECT_EQ(got[2].tokens, Expected(9, 4));
  EXPECT_TRUE(got[3].tokens.empty());
  EXPECT_TRUE(got[4].tokens.empty());
  EXPECT_TRUE(dm->DraftBatch({}).empty());
  // The sequence keeps working after its bad job.
  EXPECT_EQ(b->Draft(History(7), p).tokens, Expected(7, 4));
}

// A KV cache too small for the whole batch: the jobs are drafted one after another
// (each evicting the other) and still right.
TEST_F(DraftModelTest, DraftBatchWithoutRoomForAllDraftsOneAtATime) {
  auto dm = LoadDraft(/*n_ctx=*/64);
  ASSERT_NE(dm, nullptr);
  auto a = dm->NewDrafter(), b = dm->NewDrafter();
  DraftParams p;
  p.n_max = 4;
  p.p_min = 0.0f;
  for (size_t k = 18; k < 26; k += 3) {
    const Tokens ha = History(k), hb = History(k + 1);
    ASSERT_GT(ha.size() + hb.size(), 64u) << "the two histories must not fit together";
    std::vector<DraftModelJob> jobs(2);
    jobs[0] = {static_cast<DraftModelDrafter*>(a.get())->seq(), &ha, p};
    jobs[1] = {static_cast<DraftModelDrafter*>(b.get())->seq(), &hb, p};
    const std::vector<DraftResult> got = dm->DraftBatch(jobs);
    EXPECT_EQ(got[0].tokens, Expected(k, 4)) << k;
    EXPECT_EQ(got[1].tokens, Expected(k + 1, 4)) << k;
  }
  EXPECT_GT(dm->n_kv_evictions(), 0);
}

// Concurrent DraftFor calls from 8 threads (group commit: merged into shared batches)
// give the same drafts as sequential calls.
TEST_F(DraftModelTest, ConcurrentDraftForEqualsSequential) {
  auto seq_dm = LoadDraft(), conc_dm = LoadDraft();
  ASSERT_NE(seq_dm, nullptr);
  ASSERT_NE(conc_dm, nullptr);
  constexpr int kThreads = 8, kCalls = 6;
  DraftParams p;
  p.n_max = 5;
  p.p_min = 0.0f;
  auto len = [](int t, int c) { return static_cast<size_t>(1 + (t * 5 + c * 3) % 30); };
  std::vector<std::vector<Tokens>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    auto d = seq_dm->NewDrafter();
    for (int c = 0; c < kCalls; ++c) want[static_cast<size_t>(t)].push_back(d->Draft(History(len(t, c)), p).tokens);
  }
  std::vector<std::vector<Tokens>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto d = conc_dm->NewDrafter();
      for (int c = 0; c < kCalls; ++c) got[static_cast<size_t>(t)].push_back(d->Draft(History(len(t, c)), p).tokens);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(got[static_cast<size_t>(t)], want[static_cast<size_t>(t)]) << "thread " << t;
    for (int c = 0; c < kCalls; ++c) {
      EXPECT_EQ(got[static_cast<size_t>(t)][static_cast<size_t>(c)], Expected(len(t, c), 5)) << t << " " << c;
    }
  }
  // 8 threads start together: at least some of their calls share a batch.
  EXPECT_LT(conc_dm->n_batches(), kThreads * kCalls);
  std::cout << "batches for " << kThreads * kCalls << " concurrent calls: " << conc_dm->n_batches() << "\n";
  EXPECT_EQ(conc_dm->n_cached_seqs(), 0u);  // every drafter released its sequence
}

// Waits (up to a minute) until f() holds; false if it never did.
template <typename F>
bool WaitFor(F f) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Draft ahead: after a draft of 4, the background thread drafts 5 more tokens (the guess
// for the target's own token, then a whole draft); a history that accepted the draft
// and whose next token is that guess gets the continuation at once, equal to what
// drafting gives; a history that left it (partial acceptance) is drafted as before.
TEST_F(DraftModelTest, DraftAheadServesTheAcceptedContinuation) {
  DraftModelParams dp;
  dp.n_ctx = 1024;
  dp.n_threads = 2;
  dp.draft_ahead = true;
  auto loaded = DraftModel::Load(stories_path_, dp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::unique_ptr<DraftModel> dm = *std::move(loaded);
  ASSERT_TRUE(dm->AttachTarget(*vocab_).ok());
  auto drafter = dm->NewDrafter();
  DraftParams p;
  p.n_max = 4;
  p.p_min = 0.0f;
  ASSERT_EQ(drafter->Draft(History(4), p).tokens, Expected(4, 4));
  ASSERT_TRUE(WaitFor([&] { return dm->n_ahead_steps() >= 5; })) << dm->n_ahead_steps();
  EXPECT_EQ(dm->n_ahead_hits(), 0);
  // The draft out[4..8) accepted and the target's token out[8]: out[9..13) are ready.
  EXPECT_EQ(drafter->Draft(History(9), p).tokens, Expected(9, 4));
  EXPECT_EQ(dm->n_ahead_hits(), 1);
  // And again from there, after the ahead steps of that draft.
  ASSERT_TRUE(WaitFor([&] { return dm->n_ahead_steps() >= 10; })) << dm->n_ahead_steps();
  EXPECT_EQ(drafter->Draft(History(14), p).tokens, Expected(14, 4));
  EXPECT_EQ(dm->n_ahead_hits(), 2);
  // Two of its tokens accepted and a target token other than the draft's after them:
  // drafted as a draft model without draft ahead drafts that history.
  const int64_t steps = dm->n_ahead_steps();
  Tokens diverged = History(16);
  diverged.push_back(out_[16] == 13 ? 14 : 13);
  auto plain = LoadDraft();
  ASSERT_NE(plain, nullptr);
  const Tokens want = plain->NewDrafter()->Draft(diverged, p).tokens;
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(drafter->Draft(diverged, p).tokens, want);
  EXPECT_EQ(dm->n_ahead_hits(), 2);
  // A p_min no ahead token reaches: not served from them.
  ASSERT_TRUE(WaitFor([&] { return dm->n_ahead_steps() >= steps + 5; }));
  DraftParams strict = p;
  strict.p_min = 1.01f;
  Tokens next = diverged;
  next.insert(next.end(), want.begin(), want.end());
  DraftParams one = p;
  one.n_max = 1;
  const Tokens guess = plain->NewDrafter()->Draft(next, one).tokens;  // what draft ahead guessed
  ASSERT_EQ(guess.size(), 1u);
  next.push_back(guess[0]);  // the whole draft accepted, the target's token the guess
  EXPECT_TRUE(drafter->Draft(next, strict).tokens.empty());
  EXPECT_EQ(dm->n_ahead_hits(), 2);
  // Sampled drafts never take ahead tokens.
  DraftParams sampled = p;
  sampled.temp = 0.8f;
  sampled.seed = 7;
  EXPECT_EQ(drafter->Draft(next, sampled).tokens.size(), 4u);
  EXPECT_EQ(dm->n_ahead_hits(), 2);
  drafter.reset();
  EXPECT_EQ(dm->n_cached_seqs(), 0u);
}

// After a call that drafted for more than draft_ahead_max_seqs sequences nothing is
// drafted ahead: the accepted continuation is drafted as usual.
TEST_F(DraftModelTest, NoDraftAheadAfterLargeBatches) {
  DraftModelParams dp;
  dp.n_ctx = 1024;
  dp.n_threads = 2;
  dp.draft_ahead = true;
  dp.draft_ahead_max_seqs = 2;
  auto loaded = DraftModel::Load(stories_path_, dp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::unique_ptr<DraftModel> dm = *std::move(loaded);
  ASSERT_TRUE(dm->AttachTarget(*vocab_).ok());
  DraftParams p;
  p.n_max = 2;
  p.p_min = 0.0f;
  std::vector<std::unique_ptr<Drafter>> drafters;
  std::vector<DraftModelJob> jobs(3);
  const Tokens h = History(4);
  for (size_t i = 0; i < jobs.size(); ++i) {
    drafters.push_back(dm->NewDrafter());
    jobs[i].seq = static_cast<DraftModelDrafter*>(drafters.back().get())->seq();
    jobs[i].history = &h;
    jobs[i].params = p;
  }
  for (const DraftResult& r : dm->DraftBatch(jobs)) EXPECT_EQ(r.tokens, Expected(4, 2));
  EXPECT_EQ(drafters[0]->Draft(History(7), p).tokens, Expected(7, 2));
  EXPECT_EQ(dm->n_ahead_hits(), 0);
  // One sequence: drafted ahead.
  ASSERT_TRUE(WaitFor([&] { return dm->n_ahead_steps() >= 3; }));
  EXPECT_EQ(drafters[0]->Draft(History(10), p).tokens, Expected(10, 2));
  EXPECT_EQ(dm->n_ahead_hits(), 1);
  // A one-token ask (a probe, a prompt's warm-up call) is not drafted past.
  ASSERT_TRUE(WaitFor([&] { return dm->n_ahead_steps() >= 6; }));
  DraftParams one = p;
  one.n_max = 1;
  EXPECT_EQ(drafters[0]->Draft(History(13), one).tokens, Expected(13, 1));  // served from ahead
  EXPECT_EQ(dm->n_ahead_hits(), 2);
  EXPECT_EQ(drafters[0]->Draft(History(15), p).tokens, Expected(15, 2));
  EXPECT_EQ(dm->n_ahead_hits(), 2);
}

// Concurrent callers with draft ahead running between their calls: every draft is
// still the greedy continuation of its history.
TEST_F(DraftModelTest, DraftAheadWithConcurrentCallersKeepsDraftsRight) {
  DraftModelParams dp;
  dp.n_ctx = 1024;
  dp.n_threads = 2;
  dp.draft_ahead = true;
  auto loaded = DraftModel::Load(stories_path_, dp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::unique_ptr<DraftModel> dm = *std::move(loaded);
  ASSERT_TRUE(dm->AttachTarget(*vocab_).ok());
  constexpr int kThreads = 4, kCalls = 8;
  DraftParams p;
  p.n_max = 3;
  p.p_min = 0.0f;
  // Each thread's history grows by a whole accepted draft plus one token per call, or
  // by one token (a rejected draft), so some calls find their continuation ahead.
  auto len = [](int t, int c) { return static_cast<size_t>(2 + t + 3 * c + (c % 3 == 2 ? 0 : c / 3)); };
  std::vector<std::vector<Tokens>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto d = dm->NewDrafter();
      for (int c = 0; c < kCalls; ++c) {
        got[static_cast<size_t>(t)].push_back(d->Draft(History(len(t, c)), p).tokens);
        std::this_thread::sleep_for(std::chrono::milliseconds(c % 2));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int c = 0; c < kCalls; ++c) {
      const size_t k = len(t, c);
      const Tokens& d = got[static_cast<size_t>(t)][static_cast<size_t>(c)];
      const Tokens want = Expected(k, 3);
      ASSERT_GE(d.size(), std::min<size_t>(1, want.size())) << t << " " << c;
      EXPECT_EQ(d, Tokens(want.begin(), want.begin() + static_cast<ptrdiff_t>(std::min(d.size(), want.size()))))
          << t << " " << c;
    }
  }
  std::cout << "ahead steps " << dm->n_ahead_steps() << ", hits " << dm->n_ahead_hits() << "\n";
  EXPECT_EQ(dm->n_cached_seqs(), 0u);
}

}  // namespace
}  // namespace herd::engine::spec
