// Composable samplers, after llama.cpp's llama_sampler_i / llama_sampler_chain
// (include/llama.h, src/llama-sampling.cpp).
//
// A SamplerStage is one sampler with llama.cpp's four operations: Apply (modify or cut
// the candidate list, or pick a token: llama_sampler_apply), Accept (record a token the
// caller kept: llama_sampler_accept), Reset (llama_sampler_reset) and Clone
// (llama_sampler_clone). A SamplerChain runs its stages in order (llama_sampler_chain_*).
// The stages here are the ones of llama.cpp's default chain (common_sampler_init):
//
//   LogitBiasSampler -> PenaltiesSampler -> TopKSampler -> TopPSampler -> MinPSampler
//     -> TemperatureSampler -> DistSampler        (GreedySampler instead when temp <= 0)
//
// DefaultSamplerChain() (sampling.h) builds exactly that from SamplingParams; any other
// order or subset can be assembled by hand:
//
//   SamplerChain chain;
//   chain.Add(std::make_unique<TopKSampler>(40));
//   chain.Add(std::make_unique<TemperatureSampler>(0.7f));
//   chain.Add(std::make_unique<DistSampler>(1234));
//   int32_t token = chain.Sample(logits, n_vocab);
//   chain.Accept(token);
//
// Candidates are ordered by (logit descending, id ascending), a total order, where
// llama.cpp uses an unstable sort on the logit alone (see sampling.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace herd::engine {

/// LLAMA_DEFAULT_SEED: a seed value meaning "choose randomly".
inline constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

/// get_rng_seed() of llama-sampling.cpp: `seed` itself, or a random one for kRandomSeed.
uint32_t ResolveSeed(uint32_t seed);

/// One candidate token (llama_token_data): id, (possibly modified) logit, and
/// probability (valid only after a softmax).
struct TokenData {
  int32_t id;
  float logit;
  float p;
};

/// A candidate list (llama_token_data_array). `sorted` means data is ordered by
/// logit descending (ties: lower id first). `selected` is the index into data of the
/// token a selecting stage (DistSampler, GreedySampler) picked; -1 = none yet.
struct TokenDataArray {
  std::vector<TokenData> data;
  bool sorted = false;
  int64_t selected = -1;
};

/// The candidate order: logit descending, then id ascending (a total order, so results
/// do not depend on the sort algorithm).
inline bool CandidateBefore(const TokenData& a, const TokenData& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// The individual sampler operations, exposed for testing and for other chains. Each one
// behaves like its llama.cpp counterpart in src/llama-sampling.cpp. All accept an empty
// array (no-op).

/// The array llama_sampler_sample builds: the `n_vocab` logits in id order, NaN read as
/// -inf and +inf as FLT_MAX; unsorted, nothing selected.
void FillCandidates(const float* logits, int32_t n_vocab, TokenDataArray* cur);

/// The id GreedySampler selects from FillCandidates(logits, n_vocab): the first maximum
/// of the `n_vocab` logits with NaN read as -inf and +inf as FLT_MAX (0 when every logit is
/// NaN or -inf), without building the candidate array. -1 when n_vocab <= 0.
int32_t GreedyArgmax(const float* logits, int32_t n_vocab);
/// The first min(k, n_vocab) candidates of FillCandidates(logits, n_vocab) in
/// CandidateBefore order (logit descending, id ascending), sorted (cur->sorted = true):
/// exactly what TopKCandidates(k) leaves of the full array, in one O(n_vocab) scan with a
/// k-element heap instead of filling and partially sorting n_vocab candidates.
void FillTopK(const float* logits, int32_t n_vocab, size_t k, TokenDataArray* cur);
/// llama_sampler_softmax_impl: sorts (if needed) and sets p = softmax(logit).
void SoftmaxCandidates(TokenDataArray* cur);
/// llama_sampler_top_k_impl: keeps the k highest logits (sorted); k <= 0 = no-op.
void TopKCandidates(TokenDataArray* cur, int32_t k);
/// llama_sampler_top_p_apply: no-op if p >= 1; else softmax, then keeps the
/// shortest prefix with cumulative probability >= p and at least min_keep tokens.
void TopPCandidates(TokenDataArray* cur, float p, size_t min_keep = 1);
/// llama_sampler_min_p_apply: no-op if p <= 0; else keeps tokens whose logit is
/// >= max_logit + log(p) (i.e. prob >= p * p_max), at least min_keep of them.
void MinPCandidates(TokenDataArray* cur, float p, size_t min_keep = 1);
/// llama_sampler_temp_impl: temp > 0 divides logits by temp (results clamped to
/// +-FLT_MAX); temp <= 0 keeps only the first maximum (others become -inf).
void TemperatureCandidates(TokenDataArray* cur, float temp);

/// One sampler of a chain (llama_sampler_i). Implementations are small value types;
/// none is thread-safe (one chain per sequence).
class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  /// A short name, llama.cpp's ("top-k", "dist", ...) (llama_sampler_i::name).
  virtual const char* Name() const = 0;
  /// Modifies, reorders or cuts `cur`, or picks a token by setting cur->selected
  /// (llama_sampler_i::apply). Must accept an empty array.
  virtual void Apply(TokenDataArray* cur) = 0;
  /// Records a token the caller kept (llama_sampler_i::accept). Default: nothing.
  virtual void Accept(int32_t token) { (void)token; }
  /// Back to the state right after construction (llama_sampler_i::reset); a random
  /// seed draws a new one. Default: nothing.
  virtual void Reset() {}
  /// An independent copy with the same state (history, RNG position)
  /// (llama_sampler_i::clone).
  virtual std::unique_ptr<SamplerStage> Clone() const = 0;
  /// True for the stages that set TokenDataArray::selected (DistSampler, GreedySampler).
  virtual bool Selects() const { return false; }
  /// The RNG seed in use, for stages that draw random numbers (llama_sampler_get_seed).
  virtual std::optional<uint32_t> Seed() const { return std::nullopt; }
};

/// llama_sampler_init_logit_bias: adds each (token id, bias) to that token's logit;
/// ids outside [0, n_vocab) are ignored, repeated ids add up. Marks the array unsorted.
class LogitBiasSampler final : public SamplerStage {
 public:
  LogitBiasSampler(int32_t n_vocab, std::vector<std::pair<int32_t, float>> bias)
      : n_vocab_(n_vocab), bias_(std::move(bias)) {}
  const char* Name() const override { return "logit-bias"; }
  void Apply(TokenDataArray* cur) override;
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<LogitBiasSampler>(*this); }

 private:
  int32_t n_vocab_;
  std::vector<std::pair<int32_t, float>> bias_;
};

/// llama_sampler_init_penalties: repetition (positive logits divided by `repeat`,
/// others multiplied), frequency (count * `freq` subtracted) and presence (`present`
/// subtracted once) penalties over the last `last_n` accepted tokens (-1 = all of them,
/// 0 = off: Accept records nothing). A no-op when repeat == 1, freq == 0 and present == 0.
class PenaltiesSampler final : public SamplerStage {
 public:
  PenaltiesSampler(int32_t n_vocab, int32_t last_n, float repeat, float freq, float present)
      : n_vocab_(n_vocab), last_n_(last_n < -1 ? 0 : last_n), repeat_(repeat), freq_(freq), present_(present) {}
  const char* Name() const override { return "penalties"; }
  void Apply(TokenDataArray* cur) override;
  void Accept(int32_t token) override;
  void Reset() override;
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<PenaltiesSampler>(*this); }
  /// How many times `token` occurs in the window.
  int32_t Count(int32_t token) const;

 private:
  bool Active() const;
  int32_t n_vocab_;
  int32_t last_n_;
  float repeat_, freq_, present_;
  std::deque<int32_t> prev_;  // the window (last_n_ > 0 only)
  std::unordered_map<int32_t, int32_t> token_count_;
};

/// llama_sampler_init_top_k: TopKCandidates(k).
class TopKSampler final : public SamplerStage {
 public:
  explicit TopKSampler(int32_t k) : k_(k) {}
  const char* Name() const override { return "top-k"; }
  void Apply(TokenDataArray* cur) override { TopKCandidates(cur, k_); }
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<TopKSampler>(*this); }

 private:
  int32_t k_;
};

/// llama_sampler_init_top_p: TopPCandidates(p, min_keep).
class TopPSampler final : public SamplerStage {
 public:
  explicit TopPSampler(float p, size_t min_keep = 1) : p_(p), min_keep_(min_keep) {}
  const char* Name() const override { return "top-p"; }
  void Apply(TokenDataArray* cur) override { TopPCandidates(cur, p_, min_keep_); }
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<TopPSampler>(*this); }

 private:
  float p_;
  size_t min_keep_;
};

/// llama_sampler_init_min_p: MinPCandidates(p, min_keep).
class MinPSampler final : public SamplerStage {
 public:
  explicit MinPSampler(float p, size_t min_keep = 1) : p_(p), min_keep_(min_keep) {}
  const char* Name() const override { return "min-p"; }
  void Apply(TokenDataArray* cur) override { MinPCandidates(cur, p_, min_keep_); }
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<MinPSampler>(*this); }

 private:
  float p_;
  size_t min_keep_;
};

/// llama_sampler_init_temp: TemperatureCandidates(temp).
class TemperatureSampler final : public SamplerStage {
 public:
  explicit TemperatureSampler(float temp) : temp_(temp) {}
  const char* Name() const override { return "temp"; }
  void Apply(TokenDataArray* cur) override { TemperatureCandidates(cur, temp_); }
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<TemperatureSampler>(*this); }

 private:
  float temp_;
};

/// llama_sampler_init_dist: softmax (sorts the array, sets p), then one draw of a
/// std::discrete_distribution<int> over p from a std::mt19937 seeded with `seed`
/// (kRandomSeed = a random seed, drawn again on Reset); sets cur->selected.
class DistSampler final : public SamplerStage {
 public:
  explicit DistSampler(uint32_t seed);
  const char* Name() const override { return "dist"; }
  void Apply(TokenDataArray* cur) override;
  void Reset() override;
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<DistSampler>(*this); }
  bool Selects() const override { return true; }
  std::optional<uint32_t> Seed() const override { return seed_cur_; }

 private:
  uint32_t seed_;      // as requested (may be kRandomSeed)
  uint32_t seed_cur_;  // in use
  std::mt19937 rng_;
};

/// llama_sampler_init_greedy: selects the highest logit, the first (in array order) on
/// ties; leaves the candidates unchanged.
class GreedySampler final : public SamplerStage {
 public:
  const char* Name() const override { return "greedy"; }
  void Apply(TokenDataArray* cur) override;
  std::unique_ptr<SamplerStage> Clone() const override { return std::make_unique<GreedySampler>(*this); }
  bool Selects() const override { return true; }
};

/// llama_sampler_chain: stages applied in the order they were added. Copying clones
/// every stage (llama_sampler_clone of a chain).
class SamplerChain {
 public:
  SamplerChain() = default;
  SamplerChain(const SamplerChain& other);
  SamplerChain& operator=(const SamplerChain& other);
  SamplerChain(SamplerChain&&) = default;
  SamplerChain& operator=(SamplerChain&&) = default;

  /// Appends a stage (llama_sampler_chain_add); a null stage is ignored.
  void Add(std::unique_ptr<SamplerStage> stage);
  size_t size() const { return stages_.size(); }
  /// The i-th stage (i < size()) (llama_sampler_chain_get).
  SamplerStage& stage(size_t i) { return *stages_[i]; }
  const SamplerStage& stage(size_t i) const { return *stages_[i]; }

  /// Every stage's Apply, in order (llama_sampler_chain_apply).
  void Apply(TokenDataArray* cur) { ApplyRange(cur, 0, stages_.size()); }
  /// Apply of stages [first, last) only (last is clamped to size()).
  void ApplyRange(TokenDataArray* cur, size_t first, size_t last);
  /// Every stage's Accept (llama_sampler_chain_accept).
  void Accept(int32_t token);
  /// Every stage's Reset (llama_sampler_chain_reset).
  void Reset();
  /// A deep copy (llama_sampler_clone).
  SamplerChain Clone() const { return *this; }
  /// The first stage's seed that has one (llama_sampler_get_seed); nullopt when none draws.
  std::optional<uint32_t> Seed() const;

  /// llama_sampler_sample: FillCandidates(logits, n_vocab), Apply, and the selected
  /// token's id. Does not Accept it. Returns -1 when n_vocab <= 0 or no stage selected
  /// a token (a chain without DistSampler / GreedySampler).
  int32_t Sample(const float* logits, int32_t n_vocab);
  /// The candidate list of the last Sample() call, after the chain.
  const TokenDataArray& last_candidates() const { return cur_; }

 private:
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  TokenDataArray cur_;
};

}  // namespace herd::engine
