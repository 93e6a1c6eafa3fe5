#include "libs/engine/sampling.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace herd::engine {
namespace {

absl::Status FieldError(const char* field, const std::string& want, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid sampling parameter ", field, ": must be ", want, ", got ", got));
}

// "invalid sampling parameter grammar: <parser message without its "grammar: ">".
absl::Status GrammarError(const absl::Status& parse) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid sampling parameter grammar: ", absl::StripPrefix(parse.message(), "grammar: ")));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int32_t n_vocab) {
  if (!std::isfinite(p.temp) || p.temp < 0.0f) {
    return FieldError("temp", "a finite number >= 0 (0 = greedy)", p.temp);
  }
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) {
    return FieldError("top_p", "in [0, 1] (1 = disabled)", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return FieldError("min_p", "in [0, 1] (0 = disabled)", p.min_p);
  }
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
    return FieldError("repeat_penalty", "a finite number > 0 (1 = disabled)", p.repeat_penalty);
  }
  if (!std::isfinite(p.frequency_penalty)) {
    return FieldError("frequency_penalty", "finite", p.frequency_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) {
    return FieldError("presence_penalty", "finite", p.presence_penalty);
  }
  if (p.penalty_last_n < -1) {
    return FieldError("penalty_last_n", ">= -1 (0 = disabled, -1 = whole context)", p.penalty_last_n);
  }
  if (p.n_probs < 0) return FieldError("n_probs", ">= 0", p.n_probs);
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0 || (n_vocab >= 0 && id >= n_vocab)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid sampling parameter logit_bias[", i, "]: token id ", id,
          n_vocab >= 0 ? absl::StrCat(" is outside the vocabulary [0, ", n_vocab, ")") : std::string(" is negative")));
    }
    if (std::isnan(bias) || bias == INFINITY) {
      return absl::InvalidArgumentError(absl::StrCat("invalid sampling parameter logit_bias[", i,
                                                     "]: bias must be a finite number or -inf (got ", bias, ")"));
    }
  }
  if (!p.grammar.empty()) {
    auto g = grammar::Grammar::Parse(p.grammar);
    if (!g.ok()) return GrammarError(g.status());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Sampler

SamplerChain DefaultSamplerChain(const SamplingParams& params, int32_t n_vocab) {
  SamplerChain chain;
  chain.Add(std::make_unique<LogitBiasSampler>(n_vocab, params.logit_bias));
  chain.Add(std::make_unique<PenaltiesSampler>(n_vocab, params.penalty_last_n, params.repeat_penalty,
                                               params.frequency_penalty, params.presence_penalty));
  if (params.temp <= 0.0f) {
    chain.Add(std::make_unique<GreedySampler>());
    return chain;
  }
  chain.Add(std::make_unique<TopKSampler>(params.top_k));
  chain.Add(std::make_unique<TopPSampler>(params.top_p, 1));
  chain.Add(std::make_unique<MinPSampler>(params.min_p, 1));
  chain.Add(std::make_unique<TemperatureSampler>(params.temp));
  chain.Add(std::make_unique<DistSampler>(params.seed));
  return chain;
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(std::max<int32_t>(n_vocab, 0)) {
  if (params_.penalty_last_n < -1) params_.penalty_last_n = 0;
  if (params_.n_probs < 0) params_.n_probs = 0;
  chain_ = DefaultSamplerChain(params_, n_vocab_);
  const bool penalties =
      params_.penalty_last_n != 0 && !(params_.repeat_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
                                       params_.presence_penalty == 0.0f);  // PenaltiesSampler::Active
  plain_greedy_ =
      IsGreedy() && params_.logit_bias.empty() && !penalties && params_.n_probs == 0 && params_.grammar.empty();
  fast_top_k_ =
      !IsGreedy() && params_.logit_bias.empty() && !penalties && params_.top_k > 0 && params_.top_k < n_vocab_;
  if (!chain_.Seed()) seed_cur_ = ResolveSeed(params_.seed);
  if (!params_.grammar.empty()) {
    status_ = absl::FailedPreconditionError("sampler: a grammar needs the vocabulary (use Sampler::Create)");
  }
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(const SamplingParams& params, int32_t n_vocab,
                                                         std::shared_ptr<const grammar::TokenPieces> pieces,
                                                         grammar::GrammarCache* grammars) {
  SamplingParams ranges = params;  // the grammar is parsed once, below
  ranges.grammar.clear();
  absl::Status st = ValidateSamplingParams(ranges, n_vocab);
  if (!st.ok()) return st;
  auto s = std::make_unique<Sampler>(params, n_vocab);
  if (params.grammar.empty()) return s;
  std::shared_ptr<grammar::MaskCache> masks;
  std::shared_ptr<const grammar::Grammar> parsed;
  if (grammars != nullptr && grammars->pieces() == pieces && pieces != nullptr) {
    auto got = grammars->Get(params.grammar);
    if (!got.ok()) return GrammarError(got.status());
    masks = std::move(*got);
    parsed = masks->grammar();
  } else {
    auto g = grammar::Grammar::Parse(params.grammar);
    if (!g.ok()) return GrammarError(g.status());
    parsed = std::move(*g);
  }
  if (pieces == nullptr || pieces->n_tokens() != n_vocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sampler: a grammar needs the token pieces of the ", n_vocab, "-token vocabulary",
        pieces == nullptr ? std::string(" (none given)") : absl::StrCat(" (got ", pieces->n_tokens(), " tokens)")));
  }
  auto m = grammar::Matcher::Create(std::move(parsed));
  if (!m.ok()) return m.status();
  s->matcher_.emplace(*m);
  s->matcher_start_.emplace(std::move(*m));
  s->pieces_ = std::move(pieces);
  s->masks_ = std::move(masks);
  s->status_ = absl::OkStatus();
  return s;
}

void Sampler::Prepare(const float* logits, TokenDataArray* cur) const {
  FillCandidates(logits, n_vocab_, cur);
  chain_.ApplyRange(cur, 0, kDefaultChainLogitStages);
}

TokenDataArray Sampler::Candidates(const float* logits) const {
  TokenDataArray cur;
  if (n_vocab_ <= 0) return cur;
  Prepare(logits, &cur);
  if (matcher_) MaskCandidates(&cur);
  if (IsGreedy()) {
    size_t best = 0;
    for (size_t i = 1; i < cur.data.size(); ++i) {
      if (cur.data[i].logit > cur.data[best].logit) best = i;
    }
    TokenData t = cur.data[best];
    t.p = 1.0f;
    cur.data.assign(1, t);
    cur.sorted = true;
    return cur;
  }
  // The filters (no state changes in their Apply), not the final draw.
  chain_.ApplyRange(&cur, kDefaultChainLogitStages, chain_.size() - 1);
  SoftmaxCandidates(&cur);
  return cur;
}

int32_t Sampler::Sample(const float* logits) {
  top_logprobs_.clear();
  if (n_vocab_ <= 0 || !status_.ok()) return -1;
  if (plain_greedy_) return GreedyArgmax(logits, n_vocab_);
  TokenDataArray& cur = scratch_;
  if (fast_top_k_) {
    FillTopK(logits, n_vocab_, static_cast<size_t>(params_.top_k), &cur);  // = Prepare + the top_k stage
  } else {
    Prepare(logits, &cur);
  }
  if (!matcher_) return SampleFrom(&cur);
  // common_sampler_sample (grammar_first = false): sample, check that one token, and
  // only when the grammar rejects it apply the grammar to everything and sample again.
  const int32_t first = SampleFrom(&cur);
  if (first >= 0 && matcher_->TokenAllowed(*pieces_, first)) return first;
  top_logprobs_.clear();
  Prepare(logits, &cur);
  if (IsGreedy() && params_.n_probs == 0) {
    // The argmax over the allowed tokens is the first allowed one in (logit desc, id
    // asc) order: check the best few before applying the grammar to everything (same
    // result, much cheaper on large vocabularies).
    const size_t k = std::min<size_t>(64, cur.data.size());
    std::partial_sort(cur.data.begin(), cur.data.begin() + static_cast<long>(k), cur.data.end(), CandidateBefore);
    std::vector<int32_t> ids(k);
    std::vector<uint8_t> ok(k);
    for (size_t i = 0; i < k; ++i) ids[i] = cur.data[i].id;
    matcher_->CheckTokens(*pieces_, ids.data(), k, ok.data());
    for (size_t i = 0; i < k; ++i) {
      if (!ok[i]) continue;
      if (cur.data[i].logit != -INFINITY) return cur.data[i].id;
      break;  // only -inf tokens left: the full path decides
    }
    Prepare(logits, &cur);
  } else if (!IsGreedy() && params_.top_k > 0 && grammar_top_k_search_ &&
             (masks_ == nullptr || !masks_->Cached(*matcher_)) && GrammarTopK(&cur)) {
    return SampleFrom(&cur);
  }
  MaskCandidates(&cur);
  bool any = false;
  for (const TokenData& t : cur.data) {
    if (t.logit != -INFINITY) {
      any = true;
      break;
    }
  }
  if (!any) return -1;
  return SampleFrom(&cur);
}

bool Sampler::GrammarTopK(TokenDataArray* cur) const {
  std::vector<TokenData>& d = cur->data;
  const size_t k = static_cast<size_t>(params_.top_k);
  // One O(n_vocab) selection of the best `span` candidates, sorted, then one grammar check
  // of those: cheap when the state allows most tokens (inside a string), where the whole
  // mask is most expensive; a restrictive state (few allowed tokens) fails here and is
  // masked whole, which is cheap there (most tokens fail at their first code point).
  const size_t span = std::min(d.size(), std::max<size_t>(256, 4 * k));
  if (span < k || span == 0) return false;
  std::nth_element(d.begin(), d.begin() + static_cast<long>(span - 1), d.end(), CandidateBefore);
  std::sort(d.begin(), d.begin() + static_cast<long>(span), CandidateBefore);
  std::vector<int32_t> ids(span);
  std::vector<uint8_t> ok(span);
  for (size_t i = 0; i < span; ++i) ids[i] = d[i].id;
  matcher_->CheckTokens(*pieces_, ids.data(), span, ok.data());
  std::vector<TokenData> kept;
  kept.reserve(k);
  for (size_t i = 0; i < span && kept.size() < k; ++i) {
    // -inf from here on: fewer than k finite allowed tokens; the full path orders the
    // -inf ones exactly as the top_k stage does.
    if (d[i].logit == -INFINITY) return false;
    if (ok[i]) kept.push_back(d[i]);
  }
  if (kept.size() < k) return false;
  d = std::move(kept);
  cur->sorted = true;
  return true;
}

void Sampler::MaskCandidates(TokenDataArray* cur) const {
  if (masks_ == nullptr) {
    grammar::ApplyGrammar(*matcher_, *pieces_, &cur->data);
    return;
  }
  std::shared_ptr<const grammar::TokenMask> mask = masks_->Mask(*matcher_);
  for (TokenData& t : cur->data) {
    if (!grammar::MaskAllows(*mask, t.id)) t.logit = -INFINITY;
  }
}

int32_t Sampler::SampleFrom(TokenDataArray* cur) {
  cur->selected = -1;
  chain_.ApplyRange(cur, kDefaultChainLogitStages, chain_.size());
  if (cur->selected < 0 || cur->selected >= static_cast<int64_t>(cur->data.size())) return -1;
  const size_t sel = static_cast<size_t>(cur->selected);
  const int32_t token = cur->data[sel].id;
  if (params_.n_probs <= 0) return token;
  if (IsGreedy()) {
    GreedyLogprobs(cur, sel);
    return token;
  }
  // DistSampler left the final distribution sorted, with p set.
  const size_t n = std::min(static_cast<size_t>(params_.n_probs), cur->data.size());
  for (size_t i = 0; i < n; ++i) {
    top_logprobs_.push_back({cur->data[i].id, std::log(cur->data[i].p)});
  }
  return token;
}

void Sampler::GreedyLogprobs(TokenDataArray* cur_p, size_t best) {
  auto& d = cur_p->data;
  // Softmax of the full (penalized) logits, top n_probs.
  const float max_l = d[best].logit;
  double sum = 0.0;
  if (max_l != -INFINITY) {
    for (const auto& t : d) sum += std::exp(static_cast<double>(t.logit) - max_l);
  }
  const size_t n = std::min(static_cast<size_t>(params_.n_probs), d.size());
  std::partial_sort(d.begin(), d.begin() + n, d.end(), CandidateBefore);
  const double log_sum = std::log(sum);
  for (size_t i = 0; i < n; ++i) {
    const double lp = max_l == -INFINITY ? -std::log(static_cast<double>(d.size()))
                                         : static_cast<double>(d[i].logit) - max_l - log_sum;
    top_logprobs_.push_back({d[i].id, static_cast<float>(lp)});
  }
}

// llama_sampler_penalties_accept (+ llama_sampler_grammar_accept_impl).
absl::Status Sampler::Accept(int32_t token, bool accept_grammar) {
  absl::Status st;
  if (accept_grammar && matcher_) st = matcher_->AcceptToken(*pieces_, token);
  chain_.Accept(token);
  return st;
}

void Sampler::Reset() {
  chain_.Reset();
  top_logprobs_.clear();
  if (!chain_.Seed()) seed_cur_ = ResolveSeed(params_.seed);
  if (matcher_) matcher_ = matcher_start_;
}

}  // namespace herd::engine
