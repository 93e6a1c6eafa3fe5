#include "libs/engine/sampling.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace herd::engine {
namespace {

// Total order: logit descending, then id ascending (deterministic on ties).
inline bool Before(const TokenData& a, const TokenData& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

absl::Status FieldError(const char* field, const std::string& want, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid sampling parameter ", field, ": must be ", want, ", got ", got));
}

// "invalid sampling parameter grammar: <parser message without its "grammar: ">".
absl::Status GrammarError(const absl::Status& parse) {
  return absl::InvalidArgumentError(absl::StrCat("invalid sampling parameter grammar: ",
                                                 absl::StripPrefix(parse.message(), "grammar: ")));
}

// get_rng_seed() in llama-sampling.cpp.
uint32_t RngSeed(uint32_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device rd;
  if (rd.entropy() == 0) {
    // std::random_device may be a PRNG; use the clock like llama.cpp does.
    return static_cast<uint32_t>(
        std::chrono::system_clock::now().time_since_epoch().count());
  }
  return rd();
}

inline float Sanitize(float x) {
  if (std::isnan(x)) return -INFINITY;
  if (x == INFINITY) return FLT_MAX;
  return x;
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
    return FieldError("penalty_last_n", ">= -1 (0 = disabled, -1 = whole context)",
                      p.penalty_last_n);
  }
  if (p.n_probs < 0) return FieldError("n_probs", ">= 0", p.n_probs);
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0 || (n_vocab >= 0 && id >= n_vocab)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid sampling parameter logit_bias[", i, "]: token id ", id,
                                                     n_vocab >= 0 ? absl::StrCat(" is outside the vocabulary [0, ", n_vocab, ")")
                                                                  : std::string(" is negative")));
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
// Individual samplers (src/llama-sampling.cpp).

void SoftmaxCandidates(TokenDataArray* cur) {
  auto& d = cur->data;
  if (d.empty()) return;
  if (!cur->sorted) {
    std::sort(d.begin(), d.end(), Before);
    cur->sorted = true;
  }
  const float max_l = d[0].logit;
  if (max_l == -INFINITY) {  // every candidate is -inf: uniform (llama.cpp would give NaN)
    for (auto& t : d) t.p = 1.0f / static_cast<float>(d.size());
    return;
  }
  float cum_sum = 0.0f;
  for (auto& t : d) {
    t.p = std::exp(t.logit - max_l);
    cum_sum += t.p;
  }
  for (auto& t : d) t.p /= cum_sum;
}

void TopKCandidates(TokenDataArray* cur, int32_t k) {
  auto& d = cur->data;
  if (k <= 0 || d.empty()) return;
  const size_t kk = std::min(static_cast<size_t>(k), d.size());
  if (!cur->sorted) {
    std::partial_sort(d.begin(), d.begin() + kk, d.end(), Before);
    cur->sorted = true;
  }
  d.resize(kk);
}

void TopPCandidates(TokenDataArray* cur, float p, size_t min_keep) {
  if (p >= 1.0f || cur->data.empty()) return;
  SoftmaxCandidates(cur);
  auto& d = cur->data;
  float cum_sum = 0.0f;
  size_t last_idx = d.size();
  for (size_t i = 0; i < d.size(); ++i) {
    cum_sum += d[i].p;
    // Include the current token once the mass reaches p (and min_keep is met).
    if (cum_sum >= p && i + 1 >= min_keep) {
      last_idx = i + 1;
      break;
    }
  }
  d.resize(last_idx);
}

void MinPCandidates(TokenDataArray* cur, float p, size_t min_keep) {
  auto& d = cur->data;
  if (p <= 0.0f || d.empty()) return;
  if (!cur->sorted) {
    // Unsorted path: filter in place, keeping id order.
    float max_logit = -FLT_MAX;
    for (const auto& t : d) max_logit = std::max(max_logit, t.logit);
    const float min_logit = max_logit + std::log(p);  // p_i >= p * p_max
    size_t n = 0;
    for (const auto& t : d) n += t.logit >= min_logit;
    if (n >= min_keep && n > 0) {
      size_t j = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        if (d[i].logit >= min_logit) d[j++] = d[i];
      }
      d.resize(j);
      return;
    }
    std::sort(d.begin(), d.end(), Before);
    cur->sorted = true;
  }
  const float min_logit = d[0].logit + std::log(p);
  size_t i = 1;  // the first token always matches
  for (; i < d.size(); ++i) {
    if (d[i].logit < min_logit && i >= min_keep) break;
  }
  d.resize(i);
}

void TemperatureCandidates(TokenDataArray* cur, float temp) {
  auto& d = cur->data;
  if (d.empty()) return;
  if (temp <= 0.0f) {
    // Keep only the first token with the highest logit.
    size_t max_i = 0;
    float max_l = d[0].logit;
    for (size_t i = 1; i < d.size(); ++i) {
      if (d[i].logit > max_l) {
        d[max_i].logit = -INFINITY;
        max_i = i;
        max_l = d[i].logit;
      } else {
        d[i].logit = -INFINITY;
      }
    }
    return;
  }
  for (auto& t : d) {
    t.logit = std::clamp(t.logit / temp, -FLT_MAX, FLT_MAX);
  }
  // Division by a positive number keeps the order.
}

// ---------------------------------------------------------------------------
// Sampler

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(std::max<int32_t>(n_vocab, 0)) {
  if (params_.penalty_last_n < -1) params_.penalty_last_n = 0;
  if (params_.n_probs < 0) params_.n_probs = 0;
  seed_cur_ = RngSeed(params_.seed);
  rng_.seed(seed_cur_);
  if (!params_.grammar.empty()) {
    status_ = absl::FailedPreconditionError("sampler: a grammar needs the vocabulary (use Sampler::Create)");
  }
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(const SamplingParams& params, int32_t n_vocab,
                                                         std::shared_ptr<const grammar::TokenPieces> pieces) {
  SamplingParams ranges = params;  // the grammar is parsed once, below
  ranges.grammar.clear();
  absl::Status st = ValidateSamplingParams(ranges, n_vocab);
  if (!st.ok()) return st;
  auto s = std::make_unique<Sampler>(params, n_vocab);
  if (params.grammar.empty()) return s;
  auto g = grammar::Grammar::Parse(params.grammar);
  if (!g.ok()) return GrammarError(g.status());
  if (pieces == nullptr || pieces->n_tokens() != n_vocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sampler: a grammar needs the token pieces of the ", n_vocab, "-token vocabulary",
        pieces == nullptr ? std::string(" (none given)") : absl::StrCat(" (got ", pieces->n_tokens(), " tokens)")));
  }
  auto m = grammar::Matcher::Create(*g);
  if (!m.ok()) return m.status();
  s->matcher_.emplace(*m);
  s->matcher_start_.emplace(std::move(*m));
  s->pieces_ = std::move(pieces);
  s->status_ = absl::OkStatus();
  return s;
}

bool Sampler::PenaltiesActive() const {
  return params_.penalty_last_n != 0 &&
         !(params_.repeat_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
           params_.presence_penalty == 0.0f);
}

void Sampler::FillCandidates(const float* logits, TokenDataArray* cur) const {
  cur->data.resize(static_cast<size_t>(n_vocab_));
  for (int32_t i = 0; i < n_vocab_; ++i) {
    cur->data[i] = TokenData{i, Sanitize(logits[i]), 0.0f};
  }
  cur->sorted = false;
}

// llama_sampler_logit_bias_apply: index directly when the candidates are the whole
// vocabulary in id order, else search.
void Sampler::ApplyLogitBias(TokenDataArray* cur) const {
  if (params_.logit_bias.empty()) return;
  auto& d = cur->data;
  const bool full = !cur->sorted && d.size() == static_cast<size_t>(n_vocab_);
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || id >= n_vocab_) continue;
    if (full) {
      d[static_cast<size_t>(id)].logit += bias;
    } else {
      for (auto& t : d) {
        if (t.id == id) t.logit += bias;
      }
    }
  }
  cur->sorted = false;
}

void Sampler::Prepare(const float* logits, TokenDataArray* cur) const {
  FillCandidates(logits, cur);
  ApplyLogitBias(cur);
  ApplyPenalties(cur);
}

// llama_sampler_penalties_apply.
void Sampler::ApplyPenalties(TokenDataArray* cur) const {
  if (!PenaltiesActive() || token_count_.empty()) return;
  auto& d = cur->data;
  auto apply = [&](TokenData& t, int32_t count) {
    // Divide positive logits, multiply non-positive ones (the usual fix of the
    // CTRL paper's plain division, which would favour negative-logit tokens).
    if (t.logit <= 0) {
      t.logit *= params_.repeat_penalty;
    } else {
      t.logit /= params_.repeat_penalty;
    }
    t.logit -= static_cast<float>(count) * params_.frequency_penalty +
               static_cast<float>(count > 0) * params_.presence_penalty;
  };
  if (!cur->sorted && d.size() == static_cast<size_t>(n_vocab_)) {
    // Candidates are the full vocabulary in id order: index directly.
    for (const auto& [id, count] : token_count_) {
      if (id >= 0 && id < n_vocab_) apply(d[id], count);
    }
  } else {
    for (auto& t : d) {
      auto it = token_count_.find(t.id);
      if (it != token_count_.end()) apply(t, it->second);
    }
  }
  cur->sorted = false;
}

void Sampler::ApplyFilters(TokenDataArray* cur) const {
  TopKCandidates(cur, params_.top_k);
  TopPCandidates(cur, params_.top_p, 1);
  MinPCandidates(cur, params_.min_p, 1);
  TemperatureCandidates(cur, params_.temp);
}

TokenDataArray Sampler::Candidates(const float* logits) const {
  TokenDataArray cur;
  if (n_vocab_ <= 0) return cur;
  Prepare(logits, &cur);
  if (matcher_) grammar::ApplyGrammar(*matcher_, *pieces_, &cur.data);
  if (Greedy()) {
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
  ApplyFilters(&cur);
  SoftmaxCandidates(&cur);
  return cur;
}

int32_t Sampler::Sample(const float* logits) {
  top_logprobs_.clear();
  if (n_vocab_ <= 0 || !status_.ok()) return -1;
  TokenDataArray& cur = scratch_;
  Prepare(logits, &cur);
  if (!matcher_) return SampleFrom(&cur);
  // common_sampler_sample (grammar_first = false): sample, check that one token, and
  // only when the grammar rejects it apply the grammar to everything and sample again.
  const int32_t first = SampleFrom(&cur);
  if (first >= 0 && matcher_->TokenAllowed(*pieces_, first)) return first;
  top_logprobs_.clear();
  Prepare(logits, &cur);
  if (Greedy() && params_.n_probs == 0) {
    // The argmax over the allowed tokens is the first allowed one in (logit desc, id
    // asc) order: check the best few before applying the grammar to everything (same
    // result, much cheaper on large vocabularies).
    const size_t k = std::min<size_t>(64, cur.data.size());
    std::partial_sort(cur.data.begin(), cur.data.begin() + static_cast<long>(k), cur.data.end(), Before);
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
  }
  grammar::ApplyGrammar(*matcher_, *pieces_, &cur.data);
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

int32_t Sampler::SampleFrom(TokenDataArray* cur_p) {
  TokenDataArray& cur = *cur_p;
  if (Greedy()) {
    // Argmax; strict '>' keeps the lowest id on ties.
    size_t best = 0;
    for (size_t i = 1; i < cur.data.size(); ++i) {
      if (cur.data[i].logit > cur.data[best].logit) best = i;
    }
    const int32_t token = cur.data[best].id;
    if (params_.n_probs > 0) {
      // Softmax of the full (penalized) logits, top n_probs.
      const float max_l = cur.data[best].logit;
      double sum = 0.0;
      if (max_l != -INFINITY) {
        for (const auto& t : cur.data) sum += std::exp(static_cast<double>(t.logit) - max_l);
      }
      const size_t n = std::min(static_cast<size_t>(params_.n_probs), cur.data.size());
      std::partial_sort(cur.data.begin(), cur.data.begin() + n, cur.data.end(), Before);
      const double log_sum = std::log(sum);
      for (size_t i = 0; i < n; ++i) {
        const double lp = max_l == -INFINITY
                              ? -std::log(static_cast<double>(cur.data.size()))
                              : static_cast<double>(cur.data[i].logit) - max_l - log_sum;
        top_logprobs_.push_back({cur.data[i].id, static_cast<float>(lp)});
      }
    }
    return token;
  }

  ApplyFilters(&cur);
  // llama_sampler_dist_apply: softmax, then std::discrete_distribution over p.
  SoftmaxCandidates(&cur);
  std::vector<double> probs(cur.data.size());
  for (size_t i = 0; i < cur.data.size(); ++i) probs[i] = cur.data[i].p;
  std::discrete_distribution<int> dist(probs.begin(), probs.end());
  const int idx = dist(rng_);
  const int32_t token = cur.data[static_cast<size_t>(idx)].id;

  if (params_.n_probs > 0) {
    const size_t n = std::min(static_cast<size_t>(params_.n_probs), cur.data.size());
    for (size_t i = 0; i < n; ++i) {
      top_logprobs_.push_back({cur.data[i].id, std::log(cur.data[i].p)});
    }
  }
  return token;
}

// llama_sampler_penalties_accept (+ llama_sampler_grammar_accept_impl).
absl::Status Sampler::Accept(int32_t token, bool accept_grammar) {
  absl::Status st;
  if (accept_grammar && matcher_) st = matcher_->AcceptToken(*pieces_, token);
  if (params_.penalty_last_n == 0) return st;
  token_count_[token]++;
  if (params_.penalty_last_n > 0) {
    if (prev_.size() >= static_cast<size_t>(params_.penalty_last_n)) {
      const int32_t old = prev_.front();
      prev_.pop_front();
      auto it = token_count_.find(old);
      if (--it->second == 0) token_count_.erase(it);
    }
    prev_.push_back(token);
  }
  return st;
}

void Sampler::Reset() {
  prev_.clear();
  token_count_.clear();
  top_logprobs_.clear();
  seed_cur_ = RngSeed(params_.seed);
  rng_.seed(seed_cur_);
  if (matcher_) matcher_ = matcher_start_;
}

}  // namespace herd::engine
