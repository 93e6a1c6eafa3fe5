// The speculative decoding loop, shared by the single-process generation
// (spec_generate.cc: `herd run --spec-type`, benchmarks) and the gateway (drafts from a
// draft worker, verified by the target worker): llama.cpp's examples/speculative-simple
// and server draft path. Each iteration asks the DraftSource for a draft sized to the
// room left, has the target verify it in one pass (VerifyDraft on the target's side),
// reports the accepted length back and feeds the produced tokens to the source.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/spec/drafter.h"

namespace herd::engine::spec {

/// What bounds every draft of a loop (besides the room the caller reports).
struct SpecLoopLimits {
  /// No draft is asked for when fewer than max(1, draft_min) tokens fit (llama.cpp's
  /// server skips drafting there too).
  int32_t draft_min = 0;
  /// Longest draft (SpecConfig::draft_max).
  int32_t draft_max = 16;
  /// The target's own cap on a draft (a worker's max_draft); 0 = none.
  int64_t target_max_draft = 0;
  /// Draft ids must lie in [0, n_vocab); 0 = not checked.
  int64_t n_vocab = 0;
};

/// One verification pass as the loop sees it.
struct SpecPass {
  /// Tokens the pass produced: the accepted draft prefix, then the target's own token
  /// (fewer when the sequence ended inside the pass).
  std::vector<int32_t> tokens;
  /// Draft tokens the target accepted.
  int32_t n_accepted = 0;
  /// The sequence ended (end of generation, stop string, length, context, or the
  /// caller's reason to stop): the loop returns after this pass.
  bool end = false;
};

/// The caller's half of the loop.
struct SpecLoopHooks {
  /// Draft tokens the next pass may carry: the room left before n_predict and the end
  /// of the sequence's context (the pass also yields one token of its own).
  std::function<int64_t()> room;
  /// Runs one target pass over `draft` (empty: a plain step). An error ends the loop
  /// and is returned by RunSpecLoop.
  std::function<absl::StatusOr<SpecPass>(const DraftResult& draft)> verify;
  /// Called with each pass after the source has seen its outcome (Accept, Append), so
  /// that statistics read here include it: delivers the tokens (to the client, the
  /// output) and may set `pass.end`. An error ends the loop. Optional.
  std::function<absl::Status(SpecPass& pass)> deliver;
  /// Called with each Propose error (the pass then runs without a draft). Optional.
  std::function<void(const absl::Status&)> on_draft_error;
};

/// Runs passes until one ends the sequence (OK) or a hook fails (its error).
/// The source must already hold the sequence's history (its Append calls so far); the
/// loop appends every pass's tokens, and reports acceptance of non-empty drafts.
absl::Status RunSpecLoop(DraftSource& source, const SpecLoopLimits& limits, const SpecLoopHooks& hooks);

/// Drops what a target would refuse from a draft: cuts it before its first token
/// outside [0, n_vocab) (n_vocab 0 = unchecked) and to `n_max` tokens; keeps its
/// distributions only when every one is valid (ids in range, finite non-negative
/// probabilities, some mass, q(token) > 0), else clears them (the draft is then
/// verified as deterministic: sample and match, still exact).
void SanitizeDraft(DraftResult* draft, int64_t n_vocab, int64_t n_max);

}  // namespace herd::engine::spec
