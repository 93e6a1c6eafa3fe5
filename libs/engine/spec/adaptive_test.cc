#include "libs/engine/spec/adaptive.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

#include "libs/engine/spec/drafter.h"

namespace herd::engine::spec {
namespace {

TEST(AcceptanceEstimate, ConvergesToTheGeometricRate) {
  // Drafts of 8 tokens accepting 0, 1 or 3 tokens (each twice) or all 8 (four times)
  // in every 10; without forgetting the estimate is the maximum-likelihood one of a
  // geometric acceptance: accepted / (accepted + rejections).
  AcceptanceEstimate a(0.5, 4, 1.0);
  for (int i = 0; i < 2000; ++i) {
    const int k = i % 10 < 2 ? 0 : (i % 10 < 4 ? 1 : (i % 10 < 6 ? 3 : 8));
    a.Record(8, k);
  }
  const double acc = 200 * (2 * 0 + 2 * 1 + 2 * 3 + 4 * 8), rej = 200 * 6;
  EXPECT_NEAR(a.rate(), acc / (acc + rej), 0.001);
  EXPECT_EQ(a.drafts(), 2000);
}

TEST(AcceptanceEstimate, AlwaysRejectedDraftsDriveTheRateToZero) {
  AcceptanceEstimate a;  // prior 0.6
  EXPECT_NEAR(a.rate(), 0.6, 1e-9);
  for (int i = 0; i < 40; ++i) a.Record(4, 0);
  EXPECT_LT(a.rate(), 0.01);
  a.Record(0, 0);  // an empty draft changes nothing
  EXPECT_EQ(a.drafts(), 40);
}

// The k of the most tokens per unit of time, E(k) / (1 + fixed + k * per_token),
// checked against the closed form by brute force in the test.
TEST(DraftLengthFor, MostTokensPerSecond) {
  auto best = [](double a, double u, double f, int32_t k_max) {
    int32_t bk = 0;
    double br = 1;
    for (int32_t k = 1; k <= k_max; ++k) {
      const double e = (1 - std::pow(a, k + 1)) / (1 - a);
      if (e / (1 + f + k * u) > br) br = e / (1 + f + k * u), bk = k;
    }
    return bk;
  };
  // a = 0.86 with a draft token that costs 0.35 of a pass: 3 (E = 3.24 tokens in 2.05
  // pass-times, 1.58x; 4 gives 1.576x), not the 16 a free drafter would get.
  EXPECT_EQ(DraftLengthFor(0.86, 0.35, 0.0, 16), 3);
  EXPECT_EQ(DraftLengthFor(0.86, 0.0, 0.0, 16), 16);  // free: as long as allowed
  EXPECT_EQ(DraftLengthFor(0.86, 0.35, 0.0, 3), 3);   // capped
  EXPECT_EQ(DraftLengthFor(0.8, 0.9, 0.0, 16), 0);    // no draft pays
  EXPECT_EQ(DraftLengthFor(0.0, 0.01, 0.0, 16), 0);   // never accepted
  EXPECT_EQ(DraftLengthFor(0.5, 0.5, 0.0, 16), 0);    // 1.5 / 1.5: a tie is no draft
  EXPECT_EQ(DraftLengthFor(0.5, 0.49, 0.0, 16), 1);
  // A fixed cost per call: drafting must cover it, and then drafts longer.
  EXPECT_EQ(DraftLengthFor(0.6, 0.1, 2.0, 16), 0);
  EXPECT_GT(DraftLengthFor(0.9, 0.1, 0.5, 16), DraftLengthFor(0.9, 0.1, 0.0, 16));
  for (double a : {0.3, 0.6, 0.8, 0.95, 0.99}) {
    for (double u : {0.02, 0.1, 0.3, 0.7}) {
      for (double f : {0.0, 0.2, 1.0}) {
        EXPECT_EQ(DraftLengthFor(a, u, f, 16), best(a, u, f, 16)) << a << " " << u << " " << f;
      }
    }
  }
}

TEST(DraftOutcome, OutcomesAndRunsOfMisses) {
  EXPECT_EQ(OutcomeOf(4, 4), DraftOutcome::kAccepted);
  EXPECT_EQ(OutcomeOf(4, 2), DraftOutcome::kPartial);
  EXPECT_EQ(OutcomeOf(4, 0), DraftOutcome::kRejected);
  // Passes without a draft after a miss stay in its run for kAfterMissPasses passes.
  DraftOutcome o = DraftOutcome::kRejected;
  for (int32_t p = 1; p <= kAfterMissPasses; ++p) {
    o = AfterPlainPass(o, p);
    EXPECT_EQ(o, DraftOutcome::kAfterMiss) << p;
  }
  EXPECT_EQ(AfterPlainPass(o, kAfterMissPasses + 1), DraftOutcome::kNone);
  EXPECT_EQ(AfterPlainPass(DraftOutcome::kPartial, 1), DraftOutcome::kAfterMiss);
  EXPECT_EQ(AfterPlainPass(DraftOutcome::kAccepted, 1), DraftOutcome::kNone);
  EXPECT_EQ(AfterPlainPass(DraftOutcome::kNone, 1), DraftOutcome::kNone);
}

TEST(OutcomeAcceptance, ADraftAfterAMissIsPlannedWithTheAcceptanceAfterMisses) {
  // Runs of acceptance: drafts after fully accepted ones are accepted, drafts after a
  // rejected one are rejected at their first token 3 times in 4.
  OutcomeAcceptance o;
  const double own = 0.85;
  // Before kMinDrafts drafts after a miss, the sequence's own estimate stands.
  for (int64_t i = 0; i + 1 < OutcomeAcceptance::kMinDrafts; ++i) o.Record(DraftOutcome::kRejected, 4, 0);
  EXPECT_DOUBLE_EQ(o.Adjust(own, DraftOutcome::kRejected), own);
  for (int i = 0; i < 40; ++i) {
    o.Record(DraftOutcome::kAccepted, 4, 4);
    o.Record(DraftOutcome::kRejected, 4, i % 4 == 0 ? 4 : 0);
  }
  EXPECT_EQ(o.drafts(DraftOutcome::kRejected), 40 + OutcomeAcceptance::kMinDrafts - 1);
  const double after_miss = o.Adjust(own, DraftOutcome::kRejected);
  EXPECT_LT(after_miss, 0.6);
  EXPECT_GT(after_miss, 0.3);
  // After a fully accepted draft (or none) the sequence's own estimate stands, and the
  // pooled rate never raises it.
  EXPECT_DOUBLE_EQ(o.Adjust(own, DraftOutcome::kAccepted), own);
  EXPECT_DOUBLE_EQ(o.Adjust(own, DraftOutcome::kNone), own);
  EXPECT_DOUBLE_EQ(o.Adjust(0.1, DraftOutcome::kRejected), 0.1);
  // At a cost where a draft at the sequence's own acceptance pays, the one after a miss
  // is shorter.
  EXPECT_GT(DraftLengthFor(own, 0.15, 0.1, 16), DraftLengthFor(after_miss, 0.15, 0.1, 16));
}

TEST(ExpectedTokens, GeometricSum) {
  EXPECT_DOUBLE_EQ(ExpectedTokens(0.5, 0), 1.0);
  EXPECT_DOUBLE_EQ(ExpectedTokens(0.5, 3), 1.875);
  EXPECT_NEAR(ExpectedTokens(0.8, 10), (1 - std::pow(0.8, 11)) / 0.2, 1e-12);
}

TEST(IterationCostModel, FitsFixedAndPerTokenTime) {
  IterationCostModel m(0.05, 1.0);
  EXPECT_DOUBLE_EQ(m.TokenShare(1), 0.05);  // the prior before any data
  // t(T) = 10 ms + 0.5 ms * T
  for (int rep = 0; rep < 50; ++rep) {
    for (int t : {1, 2, 4, 8, 16, 32}) m.Observe(t, 0.010 + 0.0005 * t);
  }
  EXPECT_NEAR(m.t0(), 0.010, 2e-4);
  EXPECT_NEAR(m.c(), 0.0005, 2e-5);
  EXPECT_NEAR(m.TokenShare(20), 0.010 / 0.020, 0.01);
  EXPECT_LT(m.TokenShare(1), m.TokenShare(64));
}

TEST(IterationCostModel, OneBatchSizeFallsBackToThePrior) {
  IterationCostModel m(0.05, 0.98);
  for (int i = 0; i < 100; ++i) m.Observe(4, 0.02);
  // No spread in T: the slope is the prior's, the fit still passes through the mean.
  EXPECT_NEAR(m.t0() + 4 * m.c(), 0.02, 1e-9);
  EXPECT_NEAR(m.TokenShare(1), 0.05, 1e-3);
  m.Observe(0, 1.0);   // ignored
  m.Observe(4, -1.0);  // ignored
  EXPECT_EQ(m.n(), 100);
}

// Draft waits measured while one sequence drafts price a full batch's drafts by the
// target's own batch scaling: a draft model's step over 16 sequences costs what the
// target's pass over 16 tokens costs against its one-token pass, not one sequence's step.
TEST(DraftCostsFor, DraftWaitsScaleWithTheDraftingBatch) {
  IterationCostModel pass(0.05, 1.0), draft(0.9, 1.0);
  // t(T) = 10 ms + 1 ms * T; one sequence's drafts of k tokens wait 2 ms + 5 ms * k.
  for (int rep = 0; rep < 50; ++rep) {
    for (int t : {1, 2, 4, 8, 16}) pass.Observe(t, 0.010 + 0.001 * t);
  }
  for (int rep = 0; rep < 50; ++rep) {
    for (int k : {1, 2, 4, 8}) draft.Observe(k, NormalizedDraftWait(pass, 1, 0.002 + 0.005 * k));
  }
  const DraftCosts one = DraftCostsFor(pass, draft, 1, 1);
  EXPECT_NEAR(one.per_token, (1.0 + 5.0) / 11.0, 0.01);
  EXPECT_NEAR(one.fixed, 2.0 / 11.0, 0.01);
  // 16 sequences: a share of 26/16 ms each, a draft step of 5/11 * 26 ms for all 16.
  const DraftCosts full = DraftCostsFor(pass, draft, 16, 16);
  EXPECT_NEAR(full.per_token, (1.0 + 5.0 / 11.0 * 26.0 / 16.0) / (26.0 / 16.0), 0.01);
  EXPECT_NEAR(full.fixed, 2.0 / 11.0, 0.01);
  // At acceptance 0.9 one sequence drafts; a full batch does not (priced as one
  // sequence's seconds per draft step shared by 16, per_token 0.81, it would).
  EXPECT_GT(DraftLengthFor(0.9, one.per_token, one.fixed, 16), 0);
  EXPECT_EQ(DraftLengthFor(0.9, full.per_token, full.fixed, 16), 0);
  EXPECT_GT(DraftLengthFor(0.9, (1.0 + 5.0 / 16) / (26.0 / 16.0), 2.0 / 16 / (26.0 / 16.0), 16), 0);
  // Two of 16 sequences drafting: the draft step is the target's at 2 tokens, shared by 2.
  const DraftCosts two = DraftCostsFor(pass, draft, 16, 2);
  EXPECT_NEAR(two.per_token, (1.0 + 5.0 / 11.0 * 12.0 / 2.0) / (26.0 / 16.0), 0.01);
  // No pass yet: the prior's token share; no draft yet: drafting looks free.
  IterationCostModel none;
  EXPECT_NEAR(DraftCostsFor(none, draft, 4, 4).per_token, 0.05, 1e-9);
  EXPECT_EQ(NormalizedDraftWait(none, 1, 0.01), 0.0);
  EXPECT_NEAR(DraftCostsFor(pass, none, 16, 16).per_token, 1.0 / (26.0 / 16.0), 0.01);
  EXPECT_EQ(DraftCostsFor(pass, none, 16, 16).fixed, 0.0);
  // verify_per_token: the pass's own part of per_token, whatever the draft costs.
  EXPECT_NEAR(one.verify_per_token, 1.0 / 11.0, 0.01);
  EXPECT_NEAR(full.verify_per_token, 1.0 / (26.0 / 16.0), 0.01);
}

// A drafter slow after a pause (its catch-up) and fast while it drafts every pass: its
// cold waits price drafting only until a steady wait is measured, and then not at all.
TEST(DraftWaitModel, SteadyWaitsReplaceColdOnes) {
  IterationCostModel pass(0.05, 1.0);
  for (int rep = 0; rep < 50; ++rep) {
    for (int t : {1, 2, 4, 8}) pass.Observe(t, 0.006 + 0.0003 * t);
  }
  DraftWaitModel wait;
  EXPECT_EQ(wait.fit().n(), 0);  // nothing measured: drafting looks free
  // A cold 2-token draft that waited 20 ms (three passes' time): no draft pays.
  wait.Observe(2, NormalizedDraftWait(pass, 1, 0.020), /*cold=*/true);
  DraftCosts c = DraftCostsFor(pass, wait.fit(), 1, 1);
  EXPECT_EQ(DraftLengthFor(0.95, c.per_token, c.fixed, 16), 0);
  // Drafting free, it would: the wait alone stops it (the scheduler probes).
  EXPECT_GT(DraftLengthFor(0.95, c.verify_per_token, 0, 16), 0);
  // Steady passes drafting 2-3 tokens in 1-1.5 ms: long drafts pay, and further cold
  // waits no longer count.
  for (int rep = 0; rep < 4; ++rep) {
    wait.Observe(2, NormalizedDraftWait(pass, 1, 0.0010), false);
    wait.Observe(3, NormalizedDraftWait(pass, 1, 0.0015), false);
  }
  c = DraftCostsFor(pass, wait.fit(), 1, 1);
  EXPECT_GE(DraftLengthFor(0.95, c.per_token, c.fixed, 16), 4);
  for (int rep = 0; rep < 8; ++rep) wait.Observe(4, NormalizedDraftWait(pass, 1, 0.040), true);
  const DraftCosts after = DraftCostsFor(pass, wait.fit(), 1, 1);
  EXPECT_EQ(after.per_token, c.per_token);
  EXPECT_EQ(after.fixed, c.fixed);
  // Several sequences drafting: one sequence's steady waits do not price them; the cold
  // fit does until a steady pass of several is measured.
  EXPECT_EQ(&wait.fit(16), &wait.fit(2));
  EXPECT_GT(wait.fit(16).c() + wait.fit(16).t0(), 10 * (wait.fit(1).c() + wait.fit(1).t0()));
  wait.Observe(2, NormalizedDraftWait(pass, 16, 0.004), false, 16);
  EXPECT_EQ(wait.fit(16).n(), 1);
  EXPECT_NE(&wait.fit(16), &wait.fit(1));
  // Ignored: no draft, or no wait.
  const int64_t n = wait.fit().n();
  wait.Observe(0, 0.5, false);
  wait.Observe(3, 0.0, false);
  EXPECT_EQ(wait.fit().n(), n);
}

// Probes: after kProbeInterval plans stopped by the wait alone, kProbePasses plans
// probe; the interval doubles while probes end stopped again (up to kMaxProbeInterval)
// and returns to kProbeInterval once drafts go out by the costs.
TEST(DraftWaitModel, ProbesBackOffWhileTheWaitKeepsStoppingDrafts) {
  DraftWaitModel m;
  // Plans until a probe starts, then the probe's length, counted plan by plan.
  const auto next_probe = [&m](bool* probed) {
    int32_t plans = 0;
    while (!m.probing() && plans < 10000) {
      m.Planned(/*wait_stopped=*/true, /*drafted_by_costs=*/false);
      ++plans;
    }
    *probed = m.probing();
    int32_t probe = 0;
    while (m.probing()) {
      m.Planned(true, false);
      ++probe;
    }
    EXPECT_EQ(probe, DraftWaitModel::kProbePasses);
    return plans;
  };
  bool probed = false;
  EXPECT_EQ(next_probe(&probed), DraftWaitModel::kProbeInterval);
  EXPECT_TRUE(probed);
  EXPECT_EQ(next_probe(&probed), 2 * DraftWaitModel::kProbeInterval);
  EXPECT_EQ(next_probe(&probed), 4 * DraftWaitModel::kProbeInterval);
  for (int i = 0; i < 8; ++i) next_probe(&probed);
  EXPECT_EQ(next_probe(&probed), DraftWaitModel::kMaxProbeInterval);
  // Plans where nothing is stopped by the wait do not count toward a probe.
  const int32_t left = m.next_probe_in();
  for (int i = 0; i < 100; ++i) m.Planned(false, false);
  EXPECT_EQ(m.next_probe_in(), left);
  EXPECT_FALSE(m.probing());
  // Drafts by the costs: back to the short interval.
  m.Planned(false, true);
  EXPECT_EQ(m.next_probe_in(), DraftWaitModel::kProbeInterval);
  EXPECT_EQ(next_probe(&probed), DraftWaitModel::kProbeInterval);
}

TEST(SpeculationSwitch, TurnsOffWhenSlowerAndRetriesAfterCooldown) {
  SpeculationSwitch sw(1.0, 10, 0.9);
  EXPECT_TRUE(sw.Enabled());
  // Passes with drafts that yield one token per sequence and take twice as long.
  int passes = 0;
  while (sw.Enabled() && passes < 100) {
    sw.Observe(4, 4, 8, 0.02, 0.01);
    ++passes;
  }
  EXPECT_FALSE(sw.Enabled());
  EXPECT_EQ(passes, 8);  // judged after the minimum window
  EXPECT_NEAR(sw.speedup(), 0.5, 1e-9);
  EXPECT_EQ(sw.offs(), 1);
  for (int i = 0; i < 9; ++i) sw.Observe(4, 4, 0, 0.01, 0.01);
  EXPECT_FALSE(sw.Enabled());
  sw.Observe(4, 4, 0, 0.01, 0.01);
  EXPECT_TRUE(sw.Enabled());
  EXPECT_DOUBLE_EQ(sw.speedup(), 1.0);  // a clean slate
}

// Retries that do not pay double the cooldown (10, 20, 40, 80, then 80: 8x the base);
// a window that pays brings it back to the base.
TEST(SpeculationSwitch, CooldownDoublesWhileRetriesDoNotPay) {
  SpeculationSwitch sw(1.0, 10, 0.9);
  auto slow_until_off = [&sw] {
    int passes = 0;
    while (sw.Enabled() && passes < 100) {
      sw.Observe(4, 4, 8, 0.02, 0.01);
      ++passes;
    }
    return passes;
  };
  auto plain_until_on = [&sw] {
    int passes = 0;
    while (!sw.Enabled() && passes < 1000) {
      sw.Observe(4, 4, 0, 0.01, 0.01);
      ++passes;
    }
    return passes;
  };
  for (int want : {10, 20, 40, 80, 80}) {
    EXPECT_EQ(slow_until_off(), 8);
    EXPECT_EQ(plain_until_on(), want);
  }
  EXPECT_EQ(sw.offs(), 5);
  // A retry that pays: the next off has the base cooldown again.
  for (int i = 0; i < 8; ++i) sw.Observe(2, 6, 8, 0.012, 0.01);
  EXPECT_TRUE(sw.Enabled());
  EXPECT_EQ(sw.next_cooldown(), 10);
  while (sw.Enabled()) sw.Observe(4, 4, 8, 0.05, 0.01);
  EXPECT_EQ(plain_until_on(), 10);
}

// Switched off at 16 sequences, the switch tries again as soon as the batch halves (one
// stream after a burst), with the base cooldown; batches near 16 keep the cooldown.
TEST(SpeculationSwitch, ABatchOfHalfOrTwiceTheSequencesEndsTheCooldown) {
  SpeculationSwitch sw(1.0, 10, 0.9);
  for (int i = 0; i < 20 && sw.Enabled(); ++i) sw.Observe(16, 16, 32, 0.05, 0.02);
  ASSERT_FALSE(sw.Enabled());
  for (int i = 0; i < 9; ++i) sw.Observe(12, 12, 0, 0.02, 0.02);  // a similar batch
  EXPECT_FALSE(sw.Enabled());
  sw.Observe(8, 8, 0, 0.01, 0.01);  // half: retry now
  EXPECT_TRUE(sw.Enabled());
  EXPECT_EQ(sw.next_cooldown(), 10);
  EXPECT_DOUBLE_EQ(sw.speedup(), 1.0);
  // Off again at one stream; 16 sequences end that cooldown too.
  for (int i = 0; i < 20 && sw.Enabled(); ++i) sw.Observe(1, 1, 4, 0.02, 0.01);
  ASSERT_FALSE(sw.Enabled());
  sw.Observe(1, 1, 0, 0.01, 0.01);
  EXPECT_FALSE(sw.Enabled());
  sw.Observe(2, 2, 0, 0.01, 0.01);
  EXPECT_TRUE(sw.Enabled());
}

TEST(SpeculationSwitch, StaysOnWhileDraftsPay) {
  SpeculationSwitch sw;
  for (int i = 0; i < 200; ++i) sw.Observe(2, 6, 8, 0.012, 0.01);  // 3 tokens/seq at 1.2x time
  EXPECT_TRUE(sw.Enabled());
  EXPECT_NEAR(sw.speedup(), 2.5, 1e-9);
  EXPECT_EQ(sw.offs(), 0);
  sw.Observe(2, 2, 0, 0.01, 0.01);  // plain passes do not count
  EXPECT_NEAR(sw.speedup(), 2.5, 1e-9);
}

class FixedSource : public DraftSource {
 public:
  FixedSource(std::vector<int32_t> draft, DraftBatcher* b) : draft_(std::move(draft)), b_(b) {}
  void Append(const std::vector<int32_t>&) override {}
  absl::StatusOr<DraftResult> Propose(int32_t n_max) override {
    ++proposes;
    DraftResult r;
    r.tokens.assign(draft_.begin(), draft_.begin() + std::min<size_t>(draft_.size(), n_max));
    return r;
  }
  void Accept(int32_t) override {}
  SpecStats Stats() const override { return {}; }
  DraftBatcher* batcher() override { return b_; }
  int proposes = 0;

 private:
  std::vector<int32_t> draft_;
  DraftBatcher* b_;
};

class CountingBatcher : public DraftBatcher {
 public:
  void ProposeBatch(const std::vector<DraftJob*>& jobs) override {
    ++calls;
    sizes.push_back(jobs.size());
    for (DraftJob* j : jobs) j->result = absl::UnavailableError("batched");
  }
  int calls = 0;
  std::vector<size_t> sizes;
};

TEST(ProposeAll, GroupsJobsByBatcher) {
  CountingBatcher b1, b2;
  FixedSource a({1, 2, 3}, nullptr), b({4}, &b1), c({5}, &b2), d({6}, &b1);
  std::vector<DraftJob> jobs(4);
  jobs[0].source = &a;
  jobs[0].n_max = 2;
  jobs[1].source = &b;
  jobs[2].source = &c;
  jobs[3].source = &d;
  ProposeAll(&jobs);
  EXPECT_EQ(a.proposes, 1);
  ASSERT_TRUE(jobs[0].result.ok());
  EXPECT_EQ(jobs[0].result->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(b1.calls, 1);
  EXPECT_EQ(b1.sizes, std::vector<size_t>{2});
  EXPECT_EQ(b2.calls, 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(jobs[i].result.status().message(), "batched");
  EXPECT_EQ(b.proposes + c.proposes + d.proposes, 0);
}

}  // namespace
}  // namespace herd::engine::spec
