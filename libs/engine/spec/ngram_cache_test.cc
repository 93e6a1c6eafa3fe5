// ngram-cache: counting, drafting from the context / dynamic / static caches with
// llama.cpp's thresholds, merge, and the llama.cpp file format.
#include "libs/engine/spec/ngram_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

#include "libs/base/mmap.h"

namespace herd::engine::spec {
namespace {

using Tokens = std::vector<int32_t>;

Ngram G(std::initializer_list<int32_t> t) {
  Tokens v(t);
  return Ngram(v.data(), static_cast<int>(v.size()));
}

TEST(NgramCache, UpdateCountsFollowersOfEveryNgram) {
  NgramCache c;
  const Tokens t = {1, 2, 3, 1, 2, 4};
  NgramCacheUpdate(&c, 1, 4, t, static_cast<int64_t>(t.size()));
  EXPECT_EQ(c.at(G({1})), (NgramCachePart{{2, 2}}));
  EXPECT_EQ(c.at(G({2})), (NgramCachePart{{3, 1}, {4, 1}}));
  EXPECT_EQ(c.at(G({1, 2})), (NgramCachePart{{3, 1}, {4, 1}}));
  EXPECT_EQ(c.at(G({3, 1, 2})), (NgramCachePart{{4, 1}}));
  EXPECT_EQ(c.at(G({1, 2, 3, 1})), (NgramCachePart{{2, 1}}));
  EXPECT_EQ(c.count(G({4})), 0u);  // nothing follows the last token
  // Incremental updates equal one update over everything.
  NgramCache inc;
  Tokens part = {1, 2, 3};
  NgramCacheUpdate(&inc, 1, 4, part, 3);
  part.insert(part.end(), {1, 2, 4});
  NgramCacheUpdate(&inc, 1, 4, part, 3);
  EXPECT_EQ(inc, c);
}

TEST(NgramCache, DraftsFromTheContext) {
  NgramCache ctx, none;
  const Tokens t = {1, 2, 3, 1, 2, 3, 1, 2};
  NgramCacheUpdate(&ctx, 1, 4, t, static_cast<int64_t>(t.size()));
  EXPECT_EQ(NgramCacheDraft(t, 5, 1, 4, ctx, none, none), (Tokens{3, 1, 2, 3, 1}));
  EXPECT_EQ(NgramCacheDraft(t, 2, 1, 4, ctx, none, none), (Tokens{3, 1}));
  EXPECT_TRUE(NgramCacheDraft({1}, 5, 1, 4, ctx, none, none).empty());  // shorter than the static n-gram
}

TEST(NgramCache, LaxThresholdsForShortNgrams) {
  NgramCache ctx, none;
  // The 1-gram (5) was followed by 6 once: one sample is too few for a 1-gram (needs 2).
  EXPECT_TRUE(NgramCacheDraft(
                  {9, 5}, 3, 1, 4,
                  [] {
                    NgramCache c;
                    c[G({5})][6] = 1;
                    return c;
                  }(),
                  none, none)
                  .empty());
  // Twice: drafts. A 3-gram needs only one sample.
  ctx[G({5})][6] = 2;
  EXPECT_EQ(NgramCacheDraft({9, 5}, 1, 1, 4, ctx, none, none), (Tokens{6}));
  NgramCache ctx3;
  ctx3[G({8, 9, 5})][7] = 1;
  EXPECT_EQ(NgramCacheDraft({8, 9, 5}, 1, 1, 4, ctx3, none, none), (Tokens{7}));
  // 50% is not enough for a 1-gram (66%).
  NgramCache split;
  split[G({5})] = {{6, 2}, {7, 2}};
  EXPECT_TRUE(NgramCacheDraft({9, 5}, 1, 1, 4, split, none, none).empty());
}

TEST(NgramCache, DynamicIsStrictAndStaticAloneNeedsTwoSamples) {
  NgramCache none, dyn, st;
  dyn[G({4, 5})][6] = 2;  // a 2-gram needs 3 samples in the dynamic cache
  EXPECT_TRUE(NgramCacheDraft({4, 5}, 1, 1, 4, none, dyn, none).empty());
  dyn[G({4, 5})][6] = 3;
  EXPECT_EQ(NgramCacheDraft({4, 5}, 1, 1, 4, none, dyn, none), (Tokens{6}));
  st[G({4, 5})] = {{7, 3}, {8, 1}};
  EXPECT_EQ(NgramCacheDraft({4, 5}, 3, 1, 4, none, none, st), (Tokens{7}));  // then (5 7) is unknown
  st[G({5, 7})][9] = 1;                                                      // one sample: not enough
  EXPECT_EQ(NgramCacheDraft({4, 5}, 3, 1, 4, none, none, st), (Tokens{7}));
}

TEST(NgramCache, StaticCountsWeightContextCandidates) {
  NgramCache ctx, none, st;
  ctx[G({4, 5})] = {{6, 3}, {7, 2}};  // context alone prefers 6 (60%: passes the 50% 2-gram rule)
  EXPECT_EQ(NgramCacheDraft({4, 5}, 1, 1, 4, ctx, none, none), (Tokens{6}));
  st[G({4, 5})] = {{7, 1}};  // the static cache knows 7: weight 100x
  // Chosen 7, but its count (2 of 5 = 40%) fails the percentage: no draft from the
  // context; static alone has one sample: none.
  EXPECT_TRUE(NgramCacheDraft({4, 5}, 1, 1, 4, ctx, none, st).empty());
  ctx[G({4, 5})] = {{6, 1}, {7, 2}};
  EXPECT_EQ(NgramCacheDraft({4, 5}, 1, 1, 4, ctx, none, st), (Tokens{7}));
}

TEST(NgramCache, MergeAddsCounts) {
  NgramCache a, b;
  a[G({1, 2})] = {{3, 1}, {4, 2}};
  b[G({1, 2})] = {{3, 5}};
  b[G({7})] = {{8, 1}};
  NgramCacheMerge(&a, b);
  EXPECT_EQ(a.at(G({1, 2})), (NgramCachePart{{3, 6}, {4, 2}}));
  EXPECT_EQ(a.at(G({7})), (NgramCachePart{{8, 1}}));
  a[G({9})][1] = INT32_MAX;
  NgramCache c;
  c[G({9})][1] = 5;
  NgramCacheMerge(&a, c);
  EXPECT_EQ(a.at(G({9})).at(1), INT32_MAX);  // saturates
}

TEST(NgramCache, FileFormatIsLlamaCpps) {
  NgramCache c;
  c[G({1})][2] = 5;
  const std::string bytes = NgramCacheSerialize(c);
  const int32_t expect[] = {1, -1, -1, -1, 1, 2, 5};
  ASSERT_EQ(bytes.size(), sizeof(expect));
  EXPECT_EQ(std::memcmp(bytes.data(), expect, sizeof(expect)), 0);
}

TEST(NgramCache, CreateMergeSaveLoadRoundTrip) {
  const Tokens corpus1 = {1, 2, 3, 1, 2, 3, 4, 5, 1, 2, 3};
  const Tokens corpus2 = {1, 2, 4, 4, 5, 6};
  NgramCache s1 = NgramCacheCreateStatic(corpus1), s2 = NgramCacheCreateStatic(corpus2);
  EXPECT_EQ(s1.at(G({1, 2})), (NgramCachePart{{3, 3}}));
  char dir[] = "/tmp/herd_ngram_cache_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string p1 = std::string(dir) + "/a.bin", p2 = std::string(dir) + "/b.bin",
                    pm = std::string(dir) + "/merged.bin";
  ASSERT_TRUE(NgramCacheSave(s1, p1).ok());
  ASSERT_TRUE(NgramCacheSave(s2, p2).ok());
  auto l1 = NgramCacheLoad(p1);
  auto l2 = NgramCacheLoad(p2);
  ASSERT_TRUE(l1.ok()) << l1.status();
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_EQ(*l1, s1);
  NgramCacheMerge(&*l1, *l2);  // llama-lookup-merge
  ASSERT_TRUE(NgramCacheSave(*l1, pm).ok());
  auto merged = NgramCacheLoad(pm);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->at(G({1, 2})), (NgramCachePart{{3, 3}, {4, 1}}));
  EXPECT_EQ(merged->at(G({4, 5})), (NgramCachePart{{1, 1}, {6, 1}}));
  // Equal caches serialize to equal bytes.
  EXPECT_EQ(NgramCacheSerialize(*merged), NgramCacheSerialize(*l1));
  // The drafter reads the static cache.
  NgramCacheFiles files;
  files.static_cache = std::make_shared<const NgramCache>(*merged);
  NgramCacheDrafter d(files);
  DraftParams p;
  p.n_max = 4;
  // (1 2) -> 3 (3 of 4), (2 3) -> 1 (a tie with 4: the lower id), (3 1) has one sample.
  EXPECT_EQ(d.Draft({9, 8, 1, 2}, p).tokens, (Tokens{3, 1}));
  for (const std::string& f : {p1, p2, pm}) std::remove(f.c_str());
  ::rmdir(dir);
}

TEST(NgramCache, CorruptFilesAreErrorsNotCrashes) {
  NgramCache c;
  c[G({1, 2})] = {{3, 4}};
  std::string bytes = NgramCacheSerialize(c);
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    auto r = NgramCacheParse(bytes.substr(0, cut));
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
  }
  std::string zero = bytes;
  const int32_t z = 0;
  std::memcpy(&zero[zero.size() - 4], &z, 4);
  EXPECT_NE(NgramCacheParse(zero).status().message().find("count 0"), std::string::npos);
  std::string none = bytes.substr(0, 20);
  std::memcpy(&none[16], &z, 4);
  EXPECT_NE(NgramCacheParse(none).status().message().find("0 tokens"), std::string::npos);
  std::string huge = bytes.substr(0, 20);
  const int32_t big = 0x7fffffff;
  std::memcpy(&huge[16], &big, 4);
  EXPECT_FALSE(NgramCacheParse(huge).ok());
  EXPECT_TRUE(NgramCacheParse("").ok());
  EXPECT_EQ(NgramCacheLoad("/nonexistent/cache.bin").status().code(), absl::StatusCode::kNotFound);
}

TEST(NgramCacheDrafter, ContextGrowsWithTheHistory) {
  NgramCacheDrafter d({});
  DraftParams p;
  p.n_max = 3;
  Tokens h = {1, 2, 3, 4};
  EXPECT_TRUE(d.Draft(h, p).tokens.empty());
  h.insert(h.end(), {1, 2, 3});  // the 3-gram (1 2 3) was followed by 4 once: enough
  EXPECT_EQ(d.Draft(h, p).tokens, (Tokens{4, 1, 2}));
  EXPECT_EQ(d.context_cache().at(G({1, 2})), (NgramCachePart{{3, 2}}));
}

}  // namespace
}  // namespace herd::engine::spec
