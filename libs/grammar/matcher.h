// Incremental grammar matching over code points, with llama.cpp's semantics
// (src/llama-grammar.cpp: llama_grammar_advance_stack, llama_grammar_accept,
// llama_grammar_reject_candidates, llama_grammar_apply_impl, llama_grammar_accept_impl).
//
// The state is a set of *stacks* of element positions (pointers into the grammar's
// rules). The top of every non-empty stack is a terminal (char class / any char); a
// rule reference is expanded into one stack per alternative. An empty stack means the
// text so far is a complete sentence of the grammar. Accepting a code point keeps the
// stacks whose top matches it (advanced). Tokens are matched by their text: the piece's
// bytes are decoded to code points, continuing a UTF-8 sequence left open by the
// previous token, and a token may end in the middle of a character (the partial
// sequence must be able to complete to a character the grammar allows).
//
// End-of-generation tokens are allowed only when some stack is empty (the grammar can
// be complete); tokens with an empty piece (control tokens) or a NUL byte never match.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "libs/grammar/gbnf.h"

namespace herd::tokenizer {
class Vocab;
}

namespace herd::grammar {

/// llama_partial_utf8: the value bits of an unfinished UTF-8 sequence and how many
/// continuation bytes it still needs (0 = none pending, -1 = invalid sequence seen).
struct PartialUtf8 {
  uint32_t value = 0;
  int n_remain = 0;
};

/// decode_utf8 (llama-grammar.cpp): decodes `src` continuing `start`. Complete code
/// points are appended to `*cps`; `*end` receives the new partial state. An invalid
/// byte (a continuation byte where a lead is expected, or a lead byte where a
/// continuation is expected) clears `*cps` and sets end->n_remain = -1, as llama.cpp.
void DecodeUtf8(absl::string_view src, PartialUtf8 start, std::vector<uint32_t>* cps, PartialUtf8* end);

/// The token texts of one vocabulary, decoded once (cache it per model; immutable and
/// thread-safe once built).
class TokenPieces {
 public:
  /// `pieces[id]` = the token's bytes (llama_token_to_piece); `is_eog[id]` = end of
  /// generation. Sizes must match (the shorter one wins otherwise).
  static std::shared_ptr<const TokenPieces> Create(std::vector<std::string> pieces, std::vector<bool> is_eog);
  /// From a tokenizer: piece = Vocab::TokenToPiece(id, special=false) (so control and
  /// unknown-type tokens have an empty piece and never match; user-defined tokens match
  /// their text), EOG = Vocab::IsEog (llama.cpp's grammar uses the same rules).
  static std::shared_ptr<const TokenPieces> FromVocab(const tokenizer::Vocab& vocab);

  int32_t n_tokens() const { return static_cast<int32_t>(pieces_.size()); }
  bool IsEog(int32_t id) const { return InRange(id) && eog_[static_cast<size_t>(id)]; }
  /// A non-EOG token whose piece is non-empty and has no NUL byte.
  bool Matchable(int32_t id) const { return InRange(id) && matchable_[static_cast<size_t>(id)]; }
  const std::string& Piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  /// Code points of the piece decoded from an empty partial state: [*begin, *end).
  void CodePoints(int32_t id, const uint32_t** begin, const uint32_t** end) const;
  /// The partial state after decoding the piece from an empty state.
  PartialUtf8 EndPartial(int32_t id) const { return partial_[static_cast<size_t>(id)]; }

 private:
  bool InRange(int32_t id) const { return id >= 0 && id < n_tokens(); }
  std::vector<std::string> pieces_;
  std::vector<bool> eog_, matchable_;
  std::vector<uint32_t> cps_;
  std::vector<uint32_t> offsets_;  // n_tokens + 1
  std::vector<PartialUtf8> partial_;
};

/// Limits on the matcher's state (ambiguous grammars can multiply stacks).
struct MatcherLimits {
  size_t max_stacks = 8192;
};

/// The matching state of one sequence (llama_grammar). Copyable (a copy shares the
/// grammar). Not thread-safe.
class Matcher {
 public:
  using Stack = std::vector<const Element*>;

  /// Initial stacks: one per alternative of root, advanced to terminals.
  /// RESOURCE_EXHAUSTED if the stacks exceed limits.max_stacks.
  static absl::StatusOr<Matcher> Create(std::shared_ptr<const Grammar> grammar, MatcherLimits limits = {});

  /// llama_grammar_accept: advances by one code point. INVALID_ARGUMENT if no stack
  /// matches (the state is then unchanged); RESOURCE_EXHAUSTED over max_stacks.
  absl::Status AcceptCodePoint(uint32_t cp);
  /// llama_grammar_accept_str: decodes `bytes` continuing the partial UTF-8 state and
  /// accepts every complete code point. INVALID_ARGUMENT naming the text if the grammar
  /// rejects it (state unchanged).
  absl::Status AcceptBytes(absl::string_view bytes);
  /// llama_grammar_accept_impl: an EOG token is accepted only when CanEnd() (the state
  /// is unchanged); any other token by its piece. INVALID_ARGUMENT naming the token if
  /// the grammar does not allow it or the id is outside the vocabulary.
  absl::Status AcceptToken(const TokenPieces& pieces, int32_t id);

  /// Some stack is empty: the text so far is a complete sentence.
  bool CanEnd() const;
  /// Nothing more can be accepted and the grammar cannot end (never after a successful
  /// Create/Accept).
  bool Dead() const { return stacks_.empty(); }

  /// For each of `ids[0..n)` sets allowed[i] = 1 if the token can continue the grammar
  /// (llama_grammar_apply_impl's test), else 0. Ids outside the vocabulary are 0.
  /// Cost: proportional to the total code points of the tokens, per stack.
  void CheckTokens(const TokenPieces& pieces, const int32_t* ids, size_t n, uint8_t* allowed) const;
  /// CheckTokens for one token.
  bool TokenAllowed(const TokenPieces& pieces, int32_t id) const;

  /// Inclusive code point ranges that may come next (union over stacks, merged and
  /// sorted); for tests and random walks.
  std::vector<std::pair<uint32_t, uint32_t>> NextCodePoints() const;
  /// Smallest stack depth (0 when CanEnd()); a rough distance to completion.
  size_t MinStackDepth() const;
  size_t n_stacks() const { return stacks_.size(); }
  /// Sum of the stacks' depths (what advancing by one code point copies at most).
  size_t total_stack_elements() const {
    size_t n = 0;
    for (const Stack& s : stacks_) n += s.size();
    return n;
  }
  PartialUtf8 partial() const { return partial_; }
  /// Appends a byte string that identifies the matching state (the stacks' element
  /// addresses in order, and the partial UTF-8 state): two matchers of the same grammar
  /// object with equal keys allow exactly the same tokens (MaskCache's key). Returns
  /// false, leaving a partial key, once the key would exceed `max_bytes`.
  bool AppendStateKey(std::string* key, size_t max_bytes) const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  Matcher() = default;
  std::shared_ptr<const Grammar> grammar_;
  MatcherLimits limits_;
  std::vector<Stack> stacks_;
  PartialUtf8 partial_;
};

/// Bounds of CheckMatchCost.
struct MatchCostLimits {
  /// Most parse stacks at any point of the probe (the mask of one token costs about
  /// n_stacks x the vocabulary's code points).
  size_t max_stacks = 512;
  /// Most stack elements in total (sum of the stacks' depths) at any point: what each
  /// accepted code point copies.
  size_t max_stack_elements = 1 << 16;
  /// Code points the probe advances, and candidates it tries at each.
  int probe_steps = 48;
  int probe_branch = 4;
};

/// What CheckMatchCost saw: the largest state on the probe's path.
struct MatchCost {
  size_t max_stacks = 0;
  size_t max_stack_elements = 0;
  int steps = 0;
};

/// Checks, before a grammar is used, that matching it stays cheap: creates the matcher
/// and advances it `probe_steps` code points along an adversarial path (at each step it
/// tries up to `probe_branch` of the code points that may come next and keeps the one
/// whose state is largest), so grammars whose ambiguity multiplies parse stacks
/// (`root ::= ("a"{0,1000}){0,1000}`, thousands of alternatives sharing a prefix) are
/// caught in bounded time (steps x branch x max_stack_elements element copies) instead
/// of stalling a worker's sampler. INVALID_ARGUMENT "grammar: too costly to match: ..."
/// naming the measure and its limit. `cost` (optional) receives the measures.
absl::Status CheckMatchCost(const std::shared_ptr<const Grammar>& grammar, const MatchCostLimits& limits = {},
                            MatchCost* cost = nullptr);

/// llama_sampler_grammar_apply over a candidate list: sets the logit of every candidate
/// the grammar does not allow to -INFINITY. `Cand` needs members `int32_t id` and
/// `float logit` (engine::TokenData).
template <typename Cand>
void ApplyGrammar(const Matcher& matcher, const TokenPieces& pieces, std::vector<Cand>* cands) {
  std::vector<int32_t> ids(cands->size());
  for (size_t i = 0; i < cands->size(); ++i) ids[i] = (*cands)[i].id;
  std::vector<uint8_t> ok(cands->size());
  matcher.CheckTokens(pieces, ids.data(), ids.size(), ok.data());
  for (size_t i = 0; i < cands->size(); ++i) {
    if (!ok[i]) (*cands)[i].logit = -__builtin_inff();
  }
}

}  // namespace herd::grammar
