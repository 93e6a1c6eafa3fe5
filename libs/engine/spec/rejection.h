// Verification of a draft by speculative (rejection) sampling: Leviathan et al. 2023,
// "Fast Inference from Transformers via Speculative Decoding", and Chen et al. 2023,
// "Accelerating Large Language Model Decoding with Speculative Sampling". The output
// tokens are distributed exactly as if the target had sampled them one by one.
//
// For draft token x_i drawn from q_i, with p_i the target's sampling distribution at
// that position (after the accepted prefix): accept with probability
// min(1, p_i(x_i) / q_i(x_i)); on the first rejection, emit a token drawn from the
// residual norm(max(0, p_i - q_i)) and stop; if all are accepted, emit a token drawn
// from p_n. A deterministic draft (n-gram drafters, greedy draft model) has q_i = a
// point mass on x_i: then x_i is accepted with probability p_i(x_i) and the residual is
// p_i without x_i, which is the same as "sample from p_i and accept while it matches".
// With a greedy target (p_i one-hot) the result is exactly greedy decoding.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/engine/sampling.h"
#include "libs/engine/spec/drafter.h"

namespace herd::engine::spec {

struct RejectionResult {
  /// Draft tokens accepted (0..n_draft): the prefix draft[0..n_accepted) is kept.
  int32_t n_accepted = 0;
  /// The token emitted after the accepted prefix (the correction on a rejection, else
  /// a sample of the distribution after the whole draft). Always a valid token.
  int32_t token = -1;
};

/// Speculative sampling over one draft.
///
/// `target`: n_draft + 1 distributions; target[i] is the target's final sampling
/// distribution (after its whole sampler chain) at the position following draft[0..i).
/// `draft`: the n_draft draft tokens. `draft_q`: empty when every draft token is
/// deterministic, else n_draft entries, each the distribution draft[i] was drawn from
/// (an empty entry = deterministic). Distributions are sparse and need not be
/// normalized (they are scaled to sum 1). `rng` supplies the uniform draws.
///
/// Errors (INVALID_ARGUMENT, naming the argument and index): size mismatches, a
/// negative or non-finite probability, a distribution with no mass, or a draft token
/// with q(x) = 0 (it cannot have been drawn from q).
absl::StatusOr<RejectionResult> RejectionSample(const std::vector<SparseDist>& target,
                                                const std::vector<int32_t>& draft,
                                                const std::vector<SparseDist>& draft_q, std::mt19937& rng);

/// One position of RejectionSample, for verifiers that compute each target
/// distribution only after the previous token is settled (e.g. with repetition
/// penalties): accepts x with probability min(1, p(x)/q(x)) (q empty = point mass on
/// x) and returns {true, x}; otherwise returns {false, y} with y drawn from
/// norm(max(0, p - q)). Errors as RejectionSample (argument names "target" /
/// "draft_q", index 0).
struct RejectionStepResult {
  bool accepted = false;
  int32_t token = -1;
};
absl::StatusOr<RejectionStepResult> RejectionStep(const SparseDist& p, int32_t x, const SparseDist& q,
                                                  std::mt19937& rng);

/// The distribution of a Sampler::Candidates() result (ids and probabilities p).
SparseDist DistFromCandidates(const TokenDataArray& candidates);

/// A dense distribution (probs[id]) as a sparse one (zero entries dropped).
SparseDist DistFromDense(const std::vector<float>& probs);

}  // namespace herd::engine::spec
