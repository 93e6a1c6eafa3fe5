#include "libs/engine/sampler_chain.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>

namespace herd::engine {
namespace {

inline float Sanitize(float x) {
  if (std::isnan(x)) return -INFINITY;
  if (x == INFINITY) return FLT_MAX;
  return x;
}

}  // namespace

uint32_t ResolveSeed(uint32_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device rd;
  if (rd.entropy() == 0) {
    // std::random_device may be a PRNG; use the clock like llama.cpp does.
    return static_cast<uint32_t>(std::chrono::system_clock::now().time_since_epoch().count());
  }
  return rd();
}

// ---------------------------------------------------------------------------
// Candidate operations (src/llama-sampling.cpp).

void FillCandidates(const float* logits, int32_t n_vocab, TokenDataArray* cur) {
  const int32_t n = std::max<int32_t>(n_vocab, 0);
  cur->data.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    cur->data[i] = TokenData{i, Sanitize(logits[i]), 0.0f};
  }
  cur->sorted = false;
  cur->selected = -1;
}

int32_t GreedyArgmax(const float* logits, int32_t n_vocab) {
  if (n_vocab <= 0) return -1;
  int32_t best = 0;
  float best_l = Sanitize(logits[0]);
  for (int32_t i = 1; i < n_vocab; ++i) {
    // NaN (-inf once sanitized) never compares greater; +inf counts as FLT_MAX, so the
    // first of several +inf / FLT_MAX logits stays selected, as in the candidate array.
    const float l = logits[i];
    if (l > best_l && !(l == INFINITY && best_l == FLT_MAX)) {
      best = i;
      best_l = Sanitize(l);
    }
  }
  return best;
}

void FillTopK(const float* logits, int32_t n_vocab, size_t k, TokenDataArray* cur) {
  std::vector<TokenData>& d = cur->data;
  d.clear();
  const int32_t n = std::max<int32_t>(n_vocab, 0);
  k = std::min(k, static_cast<size_t>(n));
  cur->sorted = true;
  cur->selected = -1;
  if (k == 0) return;
  d.reserve(k);
  // A heap whose front is the worst kept candidate (CandidateBefore as "less": the heap's
  // maximum is the candidate that comes last). Ids ascend, so a later token with the
  // front's logit comes after it: only a strictly larger logit replaces the front.
  int32_t i = 0;
  for (; i < n && d.size() < k; ++i) d.push_back(TokenData{i, Sanitize(logits[i]), 0.0f});
  std::make_heap(d.begin(), d.end(), CandidateBefore);
  for (; i < n; ++i) {
    const float l = Sanitize(logits[i]);
    if (l > d.front().logit) {
      std::pop_heap(d.begin(), d.end(), CandidateBefore);
      d.back() = TokenData{i, l, 0.0f};
      std::push_heap(d.begin(), d.end(), CandidateBefore);
    }
  }
  std::sort_heap(d.begin(), d.end(), CandidateBefore);
}

void SoftmaxCandidates(TokenDataArray* cur) {
  auto& d = cur->data;
  if (d.empty()) return;
  if (!cur->sorted) {
    std::sort(d.begin(), d.end(), CandidateBefore);
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
    std::partial_sort(d.begin(), d.begin() + kk, d.end(), CandidateBefore);
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
    std::sort(d.begin(), d.end(), CandidateBefore);
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
// Stages

// llama_sampler_logit_bias_apply: index directly when the candidates are the whole
// vocabulary in id order, else search.
void LogitBiasSampler::Apply(TokenDataArray* cur) {
  if (bias_.empty()) return;
  auto& d = cur->data;
  const bool full = !cur->sorted && d.size() == static_cast<size_t>(n_vocab_);
  for (const auto& [id, bias] : bias_) {
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

bool PenaltiesSampler::Active() const {
  return last_n_ != 0 && !(repeat_ == 1.0f && freq_ == 0.0f && present_ == 0.0f);
}

// llama_sampler_penalties_apply.
void PenaltiesSampler::Apply(TokenDataArray* cur) {
  if (!Active() || token_count_.empty()) return;
  auto& d = cur->data;
  auto apply = [&](TokenData& t, int32_t count) {
    // Divide positive logits, multiply non-positive ones (the usual fix of the
    // CTRL paper's plain division, which would favour negative-logit tokens).
    if (t.logit <= 0) {
      t.logit *= repeat_;
    } else {
      t.logit /= repeat_;
    }
    t.logit -= static_cast<float>(count) * freq_ + static_cast<float>(count > 0) * present_;
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

// llama_sampler_penalties_accept.
void PenaltiesSampler::Accept(int32_t token) {
  if (last_n_ == 0) return;
  token_count_[token]++;
  if (last_n_ > 0) {
    if (prev_.size() >= static_cast<size_t>(last_n_)) {
      const int32_t old = prev_.front();
      prev_.pop_front();
      auto it = token_count_.find(old);
      if (--it->second == 0) token_count_.erase(it);
    }
    prev_.push_back(token);
  }
}

void PenaltiesSampler::Reset() {
  prev_.clear();
  token_count_.clear();
}

int32_t PenaltiesSampler::Count(int32_t token) const {
  auto it = token_count_.find(token);
  return it == token_count_.end() ? 0 : it->second;
}

DistSampler::DistSampler(uint32_t seed) : seed_(seed), seed_cur_(ResolveSeed(seed)), rng_(seed_cur_) {}

// llama_sampler_dist_apply: softmax, then std::discrete_distribution over p.
void DistSampler::Apply(TokenDataArray* cur) {
  if (cur->data.empty()) return;
  SoftmaxCandidates(cur);
  std::vector<double> probs(cur->data.size());
  for (size_t i = 0; i < cur->data.size(); ++i) probs[i] = cur->data[i].p;
  std::discrete_distribution<int> dist(probs.begin(), probs.end());
  cur->selected = dist(rng_);
}

void DistSampler::Reset() {
  seed_cur_ = ResolveSeed(seed_);
  rng_.seed(seed_cur_);
}

// llama_sampler_greedy_apply; strict '>' keeps the first maximum.
void GreedySampler::Apply(TokenDataArray* cur) {
  const auto& d = cur->data;
  if (d.empty()) return;
  size_t best = 0;
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i].logit > d[best].logit) best = i;
  }
  cur->selected = static_cast<int64_t>(best);
}

// ---------------------------------------------------------------------------
// SamplerChain

SamplerChain::SamplerChain(const SamplerChain& other) : cur_(other.cur_) {
  stages_.reserve(other.stages_.size());
  for (const auto& s : other.stages_) stages_.push_back(s->Clone());
}

SamplerChain& SamplerChain::operator=(const SamplerChain& other) {
  if (this != &other) *this = SamplerChain(other);
  return *this;
}

void SamplerChain::Add(std::unique_ptr<SamplerStage> stage) {
  if (stage != nullptr) stages_.push_back(std::move(stage));
}

void SamplerChain::ApplyRange(TokenDataArray* cur, size_t first, size_t last) {
  last = std::min(last, stages_.size());
  for (size_t i = first; i < last; ++i) stages_[i]->Apply(cur);
}

void SamplerChain::Accept(int32_t token) {
  for (auto& s : stages_) s->Accept(token);
}

void SamplerChain::Reset() {
  for (auto& s : stages_) s->Reset();
}

std::optional<uint32_t> SamplerChain::Seed() const {
  for (const auto& s : stages_) {
    if (auto seed = s->Seed()) return seed;
  }
  return std::nullopt;
}

int32_t SamplerChain::Sample(const float* logits, int32_t n_vocab) {
  if (n_vocab <= 0) {
    cur_ = TokenDataArray();
    return -1;
  }
  FillCandidates(logits, n_vocab, &cur_);
  Apply(&cur_);
  if (cur_.selected < 0 || cur_.selected >= static_cast<int64_t>(cur_.data.size())) return -1;
  return cur_.data[static_cast<size_t>(cur_.selected)].id;
}

}  // namespace herd::engine
