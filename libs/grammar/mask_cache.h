// Whole-vocabulary grammar masks, memoized by matching state.
//
// The sampler's fallback (the model's first choice was rejected) applies the grammar to
// every token of the vocabulary: Matcher::CheckTokens over n_vocab pieces, hundreds of µs
// to milliseconds on a 32,000-token vocabulary. The mask is a function of the matching
// state alone (the parse stacks and the pending partial UTF-8 sequence), and constrained
// outputs revisit a small set of states over and over (inside a JSON string, between
// properties, inside a number), and the sequences of one batch that share a schema visit
// the same ones. MaskCache keeps the masks of recent states, shared by every matcher of
// one grammar object, so a state's mask is computed once (the idea behind Outlines'
// per-state token index and XGrammar's adaptive token-mask cache; computed lazily here,
// for the states actually reached, instead of ahead of time).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"

namespace herd::grammar {

/// A token mask: bit (id % 64) of word id / 64 is set when token `id` is allowed.
using TokenMask = std::vector<uint64_t>;

inline bool MaskAllows(const TokenMask& m, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) / 64 < m.size() && ((m[static_cast<size_t>(id) / 64] >> (id % 64)) & 1u);
}

/// The masks of one grammar's recent matching states over one vocabulary. Thread-safe:
/// shared by the samplers of every sequence using the grammar. Memory: at most
/// max_entries masks of n_tokens / 8 bytes (4 KB each for 32,000 tokens) plus their keys
/// (the stacks' element pointers); the oldest entry is dropped first.
class MaskCache {
 public:
  struct Limits {
    size_t max_entries = 1024;
    /// States whose key (8 bytes per stack element, plus 8 per stack) is longer are not
    /// cached (their masks are computed each time).
    size_t max_key_bytes = 64 * 1024;
  };
  struct Stats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0;
  };

  /// `grammar` is the object the matchers were created from (states of matchers of
  /// another grammar object are computed, never cached); `pieces` the vocabulary.
  MaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces, Limits limits);
  MaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces)
      : MaskCache(std::move(grammar), std::move(pieces), Limits()) {}

  /// The mask of `m`'s state over every token of the vocabulary: exactly the tokens
  /// m.CheckTokens allows (EOG tokens when the grammar can end).
  std::shared_ptr<const TokenMask> Mask(const Matcher& m);
  /// Whether `m`'s state has a mask in the cache (no computation; not counted in stats).
  bool Cached(const Matcher& m) const;
  /// Mask(m) written as allowed[id] = 0/1 for id in [0, n_tokens).
  void Mask(const Matcher& m, uint8_t* allowed);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenPieces& pieces() const { return *pieces_; }
  Stats stats() const;

 private:
  std::shared_ptr<const TokenMask> Compute(const Matcher& m) const;

  const std::shared_ptr<const Grammar> grammar_;
  const std::shared_ptr<const TokenPieces> pieces_;
  const Limits limits_;
  std::vector<int32_t> all_ids_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  std::deque<std::string> order_;  // insertion order, oldest first
  Stats stats_;                    // masks_, order_, stats_ under mu_
};

/// Parsed grammars by source text, each with its MaskCache, for one vocabulary: the
/// requests that send the same grammar (one schema, many requests or n > 1 choices)
/// share the parse and the masks. Thread-safe; keeps the `max_grammars` most recently
/// used (memory: at most max_grammars x MaskCache::Limits::max_entries masks).
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenPieces> pieces, size_t max_grammars = 32,
               MaskCache::Limits mask_limits = {256, 64 * 1024});

  /// The MaskCache of `text`'s grammar (Grammar::Parse; its errors are returned, and
  /// nothing is cached for them).
  absl::StatusOr<std::shared_ptr<MaskCache>> Get(const std::string& text);
  const std::shared_ptr<const TokenPieces>& pieces() const { return pieces_; }

 private:
  const std::shared_ptr<const TokenPieces> pieces_;
  const size_t max_grammars_;
  const MaskCache::Limits mask_limits_;
  std::mutex mu_;
  uint64_t clock_ = 0;  // under mu_, with entries_
  struct Entry {
    std::shared_ptr<MaskCache> cache;
    uint64_t last_use = 0;
  };
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace herd::grammar
