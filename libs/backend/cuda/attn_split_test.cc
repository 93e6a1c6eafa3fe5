// The split-KV merge of attn_split.h on the host (no GPU): random attention rows (scores
// with -inf masked cells, whole chunks masked, fully masked rows) are cut into chunks, each
// chunk reduced to (m, l, acc) in float as the kernel does, merged with CombineElement and
// compared with softmax(scores) V computed unsplit in double. Tolerance: 2e-6 relative
// to the largest |V| (float sums over <= 4096 cells of terms in [0, 1]); fully masked
// rows must be exactly 0. Also the split planner's choices for 7B decode shapes.
#include "libs/backend/cuda/attn_split.h"

#include <math.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace herd::cuda::attn {
namespace {

struct Row {
  std::vector<float> score;  // [n_kv], -inf where masked
  std::vector<float> v;      // [n_kv][hd]
};

Row RandomRow(std::mt19937& rng, int64_t n_kv, int64_t hd, double p_masked, int64_t masked_from, int64_t masked_to) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Row r;
  r.score.resize(static_cast<size_t>(n_kv));
  r.v.resize(static_cast<size_t>(n_kv * hd));
  for (int64_t c = 0; c < n_kv; ++c) {
    const bool masked = u(rng) < p_masked || (c >= masked_from && c < masked_to);
    r.score[static_cast<size_t>(c)] = masked ? -INFINITY : nd(rng);
    for (int64_t i = 0; i < hd; ++i) r.v[static_cast<size_t>(c * hd + i)] = nd(rng) / 3.0f;
  }
  return r;
}

// softmax(score) . V in double; zeros when every cell is masked.
std::vector<double> Reference(const Row& r, int64_t hd) {
  const int64_t n_kv = static_cast<int64_t>(r.score.size());
  double M = -INFINITY;
  for (float s : r.score) M = std::max(M, static_cast<double>(s));
  std::vector<double> o(static_cast<size_t>(hd), 0.0);
  if (M == -INFINITY) return o;
  double sum = 0.0;
  for (int64_t c = 0; c < n_kv; ++c) {
    if (r.score[static_cast<size_t>(c)] == -INFINITY) continue;
    const double e = std::exp(r.score[static_cast<size_t>(c)] - M);
    sum += e;
    for (int64_t i = 0; i < hd; ++i) o[static_cast<size_t>(i)] += e * r.v[static_cast<size_t>(c * hd + i)];
  }
  for (double& x : o) x /= sum;
  return o;
}

// Chunk partials as the kernel keeps them (float): ml[2 s], ml[2 s + 1], acc[s * hd + i].
void Partials(const Row& r, int64_t hd, const SplitPlan& p, std::vector<float>* ml, std::vector<float>* acc) {
  const int64_t n_kv = static_cast<int64_t>(r.score.size());
  ml->assign(static_cast<size_t>(2 * p.n_split), 0.0f);
  acc->assign(static_cast<size_t>(hd * p.n_split), 0.0f);
  for (int64_t s = 0; s < p.n_split; ++s) {
    const int64_t c0 = s * p.cells, c1 = std::min(n_kv, c0 + p.cells);
    float m = -INFINITY;
    for (int64_t c = c0; c < c1; ++c) m = std::max(m, r.score[static_cast<size_t>(c)]);
    float l = 0.0f;
    if (m != -INFINITY) {
      for (int64_t c = c0; c < c1; ++c) {
        const float sc = r.score[static_cast<size_t>(c)];
        if (sc == -INFINITY) continue;
        const float e = expf(sc - m);
        l += e;
        for (int64_t i = 0; i < hd; ++i)
          (*acc)[static_cast<size_t>(s * hd + i)] += e * r.v[static_cast<size_t>(c * hd + i)];
      }
    }
    (*ml)[static_cast<size_t>(2 * s)] = m;
    (*ml)[static_cast<size_t>(2 * s + 1)] = l;
  }
}

void CheckRow(const Row& r, int64_t hd, const SplitPlan& p, bool all_masked) {
  std::vector<float> ml, acc;
  Partials(r, hd, p, &ml, &acc);
  const std::vector<double> ref = Reference(r, hd);
  double vmax = 0.0;
  for (float x : r.v) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
  for (int64_t i = 0; i < hd; ++i) {
    const float got = CombineElement(ml.data(), 2, acc.data(), hd, p.n_split, i);
    if (all_masked) {
      ASSERT_EQ(got, 0.0f) << "element " << i;
    } else {
      ASSERT_NEAR(got, ref[static_cast<size_t>(i)], 2e-6 * vmax) << "element " << i << " of " << p.n_split << " splits";
    }
  }
}

TEST(AttnSplitTest, CombineMatchesUnsplitSoftmax) {
  std::mt19937 rng(37);
  const int64_t hd = 64;
  for (int64_t n_kv : {129, 300, 1000, 4096}) {
    for (int64_t n_split : {1, 2, 3, 7, 16}) {
      SplitPlan p;
      p.cells = (n_kv + n_split - 1) / n_split;
      p.n_split = (n_kv + p.cells - 1) / p.cells;
      for (double p_masked : {0.0, 0.3, 0.95}) {
        CheckRow(RandomRow(rng, n_kv, hd, p_masked, 0, 0), hd, p, false);
        // The second chunk (and for one split the middle third) wholly masked.
        CheckRow(RandomRow(rng, n_kv, hd, p_masked, p.cells, 2 * p.cells), hd, p, false);
        CheckRow(RandomRow(rng, n_kv, hd, p_masked, n_kv / 3, 2 * n_kv / 3), hd, p, false);
        // All but the last chunk masked (a decode step whose visible cells are at the end).
        CheckRow(RandomRow(rng, n_kv, hd, p_masked, 0, (p.n_split - 1) * p.cells), hd, p, false);
      }
      CheckRow(RandomRow(rng, n_kv, hd, 0.0, 0, n_kv), hd, p, true);  // every cell masked
    }
  }
}

TEST(AttnSplitTest, WeightOfMaskedChunkIsZero) {
  EXPECT_EQ(ChunkWeight(-INFINITY, 1.0f), 0.0f);
  EXPECT_EQ(ChunkWeight(2.0f, 2.0f), 1.0f);
  const float ml[4] = {-INFINITY, 0.0f, -INFINITY, 0.0f};
  const float acc[2] = {0.0f, 0.0f};
  EXPECT_EQ(CombineMax(ml, 2, 2), -INFINITY);
  EXPECT_EQ(CombineElement(ml, 2, acc, 1, 2, 0), 0.0f);
}

TEST(AttnSplitTest, PlanSplitForDecode) {
  // 7B decode (32 query heads, 1 token) on 132 SMs over 4096 cells: 264 blocks wanted,
  // 9 splits of 456 cells, rounded to 512 -> 8 splits.
  SplitPlan p = PlanSplit(1, 32, 4096, 132);
  EXPECT_EQ(p.n_split, 8);
  EXPECT_EQ(p.cells, 512);
  // A short cache is not split (fewer than 2 x kSplitMinCells cells).
  p = PlanSplit(1, 32, 129, 132);
  EXPECT_EQ(p.n_split, 1);
  EXPECT_EQ(p.cells, 129);
  // A prompt is not split, nor are rows that fill the device already.
  EXPECT_EQ(PlanSplit(512, 32 * 512, 4096, 132).n_split, 1);
  EXPECT_EQ(PlanSplit(8, 32 * 8, 4096, 132).n_split, 2);
  EXPECT_EQ(PlanSplit(9, 32 * 9, 4096, 132).n_split, 1);
  EXPECT_EQ(PlanSplit(1, 264, 4096, 132).n_split, 1);
  // Every split is non-empty, a multiple of kKvStep but for the last, and covers n_kv.
  for (int64_t n_kv = 1; n_kv < 20000; n_kv += 97) {
    for (int64_t rows : {1, 4, 12, 32, 100}) {
      p = PlanSplit(1, rows, n_kv, 132);
      ASSERT_GE(p.n_split, 1);
      ASSERT_LE(p.n_split, kSplitMax);
      if (p.n_split == 1) {
        ASSERT_EQ(p.cells, n_kv);
        continue;
      }
      ASSERT_EQ(p.cells % kKvStep, 0);
      ASSERT_GE(p.cells, kSplitMinCells);
      ASSERT_GE(p.n_split * p.cells, n_kv);
      ASSERT_LT((p.n_split - 1) * p.cells, n_kv) << n_kv << " " << rows;
    }
  }
}

}  // namespace
}  // namespace herd::cuda::attn
