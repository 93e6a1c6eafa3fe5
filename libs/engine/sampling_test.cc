#include "libs/engine/sampling.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace herd::engine {
namespace {

SamplingParams Plain(float temp = 1.0f) {
  SamplingParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> LogitsFromProbs(const std::vector<float>& probs) {
  std::vector<float> l;
  for (float p : probs) l.push_back(std::log(p));
  return l;
}

std::set<int32_t> SampledSet(const SamplingParams& base, const std::vector<float>& logits, int n_seeds) {
  std::set<int32_t> seen;
  for (int s = 0; s < n_seeds; ++s) {
    SamplingParams p = base;
    p.seed = static_cast<uint32_t>(s);
    Sampler sampler(p, static_cast<int32_t>(logits.size()));
    seen.insert(sampler.Sample(logits.data()));
  }
  return seen;
}

std::set<int32_t> CandidateIds(const TokenDataArray& a) {
  std::set<int32_t> ids;
  for (const auto& t : a.data) ids.insert(t.id);
  return ids;
}

float LogitOf(const TokenDataArray& a, int32_t id) {
  for (const auto& t : a.data) {
    if (t.id == id) return t.logit;
  }
  ADD_FAILURE() << "token " << id << " not among candidates";
  return NAN;
}

TEST(SamplingTest, GreedyIsArgmax) {
  std::vector<float> logits = {0.1f, -3.0f, 2.5f, 2.4f, 0.0f};
  Sampler s(Plain(0.0f), 5);
  EXPECT_EQ(s.Sample(logits.data()), 2);
  logits[4] = 9.0f;
  EXPECT_EQ(s.Sample(logits.data()), 4);
}

TEST(SamplingTest, GreedyTiesPickLowestId) {
  std::vector<float> logits = {1.0f, 3.0f, -1.0f, 3.0f, 3.0f};
  Sampler s(Plain(0.0f), 5);
  EXPECT_EQ(s.Sample(logits.data()), 1);
  // Negative temperature also means greedy (llama.cpp temp <= 0).
  Sampler neg(Plain(-1.0f), 5);
  EXPECT_EQ(neg.Sample(logits.data()), 1);
  std::vector<float> all_equal(7, -2.0f);
  Sampler s7(Plain(0.0f), 7);
  EXPECT_EQ(s7.Sample(all_equal.data()), 0);
}

TEST(SamplingTest, GreedyIgnoresNaNAndHandlesInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {nan, 1.0f, nan, 0.5f};
  Sampler s(Plain(0.0f), 4);
  EXPECT_EQ(s.Sample(logits.data()), 1);
  logits[3] = INFINITY;
  EXPECT_EQ(s.Sample(logits.data()), 3);
  // Non-greedy path with an +inf logit picks it too.
  Sampler t(Plain(1.0f), 4);
  EXPECT_EQ(t.Sample(logits.data()), 3);
}

TEST(SamplingTest, TopK1EqualsGreedy) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(64);
    for (auto& x : logits) x = nd(gen);
    if (trial % 10 == 0) logits[5] = logits[9] = 100.0f;  // a tie: lowest id wins
    SamplingParams p;                                     // defaults otherwise
    p.top_k = 1;
    p.seed = static_cast<uint32_t>(trial);
    Sampler topk(p, 64);
    Sampler greedy(Plain(0.0f), 64);
    EXPECT_EQ(topk.Sample(logits.data()), greedy.Sample(logits.data())) << "trial " << trial;
  }
}

// FillTopK = FillCandidates + TopKCandidates (same tokens, same order), with ties, NaN
// and infinities; and a sampler on that fast path (no bias, no penalties) draws exactly
// what the full chain draws (a zero logit bias forces the full path).
TEST(SamplingTest, FastTopKEqualsFullChain) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 700);
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) l = std::round(nd(rng) * 4) / 4;  // many ties
    if (trial % 5 == 0) logits[rng() % logits.size()] = NAN;
    if (trial % 7 == 0) logits[rng() % logits.size()] = INFINITY;
    if (trial % 11 == 0) logits[rng() % logits.size()] = -INFINITY;
    const size_t k = 1 + rng() % 80;
    TokenDataArray full, fast;
    FillCandidates(logits.data(), n, &full);
    TopKCandidates(&full, static_cast<int32_t>(k));
    FillTopK(logits.data(), n, k, &fast);
    ASSERT_EQ(full.data.size(), fast.data.size());
    for (size_t i = 0; i < full.data.size(); ++i) {
      ASSERT_EQ(full.data[i].id, fast.data[i].id) << "trial " << trial << " i " << i;
      ASSERT_EQ(full.data[i].logit, fast.data[i].logit);
    }
    EXPECT_TRUE(fast.sorted);
  }
  for (int trial = 0; trial < 100; ++trial) {
    SamplingParams p;
    p.temp = 0.3f + static_cast<float>(trial % 7) * 0.2f;
    p.top_k = 1 + trial % 60;
    p.top_p = trial % 3 == 0 ? 1.0f : 0.9f;
    p.min_p = trial % 4 == 0 ? 0.0f : 0.05f;
    p.n_probs = trial % 2 ? 5 : 0;
    p.seed = static_cast<uint32_t>(trial);
    SamplingParams q = p;
    q.logit_bias = {{0, 0.0f}};
    Sampler a(p, 500), b(q, 500);
    for (int step = 0; step < 20; ++step) {
      std::vector<float> logits(500);
      for (float& l : logits) l = std::round(nd(rng) * 8) / 8;
      const int32_t ta = a.Sample(logits.data()), tb = b.Sample(logits.data());
      ASSERT_EQ(ta, tb) << "trial " << trial << " step " << step;
      ASSERT_EQ(a.last_top_logprobs().size(), b.last_top_logprobs().size());
      for (size_t i = 0; i < a.last_top_logprobs().size(); ++i) {
        EXPECT_EQ(a.last_top_logprobs()[i].id, b.last_top_logprobs()[i].id);
        EXPECT_EQ(a.last_top_logprobs()[i].logprob, b.last_top_logprobs()[i].logprob);
      }
      ASSERT_TRUE(a.Accept(ta).ok());
      ASSERT_TRUE(b.Accept(tb).ok());
    }
  }
}

TEST(SamplingTest, SeededDeterminism) {
  std::vector<float> logits = LogitsFromProbs({0.2f, 0.2f, 0.2f, 0.2f, 0.2f});
  auto run = [&](uint32_t seed) {
    SamplingParams p = Plain(1.0f);
    p.seed = seed;
    Sampler s(p, 5);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits.data()));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));

  // Reset() re-seeds: the same sequence again.
  SamplingParams p = Plain(1.0f);
  p.seed = 42;
  Sampler s(p, 5);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 32; ++i) a.push_back(s.Sample(logits.data()));
  s.Reset();
  for (int i = 0; i < 32; ++i) b.push_back(s.Sample(logits.data()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.seed(), 42u);

  // A fixed seed matches llama.cpp's RNG: std::mt19937(seed) feeding
  // std::discrete_distribution over the sorted candidate probabilities.
  std::vector<float> skew = LogitsFromProbs({0.1f, 0.4f, 0.3f, 0.2f});
  SamplingParams q = Plain(1.0f);
  q.seed = 5;
  Sampler sq(q, 4);
  std::mt19937 rng(5);
  const std::vector<int32_t> order = {1, 2, 3, 0};  // ids sorted by probability
  for (int i = 0; i < 50; ++i) {
    std::discrete_distribution<int> dist({0.4, 0.3, 0.2, 0.1});
    EXPECT_EQ(sq.Sample(skew.data()), order[dist(rng)]) << "draw " << i;
  }
}

TEST(SamplingTest, RandomSeedIsReported) {
  SamplingParams p = Plain(1.0f);
  p.seed = kRandomSeed;
  Sampler s(p, 3);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  const int32_t t = s.Sample(logits.data());
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 3);
  // Re-running with the reported seed reproduces the draw.
  SamplingParams q = p;
  q.seed = s.seed();
  Sampler s2(q, 3);
  EXPECT_EQ(s2.Sample(logits.data()), t);
}

TEST(SamplingTest, TemperatureToZero) {
  std::vector<float> logits = {1.0f, 1.5f, 1.4f, -2.0f};
  for (float temp : {1e-3f, 1e-6f, 1e-30f}) {
    for (uint32_t seed = 0; seed < 50; ++seed) {
      SamplingParams p = Plain(temp);
      p.seed = seed;
      Sampler s(p, 4);
      EXPECT_EQ(s.Sample(logits.data()), 1) << "temp " << temp;
    }
  }
  // High temperature flattens the distribution: every token shows up.
  SamplingParams hot = Plain(100.0f);
  EXPECT_EQ(SampledSet(hot, logits, 400), (std::set<int32_t>{0, 1, 2, 3}));

  // The temperature sampler on its own.
  TokenDataArray a;
  a.data = {{0, 2.0f, 0}, {1, -4.0f, 0}};
  TemperatureCandidates(&a, 0.5f);
  EXPECT_FLOAT_EQ(a.data[0].logit, 4.0f);
  EXPECT_FLOAT_EQ(a.data[1].logit, -8.0f);
  a.data = {{0, 2.0f, 0}, {1, 5.0f, 0}, {2, 5.0f, 0}};
  TemperatureCandidates(&a, 0.0f);
  EXPECT_EQ(a.data[0].logit, -INFINITY);
  EXPECT_EQ(a.data[1].logit, 5.0f);
  EXPECT_EQ(a.data[2].logit, -INFINITY);
}

// A hand-made distribution with ids not in probability order:
// id: 0     1     2     3     4
// p : 0.05  0.50  0.10  0.20  0.15
const std::vector<float> kProbs = {0.05f, 0.50f, 0.10f, 0.20f, 0.15f};

TEST(SamplingTest, TopPKeepsSmallestNucleus) {
  const auto logits = LogitsFromProbs(kProbs);
  // Sorted: 0.50 (1), 0.20 (3), 0.15 (4), 0.10 (2), 0.05 (0).
  struct Case {
    float top_p;
    std::set<int32_t> kept;
  };
  for (const Case& c : {Case{0.3f, {1}}, Case{0.6f, {1, 3}}, Case{0.8f, {1, 3, 4}}, Case{0.9f, {1, 3, 4, 2}},
                        Case{0.0f, {1}}, Case{1.0f, {0, 1, 2, 3, 4}}}) {
    SamplingParams p = Plain(1.0f);
    p.top_p = c.top_p;
    Sampler s(p, 5);
    TokenDataArray cand = s.Candidates(logits.data());
    EXPECT_EQ(CandidateIds(cand), c.kept) << "top_p " << c.top_p;
    // Renormalized probabilities over the kept set.
    float total = 0;
    for (const auto& t : cand.data) total += t.p;
    EXPECT_NEAR(total, 1.0f, 1e-5f);
    // Sampling never leaves the kept set and reaches all of it.
    EXPECT_EQ(SampledSet(p, logits, 600), c.kept) << "top_p " << c.top_p;
  }
  // The exact renormalized probabilities for top_p = 0.8.
  SamplingParams p = Plain(1.0f);
  p.top_p = 0.8f;
  TokenDataArray cand = Sampler(p, 5).Candidates(logits.data());
  ASSERT_EQ(cand.data.size(), 3u);
  EXPECT_EQ(cand.data[0].id, 1);
  EXPECT_NEAR(cand.data[0].p, 0.50f / 0.85f, 1e-5f);
  EXPECT_EQ(cand.data[1].id, 3);
  EXPECT_NEAR(cand.data[1].p, 0.20f / 0.85f, 1e-5f);
  EXPECT_EQ(cand.data[2].id, 4);
  EXPECT_NEAR(cand.data[2].p, 0.15f / 0.85f, 1e-5f);
}

TEST(SamplingTest, MinPCutsRelativeToMax) {
  const auto logits = LogitsFromProbs(kProbs);
  struct Case {
    float min_p;
    std::set<int32_t> kept;
  };
  // Threshold = min_p * 0.5.
  for (const Case& c : {Case{0.0f, {0, 1, 2, 3, 4}}, Case{0.05f, {0, 1, 2, 3, 4}}, Case{0.15f, {1, 2, 3, 4}},
                        Case{0.25f, {1, 3, 4}}, Case{0.35f, {1, 3}}, Case{0.5f, {1}}, Case{1.0f, {1}}}) {
    SamplingParams p = Plain(1.0f);
    p.min_p = c.min_p;
    Sampler s(p, 5);
    EXPECT_EQ(CandidateIds(s.Candidates(logits.data())), c.kept) << "min_p " << c.min_p;
    EXPECT_EQ(SampledSet(p, logits, 600), c.kept) << "min_p " << c.min_p;
  }
  // Sorted path (after top-k) gives the same set.
  TokenDataArray a;
  for (int i = 0; i < 5; ++i) a.data.push_back({i, logits[i], 0});
  TopKCandidates(&a, 5);
  ASSERT_TRUE(a.sorted);
  MinPCandidates(&a, 0.35f);
  EXPECT_EQ(CandidateIds(a), (std::set<int32_t>{1, 3}));
}

TEST(SamplingTest, TopKThenTopPThenMinP) {
  const auto logits = LogitsFromProbs(kProbs);
  SamplingParams p = Plain(1.0f);
  p.top_k = 4;      // drops id 0
  p.top_p = 0.75f;  // over the renormalized top-4: 0.526, 0.737, 0.895 -> {1, 3, 4}
  p.min_p = 0.35f;  // relative to the max: keeps {1, 3}
  EXPECT_EQ(CandidateIds(Sampler(p, 5).Candidates(logits.data())), (std::set<int32_t>{1, 3}));
  p.min_p = 0.0f;
  EXPECT_EQ(CandidateIds(Sampler(p, 5).Candidates(logits.data())), (std::set<int32_t>{1, 3, 4}));
  p.top_k = 2;
  EXPECT_EQ(CandidateIds(Sampler(p, 5).Candidates(logits.data())), (std::set<int32_t>{1, 3}));
}

TEST(SamplingTest, TopKSamplerKeepsHighestSorted) {
  TokenDataArray a;
  a.data = {{0, 1.0f, 0}, {1, 3.0f, 0}, {2, 2.0f, 0}, {3, 3.0f, 0}, {4, -1.0f, 0}};
  TopKCandidates(&a, 3);
  ASSERT_EQ(a.data.size(), 3u);
  EXPECT_EQ(a.data[0].id, 1);  // tie 1/3: lower id first
  EXPECT_EQ(a.data[1].id, 3);
  EXPECT_EQ(a.data[2].id, 2);
  TokenDataArray b;
  b.data = {{0, 1.0f, 0}, {1, 3.0f, 0}};
  TopKCandidates(&b, 0);  // disabled
  EXPECT_EQ(b.data.size(), 2u);
  TopKCandidates(&b, 10);  // k > size
  EXPECT_EQ(b.data.size(), 2u);
}

TEST(SamplingTest, PenaltiesChangeLogitsAsSpecified) {
  // id:       0     1     2      3
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f};
  SamplingParams p = Plain(1.0f);
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.penalty_last_n = 64;
  Sampler s(p, 4);
  ASSERT_TRUE(s.Accept(0).ok());
  ASSERT_TRUE(s.Accept(0).ok());
  ASSERT_TRUE(s.Accept(1).ok());
  TokenDataArray c = s.Candidates(logits.data());
  // Positive logit divided, then - count*freq - presence.
  EXPECT_FLOAT_EQ(LogitOf(c, 0), 2.0f / 2.0f - 2 * 0.5f - 0.25f);
  // Negative logit multiplied.
  EXPECT_FLOAT_EQ(LogitOf(c, 1), -1.0f * 2.0f - 1 * 0.5f - 0.25f);
  // Unseen tokens untouched.
  EXPECT_FLOAT_EQ(LogitOf(c, 2), 0.5f);
  EXPECT_FLOAT_EQ(LogitOf(c, 3), 1.0f);

  // Greedy sees the penalized logits: token 0 would win, 3 wins instead.
  SamplingParams g = p;
  g.temp = 0.0f;
  Sampler sg(g, 4);
  EXPECT_EQ(sg.Sample(logits.data()), 0);
  ASSERT_TRUE(sg.Accept(0).ok());
  EXPECT_EQ(sg.Sample(logits.data()), 3);

  // Reset clears the history.
  s.Reset();
  EXPECT_FLOAT_EQ(LogitOf(s.Candidates(logits.data()), 0), 2.0f);
}

TEST(SamplingTest, PenaltyWindow) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams p = Plain(1.0f);
  p.presence_penalty = 1.0f;
  p.penalty_last_n = 2;
  Sampler s(p, 4);
  ASSERT_TRUE(s.Accept(0).ok());
  ASSERT_TRUE(s.Accept(1).ok());
  ASSERT_TRUE(s.Accept(2).ok());  // evicts 0
  TokenDataArray c = s.Candidates(logits.data());
  EXPECT_FLOAT_EQ(LogitOf(c, 0), 1.0f);
  EXPECT_FLOAT_EQ(LogitOf(c, 1), 0.0f);
  EXPECT_FLOAT_EQ(LogitOf(c, 2), 0.0f);
  EXPECT_FLOAT_EQ(LogitOf(c, 3), 1.0f);

  // Same token twice in the window, frequency counts both.
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 1.0f;
  Sampler f(p, 4);
  ASSERT_TRUE(f.Accept(3).ok());
  ASSERT_TRUE(f.Accept(3).ok());
  EXPECT_FLOAT_EQ(LogitOf(f.Candidates(logits.data()), 3), -1.0f);
  ASSERT_TRUE(f.Accept(1).ok());  // evicts one 3
  EXPECT_FLOAT_EQ(LogitOf(f.Candidates(logits.data()), 3), 0.0f);

  // -1: unbounded history.
  p.penalty_last_n = -1;
  Sampler u(p, 4);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(u.Accept(i == 0 ? 2 : 1).ok());
  c = u.Candidates(logits.data());
  EXPECT_FLOAT_EQ(LogitOf(c, 2), 0.0f);
  EXPECT_FLOAT_EQ(LogitOf(c, 1), 1.0f - 99.0f);

  // 0: disabled.
  p.penalty_last_n = 0;
  Sampler z(p, 4);
  ASSERT_TRUE(z.Accept(1).ok());
  EXPECT_FLOAT_EQ(LogitOf(z.Candidates(logits.data()), 1), 1.0f);
}

TEST(SamplingTest, TopLogprobs) {
  const auto logits = LogitsFromProbs(kProbs);
  SamplingParams p = Plain(0.0f);
  p.n_probs = 3;
  Sampler g(p, 5);
  EXPECT_EQ(g.Sample(logits.data()), 1);
  ASSERT_EQ(g.last_top_logprobs().size(), 3u);
  EXPECT_EQ(g.last_top_logprobs()[0].id, 1);
  EXPECT_NEAR(g.last_top_logprobs()[0].logprob, std::log(0.5f), 1e-5f);
  EXPECT_EQ(g.last_top_logprobs()[1].id, 3);
  EXPECT_NEAR(g.last_top_logprobs()[1].logprob, std::log(0.2f), 1e-5f);
  EXPECT_EQ(g.last_top_logprobs()[2].id, 4);

  p.temp = 1.0f;
  p.top_p = 0.8f;
  p.n_probs = 10;
  Sampler s(p, 5);
  s.Sample(logits.data());
  ASSERT_EQ(s.last_top_logprobs().size(), 3u);  // the filtered distribution
  EXPECT_NEAR(s.last_top_logprobs()[0].logprob, std::log(0.5f / 0.85f), 1e-5f);

  p.n_probs = 0;
  Sampler n(p, 5);
  n.Sample(logits.data());
  EXPECT_TRUE(n.last_top_logprobs().empty());
}

TEST(SamplingTest, DefaultParamsAreValidAndSample) {
  SamplingParams p;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.seed = 3;
  Sampler s(p, 5);
  const auto logits = LogitsFromProbs(kProbs);
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.Sample(logits.data());
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 5);
    ASSERT_TRUE(s.Accept(t).ok());
  }
}

TEST(SamplingTest, ValidationNamesTheField) {
  struct Case {
    const char* field;
    void (*mutate)(SamplingParams&);
  };
  const Case cases[] = {
      {"temp", [](SamplingParams& p) { p.temp = NAN; }},
      {"temp", [](SamplingParams& p) { p.temp = -0.5f; }},
      {"temp", [](SamplingParams& p) { p.temp = INFINITY; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = -0.1f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = NAN; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 2.0f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = NAN; }},
      {"repeat_penalty", [](SamplingParams& p) { p.repeat_penalty = 0.0f; }},
      {"repeat_penalty", [](SamplingParams& p) { p.repeat_penalty = NAN; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = INFINITY; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = NAN; }},
      {"penalty_last_n", [](SamplingParams& p) { p.penalty_last_n = -2; }},
      {"n_probs", [](SamplingParams& p) { p.n_probs = -1; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    absl::Status st = ValidateSamplingParams(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(std::string(c.field) + ":"), std::string::npos) << c.field << " -> " << st.message();
  }
  // Boundaries that are valid.
  SamplingParams ok;
  ok.temp = 0.0f;
  ok.top_k = -1;  // <= 0 = disabled, as llama.cpp
  ok.top_p = 0.0f;
  ok.min_p = 1.0f;
  ok.penalty_last_n = -1;
  ok.frequency_penalty = -2.0f;
  EXPECT_TRUE(ValidateSamplingParams(ok).ok());
}

}  // namespace
}  // namespace herd::engine

// ---------------------------------------------------------------------------
// logit_bias and grammar

namespace herd::engine {
namespace {

TEST(SamplingBias, BanAndBoost) {
  std::vector<float> logits = {0.1f, -3.0f, 2.5f, 2.4f, 0.0f};
  SamplingParams p = Plain(0.0f);
  p.logit_bias = {{2, -INFINITY}};
  Sampler s(p, 5);
  EXPECT_EQ(s.Sample(logits.data()), 3);
  p.logit_bias = {{1, 10.0f}};
  Sampler s2(p, 5);
  EXPECT_EQ(s2.Sample(logits.data()), 1);
  p.logit_bias = {{1, 3.0f}, {1, 3.0f}};  // repeated ids add up
  Sampler s3(p, 5);
  EXPECT_EQ(s3.Sample(logits.data()), 1);
  // Sampling mode: a banned token is never drawn.
  SamplingParams q = Plain(1.0f);
  q.logit_bias = {{2, -INFINITY}, {3, -INFINITY}};
  std::set<int32_t> seen = SampledSet(q, logits, 200);
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(3), 0u);
  EXPECT_GE(seen.size(), 2u);
}

TEST(SamplingBias, Validation) {
  SamplingParams p = Plain();
  p.logit_bias = {{5, 1.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  EXPECT_EQ(ValidateSamplingParams(p, 5).code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(ValidateSamplingParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias = {{0, NAN}};
  EXPECT_EQ(ValidateSamplingParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias = {{0, INFINITY}};
  EXPECT_EQ(ValidateSamplingParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias = {{0, -INFINITY}};
  EXPECT_TRUE(ValidateSamplingParams(p, 5).ok());
}

// Vocabulary: 0 "<eos>" (EOG), 1 "a", 2 "b", 3 "ab", 4 "{", 5 "}", 6 "" (control), 7 "x"
std::shared_ptr<const grammar::TokenPieces> TinyPieces() {
  return grammar::TokenPieces::Create({"<eos>", "a", "b", "ab", "{", "}", "", "x"},
                                      {true, false, false, false, false, false, false, false});
}

TEST(SamplingGrammar, GreedyFollowsGrammar) {
  SamplingParams p = Plain(0.0f);
  p.grammar = "root ::= \"{\" (\"a\" | \"b\")+ \"}\"";
  auto s = Sampler::Create(p, 8, TinyPieces());
  ASSERT_TRUE(s.ok()) << s.status();
  // "x" is by far the most likely token, then the control token, then eos.
  std::vector<float> logits = {5, 1, 2, 0.5f, 0, 0, 8, 9};
  std::string text;
  auto pieces = TinyPieces();
  for (int i = 0; i < 6; ++i) {
    const int32_t t = (*s)->Sample(logits.data());
    ASSERT_GE(t, 0);
    ASSERT_TRUE((*s)->Accept(t).ok());
    if (t == 0) break;
    text += pieces->Piece(t);
    logits[5] = i >= 2 ? 20 : 0;  // "}" becomes likely after a few tokens
  }
  EXPECT_EQ(text, "{bb}");
}

TEST(SamplingGrammar, SampledOutputsAlwaysMatch) {
  auto pieces = TinyPieces();
  for (uint32_t seed = 0; seed < 50; ++seed) {
    SamplingParams p = Plain(1.0f);
    p.seed = seed;
    p.grammar = "root ::= \"{\" \"a\"{1,3} \"}\"";
    auto s = Sampler::Create(p, 8, pieces);
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<float> logits(8, 0.0f);
    std::string text;
    for (int i = 0; i < 20; ++i) {
      const int32_t t = (*s)->Sample(logits.data());
      ASSERT_GE(t, 0);
      ASSERT_TRUE((*s)->Accept(t).ok());
      if (t == 0) break;
      text += pieces->Piece(t);
    }
    EXPECT_TRUE(text == "{a}" || text == "{aa}" || text == "{aaa}") << text;
  }
}

std::set<int32_t> Possible(const TokenDataArray& a) {
  std::set<int32_t> ids;
  for (const auto& t : a.data) {
    if (t.p > 0) ids.insert(t.id);
  }
  return ids;
}

TEST(SamplingGrammar, CandidatesAndErrors) {
  auto pieces = TinyPieces();
  SamplingParams p = Plain(1.0f);
  p.grammar = "root ::= \"ab\" | \"b\"";
  auto s = Sampler::Create(p, 8, pieces);
  ASSERT_TRUE(s.ok());
  std::vector<float> logits(8, 0.0f);
  EXPECT_EQ(Possible((*s)->Candidates(logits.data())), (std::set<int32_t>{1, 2, 3}));
  EXPECT_FALSE((*s)->Accept(7).ok());  // "x" is not allowed; state unchanged
  ASSERT_TRUE((*s)->Accept(3).ok());
  EXPECT_EQ(Possible((*s)->Candidates(logits.data())), (std::set<int32_t>{0}));
  (*s)->Reset();
  EXPECT_EQ(Possible((*s)->Candidates(logits.data())), (std::set<int32_t>{1, 2, 3}));

  p.grammar = "root ::= \"a\" undefined";
  auto bad = Sampler::Create(p, 8, pieces);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("undefined rule 'undefined'"), std::string::npos);
  p.grammar = "root ::= \"a\"";
  EXPECT_EQ(Sampler::Create(p, 8, nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  Sampler plain(p, 8);  // a grammar without pieces: failed state
  EXPECT_FALSE(plain.status().ok());
  EXPECT_EQ(plain.Sample(logits.data()), -1);
}

// Greedy sampling with a grammar (fast path over the best candidates) equals the argmax
// of the grammar-filtered logits (Candidates(), which applies the grammar to everything).
TEST(SamplingGrammar, GreedyEqualsFullGrammarArgmax) {
  std::vector<std::string> texts = {"<eos>"};
  std::vector<bool> eog = {true};
  for (int i = 0; i < 200; ++i) {
    texts.push_back(std::string(1, static_cast<char>('a' + i % 26)) + (i >= 26 ? std::to_string(i) : ""));
    eog.push_back(false);
  }
  auto pieces = grammar::TokenPieces::Create(texts, eog);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    SamplingParams p = Plain(0.0f);
    p.grammar = "root ::= [x-z] [0-9]* | \"q1\" [0-9]+";
    auto s = Sampler::Create(p, static_cast<int32_t>(texts.size()), pieces);
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<float> logits(texts.size());
    for (float& l : logits) l = nd(rng);
    if (trial % 3 == 0) logits[static_cast<size_t>(trial % 200)] = 50;  // a likely, mostly rejected token
    const TokenDataArray c = (*s)->Candidates(logits.data());
    const int32_t t = (*s)->Sample(logits.data());
    ASSERT_EQ(c.data.size(), 1u);
    EXPECT_EQ(t, c.data[0].id) << "trial " << trial;
    EXPECT_TRUE((*s)->matcher()->TokenAllowed(*pieces, t));
  }
}

// Temperature sampling with a grammar: after a rejected first draw, checking tokens in
// logit order until top_k allowed ones are found (and the shared mask cache) gives the
// same tokens as masking the whole vocabulary, for every top_k and seed.
TEST(SamplingGrammar, TopKSearchEqualsWholeMask) {
  std::vector<std::string> texts = {"<eos>"};
  std::vector<bool> eog = {true};
  for (int i = 0; i < 3000; ++i) {
    texts.push_back(std::string(1, static_cast<char>('a' + i % 26)) + (i >= 26 ? std::to_string(i % 97) : ""));
    eog.push_back(false);
  }
  auto pieces = grammar::TokenPieces::Create(texts, eog);
  const int32_t n_vocab = static_cast<int32_t>(texts.size());
  grammar::GrammarCache grammars(pieces);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  int sampled = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SamplingParams p = Plain(1.0f);
    p.top_k = std::vector<int32_t>{1, 5, 40, 500, 3000}[static_cast<size_t>(trial % 5)];
    p.top_p = trial % 2 ? 0.9f : 1.0f;
    p.seed = static_cast<uint32_t>(trial);
    p.grammar = trial % 3 == 0 ? "root ::= [a-f] [0-9]* \"!\"" : "root ::= ([a-z] [0-9]*){1,6}";
    auto fast = Sampler::Create(p, n_vocab, pieces, trial % 2 ? &grammars : nullptr);
    auto whole = Sampler::Create(p, n_vocab, pieces);
    ASSERT_TRUE(fast.ok() && whole.ok());
    (*whole)->set_grammar_top_k_search(false);
    for (int step = 0; step < 12; ++step) {
      std::vector<float> logits(texts.size());
      for (float& l : logits) l = nd(rng);
      if (step % 4 == 1) logits[static_cast<size_t>(1 + step)] = -INFINITY;
      const int32_t a = (*fast)->Sample(logits.data());
      const int32_t b = (*whole)->Sample(logits.data());
      ASSERT_EQ(a, b) << "trial " << trial << " step " << step;
      if (a < 0) break;
      ++sampled;
      ASSERT_TRUE((*fast)->Accept(a).ok());
      ASSERT_TRUE((*whole)->Accept(b).ok());
      if (a == 0) break;
    }
  }
  EXPECT_GT(sampled, 200);
}

TEST(SamplingGrammar, DeadEndReturnsMinusOne) {
  // No EOG token in this vocabulary: after "a" nothing can follow.
  auto pieces = grammar::TokenPieces::Create({"a", "b"}, {false, false});
  SamplingParams p = Plain(0.0f);
  p.grammar = "root ::= \"a\"";
  auto s = Sampler::Create(p, 2, pieces);
  ASSERT_TRUE(s.ok());
  std::vector<float> logits = {0, 1};
  EXPECT_EQ((*s)->Sample(logits.data()), 0);
  ASSERT_TRUE((*s)->Accept(0).ok());
  EXPECT_EQ((*s)->Sample(logits.data()), -1);
}

}  // namespace
}  // namespace herd::engine
