// Verification of one draft on the target side: given the target's logits at the
// pending token and at every draft token (one batch), settle which draft tokens are
// accepted and which token follows them. Shared by the worker's scheduler
// (libs/engine/scheduler.cc) and the single-process loop (spec_generate.cc), so that
// both produce exactly the same tokens for the same logits, sampler state and RNG.
//
// Position i's token is produced from the logits after pending/draft[i-1]:
//  - Sample and match (deterministic drafts, or a greedy sequence): position i is one
//    Sampler::Sample() call; draft[i] is accepted while the sample equals it. Exact for
//    greedy sampling and for any deterministic draft: every token is sampled exactly as
//    without a draft (llama.cpp common_sampler_sample_and_accept_n).
//  - Rejection sampling (the draft carries its distributions q and the sequence samples
//    at temp > 0): RejectionStep(p_i, draft[i], q_i) with p_i = Sampler::Candidates()
//    (the whole sampler chain, penalties seeing the tokens settled so far); on a
//    rejection the emitted token comes from norm(max(0, p_i - q_i)) and the pass ends;
//    after a fully accepted draft the extra token is drawn from p_n. All draws come from
//    `rng`, so a verification equals RejectionSample(p, draft, q, rng).
// Every emitted token is Accept()ed by the sampler.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "absl/status/status.h"

#include "libs/engine/sampling.h"
#include "libs/engine/spec/drafter.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::engine::spec {

/// The outcome of VerifyDraft.
struct VerifyResult {
  /// The accepted draft prefix, then the target's own token (fewer when an
  /// end-of-generation token ends the pass early).
  std::vector<int32_t> tokens;
  /// Draft tokens accepted (tokens.size() - 1 when status is OK).
  int32_t n_accepted = 0;
  /// One per token when `n_logprobs` > 0.
  std::vector<TokenLogprobs> logprobs;
  /// The last token is end-of-generation (never with ignore_eos).
  bool eos = false;
  /// FAILED_PRECONDITION when the grammar allows no token or the sampler refuses a
  /// token; `tokens` then holds what was settled before.
  absl::Status status;
};

/// Settles positions 0..draft.size() of one verification pass.
///
/// `logits(i)`: the target's n_vocab logits at position i (after the pending token for
/// i = 0, after draft[i-1] otherwise). `draft_q`: empty for a deterministic draft, else
/// one distribution per draft token (DraftResult::probs); used only when the sampler's
/// temperature > 0. `n_logprobs` > 0 fills VerifyResult::logprobs with that many
/// alternatives per token. `ignore_eos`: end-of-generation tokens do not end the pass.
VerifyResult VerifyDraft(Sampler& sampler, const std::function<const float*(size_t)>& logits,
                         const std::vector<int32_t>& draft, const std::vector<SparseDist>& draft_q, std::mt19937& rng,
                         const tokenizer::Vocab& vocab, bool ignore_eos, int32_t n_logprobs = 0);

}  // namespace herd::engine::spec
