// Single-process speculative generation: the target engine verifies each draft of a
// SpecSession in one batch with the sequence's next token (llama.cpp
// examples/speculative-simple and the server's draft path). For `herd run
// --spec-type`, benchmarks, and as the reference the distributed loop (gateway +
// target worker + draft worker) must match.
//
// Verification: the batch is [last token, draft...], every position with logits.
// Position i's token is produced exactly as the target would produce it alone:
//  - deterministic drafts (n-gram types, greedy draft model): the sampler samples
//    position i; the draft token is accepted while that sample equals it ("sample and
//    match"). Greedy: the output is identical to Generate()'s; with temp > 0 each
//    output token is one Sampler::Sample call on the same logits, as in Generate().
//  - sampled draft-model drafts (DraftResult::probs): RejectionStep with the target's
//    Sampler::Candidates() distribution, so outputs follow the target's distribution.
// Rejected draft cells are removed from the KV cache.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

#include "libs/engine/engine.h"
#include "libs/engine/generate.h"
#include "libs/engine/spec/session.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::engine::spec {

struct SpecGenerateResult {
  /// As Generate() returns it, except `logits`, which stays empty.
  GenerateResult gen;
  /// The session's statistics at the end.
  SpecStats stats;
  /// Target forward passes (Decode calls) after prompt processing; each produced
  /// 1 + (accepted draft tokens) output tokens.
  int64_t target_passes = 0;
  /// Wall time spent asking the drafter, in ms (part of gen.tg_ms).
  double draft_ms = 0;
  /// Output tokens per target pass.
  double tokens_per_pass() const {
    return target_passes > 0 ? static_cast<double>(gen.output_ids.size()) / static_cast<double>(target_passes) : 0;
  }
};

/// Runs generation on sequence 0 of `engine` (its KV cache is cleared first), drafting
/// with `session` (a fresh session: the prompt is appended to it here). Same
/// parameters, stop rules, streaming and errors as Generate(); all_prompt_logits is
/// ignored. `session` may have type none (then this is plain generation in a loop).
absl::StatusOr<SpecGenerateResult> GenerateSpeculative(
    Engine& engine, const tokenizer::Vocab& vocab, const GenerateParams& params, SpecSession* session,
    const std::function<void(const std::string&)>& on_text = nullptr);

}  // namespace herd::engine::spec
