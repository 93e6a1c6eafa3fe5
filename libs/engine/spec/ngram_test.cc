// The n-gram drafters' rules on small hand-made token sequences, and the session's
// n_min / n_max rules and statistics.
#include "libs/engine/spec/ngram.h"

#include <vector>

#include "gtest/gtest.h"

#include "libs/engine/spec/session.h"

namespace herd::engine::spec {
namespace {

using Tokens = std::vector<int32_t>;

Tokens DraftOf(Drafter& d, const Tokens& h, int n_max = 64) {
  DraftParams p;
  p.n_max = n_max;
  return d.Draft(h, p).tokens;
}

// ---------------------------------------------------------------- ngram-simple

TEST(NgramSimple, MostRecentEarlierOccurrenceProposesWhatFollowed) {
  NgramSimpleDrafter d(/*n=*/3, /*m=*/2, /*check_rate=*/1);
  //            0  1  2  3  4  5  6  7  8  9 10 11
  const Tokens h = {1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3};
  // Occurrences of the key (1 2 3) at 0 and 4: the one at 4 is the most recent.
  EXPECT_EQ(DraftOf(d, h), (Tokens{8, 7}));
}

TEST(NgramSimple, MTokensContinuingPeriodicallyPastTheHistory) {
  const Tokens h = {1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3};
  NgramSimpleDrafter d5(3, 5, 1);
  EXPECT_EQ(DraftOf(d5, h), (Tokens{8, 7, 1, 2, 3}));
  // Only 5 tokens follow the occurrence in the history; then the draft repeats itself
  // (period 5: the text since the occurrence).
  NgramSimpleDrafter d12(3, 12, 1);
  EXPECT_EQ(DraftOf(d12, h), (Tokens{8, 7, 1, 2, 3, 8, 7, 1, 2, 3, 8, 7}));
  // A run: period 1.
  NgramSimpleDrafter run(2, 4, 1);
  EXPECT_EQ(DraftOf(run, {5, 5, 5, 5}), (Tokens{5, 5, 5, 5}));
  // An occurrence at position 0 counts.
  NgramSimpleDrafter d(2, 3, 1);
  EXPECT_EQ(DraftOf(d, {4, 6, 1, 2, 4, 6}), (Tokens{1, 2, 4}));
}

TEST(NgramSimple, NoEarlierOccurrenceNoDraft) {
  NgramSimpleDrafter d(3, 4, 1);
  EXPECT_TRUE(DraftOf(d, {1, 2, 3, 4, 5, 6}).empty());
  EXPECT_TRUE(DraftOf(d, {1, 2}).empty());  // shorter than the key
  EXPECT_TRUE(DraftOf(d, {1, 2, 3}).empty());
  // Only part of the key matches.
  EXPECT_TRUE(DraftOf(d, {9, 2, 3, 7, 1, 2, 3}).empty());
}

TEST(NgramSimple, CheckRateSkipsSearchesUntilEnoughNewTokens) {
  NgramSimpleDrafter d(1, 2, /*check_rate=*/3);
  Tokens h = {5, 6, 7, 5};
  EXPECT_EQ(DraftOf(d, h), (Tokens{6, 7}));  // first call searches
  h.push_back(6);
  EXPECT_TRUE(DraftOf(d, h).empty());  // 1 new token: skipped
  h.push_back(7);
  EXPECT_TRUE(DraftOf(d, h).empty());  // 2: skipped
  h.push_back(5);
  EXPECT_EQ(DraftOf(d, h), (Tokens{6, 7}));  // 3: searches
}

// ---------------------------------------------------------------- ngram-map-k

TEST(NgramMapK, DraftsTheMGramAfterTheMostRecentOccurrence) {
  NgramMapDrafter d(false, /*n=*/2, /*m=*/2, 1, /*min_hits=*/1);
  //            0  1  2  3  4  5  6  7  8  9
  const Tokens h = {1, 2, 3, 4, 1, 2, 5, 6, 1, 2};
  EXPECT_EQ(DraftOf(d, h), (Tokens{5, 6}));
}

TEST(NgramMapK, OnlyOccurrencesFollowedByAWholeMGramCount) {
  NgramMapDrafter d(false, 2, 3, 1, 1);
  // The key (1 2) at 0 is followed by 3 tokens, the one at 4 by only 2 before the key at 6.
  EXPECT_EQ(DraftOf(d, {1, 2, 3, 4, 1, 2, 1, 2}), (Tokens{3, 4, 1}));
  NgramMapDrafter e(false, 2, 3, 1, 1);
  EXPECT_TRUE(DraftOf(e, {1, 2, 9, 1, 2}).empty());
}

TEST(NgramMapK, MinHitsTwoFirstSightingNeverDrafts) {
  NgramMapDrafter d(false, 1, 2, 1, /*min_hits=*/2);
  Tokens h = {7, 1, 2, 9, 7};
  EXPECT_TRUE(DraftOf(d, h).empty());  // first lookup that finds the key: 1 hit
  const NgramMapDrafter::Key* k = d.FindKey({7});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->hits, 1);
  h.insert(h.end(), {1, 2, 8, 7});
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));  // second: 2 hits
  EXPECT_EQ(d.FindKey({7})->hits, 2);
  // A key never found earlier has no statistics and no hit.
  EXPECT_TRUE(DraftOf(d, {3, 4, 5, 6}).empty());
  EXPECT_EQ(d.FindKey({6}), nullptr);
}

TEST(NgramMapK, AcceptedCountCapsLaterDraftsOfTheKey) {
  NgramMapDrafter d(false, 1, 4, 1, 1);
  Tokens h = {7, 1, 2, 3, 4, 7};
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2, 3, 4}));
  d.Accepted(2);
  h.insert(h.end(), {1, 2, 5, 7});
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));  // capped at the 2 accepted last time
  d.Accepted(2);
  // Another key is not affected.
  h.insert(h.end(), {1, 2, 5, 9, 8, 8, 8, 8, 9});
  EXPECT_EQ(DraftOf(d, h), (Tokens{8, 8, 8, 8}));
  // The (9) key drafted last: Accepted(0) caps it; the second Accepted() has no draft.
  d.Accepted(0);
  d.Accepted(0);
  h.insert(h.end(), {3, 7});
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));
}

// ---------------------------------------------------------------- ngram-map-k4v

TEST(NgramMapK4v, CountsThreeToOneDraft) {
  NgramMapDrafter d(true, /*n=*/1, /*m=*/2, 1, 1);
  //                      value (1 2) x3        value (3 4) x1
  const Tokens h = {7, 1, 2, 7, 1, 2, 7, 1, 2, 7, 3, 4, 9, 7};
  // The most recent occurrence is followed by (3 4), but the draft is the top value's
  // own m-gram.
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));
  const NgramMapDrafter::Key* k = d.FindKey({7});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->values[0].count, 3);
  EXPECT_EQ(k->values[1].count, 1);
}

TEST(NgramMapK4v, CountsTwoToOneDoNot) {
  NgramMapDrafter d(true, 1, 2, 1, 1);
  EXPECT_TRUE(DraftOf(d, {7, 1, 2, 7, 1, 2, 7, 3, 4, 9, 7}).empty());
  const NgramMapDrafter::Key* k = d.FindKey({7});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->values[0].count, 2);
  EXPECT_EQ(k->values[1].count, 1);
}

TEST(NgramMapK4v, SingleValueDrafts) {
  NgramMapDrafter d(true, 2, 2, 1, 1);
  EXPECT_EQ(DraftOf(d, {5, 6, 1, 2, 5, 6}), (Tokens{1, 2}));
}

TEST(NgramMapK4v, OccurrencesCountOnceAcrossLookups) {
  NgramMapDrafter d(true, 1, 2, 1, 1);
  Tokens h = {7, 1, 2, 7, 1, 2, 9, 7};
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));
  EXPECT_EQ(d.FindKey({7})->values[0].count, 2);
  h.insert(h.end(), {1, 2, 7, 3, 4, 9, 7});
  // Occurrences at 0, 3, 7 -> (1 2) x3; at 10 -> (3 4) x1. Counting the occurrence at
  // 3 again (as llama.cpp's rescan would) would make it 4.
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2}));
  EXPECT_EQ(d.FindKey({7})->values[0].count, 3);
  EXPECT_EQ(d.FindKey({7})->values[1].count, 1);
}

TEST(NgramMapK4v, AtMostFourValuesPerKey) {
  NgramMapDrafter d(true, 1, 1, 1, 1);
  // Values 1, 2, 3, 4 once each, then value 5 many times: 5 never gets a slot.
  Tokens h = {7, 1, 7, 2, 7, 3, 7, 4};
  for (int i = 0; i < 10; ++i) h.insert(h.end(), {7, 5});
  h.push_back(7);
  EXPECT_TRUE(DraftOf(d, h).empty());  // (1,1,1,1): no dominant value
  const NgramMapDrafter::Key* k = d.FindKey({7});
  ASSERT_NE(k, nullptr);
  for (int v = 0; v < kNgramMaxValues; ++v) {
    EXPECT_EQ(k->values[v].count, 1) << v;
    EXPECT_EQ(h[static_cast<size_t>(k->values[v].pos)], v + 1) << v;
  }
  // A dominant value among the four drafts.
  NgramMapDrafter e(true, 1, 1, 1, 1);
  Tokens g = {7, 1, 7, 2, 7, 3, 7, 4};
  for (int i = 0; i < 9; ++i) g.insert(g.end(), {7, 1});
  g.push_back(7);
  EXPECT_EQ(DraftOf(e, g), (Tokens{1}));  // 10 >= 3 * 3
}

TEST(NgramMapK4v, MinHitsAndAcceptedCap) {
  NgramMapDrafter d(true, 1, 3, 1, /*min_hits=*/2);
  Tokens h = {7, 1, 2, 3, 7};
  EXPECT_TRUE(DraftOf(d, h).empty());
  h.insert(h.end(), {1, 2, 3, 7});
  EXPECT_EQ(DraftOf(d, h), (Tokens{1, 2, 3}));
  d.Accepted(1);
  h.insert(h.end(), {1, 2, 3, 7});
  EXPECT_EQ(DraftOf(d, h), (Tokens{1}));
}

// ---------------------------------------------------------------- session rules

SpecConfig Cfg(SpecType t, int n, int m, int draft_min, int draft_max) {
  SpecConfig c;
  c.type = t;
  c.ngram_size_n = n;
  c.ngram_size_m = m;
  c.draft_min = draft_min;
  c.draft_max = draft_max;
  return c;
}

TEST(SpecSession, NMaxCapsAndNMinDropsEveryType) {
  for (SpecType t : {SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v, SpecType::kNgramCache}) {
    SCOPED_TRACE(SpecTypeName(t));
    const Tokens h = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3};
    {
      auto s = SpecSession::Create(Cfg(t, 2, 8, 0, 4), {});
      ASSERT_TRUE(s.ok()) << s.status();
      (*s)->Append(h);
      EXPECT_EQ((*s)->Draft().tokens, (Tokens{4, 5, 6, 7}));
    }
    {  // the caller's cap
      auto s = SpecSession::Create(Cfg(t, 2, 8, 0, 4), {});
      (*s)->Append(h);
      EXPECT_EQ((*s)->Draft(/*n_max_cap=*/2).tokens, (Tokens{4, 5}));
    }
    if (t == SpecType::kNgramCache) continue;  // its drafts are not m long
    {                                          // a draft of 3 (m) is dropped under n_min 4, kept under n_min 3
      auto s = SpecSession::Create(Cfg(t, 2, 3, 4, 8), {});
      (*s)->Append(h);
      EXPECT_TRUE((*s)->Draft().tokens.empty());
      EXPECT_EQ((*s)->stats().gen_drafts, 0);
      auto s3 = SpecSession::Create(Cfg(t, 2, 3, 3, 8), {});
      (*s3)->Append(h);
      EXPECT_EQ((*s3)->Draft().tokens, (Tokens{4, 5, 6}));
    }
  }
}

TEST(SpecSession, StatisticsLikeLlamaCpp) {
  auto s = SpecSession::Create(Cfg(SpecType::kNgramSimple, 2, 4, 0, 16), {});
  ASSERT_TRUE(s.ok());
  SpecSession& ss = **s;
  ss.Append({1, 2, 3, 4, 5, 6, 1, 2});
  EXPECT_EQ(ss.Draft().tokens, (Tokens{3, 4, 5, 6}));
  ss.Accept(2);
  ss.Append({3, 4, 9});
  EXPECT_TRUE(ss.Draft().tokens.empty());  // (4 9) never seen
  ss.Accept(3);                            // ignored: no pending draft
  ss.Append({1, 2});
  EXPECT_EQ(ss.Draft().tokens, (Tokens{3, 4, 9, 1}));
  ss.Accept(0);
  const SpecStats& st = ss.stats();
  EXPECT_EQ(st.type, SpecType::kNgramSimple);
  EXPECT_EQ(st.calls, 3);
  EXPECT_EQ(st.gen_drafts, 2);
  EXPECT_EQ(st.acc_drafts, 1);
  EXPECT_EQ(st.gen_tokens, 8);
  EXPECT_EQ(st.acc_tokens, 2);
  EXPECT_DOUBLE_EQ(st.acceptance_rate(), 0.25);
  EXPECT_EQ(st.ToString(),
            "statistics ngram-simple: #calls = 3, #gen drafts = 2, #acc drafts = 1, #gen tokens = 8, "
            "#acc tokens = 2, acceptance rate = 0.250");
}

TEST(SpecSession, AcceptIsClampedToTheDraft) {
  auto s = SpecSession::Create(Cfg(SpecType::kNgramSimple, 1, 2, 0, 16), {});
  (*s)->Append({4, 5, 6, 4});
  EXPECT_EQ((*s)->Draft().tokens.size(), 2u);
  (*s)->Accept(99);
  EXPECT_EQ((*s)->stats().acc_tokens, 2);
}

TEST(SpecSession, NoneNeverDrafts) {
  auto s = SpecSession::Create(SpecConfig(), {});
  ASSERT_TRUE(s.ok());
  (*s)->Append({1, 2, 1, 2, 1, 2});
  EXPECT_TRUE((*s)->Draft().tokens.empty());
  EXPECT_EQ((*s)->stats().calls, 1);
}

}  // namespace
}  // namespace herd::engine::spec
