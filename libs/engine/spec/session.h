// One sequence's speculative state: its token history, its drafter, the n_min/n_max
// rules applied to every draft, and llama.cpp's statistics (common_speculative_draft /
// common_speculative_accept / common_speculative_print_stats).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/engine/spec/draft_model.h"
#include "libs/engine/spec/drafter.h"
#include "libs/engine/spec/ngram.h"
#include "libs/engine/spec/ngram_cache.h"
#include "libs/engine/spec/spec_config.h"

namespace herd::engine::spec {

/// What drafters share across sequences (read-only after start-up; may be null).
struct SpecResources {
  DraftModel* draft_model = nullptr;  // for draft-model (outlives every drafter)
  NgramCacheFiles ngram_cache;        // static/dynamic caches for ngram-cache
};

/// A fresh drafter for `config.type`. Errors: ValidateSpecConfig's INVALID_ARGUMENT;
/// FAILED_PRECONDITION for draft-model without a loaded draft model.
absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const SpecConfig& config, const SpecResources& resources);

/// A sequence's speculative session. Not thread-safe (one caller at a time).
///
/// Rules applied to every draft, whatever the type (llama.cpp server): the drafter's
/// proposal is cut to n_max = min(draft_max, the caller's cap), and dropped when
/// shorter than draft_min. Statistics follow llama.cpp: every Draft() call counts in
/// #calls; a non-empty draft counts in #gen drafts / #gen tokens; Accept() of such a
/// draft adds to #acc tokens, and to #acc drafts when at least one token was accepted.
class SpecSession : public DraftSource {
 public:
  /// Validates `config` and creates its drafter (errors as CreateDrafter). `seed`
  /// seeds the RNG used for temp > 0 draft-model drafting.
  static absl::StatusOr<std::unique_ptr<SpecSession>> Create(const SpecConfig& config, const SpecResources& resources,
                                                             uint32_t seed = 0);

  /// Appends tokens the target produced (the prompt on the first call).
  void Append(const std::vector<int32_t>& tokens) override;
  /// The target accepted `n_accepted` tokens of the last draft returned by Draft()
  /// (clamped to its size). Ignored when that draft was empty or already answered.
  void Accept(int32_t n_accepted) override;
  /// DraftSource: Draft(n_max, the temperature set with set_draft_temp()). Never fails.
  absl::StatusOr<DraftResult> Propose(int32_t n_max) override { return Draft(n_max, draft_temp_); }
  SpecStats Stats() const override { return stats_; }
  /// The temperature Propose() drafts at (a draft model samples its draft when > 0).
  void set_draft_temp(float temp) { draft_temp_ = temp; }
  /// Proposes a draft for the current history. `n_max_cap` > 0 further limits its
  /// length (e.g. tokens left before n_predict or the context end); `temp` > 0 asks a
  /// draft model to sample its draft (DraftResult::probs).
  DraftResult Draft(int32_t n_max_cap = 0, float temp = 0.0f);
  /// Draft() in two halves, so that a caller can run several sessions' drafters at once
  /// (DraftModel::DraftBatch): BeginDraft counts the call and returns false when there is
  /// nothing to draft (the draft is then empty; FinishDraft need not be called), else
  /// fills `params` for drafter()->Draft(history(), *params). FinishDraft applies the
  /// n_max / draft_min rules to that proposal and records it. Draft() is exactly
  /// BeginDraft, drafter()->Draft, FinishDraft.
  bool BeginDraft(int32_t n_max_cap, float temp, DraftParams* params);
  DraftResult FinishDraft(DraftResult proposal, const DraftParams& params);
  /// The session's drafter (its type is config().type).
  Drafter* drafter() { return drafter_.get(); }

  /// Drops the drafter's state and builds a new one for `config` (history and
  /// statistics of the old type are kept only if the type is unchanged).
  absl::Status Reconfigure(const SpecConfig& config, const SpecResources& resources);

  const std::vector<int32_t>& history() const { return history_; }
  const SpecConfig& config() const { return config_; }
  const SpecStats& stats() const { return stats_; }
  /// Size of the last draft still awaiting Accept() (0 if none).
  int32_t pending() const { return pending_; }

 private:
  SpecSession() = default;
  SpecConfig config_;
  std::unique_ptr<Drafter> drafter_;
  std::vector<int32_t> history_;
  SpecStats stats_;
  int32_t pending_ = 0;
  float draft_temp_ = 0.0f;
  uint32_t seed_ = 0;  // DraftParams::seed of sampled drafts
};

}  // namespace herd::engine::spec
