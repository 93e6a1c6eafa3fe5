// Speculative-decoding configuration: the drafter types and parameters of llama.cpp's
// --spec-type / --spec-ngram-* / --draft-* options (common_params_speculative), with
// the same names, defaults and ranges, and the statistics llama.cpp prints per drafter
// (common_speculative_print_stats).
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::engine::spec {

/// Drafter types (llama.cpp common_speculative_type, spelled as --spec-type takes them).
enum class SpecType {
  kNone,         // "none": no speculation
  kNgramSimple,  // "ngram-simple": common_ngram_simple_draft
  kNgramMapK,    // "ngram-map-k": common_ngram_map_draft, key_only
  kNgramMapK4v,  // "ngram-map-k4v": common_ngram_map_draft, up to 4 values per key
  kNgramCache,   // "ngram-cache": common_ngram_cache_draft (llama-lookup)
  kDraftModel,   // "draft-model": a small model (common_speculative_state_draft)
};

/// "none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache", "draft-model".
const char* SpecTypeName(SpecType t);

/// Parses a type name. Accepts the names above, '_' for '-' (llama.cpp's older
/// spelling), "" as "none" and "draft" as "draft-model". INVALID_ARGUMENT naming
/// `field` and listing the valid names otherwise.
absl::StatusOr<SpecType> ParseSpecType(absl::string_view name, absl::string_view field = "type");

/// Upper bound of draft_max, ngram_size_n and ngram_size_m.
inline constexpr int32_t kSpecMaxSize = 1024;

/// One sequence's speculative configuration. Field names follow the wire contract
/// (herd.v1.SpeculativeConfig); the llama.cpp option of each is noted.
struct SpecConfig {
  SpecType type = SpecType::kNone;  // --spec-type
  /// n_max (--draft-max): most tokens one draft may hold. Drafts longer than this are
  /// cut to it (every type); the draft model stops generating at it.
  int32_t draft_max = 16;
  /// n_min (--draft-min): drafts shorter than this are dropped (every type).
  int32_t draft_min = 0;
  /// p_min (--draft-p-min): the draft model stops drafting at the first position
  /// whose most likely token has a probability below this (draft-model only).
  float draft_p_min = 0.75f;
  /// Key size n (--spec-ngram-size-n): n-gram length looked up in the history.
  int32_t ngram_size_n = 12;
  /// Draft size m (--spec-ngram-size-m): m-gram length proposed after a key.
  int32_t ngram_size_m = 48;
  /// --spec-ngram-check-rate: search again only once this many tokens were added
  /// since the last search (ngram-simple, ngram-map-k, ngram-map-k4v).
  int32_t ngram_check_rate = 1;
  /// --spec-ngram-min-hits: a key drafts only once it has been looked up and found
  /// this many times (ngram-map-k, ngram-map-k4v).
  int32_t ngram_min_hits = 1;

  bool operator==(const SpecConfig& o) const;
  bool operator!=(const SpecConfig& o) const { return !(*this == o); }
};

/// Checks the ranges of the wire contract: draft_max in 0..1024, 0 <= draft_min <=
/// draft_max, draft_p_min in [0, 1] (not NaN), ngram_size_n and ngram_size_m in
/// 1..1024, ngram_check_rate >= 1, ngram_min_hits >= 1. INVALID_ARGUMENT naming the
/// field (e.g. "ngram_size_n: 0 is outside 1..1024") otherwise.
absl::Status ValidateSpecConfig(const SpecConfig& c);

/// A ValidateSpecConfig message with the field named as the flag that sets it in
/// herd-draft and the gateway ("ngram_size_n: ..." -> "--spec_ngram_size_n: ...", "type:"
/// -> "--spec_type:"); any other message as given.
std::string SpecConfigMessageForFlags(const std::string& msg);

/// llama.cpp-style speculative statistics of one drafter (per sequence, or summed).
struct SpecStats {
  SpecType type = SpecType::kNone;
  int64_t calls = 0;       // #calls: drafts asked for
  int64_t gen_drafts = 0;  // #gen drafts: non-empty drafts returned
  int64_t acc_drafts = 0;  // #acc drafts: drafts with at least one token accepted
  int64_t gen_tokens = 0;  // #gen tokens: tokens drafted (after the n_min/n_max rules)
  int64_t acc_tokens = 0;  // #acc tokens: drafted tokens the target accepted

  /// acc_tokens / gen_tokens (0 when nothing was drafted).
  double acceptance_rate() const;
  /// Adds `o`'s counters (types are not checked).
  void Add(const SpecStats& o);
  /// One line as llama.cpp prints it, e.g. "statistics ngram-simple: #calls = 75,
  /// #gen drafts = 12, #acc drafts = 12, #gen tokens = 500, #acc tokens = 470,
  /// acceptance rate = 0.940".
  std::string ToString() const;
};

}  // namespace herd::engine::spec
