// Self-speculative n-gram drafters over a sequence's own token history (llama.cpp
// common/ngram-map.{h,cpp}, PR #18471): ngram-simple, ngram-map-k and ngram-map-k4v.
//
// Terms: the history h[0..L) is the prompt plus every token produced so far; the key
// is its last n tokens h[L-n..L); an "earlier occurrence" of the key starts at some
// j < L-n. Positions before the first token are never consulted, so nothing depends
// on how the history was chunked into calls.
//
// Deliberate refinements of llama.cpp's code (same behaviour otherwise):
//  - occurrences at position 0 count (llama.cpp uses 0 as "no match");
//  - ngram-simple has no minimum history length and no "draft shorter than n is
//    dropped" rule (the n_min/n_max rules of SpecSession apply to every type alike),
//    and continues a draft that reaches the end of the history periodically;
//  - ngram-map-k honours min_hits (llama.cpp's key_only branch returns before the
//    min_hits test) and remembers accepted counts (llama.cpp's first version never
//    recorded them for key_only);
//  - ngram-map-k4v counts each occurrence once (llama.cpp rescans the last match
//    position on the next lookup) and drafts the top value's own m-gram (llama.cpp
//    copies the m tokens after the most recent occurrence, whichever value they are);
//    the dominance test is llama.cpp's 3x rule.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "libs/engine/spec/drafter.h"

namespace herd::engine::spec {

/// Occurrence counters saturate here (llama.cpp COMMON_NGRAM_MAX_VALUE_COUNT).
inline constexpr int32_t kNgramMaxCount = 16380;
/// m-gram values remembered per key by ngram-map-k4v (COMMON_NGRAM_MAX_VALUES).
inline constexpr int kNgramMaxValues = 4;

/// ngram-simple (llama.cpp common_ngram_simple_draft): the most recent earlier
/// occurrence of the key, at j, proposes the m tokens that followed it. Where those
/// run past the end of the history they continue with the draft itself, i.e. the text
/// since the occurrence is taken to repeat with period L - n - j (llama.cpp instead
/// stops at the end of the history, so a loop shorter than n_min never drafts). A
/// search runs only when at least check_rate tokens were added since the previous
/// search (the first call always searches).
class NgramSimpleDrafter : public Drafter {
 public:
  NgramSimpleDrafter(int32_t n, int32_t m, int32_t check_rate) : n_(n), m_(m), check_rate_(check_rate) {}
  SpecType type() const override { return SpecType::kNgramSimple; }
  DraftResult Draft(const std::vector<int32_t>& history, const DraftParams& params) override;

 private:
  int32_t n_, m_, check_rate_;
  bool checked_ = false;
  size_t last_check_ = 0;
};

/// ngram-map-k and ngram-map-k4v (llama.cpp common_ngram_map_draft / _accept).
///
/// Only occurrences followed by a whole m-gram inside the history count
/// (j + n + m <= L). Each lookup that finds an earlier occurrence of the key counts one
/// hit for that key (key statistics live for the whole sequence); a key drafts only
/// once it has at least min_hits hits.
///
/// ngram-map-k: the draft is the m-gram after the most recent earlier occurrence.
///
/// ngram-map-k4v: every earlier occurrence's m-gram is a value of the key, with an
/// occurrence count; up to 4 distinct values are kept (a fifth distinct value is not
/// counted). The key drafts only when the top value's count is at least three times
/// the sum of the others' (counts (3,1) draft, (2,1) do not); the draft is the top
/// value's own m-gram.
///
/// Both: each (key, value) remembers how many tokens of its last draft were accepted
/// (initially m), and later drafts from it are cut to that many tokens.
class NgramMapDrafter : public Drafter {
 public:
  /// four_values: true for ngram-map-k4v, false for ngram-map-k.
  NgramMapDrafter(bool four_values, int32_t n, int32_t m, int32_t check_rate, int32_t min_hits)
      : four_values_(four_values), n_(n), m_(m), check_rate_(check_rate), min_hits_(min_hits) {}
  SpecType type() const override { return four_values_ ? SpecType::kNgramMapK4v : SpecType::kNgramMapK; }
  DraftResult Draft(const std::vector<int32_t>& history, const DraftParams& params) override;
  void Accepted(int32_t n_accepted) override;

  /// Statistics of one value m-gram of a key.
  struct Value {
    int64_t pos = -1;        // history index of one occurrence of the m-gram; -1 = empty slot
    int32_t count = 0;       // occurrences after the key
    int32_t n_accepted = 0;  // accepted tokens of its last draft (starts at m)
  };
  /// Statistics of one key n-gram.
  struct Key {
    int32_t hits = 0;        // lookups that found an earlier occurrence
    int64_t scanned_to = 0;  // occurrences starting before this index are counted
    Value values[kNgramMaxValues];
  };
  /// The statistics of key `key` (n tokens), or nullptr if it was never found.
  const Key* FindKey(const std::vector<int32_t>& key) const;
  size_t n_keys() const { return keys_.size(); }

 private:
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };
  bool four_values_;
  int32_t n_, m_, check_rate_, min_hits_;
  bool checked_ = false;
  size_t last_check_ = 0;
  std::unordered_map<std::vector<int32_t>, Key, VecHash> keys_;
  Value* last_value_ = nullptr;  // value of the last draft (element pointers are stable)
};

}  // namespace herd::engine::spec
