#include "libs/engine/spec/adaptive.h"

#include <algorithm>
#include <cmath>

namespace herd::engine::spec {

AcceptanceEstimate::AcceptanceEstimate(double prior, double prior_weight, double decay)
    : accepted_(prior * prior_weight), trials_(prior_weight), decay_(decay) {}

void AcceptanceEstimate::Record(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  accepted = std::clamp(accepted, 0, drafted);
  // Each accepted token is a success; a rejection (accepted < drafted) one failure.
  accepted_ = accepted_ * decay_ + accepted;
  trials_ = trials_ * decay_ + accepted + (accepted < drafted ? 1 : 0);
  ++drafts_;
}

double AcceptanceEstimate::rate() const {
  if (trials_ <= 0) return 0;
  return std::clamp(accepted_ / trials_, 0.0, 0.999);
}

DraftOutcome OutcomeOf(int32_t drafted, int32_t accepted) {
  if (accepted >= drafted) return DraftOutcome::kAccepted;
  return accepted > 0 ? DraftOutcome::kPartial : DraftOutcome::kRejected;
}

DraftOutcome AfterPlainPass(DraftOutcome last, int32_t plain_passes) {
  const bool miss =
      last == DraftOutcome::kPartial || last == DraftOutcome::kRejected || last == DraftOutcome::kAfterMiss;
  return miss && plain_passes <= kAfterMissPasses ? DraftOutcome::kAfterMiss : DraftOutcome::kNone;
}

void OutcomeAcceptance::Record(DraftOutcome previous, int32_t drafted, int32_t accepted) {
  after_[Index(previous)].Record(drafted, accepted);
}

double OutcomeAcceptance::Adjust(double own, DraftOutcome last) const {
  if (last == DraftOutcome::kNone || last == DraftOutcome::kAccepted) return own;
  const AcceptanceEstimate& after = after_[Index(last)];
  return after.drafts() >= kMinDrafts ? std::min(own, after.rate()) : own;
}

int32_t DraftLengthFor(double acceptance, double per_token, double fixed, int32_t k_max) {
  if (k_max <= 0 || !(acceptance > 0)) return 0;
  const double a = std::min(acceptance, 1.0);
  per_token = std::max(0.0, per_token);
  fixed = std::max(0.0, fixed);
  int32_t best = 0;
  double best_rate = 1.0;  // k = 0: one token per unit of time
  double e = 1, term = 1;
  for (int32_t k = 1; k <= k_max; ++k) {
    term *= a;
    e += term;
    const double rate = e / (1 + fixed + k * per_token);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

double ExpectedTokens(double acceptance, int32_t k) {
  double sum = 0, term = 1;
  for (int32_t i = 0; i <= k; ++i) {
    sum += term;
    term *= acceptance;
  }
  return sum;
}

IterationCostModel::IterationCostModel(double prior_c_share, double decay)
    : prior_share_(std::clamp(prior_c_share, 0.0, 0.99)), decay_(decay) {}

void IterationCostModel::Observe(int32_t batch_tokens, double seconds) {
  if (batch_tokens < 1 || !(seconds > 0) || !std::isfinite(seconds)) return;
  const double x = batch_tokens, y = seconds;
  sw_ = sw_ * decay_ + 1;
  sx_ = sx_ * decay_ + x;
  sy_ = sy_ * decay_ + y;
  sxx_ = sxx_ * decay_ + x * x;
  sxy_ = sxy_ * decay_ + x * y;
  ++n_;
}

void IterationCostModel::Fit(double* t0, double* c) const {
  *t0 = 0;
  *c = 0;
  if (sw_ <= 0) return;
  const double mx = sx_ / sw_, my = sy_ / sw_;
  const double vxx = sxx_ / sw_ - mx * mx, vxy = sxy_ / sw_ - mx * my;
  // The prior: t(T) = t0 + c*T with c*1 / (t0 + c) = prior_share at the mean time per
  // pass, weighted as one pass at a batch size one away from the mean (ridge toward it).
  const double prior_c = my * prior_share_ / (1 + prior_share_ * (mx - 1));
  const double lambda = 1.0 / sw_;
  double slope = (vxy + lambda * prior_c) / (vxx + lambda);
  slope = std::max(0.0, slope);
  double intercept = my - slope * mx;
  if (intercept < 0) {  // all time per token: keep the fit through the mean
    intercept = 0;
    slope = my / mx;
  }
  *t0 = intercept;
  *c = slope;
}

double IterationCostModel::t0() const {
  double t0, c;
  Fit(&t0, &c);
  return t0;
}

double IterationCostModel::c() const {
  double t0, c;
  Fit(&t0, &c);
  return c;
}

double IterationCostModel::TokenShare(int32_t batch_tokens) const {
  if (n_ == 0) return prior_share_;
  double t0, c;
  Fit(&t0, &c);
  const double per_token = c * std::max(1, batch_tokens);
  const double total = t0 + per_token;
  return total > 0 ? std::clamp(per_token / total, 0.0, 1.0) : prior_share_;
}

double NormalizedDraftWait(const IterationCostModel& pass, int32_t n_drafting, double seconds) {
  if (pass.n() == 0 || !(seconds > 0)) return 0;
  const double t = pass.t0() + pass.c() * std::max(1, n_drafting);
  return t > 0 ? seconds / t : 0;
}

DraftCosts DraftCostsFor(const IterationCostModel& pass, const IterationCostModel& draft, int32_t n_decoding,
                         int32_t n_drafting) {
  DraftCosts costs;
  const int32_t T = std::max(1, n_decoding);
  const double share = (pass.t0() + pass.c() * T) / T;
  if (pass.n() == 0 || !(share > 0)) {
    costs.per_token = costs.verify_per_token = std::max(kMinDraftTokenShare, pass.TokenShare(T));
    return costs;
  }
  const int32_t n = std::max(1, n_drafting);
  const double t_n = pass.t0() + pass.c() * n;
  const bool measured = draft.n() > 0;
  const double d = measured ? draft.c() * t_n : 0, d0 = measured ? draft.t0() * t_n : 0;
  costs.per_token = std::max(kMinDraftTokenShare, (pass.c() + d / n) / share);
  costs.fixed = d0 / n / share;
  costs.verify_per_token = std::max(kMinDraftTokenShare, pass.c() / share);
  return costs;
}

void DraftWaitModel::Observe(int32_t longest, double normalized_wait, bool cold, int32_t n_drafting) {
  if (longest <= 0 || !(normalized_wait > 0)) return;
  (cold ? cold_ : n_drafting > 1 ? steady_many_ : steady_).Observe(longest, normalized_wait);
}

void DraftWaitModel::Planned(bool wait_stopped, bool drafted_by_costs) {
  if (probe_left_ > 0) {
    --probe_left_;
  } else if (drafted_by_costs) {
    wait_ = interval_ = kProbeInterval;
  } else if (wait_stopped && --wait_ <= 0) {
    probe_left_ = kProbePasses;
    interval_ = std::min(2 * interval_, kMaxProbeInterval);
    wait_ = interval_;
  }
}

SpeculationSwitch::SpeculationSwitch(double min_speedup, int32_t cooldown, double decay)
    : min_speedup_(min_speedup), decay_(decay), cooldown_(cooldown), next_cooldown_(cooldown) {}

double SpeculationSwitch::speedup() const {
  if (seconds_ <= 0 || plain_seconds_ <= 0 || plain_tokens_ <= 0) return 1.0;
  return (tokens_ / seconds_) / (plain_tokens_ / plain_seconds_);
}

void SpeculationSwitch::Observe(int32_t sequences, int32_t tokens_out, int32_t draft_tokens, double seconds,
                                double plain_seconds) {
  if (cooldown_left_ > 0) {
    // A batch of half or twice the sequences of the one that switched drafting off: that
    // verdict does not hold for it (drafts pay by batch size), so try again now.
    if (sequences > 0 && off_sequences_ > 0 && (2 * sequences <= off_sequences_ || sequences >= 2 * off_sequences_)) {
      cooldown_left_ = 1;
      next_cooldown_ = cooldown_;
    }
    if (--cooldown_left_ == 0) {  // try again from a clean slate
      tokens_ = seconds_ = plain_tokens_ = plain_seconds_ = 0;
      since_on_ = 0;
    }
    return;
  }
  if (draft_tokens <= 0 || sequences <= 0 || !(seconds > 0) || !(plain_seconds > 0)) return;
  tokens_ = tokens_ * decay_ + tokens_out;
  seconds_ = seconds_ * decay_ + seconds;
  plain_tokens_ = plain_tokens_ * decay_ + sequences;
  plain_seconds_ = plain_seconds_ * decay_ + plain_seconds;
  ++since_on_;
  // Judge only over a window of speculative passes (single passes are noisy).
  constexpr int32_t kMinPasses = 8;
  if (since_on_ < kMinPasses) return;
  if (speedup() >= min_speedup_) {
    next_cooldown_ = cooldown_;  // drafting pays again: the next off is a short one
    return;
  }
  cooldown_left_ = next_cooldown_;
  off_sequences_ = sequences;
  next_cooldown_ = static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(next_cooldown_) * 2,
                                                          static_cast<int64_t>(cooldown_) * kMaxCooldownFactor));
  ++offs_;
}

}  // namespace herd::engine::spec
