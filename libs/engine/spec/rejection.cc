#include "libs/engine/spec/rejection.h"

#include <cmath>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace herd::engine::spec {
namespace {

// Uniform in [0, 1) from 24 random bits (the same on every platform, unlike
// std::uniform_real_distribution).
double Uniform(std::mt19937& rng) { return static_cast<double>(rng() >> 8) * (1.0 / 16777216.0); }

absl::StatusOr<double> Mass(const SparseDist& d, const char* what, size_t i) {
  double sum = 0;
  for (const TokenProb& t : d) {
    if (!std::isfinite(t.p) || t.p < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "]: probability ", t.p, " of token ", t.id));
    }
    sum += t.p;
  }
  if (!(sum > 0)) return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "]: the distribution has no mass"));
  return sum;
}

double ProbOf(const SparseDist& d, int32_t id) {
  double p = 0;
  for (const TokenProb& t : d) {
    if (t.id == id) p += t.p;
  }
  return p;
}

// Draws from d (total mass `sum`); falls back to the last positive entry on rounding.
int32_t Draw(const SparseDist& d, double sum, std::mt19937& rng) {
  const double u = Uniform(rng) * sum;
  double acc = 0;
  int32_t last = -1;
  for (const TokenProb& t : d) {
    if (t.p <= 0) continue;
    acc += t.p;
    last = t.id;
    if (u < acc) return t.id;
  }
  return last;
}

}  // namespace

absl::StatusOr<RejectionStepResult> RejectionStep(const SparseDist& p, int32_t x, const SparseDist& q,
                                                  std::mt19937& rng) {
  auto p_sum = Mass(p, "target", 0);
  if (!p_sum.ok()) return p_sum.status();
  const double p_x = ProbOf(p, x) / *p_sum;
  const bool point = q.empty();
  double q_sum = 1, q_x = 1;
  if (!point) {
    auto qs = Mass(q, "draft_q", 0);
    if (!qs.ok()) return qs.status();
    q_sum = *qs;
    q_x = ProbOf(q, x) / q_sum;
    if (!(q_x > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_q[0]: draft token ", x, " has probability 0 in its own distribution"));
    }
  }
  RejectionStepResult r;
  if (Uniform(rng) < p_x / q_x) {  // accept with probability min(1, p/q)
    r.accepted = true;
    r.token = x;
    return r;
  }
  // Rejected: draw from the residual max(0, p - q), normalized.
  std::unordered_map<int32_t, double> qm;
  if (point) {
    qm[x] = 1.0;
  } else {
    for (const TokenProb& t : q) qm[t.id] += t.p / q_sum;
  }
  SparseDist residual;
  residual.reserve(p.size());
  double res_sum = 0;
  for (const TokenProb& t : p) {
    auto qi = qm.find(t.id);
    const double v = static_cast<double>(t.p) / *p_sum - (qi == qm.end() ? 0.0 : qi->second);
    if (v > 0) {
      residual.push_back({t.id, static_cast<float>(v)});
      res_sum += v;
    }
  }
  // An empty residual means p == q (up to rounding): rejection had probability 0;
  // sample p itself.
  r.token = res_sum > 0 ? Draw(residual, res_sum, rng) : Draw(p, *p_sum, rng);
  return r;
}

absl::StatusOr<RejectionResult> RejectionSample(const std::vector<SparseDist>& target,
                                                const std::vector<int32_t>& draft,
                                                const std::vector<SparseDist>& draft_q, std::mt19937& rng) {
  const size_t n = draft.size();
  if (target.size() != n + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("target: ", target.size(), " distributions for a draft of ", n, " (need ", n + 1, ")"));
  }
  if (!draft_q.empty() && draft_q.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_q: ", draft_q.size(), " distributions for a draft of ", n, " (need 0 or ", n, ")"));
  }
  static const SparseDist kPoint;
  RejectionResult r;
  for (size_t i = 0; i < n; ++i) {
    auto step = RejectionStep(target[i], draft[i], draft_q.empty() ? kPoint : draft_q[i], rng);
    if (!step.ok()) {
      // Name the position of the whole draft.
      std::string msg(step.status().message());
      const size_t at = msg.find("[0]");
      if (at != std::string::npos) msg.replace(at, 3, absl::StrCat("[", i, "]"));
      return absl::InvalidArgumentError(msg);
    }
    if (!step->accepted) {
      r.token = step->token;
      return r;
    }
    ++r.n_accepted;
  }
  auto p_sum = Mass(target[n], "target", n);
  if (!p_sum.ok()) return p_sum.status();
  r.token = Draw(target[n], *p_sum, rng);
  return r;
}

SparseDist DistFromCandidates(const TokenDataArray& candidates) {
  SparseDist d;
  d.reserve(candidates.data.size());
  for (const TokenData& t : candidates.data) {
    if (t.p > 0) d.push_back({t.id, t.p});
  }
  return d;
}

SparseDist DistFromDense(const std::vector<float>& probs) {
  SparseDist d;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0) d.push_back({static_cast<int32_t>(i), probs[i]});
  }
  return d;
}

}  // namespace herd::engine::spec
