#include "libs/engine/sampler_chain.h"

#include <cfloat>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/engine/sampling.h"

namespace herd::engine {
namespace {

std::vector<std::string> Names(const SamplerChain& c) {
  std::vector<std::string> n;
  for (size_t i = 0; i < c.size(); ++i) n.push_back(c.stage(i).Name());
  return n;
}

std::set<int32_t> Ids(const TokenDataArray& a) {
  std::set<int32_t> ids;
  for (const TokenData& t : a.data) ids.insert(t.id);
  return ids;
}

std::vector<float> RandomLogits(std::mt19937* g, int n) {
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& x : l) x = u(*g);
  return l;
}

TEST(SamplerChainTest, DefaultChainIsLlamaCppOrder) {
  SamplingParams p;
  EXPECT_EQ(Names(DefaultSamplerChain(p, 10)),
            (std::vector<std::string>{"logit-bias", "penalties", "top-k", "top-p", "min-p", "temp", "dist"}));
  p.temp = 0.0f;
  EXPECT_EQ(Names(DefaultSamplerChain(p, 10)), (std::vector<std::string>{"logit-bias", "penalties", "greedy"}));
}

// The chain order matters: min-p before temperature keeps more than after (temperature
// 0.5 doubles the logit gaps).
// GreedyArgmax (the plain-greedy fast path of Sampler::Sample) selects what the greedy
// chain selects from the full candidate array, NaN / +-inf / FLT_MAX / ties included.
TEST(SamplerChainTest, GreedyArgmaxEqualsGreedyChain) {
  std::mt19937 g(11);
  const float specials[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 4.0f, 0.0f};
  std::uniform_int_distribution<int> pick(0, 6), coin(0, 9);
  SamplingParams p;
  p.temp = 0.0f;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + trial % 40;
    std::vector<float> logits = RandomLogits(&g, n);
    for (float& x : logits) {
      if (coin(g) < 3) x = specials[pick(g)];
    }
    SamplerChain chain = DefaultSamplerChain(p, n);
    const int32_t want = chain.Sample(logits.data(), n);
    ASSERT_EQ(GreedyArgmax(logits.data(), n), want) << "trial " << trial;
    Sampler s(p, n);
    ASSERT_EQ(s.Sample(logits.data()), want) << "trial " << trial;
  }
  EXPECT_EQ(GreedyArgmax(nullptr, 0), -1);
  const std::vector<float> all_nan(5, NAN);
  EXPECT_EQ(GreedyArgmax(all_nan.data(), 5), 0);
  const std::vector<float> inf_after_max = {1.0f, FLT_MAX, INFINITY};
  EXPECT_EQ(GreedyArgmax(inf_after_max.data(), 3), 1);  // +inf reads as FLT_MAX: first wins
}

TEST(SamplerChainTest, CustomOrder) {
  const std::vector<float> logits = {0.0f, -1.0f, -2.0f, -3.0f};
  TokenDataArray a, b;
  FillCandidates(logits.data(), 4, &a);
  FillCandidates(logits.data(), 4, &b);
  SamplerChain min_p_first;
  min_p_first.Add(std::make_unique<MinPSampler>(0.3f));
  min_p_first.Add(std::make_unique<TemperatureSampler>(0.5f));
  SamplerChain temp_first;
  temp_first.Add(std::make_unique<TemperatureSampler>(0.5f));
  temp_first.Add(std::make_unique<MinPSampler>(0.3f));
  min_p_first.Apply(&a);
  temp_first.Apply(&b);
  EXPECT_EQ(Ids(a), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(Ids(b), (std::set<int32_t>{0}));
  EXPECT_EQ(a.selected, -1);  // no selecting stage

  // A chain without a selecting stage samples nothing.
  EXPECT_EQ(min_p_first.Sample(logits.data(), 4), -1);
  // top-k 1 then dist is the argmax whatever the seed.
  SamplerChain top1;
  top1.Add(std::make_unique<TopKSampler>(1));
  top1.Add(std::make_unique<DistSampler>(7));
  EXPECT_EQ(top1.Sample(logits.data(), 4), 0);
  EXPECT_EQ(top1.Seed(), std::optional<uint32_t>(7));
  EXPECT_EQ(min_p_first.Seed(), std::nullopt);
}

TEST(SamplerChainTest, DefaultChainMatchesSampler) {
  std::mt19937 g(3);
  SamplingParams p;
  p.seed = 99;
  p.repeat_penalty = 1.2f;
  p.logit_bias = {{3, 1.5f}};
  Sampler sampler(p, 50);
  SamplerChain chain = DefaultSamplerChain(p, 50);
  for (int i = 0; i < 40; ++i) {
    const std::vector<float> logits = RandomLogits(&g, 50);
    const int32_t a = sampler.Sample(logits.data());
    const int32_t b = chain.Sample(logits.data(), 50);
    ASSERT_EQ(a, b) << "step " << i;
    ASSERT_TRUE(sampler.Accept(a).ok());
    chain.Accept(b);
  }
}

TEST(SamplerChainTest, ResetRestartsTheDrawsAndClearsHistory) {
  std::mt19937 g(5);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 30; ++i) steps.push_back(RandomLogits(&g, 64));
  SamplingParams p;
  p.seed = 1234;
  p.presence_penalty = 2.0f;
  SamplerChain chain = DefaultSamplerChain(p, 64);
  auto run = [&] {
    std::vector<int32_t> out;
    for (const auto& l : steps) {
      out.push_back(chain.Sample(l.data(), 64));
      chain.Accept(out.back());
    }
    return out;
  };
  const std::vector<int32_t> first = run();
  auto& pen = static_cast<PenaltiesSampler&>(chain.stage(1));
  EXPECT_GT(pen.Count(first.back()), 0);
  chain.Reset();
  EXPECT_EQ(pen.Count(first.back()), 0);
  EXPECT_EQ(run(), first);
}

TEST(SamplerChainTest, CloneReproducesTheSameDraws) {
  std::mt19937 g(11);
  SamplingParams p;
  p.seed = 42;
  p.frequency_penalty = 0.5f;
  SamplerChain chain = DefaultSamplerChain(p, 100);
  for (int i = 0; i < 10; ++i) {
    const std::vector<float> l = RandomLogits(&g, 100);
    chain.Accept(chain.Sample(l.data(), 100));
  }
  SamplerChain copy = chain.Clone();  // same RNG position and penalty history
  for (int i = 0; i < 20; ++i) {
    const std::vector<float> l = RandomLogits(&g, 100);
    const int32_t a = chain.Sample(l.data(), 100);
    const int32_t b = copy.Sample(l.data(), 100);
    ASSERT_EQ(a, b) << "step " << i;
    chain.Accept(a);
    copy.Accept(b);
  }
  // The copy is independent: each has its own RNG (advancing one does not move the other).
  SamplerChain c2 = chain.Clone();
  const std::vector<float> flat(100, 0.0f);
  std::vector<int32_t> x, y;
  for (int i = 0; i < 8; ++i) x.push_back(chain.Sample(flat.data(), 100));
  for (int i = 0; i < 8; ++i) y.push_back(c2.Sample(flat.data(), 100));
  EXPECT_EQ(x, y);

  // Sampler copies clone their chain too.
  SamplingParams sp;
  sp.seed = 8;
  Sampler s1(sp, 100);
  Sampler s2 = s1;
  for (int i = 0; i < 10; ++i) {
    const std::vector<float> l = RandomLogits(&g, 100);
    ASSERT_EQ(s1.Sample(l.data()), s2.Sample(l.data()));
  }
}

TEST(SamplerChainTest, AcceptFeedsPenalties) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  SamplerChain chain;
  chain.Add(std::make_unique<PenaltiesSampler>(4, /*last_n=*/1, /*repeat=*/1.0f, /*freq=*/0.0f, /*present=*/5.0f));
  chain.Add(std::make_unique<GreedySampler>());
  EXPECT_EQ(chain.Sample(logits.data(), 4), 2);
  chain.Accept(2);
  EXPECT_EQ(chain.Sample(logits.data(), 4), 1);  // 3 - 5 < 2
  EXPECT_FLOAT_EQ(chain.last_candidates().data[2].logit, -2.0f);
  chain.Accept(1);  // window of 1: token 2 leaves it
  EXPECT_EQ(chain.Sample(logits.data(), 4), 2);

  // last_n = 0: Accept records nothing.
  SamplerChain off;
  off.Add(std::make_unique<PenaltiesSampler>(4, 0, 1.0f, 0.0f, 5.0f));
  off.Add(std::make_unique<GreedySampler>());
  off.Accept(2);
  EXPECT_EQ(off.Sample(logits.data(), 4), 2);
}

TEST(SamplerChainTest, LogitBiasAndGreedyTies) {
  const std::vector<float> logits = {1.0f, 1.0f, 0.0f};
  SamplerChain chain;
  chain.Add(std::make_unique<LogitBiasSampler>(3, std::vector<std::pair<int32_t, float>>{{0, -INFINITY}, {7, 9.0f}}));
  chain.Add(std::make_unique<GreedySampler>());
  EXPECT_EQ(chain.Sample(logits.data(), 3), 1);  // 0 banned; id 7 is outside the vocabulary
  SamplerChain tie;
  tie.Add(std::make_unique<GreedySampler>());
  EXPECT_EQ(tie.Sample(logits.data(), 3), 0);  // lowest id on ties
  EXPECT_EQ(tie.Sample(logits.data(), 0), -1);
}

}  // namespace
}  // namespace herd::engine
