// Token sampling with llama.cpp-compatible semantics.
//
// Sampler runs a SamplerChain (sampler_chain.h) built by DefaultSamplerChain(). The chain
// mirrors llama.cpp's default sampler chain built by
// common_sampler_init() (common/sampling.cpp) from the samplers in
// src/llama-sampling.cpp, in the default order
//
//   logit_bias -> penalties -> top_k -> top_p -> min_p -> temperature -> dist
//
// plus, when SamplingParams::grammar is set, llama.cpp's grammar sampler applied the
// way common_sampler_sample() does (grammar_first = false): the chain samples
// unconstrained, the one sampled token is checked against the grammar, and only if it
// is rejected are the logits reset, the grammar applied to the whole vocabulary (every
// token that cannot continue the grammar gets -inf; end-of-generation only when the
// grammar can be complete), and the chain run again. Requests without a grammar never
// touch the grammar code. (The grammar goes right after the chain's logit stages, logit
// bias and penalties, where llama.cpp applies it before the whole chain: both only
// lower logits to -inf, so the result is the same for validated parameters.)
//
// with temp <= 0 meaning greedy (argmax of the penalized logits). The RNG is
// std::mt19937 seeded with the request seed (0xFFFFFFFF = LLAMA_DEFAULT_SEED = a
// random seed), and the final draw is a std::discrete_distribution<int> over the
// candidate probabilities, exactly like llama_sampler_dist / llama_sample_dist, so
// a given seed and the same inputs give the same tokens run to run.
//
// One deliberate difference: candidates are ordered by (logit descending, id
// ascending), a total order, where llama.cpp uses an unstable std::sort /
// std::partial_sort on the logit alone. Only the position of tokens with exactly
// equal logits can differ; the kept sets and probabilities are the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/sampler_chain.h"
#include "libs/grammar/mask_cache.h"
#include "libs/grammar/matcher.h"

namespace herd::engine {

/// Sampling parameters (defaults = llama.cpp's common_params_sampling defaults).
struct SamplingParams {
  /// Temperature; logits are divided by it. <= 0 selects greedy decoding.
  float temp = 0.8f;
  /// Keep the top_k most likely tokens; <= 0 = disabled (whole vocabulary), as llama.cpp.
  int32_t top_k = 40;
  /// Nucleus sampling: keep the smallest prefix whose probability mass >= top_p;
  /// 1.0 = disabled.
  float top_p = 0.95f;
  /// Keep tokens with probability >= min_p * p(most likely token); 0 = disabled.
  float min_p = 0.05f;
  /// Repetition penalty ("penalty_repeat"): positive logits of recent tokens are
  /// divided by it, non-positive ones multiplied. 1.0 = disabled.
  float repeat_penalty = 1.0f;
  /// Subtracted from a recent token's logit once per occurrence ("penalty_freq").
  float frequency_penalty = 0.0f;
  /// Subtracted once from the logit of any token that occurs recently
  /// ("penalty_present").
  float presence_penalty = 0.0f;
  /// Number of most recent accepted tokens the penalties look at; 0 = disable
  /// penalties, -1 = all accepted tokens (llama.cpp: the context size).
  int32_t penalty_last_n = 64;
  /// RNG seed; 0xFFFFFFFF (kRandomSeed) = pick a random seed.
  uint32_t seed = 0xFFFFFFFF;
  /// Number of (token, logprob) pairs to report per sampled token; 0 = none.
  int32_t n_probs = 0;
  /// GBNF grammar (llama.cpp syntax, libs/grammar) the generated text must follow;
  /// empty = unconstrained. Needs the model's token pieces: see Sampler::Create.
  std::string grammar;
  /// (token id, bias) pairs added to the logits before every other sampler
  /// (llama_sampler_logit_bias); a bias of -inf bans the token. Repeated ids add up.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

/// Checks ranges. Returns INVALID_ARGUMENT naming the field and the value for:
/// temp NaN/inf or < 0; top_p or min_p NaN or outside [0, 1];
/// repeat_penalty not finite or <= 0; frequency_penalty / presence_penalty not
/// finite; penalty_last_n < -1; n_probs < 0; logit_bias[i] with a token id < 0 (or
/// >= n_vocab when n_vocab >= 0) or a bias that is NaN or +inf; a grammar that does not
/// parse ("invalid sampling parameter grammar: grammar: undefined rule 'x' at line 1,
/// column 10 ...").
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_vocab = -1);

/// Number of leading stages of DefaultSamplerChain() that only adjust logits (logit
/// bias, penalties); the grammar, when Sampler needs it, is applied right after them.
inline constexpr size_t kDefaultChainLogitStages = 2;

/// llama.cpp's default chain (common_sampler_init) for `params` over an `n_vocab`-token
/// vocabulary: LogitBiasSampler(logit_bias) -> PenaltiesSampler(penalty_last_n,
/// repeat_penalty, frequency_penalty, presence_penalty) -> TopKSampler(top_k) ->
/// TopPSampler(top_p) -> MinPSampler(min_p) -> TemperatureSampler(temp) ->
/// DistSampler(seed); with temp <= 0: LogitBiasSampler -> PenaltiesSampler ->
/// GreedySampler. Every stage is present even when its parameter disables it (a no-op),
/// so the stage positions are fixed. `params` should have passed ValidateSamplingParams;
/// the grammar and n_probs are not part of the chain (Sampler handles them).
SamplerChain DefaultSamplerChain(const SamplingParams& params, int32_t n_vocab);

/// One entry of the reported top-n distribution.
struct TokenLogprob {
  int32_t id;
  float logprob;  // natural log of the probability
};

/// Per-token log probabilities of a generated token (OpenAI's logprobs).
struct TokenLogprobs {
  int32_t id = 0;
  float logprob = 0;              // of the chosen token, in the distribution it was drawn from
  std::vector<TokenLogprob> top;  // the top-n alternatives, most likely first
};

/// A stateful sampler for one sequence: DefaultSamplerChain(params) plus the grammar
/// (common_sampler in llama.cpp's common/sampling.cpp). Not thread-safe; one per sequence.
class Sampler {
 public:
  /// `params` should have passed ValidateSamplingParams (values outside the
  /// ranges are clamped the way llama.cpp's samplers treat them). `n_vocab` > 0
  /// is the number of logits per Sample call.
  /// A sampler with a grammar must be made with Create(); here a non-empty
  /// params.grammar puts the sampler in a failed state (status() not OK, Sample()
  /// returns -1).
  Sampler(const SamplingParams& params, int32_t n_vocab);

  /// Checked construction: ValidateSamplingParams(params, n_vocab) (INVALID_ARGUMENT),
  /// then, with a grammar, the matcher over `pieces` (the model's decoded vocabulary,
  /// grammar::TokenPieces::FromVocab, shared per model). FAILED_PRECONDITION when the
  /// grammar is set and `pieces` is null or has a different token count than n_vocab;
  /// RESOURCE_EXHAUSTED when the grammar is too ambiguous (parse stack limit).
  /// `grammars` (optional; its pieces must be `pieces`) shares the parsed grammar and its
  /// whole-vocabulary masks (grammar::MaskCache) with the other samplers of the same
  /// grammar text.
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(const SamplingParams& params, int32_t n_vocab,
                                                         std::shared_ptr<const grammar::TokenPieces> pieces = nullptr,
                                                         grammar::GrammarCache* grammars = nullptr);

  /// For tests and benchmarks: with false, a rejected first draw always masks the whole
  /// vocabulary (llama.cpp's path) instead of checking tokens in logit order until
  /// top_k allowed ones are found. Both give the same token.
  void set_grammar_top_k_search(bool on) { grammar_top_k_search_ = on; }

  /// Samples a token from `logits` (n_vocab floats, token id order, not
  /// modified). Greedy (temp <= 0): argmax of the penalized logits, lowest id on
  /// ties; no random numbers are drawn. Otherwise: the chain above, then one
  /// draw from the RNG. Does NOT record the token: call Accept() with the token
  /// you keep. NaN logits count as -inf, +inf as FLT_MAX. With a grammar: the token
  /// is one the grammar allows (see the file comment; a rejected first draw consumes
  /// one random number, as in llama.cpp). Returns -1 when n_vocab <= 0, when
  /// status() is not OK, or when the grammar allows no token of the vocabulary (a dead
  /// end: the grammar is complete and the vocabulary has no end-of-generation token).
  int32_t Sample(const float* logits);

  /// Runs logit_bias -> penalties -> (grammar) -> top_k -> top_p -> min_p ->
  /// temperature on `logits` without drawing, and returns the surviving candidates
  /// sorted by probability (descending; ties lower id first) with p = final sampling
  /// probability. The grammar, if any, is applied to the whole vocabulary first (tokens
  /// it rejects have p = 0). In greedy mode the result is the single argmax token with
  /// p = 1.
  TokenDataArray Candidates(const float* logits) const;

  /// Records `token` in the penalty history (llama_sampler_penalties_accept) and, when
  /// accept_grammar and a grammar is set, advances the grammar by the token's text
  /// (common_sampler_accept). Call it for prompt tokens too (with accept_grammar =
  /// false) if they should be penalized (llama-cli and llama-server do). Errors:
  /// INVALID_ARGUMENT when the grammar does not allow `token` (the grammar state is then
  /// unchanged; the penalty history has the token).
  absl::Status Accept(int32_t token, bool accept_grammar = true);

  /// OK unless the sampler was constructed with a grammar it cannot use.
  const absl::Status& status() const { return status_; }
  /// The grammar's matching state; nullptr without a grammar.
  const grammar::Matcher* matcher() const { return matcher_ ? &*matcher_ : nullptr; }

  /// Clears the penalty history, restarts the grammar and re-seeds the RNG (a fixed seed restarts the
  /// same random sequence; kRandomSeed draws a new random seed).
  void Reset();

  /// Up to params.n_probs (id, logprob) pairs, most likely first, for the last
  /// Sample() call. Sampling mode: the final distribution the token was drawn
  /// from (tokens cut by the filters are absent). Greedy mode: softmax of the
  /// full penalized logits (like llama.cpp's greedy path with n_probs, which
  /// reports top-n_probs of the softmax). Empty when n_probs == 0.
  const std::vector<TokenLogprob>& last_top_logprobs() const { return top_logprobs_; }

  /// The seed actually in use (the random one when params.seed == kRandomSeed).
  uint32_t seed() const { return chain_.Seed().value_or(seed_cur_); }
  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }
  /// The chain Sample() runs (DefaultSamplerChain(params(), n_vocab())).
  const SamplerChain& chain() const { return chain_; }

 private:
  bool IsGreedy() const { return params_.temp <= 0.0f; }
  // FillCandidates + the chain's logit stages (logit bias, penalties).
  void Prepare(const float* logits, TokenDataArray* cur) const;
  // The rest of the chain over prepared candidates (filters + Dist, or Greedy), sets
  // top_logprobs_; returns the selected id.
  int32_t SampleFrom(TokenDataArray* cur);
  // With a grammar, after a rejected first draw (not greedy, top_k > 0, the state's
  // mask not cached): selects and sorts the best max(256, 4 top_k) prepared candidates,
  // checks them with the grammar, and when top_k of them are allowed leaves exactly those
  // in *cur (sorted): the candidates the top_k stage would keep after a whole-vocabulary
  // mask. False (cur reordered, nothing dropped) otherwise.
  bool GrammarTopK(TokenDataArray* cur) const;
  // Sets the logit of every candidate the grammar rejects to -inf (through the shared
  // mask cache when there is one).
  void MaskCandidates(TokenDataArray* cur) const;
  // Greedy top_logprobs_: softmax of the full candidate logits, top n_probs.
  void GreedyLogprobs(TokenDataArray* cur, size_t best);

  SamplingParams params_;
  int32_t n_vocab_;
  // Greedy with no logit bias, no active penalties, no grammar and no logprobs: Sample()
  // is GreedyArgmax over the logits (the same id the chain selects, without filling and
  // scanning an n_vocab candidate array per token).
  bool plain_greedy_ = false;
  // Sampling with top_k in (0, n_vocab), no logit bias and no active penalties: Sample()
  // starts from FillTopK (the same candidates the top_k stage keeps, without filling and
  // partially sorting n_vocab of them).
  bool fast_top_k_ = false;
  uint32_t seed_cur_ = 0;  // reported by seed() when the chain draws no random numbers
  // Candidates() runs only the stages that keep no state in Apply (all but the last).
  mutable SamplerChain chain_;
  std::vector<TokenLogprob> top_logprobs_;
  TokenDataArray scratch_;
  // Grammar (SamplingParams::grammar); both set or both empty.
  std::shared_ptr<const grammar::TokenPieces> pieces_;
  std::optional<grammar::Matcher> matcher_;
  std::optional<grammar::Matcher> matcher_start_;  // for Reset()
  std::shared_ptr<grammar::MaskCache> masks_;      // null without a GrammarCache
  bool grammar_top_k_search_ = true;
  absl::Status status_;
};

}  // namespace herd::engine
