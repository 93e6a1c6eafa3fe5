// The drafter interface of speculative decoding: given a sequence's token history,
// propose tokens the target model is likely to produce next (llama.cpp
// common_speculative_state: begin / draft / accept). One Drafter per sequence; its
// state starts fresh with the sequence.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/engine/spec/spec_config.h"

namespace herd::engine::spec {

/// One entry of a sparse probability distribution over token ids.
struct TokenProb {
  int32_t id;
  float p;
};
/// A sparse distribution: tokens not listed have probability 0.
using SparseDist = std::vector<TokenProb>;

/// What a drafter is asked for one draft.
struct DraftParams {
  /// Most tokens wanted (>= 0). Drafters may return more; SpecSession cuts to it.
  int32_t n_max = 16;
  /// p_min (draft-model only): stop at the first position whose top token has a
  /// probability below this.
  float p_min = 0.75f;
  /// Draft-model only: 0 = greedy drafting (llama.cpp's default); > 0 = sample each
  /// draft token from the draft model's top-k distribution at this temperature and
  /// return that distribution (DraftResult::probs) for rejection sampling.
  float temp = 0.0f;
  /// Seed of the draws for temp > 0 (one per sequence; none = greedy whatever temp).
  /// The draw for the token drafted at history position i is DraftUniform(*seed, i):
  /// a draft depends on the seed, the history and its length only, never on earlier
  /// calls, so a call whose draft is dropped (a prompt's warm-up, a late or repeated
  /// call, a session rebuilt on another draft worker) changes no later draft.
  std::optional<uint32_t> seed;
  /// Draft-model only: no draft step starts that would end after this time (at the
  /// duration of the model's recent draft steps); the draft is the tokens made by then,
  /// at least the one the history's evaluation gives. The evaluation of new history
  /// is bounded too (at the model's measured speed; at least 16 tokens per call): a
  /// sequence whose new tokens do not fit has their first part evaluated and kept,
  /// and gets an empty draft (the next call goes on). Lets a draft worker answer
  /// within its caller's deadline with a shorter draft instead of none.
  std::chrono::steady_clock::time_point stop_by = std::chrono::steady_clock::time_point::max();
};

/// The uniform draw in [0, 1) (53 bits) of a sampled draft token at history position
/// `pos` (0-based: the index the token takes in the history) of the sequence with
/// `seed`: SplitMix64 (Steele et al. 2014) of (seed, pos). Independent of the target's
/// rejection-sampling draws (the scheduler's per-sequence mt19937).
inline double DraftUniform(uint32_t seed, int64_t pos) {
  uint64_t z = (static_cast<uint64_t>(seed) << 32 ^ static_cast<uint64_t>(pos)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

/// A proposed draft.
struct DraftResult {
  std::vector<int32_t> tokens;
  /// Empty when the draft is deterministic (n-gram types, greedy draft model). Else
  /// one entry per token: the distribution q that token was drawn from, which the
  /// verifier passes to RejectionSample (rejection.h).
  std::vector<SparseDist> probs;
};

/// A per-sequence drafter. Not thread-safe: one caller at a time.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual SpecType type() const = 0;

  /// Proposes tokens to follow `history`: the prompt plus every token the target has
  /// produced so far, its last sampled token included (llama.cpp passes the same as
  /// prompt_tgt + id_last). Between calls of one sequence the history only grows
  /// (earlier tokens never change). An empty result means "no draft".
  virtual DraftResult Draft(const std::vector<int32_t>& history, const DraftParams& params) = 0;

  /// The target accepted the first `n_accepted` tokens of the last non-empty draft
  /// (llama.cpp common_speculative_accept). Called at most once per such draft.
  virtual void Accepted(int32_t n_accepted) { (void)n_accepted; }
};

/// One sequence's drafts as the speculative loop (spec_loop.h) consumes them: the
/// sequence's history arrives incrementally, drafts are asked for with a length cap and
/// acceptance is reported back (llama.cpp common_speculative: begin / draft / accept).
/// This is the one interface both loops use: SpecSession implements it in-process over a
/// Drafter; the gateway implements it over a draft-worker session. A source that fails
/// costs speed, never correctness: an error counts as an empty draft. Not thread-safe.
class DraftBatcher;

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  /// Appends tokens to the sequence: the prompt first, then after each pass the tokens
  /// the target produced (the accepted draft prefix and the target's own token).
  virtual void Append(const std::vector<int32_t>& tokens) = 0;
  /// Proposes a draft of at most `n_max` (>= 1) tokens to follow the history (possibly
  /// empty). Errors (a remote drafter's UNAVAILABLE or DEADLINE_EXCEEDED) are counted
  /// by the caller and treated as an empty draft.
  virtual absl::StatusOr<DraftResult> Propose(int32_t n_max) = 0;
  /// The target verified the last non-empty draft and accepted its first `n_accepted`
  /// tokens. Not called for drafts that were not verified.
  virtual void Accept(int32_t n_accepted) = 0;
  /// The sequence ended: release resources (Stats() keeps working).
  virtual void End() {}
  /// llama.cpp's statistics so far (common_speculative_print_stats).
  virtual SpecStats Stats() const = 0;
  /// What can draft for this source together with others in one call (e.g. the pool of
  /// draft workers: one RPC per worker for every sequence it serves); nullptr = Propose
  /// alone. See ProposeAll.
  virtual DraftBatcher* batcher() { return nullptr; }
};

/// One draft asked for in a batch: the source, its cap, and (filled in) the result.
struct DraftJob {
  DraftSource* source = nullptr;
  int32_t n_max = 0;
  /// Remote sources (DraftBatcher): the call's deadline; 0 = the source's default.
  /// Jobs proposed together share the first job's.
  std::chrono::milliseconds deadline{0};
  absl::StatusOr<DraftResult> result = DraftResult{};
};

/// Drafts for several sources at once. Thread-compatible with its sources: called by
/// the one thread that drives them.
class DraftBatcher {
 public:
  virtual ~DraftBatcher() = default;
  /// Fills every job's result, as each source's Propose(n_max) would (errors per job).
  /// Every job's source returns this batcher from batcher().
  virtual void ProposeBatch(const std::vector<DraftJob*>& jobs) = 0;
};

/// Fills every job's result: the jobs whose sources share a batcher go to it in one
/// ProposeBatch call, the others are proposed one by one.
inline void ProposeAll(std::vector<DraftJob>* jobs) {
  std::vector<DraftBatcher*> batchers;
  for (DraftJob& j : *jobs) {
    DraftBatcher* b = j.source->batcher();
    if (b == nullptr) {
      j.result = j.source->Propose(j.n_max);
    } else if (std::find(batchers.begin(), batchers.end(), b) == batchers.end()) {
      batchers.push_back(b);
    }
  }
  for (DraftBatcher* b : batchers) {
    std::vector<DraftJob*> group;
    for (DraftJob& j : *jobs) {
      if (j.source->batcher() == b) group.push_back(&j);
    }
    b->ProposeBatch(group);
  }
}

/// A drafter that never drafts (type "none").
class NoneDrafter : public Drafter {
 public:
  SpecType type() const override { return SpecType::kNone; }
  DraftResult Draft(const std::vector<int32_t>&, const DraftParams&) override { return {}; }
};

}  // namespace herd::engine::spec
