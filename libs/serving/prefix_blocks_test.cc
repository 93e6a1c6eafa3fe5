#include "libs/serving/prefix_blocks.h"

#include <vector>

#include "gtest/gtest.h"

namespace herd::serving {
namespace {

TEST(PrefixBlocks, ChainedOverFullBlocksOnly) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<uint64_t> h = PrefixBlockHashes(a, 4);
  ASSERT_EQ(h.size(), 2u);  // tokens 8, 9 form no full block
  EXPECT_NE(h[0], h[1]);
  // A prompt sharing the first block only shares the first hash.
  std::vector<int32_t> b = a;
  b[5] = 99;
  const std::vector<uint64_t> hb = PrefixBlockHashes(b, 4);
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_EQ(hb[0], h[0]);
  EXPECT_NE(hb[1], h[1]);
  // The same block after a different first block hashes differently (chained).
  std::vector<int32_t> c = a;
  c[0] = 42;
  const std::vector<uint64_t> hc = PrefixBlockHashes(c, 4);
  EXPECT_NE(hc[0], h[0]);
  EXPECT_NE(hc[1], h[1]);
  // The block size is part of the hash.
  EXPECT_NE(PrefixBlockHashes(a, 2)[1], h[0]);
  EXPECT_TRUE(PrefixBlockHashes(a, 0).empty());
  EXPECT_TRUE(PrefixBlockHashes({}, 4).empty());
}

TEST(PrefixBlocks, StableValues) {
  // Gateway and workers of different builds must agree: the function is fixed.
  const std::vector<int32_t> a = {1, 15043, 3186, 29991};
  const std::vector<uint64_t> h = PrefixBlockHashes(a, 2);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h, PrefixBlockHashes(a, 2));
  EXPECT_EQ(h[0], PrefixBlockHashes({1, 15043}, 2)[0]);
}

TEST(PrefixBlocks, LeadingBlocksStopsAtFirstMiss) {
  absl::flat_hash_set<uint64_t> set;
  const std::vector<int32_t> cached = {5, 6, 7, 8, 9, 10};
  AddPrefixBlockHashes(cached, 2, &set);
  EXPECT_EQ(set.size(), 3u);
  const std::vector<uint64_t> req = PrefixBlockHashes(std::vector<int32_t>{5, 6, 7, 8, 1, 2, 9, 10}, 2);
  EXPECT_EQ(LeadingBlocks(req, [&](uint64_t h) { return set.contains(h); }), 2);
  EXPECT_EQ(
      LeadingBlocks(PrefixBlockHashes(std::vector<int32_t>{0, 6}, 2), [&](uint64_t h) { return set.contains(h); }), 0);
}

}  // namespace
}  // namespace herd::serving
