#include "libs/engine/spec/verify.h"

#include <cmath>
#include <limits>
#include <string>

#include "libs/base/log.h"
#include "libs/engine/spec/rejection.h"

namespace herd::engine::spec {
namespace {

// Top-n (id, logprob) of a candidate list sorted by probability (Sampler::Candidates).
std::vector<TokenLogprob> TopOf(const TokenDataArray& cands, int32_t n) {
  std::vector<TokenLogprob> top;
  for (const TokenData& c : cands.data) {
    if (static_cast<int32_t>(top.size()) >= n) break;
    if (c.p > 0) top.push_back({c.id, std::log(c.p)});
  }
  return top;
}

// The logprobs entry of token `t`: its top-n alternatives and its own log probability
// (looked up in the full candidate list when it is outside the top-n; the penalty
// history does not include t yet, as during Sample()).
TokenLogprobs LogprobsOf(Sampler& sampler, const float* logits, int32_t t, bool from_cands, TokenDataArray& cands,
                         int32_t n) {
  TokenLogprobs lp;
  lp.id = t;
  lp.top = from_cands ? TopOf(cands, n) : sampler.last_top_logprobs();
  lp.logprob = -std::numeric_limits<float>::infinity();
  for (const TokenLogprob& c : lp.top) {
    if (c.id == t) {
      lp.logprob = c.logprob;
      return lp;
    }
  }
  if (!from_cands) cands = sampler.Candidates(logits);
  for (const TokenData& c : cands.data) {
    if (c.id == t && c.p > 0) lp.logprob = std::log(c.p);
  }
  return lp;
}

}  // namespace

VerifyResult VerifyDraft(Sampler& sampler, const std::function<const float*(size_t)>& logits,
                         const std::vector<int32_t>& draft, const std::vector<SparseDist>& draft_q, std::mt19937& rng,
                         const tokenizer::Vocab& vocab, bool ignore_eos, int32_t n_logprobs) {
  VerifyResult r;
  const size_t n_draft = draft.size();
  const bool rejection = !draft_q.empty() && draft_q.size() >= n_draft && sampler.params().temp > 0.0f;
  for (size_t i = 0; i <= n_draft; ++i) {
    const float* lg = logits(i);
    int32_t t = -1;
    bool accepted = false;
    bool from_cands = false;  // t was drawn from `cands` (rejection path)
    TokenDataArray cands;
    if (rejection) {
      cands = sampler.Candidates(lg);
      const SparseDist p = DistFromCandidates(cands);
      if (i < n_draft) {
        auto st = RejectionStep(p, draft[i], draft_q[i], rng);
        if (st.ok()) {
          t = st->token;
          accepted = st->accepted;
          from_cands = true;
        } else {  // not expected (the caller validated q): fall back to sample and match
          HERD_LOG(Warning) << "verify: rejection step " << i << ": " << st.status();
        }
      } else {
        // The token after the whole draft: drawn from p_n with the same RNG, exactly as
        // RejectionSample draws it.
        auto st = RejectionSample({p}, {}, {}, rng);
        if (st.ok()) {
          t = st->token;
          from_cands = true;
        }
      }
    }
    if (!from_cands) {
      t = sampler.Sample(lg);
      accepted = i < n_draft && t == draft[i];
    }
    if (t < 0) {
      r.status = absl::FailedPreconditionError(sampler.status().ok()
                                                   ? "grammar: no token of the vocabulary can continue the grammar"
                                                   : std::string(sampler.status().message()));
      break;
    }
    if (n_logprobs > 0) r.logprobs.push_back(LogprobsOf(sampler, lg, t, from_cands, cands, n_logprobs));
    if (absl::Status as = sampler.Accept(t); !as.ok()) {
      r.status = absl::FailedPreconditionError(as.message());
      break;
    }
    r.tokens.push_back(t);
    if (!ignore_eos && vocab.IsEog(t)) {
      r.eos = true;
      break;
    }
    if (!accepted) break;
  }
  r.n_accepted = r.tokens.empty() ? 0 : static_cast<int32_t>(r.tokens.size()) - 1;
  return r;
}

}  // namespace herd::engine::spec
