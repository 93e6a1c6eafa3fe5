// Speculative sampling keeps the target distribution exactly: chi-square tests with
// fixed seeds over many trials, for sampled drafts (dense and sparse q) and
// deterministic drafts; greedy targets reduce to greedy decoding.
#include "libs/engine/spec/rejection.h"

#include <cmath>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace herd::engine::spec {
namespace {

int32_t Draw(const std::vector<float>& p, std::mt19937& rng) {
  std::discrete_distribution<int32_t> d(p.begin(), p.end());
  return d(rng);
}

// Pearson chi-square of observed counts against expected probabilities.
double ChiSquare(const std::vector<int64_t>& obs, const std::vector<double>& expect_p, int64_t n) {
  double chi = 0;
  for (size_t i = 0; i < obs.size(); ++i) {
    const double e = expect_p[i] * static_cast<double>(n);
    if (e == 0) {
      EXPECT_EQ(obs[i], 0) << "impossible outcome " << i << " observed";
      continue;
    }
    chi += (obs[i] - e) * (obs[i] - e) / e;
  }
  return chi;
}

std::vector<float> RandomDist(int n, std::mt19937& rng, int zeros = 0) {
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::vector<float> p(static_cast<size_t>(n));
  float s = 0;
  for (int i = 0; i < n; ++i) s += p[static_cast<size_t>(i)] = i < zeros ? 0.0f : u(rng);
  for (float& x : p) x /= s;
  return p;
}

TEST(RejectionSample, FirstTokenFollowsTheTargetWithASampledDraft) {
  constexpr int kV = 6;
  constexpr int64_t kTrials = 200000;
  std::mt19937 gen(1234);
  const std::vector<float> p = RandomDist(kV, gen, /*zeros=*/1), q = RandomDist(kV, gen), p2 = RandomDist(kV, gen);
  std::mt19937 rng(42);
  std::vector<int64_t> counts(kV, 0);
  int64_t accepted = 0;
  for (int64_t t = 0; t < kTrials; ++t) {
    const int32_t x = Draw(q, rng);
    auto r = RejectionSample({DistFromDense(p), DistFromDense(p2)}, {x}, {DistFromDense(q)}, rng);
    ASSERT_TRUE(r.ok()) << r.status();
    const int32_t first = r->n_accepted == 1 ? x : r->token;
    ++counts[static_cast<size_t>(first)];
    accepted += r->n_accepted;
  }
  std::vector<double> pe(p.begin(), p.end());
  // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
  EXPECT_LT(ChiSquare(counts, pe, kTrials), 20.5);
  // Acceptance rate = sum_x min(p(x), q(x)).
  double expect_acc = 0;
  for (int i = 0; i < kV; ++i) expect_acc += std::min(p[static_cast<size_t>(i)], q[static_cast<size_t>(i)]);
  EXPECT_NEAR(static_cast<double>(accepted) / kTrials, expect_acc, 0.005);
}

TEST(RejectionSample, TwoTokenDraftJointDistribution) {
  // Position distributions that depend on the first token, like a real model's.
  constexpr int kV = 4;
  constexpr int64_t kTrials = 300000;
  std::mt19937 gen(99);
  const std::vector<float> p0 = RandomDist(kV, gen), q0 = RandomDist(kV, gen);
  std::vector<std::vector<float>> p1, q1, p2;
  for (int a = 0; a < kV; ++a) {
    p1.push_back(RandomDist(kV, gen));
    q1.push_back(RandomDist(kV, gen, a % 2));
    p2.push_back(RandomDist(kV, gen));
  }
  std::mt19937 rng(7);
  std::vector<int64_t> counts(kV * kV, 0);
  for (int64_t t = 0; t < kTrials; ++t) {
    const int32_t x0 = Draw(q0, rng), x1 = Draw(q1[static_cast<size_t>(x0)], rng);
    auto r = RejectionSample(
        {DistFromDense(p0), DistFromDense(p1[static_cast<size_t>(x0)]), DistFromDense(p2[static_cast<size_t>(x1)])},
        {x0, x1}, {DistFromDense(q0), DistFromDense(q1[static_cast<size_t>(x0)])}, rng);
    ASSERT_TRUE(r.ok()) << r.status();
    int32_t a, b;
    if (r->n_accepted == 0) {
      a = r->token;  // the target continues from a on its own
      b = Draw(p1[static_cast<size_t>(a)], rng);
    } else {
      a = x0;
      b = r->n_accepted == 2 ? x1 : r->token;
    }
    ++counts[static_cast<size_t>(a * kV + b)];
  }
  std::vector<double> pe;
  for (int a = 0; a < kV; ++a) {
    for (int b = 0; b < kV; ++b)
      pe.push_back(static_cast<double>(p0[static_cast<size_t>(a)]) *
                   p1[static_cast<size_t>(a)][static_cast<size_t>(b)]);
  }
  // 15 degrees of freedom: P(chi2 > 37.7) = 0.001.
  EXPECT_LT(ChiSquare(counts, pe, kTrials), 37.7);
}

TEST(RejectionSample, DeterministicDraftsAndSparseQ) {
  constexpr int kV = 5;
  constexpr int64_t kTrials = 200000;
  std::mt19937 gen(5);
  const std::vector<float> p = RandomDist(kV, gen), p_next = RandomDist(kV, gen);
  for (int mode = 0; mode < 2; ++mode) {
    std::mt19937 rng(11 + mode);
    std::vector<int64_t> counts(kV, 0);
    for (int64_t t = 0; t < kTrials; ++t) {
      int32_t x;
      std::vector<SparseDist> q;
      if (mode == 0) {
        x = 2;  // a fixed (n-gram / greedy) draft: point mass
      } else {
        // q over two tokens only (like a top-k draft distribution)
        x = (rng() & 3) == 0 ? 4 : 1;
        q.push_back({{1, 0.75f}, {4, 0.25f}});
      }
      auto r = RejectionSample({DistFromDense(p), DistFromDense(p_next)}, {x}, q, rng);
      ASSERT_TRUE(r.ok()) << r.status();
      ++counts[static_cast<size_t>(r->n_accepted == 1 ? x : r->token)];
    }
    std::vector<double> pe(p.begin(), p.end());
    EXPECT_LT(ChiSquare(counts, pe, kTrials), 18.5) << "mode " << mode;  // 4 dof, p = 0.001
  }
}

TEST(RejectionSample, GreedyTargetIsGreedyDecoding) {
  std::mt19937 rng(3);
  const SparseDist one_hot_7 = {{7, 1.0f}}, one_hot_9 = {{9, 1.0f}}, one_hot_2 = {{2, 1.0f}};
  // Matching prefix accepted, first mismatch replaced by the target's token.
  for (int i = 0; i < 100; ++i) {
    auto r = RejectionSample({one_hot_7, one_hot_9, one_hot_2}, {7, 5}, {}, rng);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->n_accepted, 1);
    EXPECT_EQ(r->token, 9);
    auto all = RejectionSample({one_hot_7, one_hot_9, one_hot_2}, {7, 9}, {}, rng);
    EXPECT_EQ(all->n_accepted, 2);
    EXPECT_EQ(all->token, 2);
    auto none = RejectionSample({one_hot_2}, {}, {}, rng);
    EXPECT_EQ(none->n_accepted, 0);
    EXPECT_EQ(none->token, 2);
  }
}

TEST(RejectionSample, BadInputsAreInvalidArgument) {
  std::mt19937 rng(1);
  const SparseDist d = {{1, 0.5f}, {2, 0.5f}};
  EXPECT_EQ(RejectionSample({d}, {1}, {}, rng).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RejectionSample({d, d}, {1}, {d, d}, rng).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RejectionSample({{}, d}, {1}, {}, rng).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RejectionSample({{{1, -1.0f}}, d}, {1}, {}, rng).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RejectionSample({{{1, NAN}}, d}, {1}, {}, rng).status().code(), absl::StatusCode::kInvalidArgument);
  auto not_in_q = RejectionSample({d, d}, {3}, {d}, rng);
  EXPECT_EQ(not_in_q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_in_q.status().message().find("draft_q[0]"), std::string::npos);
}

TEST(RejectionSample, FromCandidates) {
  TokenDataArray a;
  a.data = {{3, 1.0f, 0.7f}, {8, 0.5f, 0.3f}, {9, 0.1f, 0.0f}};
  SparseDist d = DistFromCandidates(a);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].id, 3);
  EXPECT_FLOAT_EQ(d[1].p, 0.3f);
}

}  // namespace
}  // namespace herd::engine::spec
