// Adaptive speculation for a batching target (the scheduler's side of speculative
// decoding under load): how long each sequence's next draft should be, given how often
// its drafts are accepted and what one more token in the batch costs, and a switch
// that stops drafting while it measurably does not pay.
//
// The model. A draft of k tokens whose tokens are each accepted with probability a
// (given the previous ones were) yields E(k) = (1 - a^(k+1)) / (1 - a) tokens per pass
// (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
// eq. 1). One forward pass over T batch tokens takes t(T) = t0 + c*T (a fixed part --
// weights read once per pass: decode is memory-bound -- plus a per-token part, fitted
// online from the scheduler's own passes: IterationCostModel), and drafting the pass's
// drafts takes d0 + d*k for its longest draft k (the draft calls' fixed time plus one
// draft step per position, shared by the n sequences that draft: the same fit over the
// scheduler's waits for drafts). A sequence's share of a plain pass is t(T)/T; its
// k-token draft adds k*(c + d/n) + d0/n to it and yields E(k) instead of one token, and
// DraftLengthFor picks the k with the most tokens per second (Leviathan et al. sec. 3.4
// choose k the same way, with a drafter whose cost is a fixed fraction of the
// target's). Small batches (memory-bound) with a cheap drafter draft long; full
// batches, where every extra token costs as much as it yields, and slow drafters draft
// little or nothing (vLLM and SGLang report speculation's gain shrinking as load rises
// for the same reason).
//
// Acceptance a is estimated per sequence as accepted / (accepted + rejections) over
// its recent drafts (the maximum-likelihood estimate of a geometric acceptance), with
// exponential forgetting, starting from a prior. A sequence whose estimate falls below
// the threshold stops drafting and probes again every `probe_interval` passes with a
// one-token draft, so a sequence whose text becomes predictable resumes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace herd::engine::spec {

/// Per-token acceptance of one sequence's drafts (not thread-safe).
class AcceptanceEstimate {
 public:
  /// `prior` in (0, 1): the estimate before any draft, weighted as `prior_weight`
  /// draft tokens; `decay` in (0, 1]: weight kept by past drafts per new draft.
  explicit AcceptanceEstimate(double prior = 0.6, double prior_weight = 2, double decay = 0.8);
  /// A verified draft of `drafted` tokens of which the first `accepted` were accepted.
  void Record(int32_t drafted, int32_t accepted);
  /// The estimate of a, in [0, 1).
  double rate() const;
  /// Drafts recorded.
  int64_t drafts() const { return drafts_; }

 private:
  double accepted_, trials_, decay_;
  int64_t drafts_ = 0;
};

/// How a sequence's last pass ended as to drafts: a draft fully accepted, partly
/// accepted (its first tokens), or rejected at its first token; kAfterMiss: no draft,
/// within kAfterMissPasses passes of a partly accepted or rejected one (AfterPlainPass);
/// kNone: no draft otherwise (or a draft that failed: nothing learnt of the text).
enum class DraftOutcome { kNone, kAccepted, kPartial, kRejected, kAfterMiss };

/// Passes without a draft after a missed one that still count as its run (kAfterMiss).
inline constexpr int32_t kAfterMissPasses = 2;

/// The outcome of a pass without a draft, the `plain_passes`-th (>= 1) in a row, after a
/// last outcome `last`.
DraftOutcome AfterPlainPass(DraftOutcome last, int32_t plain_passes);

/// The outcome of a draft of `drafted` (> 0) tokens of which the first `accepted` were
/// accepted.
DraftOutcome OutcomeOf(int32_t drafted, int32_t accepted);

/// Acceptance after each kind of draft outcome, pooled over the sequences of one drafter
/// type. Acceptance comes in runs (a stretch of text the draft model predicts, then one
/// it does not): the per-token geometric estimate of a sequence (AcceptanceEstimate) is
/// its average, while the draft after one rejected at its first token is mostly
/// rejected too. Measured with spec_serve_bench (llama-110m F16 target, Q5_0 draft, one
/// stream): 0.28 per token after such a draft (its first token rejected 74% of the
/// time), 0.74 after a partly accepted one, 0.91 after a fully accepted one, against
/// 0.85 overall. Speculative decoding's gain depends on acceptance runs the same way
/// (Leviathan et al. 2023 assume i.i.d. acceptance; SpecDec++, Huang et al. 2024, and
/// DISCO, Mamou et al. 2024, stop drafting where the next token is likely rejected).
/// Not thread-safe.
class OutcomeAcceptance {
 public:
  /// A draft of `drafted` tokens, `accepted` of them accepted, that followed a pass whose
  /// outcome was `previous`.
  void Record(DraftOutcome previous, int32_t drafted, int32_t accepted);
  /// The acceptance to plan a sequence's next draft with, given its own estimate `own`
  /// and the outcome of its last pass: after a partly accepted or rejected draft, or a
  /// pass without a draft just after one (kAfterMiss), at most the pooled acceptance
  /// after such passes (once kMinDrafts of them were seen); `own` otherwise.
  double Adjust(double own, DraftOutcome last) const;
  /// Drafts seen after the outcome `previous`.
  int64_t drafts(DraftOutcome previous) const { return after_[Index(previous)].drafts(); }
  static constexpr int64_t kMinDrafts = 4;

 private:
  static size_t Index(DraftOutcome o) { return static_cast<size_t>(o); }
  AcceptanceEstimate after_[5] = {AcceptanceEstimate(0.6, 2.0, 0.95), AcceptanceEstimate(0.6, 2.0, 0.95),
                                  AcceptanceEstimate(0.6, 2.0, 0.95), AcceptanceEstimate(0.6, 2.0, 0.95),
                                  AcceptanceEstimate(0.6, 2.0, 0.95)};
};

/// The smallest per-token cost DraftLengthFor is given (the scheduler's floor, in
/// units of the sequence's share of a plain pass): a draft token must be accepted with
/// some probability to be asked for even when verifying and drafting it look free.
inline constexpr double kMinDraftTokenShare = 0.05;

/// What the scheduler adds to a draft's fixed cost (in shares of a plain pass) before it
/// asks for one: a draft must promise a few percent more than the fits say it costs,
/// since near a tie (a full batch, acceptance near 1: 1.99 tokens for 1.93 shares) the
/// fits' error and the draft waits they have not seen yet (a deadline missed) decide,
/// and asking then lost 5-20% at 16 streams (spec_serve_bench, F16 target, Q8_0 draft).
inline constexpr double kDraftGainMargin = 0.05;

/// The draft length k in [0, k_max] that maximizes one sequence's expected tokens per
/// second, E(k) / (1 + [k > 0] * fixed + k * per_token), with E = ExpectedTokens and the
/// costs in units of the time of the sequence's share of a plain pass (t(T) / T):
/// `per_token` is what one more draft token adds (its verification in the pass, c, plus
/// its share of a draft step), `fixed` what asking for a draft at all adds (the draft
/// call's fixed time). The smallest such k on ties; 0 when no draft beats none. With
/// fixed = 0 the drafts are long while per_token is small against the acceptance (a
/// memory-bound pass, a cheap drafter) and short or none when each token costs as much
/// as it yields (a full, compute-bound batch).
int32_t DraftLengthFor(double acceptance, double per_token, double fixed, int32_t k_max);

/// Expected tokens per pass of a k-token draft at per-token acceptance a: sum of a^i,
/// i = 0..k.
double ExpectedTokens(double acceptance, int32_t k);

/// Online fit of a forward pass's time t(T) = t0 + c*T over batch tokens T (least
/// squares with exponential forgetting, regularized toward `prior_c_share`: the
/// per-token share c*T/t(T) at T = 1 assumed before the data says otherwise).
/// Not thread-safe.
class IterationCostModel {
 public:
  explicit IterationCostModel(double prior_c_share = 0.05, double decay = 0.98);
  /// One pass of `batch_tokens` (>= 1) that took `seconds` (> 0).
  void Observe(int32_t batch_tokens, double seconds);
  /// The per-token share of a pass of `batch_tokens`: c*T / (t0 + c*T), in [0, 1].
  double TokenShare(int32_t batch_tokens) const;
  /// Passes observed (a fit needs at least two distinct batch sizes).
  int64_t n() const { return n_; }
  double t0() const;
  double c() const;

 private:
  void Fit(double* t0, double* c) const;
  double prior_share_, decay_;
  double sw_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  int64_t n_ = 0;
};

/// A sequence's draft costs for DraftLengthFor, in units of its share of a plain pass.
struct DraftCosts {
  /// What one more draft token adds: its verification (c) plus its share of a draft step.
  double per_token = kMinDraftTokenShare;
  /// What asking for a draft at all adds: its share of the draft call's fixed time.
  double fixed = 0;
  /// What one more draft token's verification alone adds (per_token were drafting free):
  /// where drafts pay at this cost but not at per_token and fixed, the measured wait for
  /// drafts is what stops them (the scheduler re-measures it now and then).
  double verify_per_token = kMinDraftTokenShare;
};

/// The wait for a pass's drafts in the unit `draft` fits (DraftCostsFor): `seconds`
/// over the plain pass time t(n) of `pass` at n = `n_drafting` (>= 1) tokens, the
/// target's own time for a batch as large as the draft model's. A draft model batches
/// its sequences like the target does, so its step over n sequences costs about the
/// same fraction of t(n) whatever n is, where seconds per draft step measured at one
/// sequence would price a 16-sequence draft step as if it were one sequence's (the
/// drafter's cost as a fraction of the target's: Leviathan et al. 2023's c). 0 while
/// `pass` has no passes.
double NormalizedDraftWait(const IterationCostModel& pass, int32_t n_drafting, double seconds);

/// The costs of one sequence's draft among `n_decoding` decoding sequences, `n_drafting`
/// of which draft: t(T)/T is its share of a plain pass (T = n_decoding), c per verified
/// token, and the wait for drafts of up to k tokens (shared by the drafting sequences)
/// is (d0 + d*k) * t(n_drafting), d0 + d*k being `draft`'s fit of NormalizedDraftWait
/// over the longest draft. Before any pass, the pass model's token share (floored at
/// kMinDraftTokenShare); before any draft was waited for, drafting looks free.
DraftCosts DraftCostsFor(const IterationCostModel& pass, const IterationCostModel& draft, int32_t n_decoding,
                         int32_t n_drafting);

/// The wait for a pass's drafts as DraftCostsFor takes it, fitted apart for steady
/// passes (every drafting sequence drafted in its previous pass too) and cold ones (some
/// did not: a draft model first evaluates the tokens it missed, and has drafted nothing
/// ahead, e.g. services/draft --draft_ahead), and the probes that re-measure it where it
/// alone stops drafting. The fits learn only from passes that draft, so one slow wait
/// (a catch-up, a busy draft worker) would otherwise stop drafting for good: after
/// kProbeInterval plans in which the wait alone stopped some sequence's drafts (drafts
/// would pay were drafting free), the next kProbePasses plans draft (at most
/// kProbeTokens each; the first is cold, the next ones steady); the interval doubles up to
/// kMaxProbeInterval while probes end with drafting stopped again, and returns to
/// kProbeInterval once the costs let drafts through. Not thread-safe.
class DraftWaitModel {
 public:
  static constexpr int32_t kProbeInterval = 32, kMaxProbeInterval = 512, kProbePasses = 3, kProbeTokens = 4;
  /// One pass's wait for drafts of `n_drafting` (>= 1) sequences: `normalized_wait`
  /// (NormalizedDraftWait) over its longest draft `longest` (> 0); `cold` as above.
  void Observe(int32_t longest, double normalized_wait, bool cold, int32_t n_drafting = 1);
  /// The fit for DraftCostsFor when `n_drafting` sequences draft: the steady one of
  /// passes of as many (one, or several) once it has a pass, else the cold one (a drafter
  /// fast only while it drafts every pass is not priced by its catch-ups once measured
  /// steady, and a slow one is not taken as free meanwhile). One sequence's steady waits
  /// do not price several's: a draft worker drafts ahead for one (or a few) sequences
  /// only (services/draft --draft_ahead_max_seqs), so its 1-4 ms answers at one stream
  /// said nothing of a burst of 16 sequences' first drafts.
  const IterationCostModel& fit(int32_t n_drafting = 1) const {
    const IterationCostModel& steady = n_drafting > 1 ? steady_many_ : steady_;
    return steady.n() > 0 ? steady : cold_;
  }
  /// Whether the plan being made is a probe.
  bool probing() const { return probe_left_ > 0; }
  /// A plan made: whether the wait alone stopped some sequence's drafts, and whether some
  /// sequence drafted by the costs (not as a probe).
  void Planned(bool wait_stopped, bool drafted_by_costs);
  /// Plans until the next probe while the wait keeps stopping drafts.
  int32_t next_probe_in() const { return wait_; }

 private:
  IterationCostModel steady_{0.9}, steady_many_{0.9}, cold_{0.9};
  int32_t wait_ = kProbeInterval, interval_ = kProbeInterval, probe_left_ = 0;
};

/// The worker-level switch: compares the tokens per second of passes that carried
/// drafts (draft wait included) with what plain passes of the same sequences would
/// have produced (IterationCostModel's t(T) at one token per sequence). While the
/// measured speedup is below `min_speedup` over the recent window, Enabled() is false
/// for `cooldown` passes, then drafting is tried again. Each switch-off that follows a
/// retry which did not pay doubles the cooldown (up to kMaxCooldownFactor times
/// `cooldown`), so a load where drafting never pays (a full batch on a compute-bound
/// backend, a draft that is always rejected) spends ever fewer passes on retries; a
/// window that pays brings it back to `cooldown`. A pass of half or twice the sequences
/// of the pass that switched drafting off ends the cooldown at once (with the cooldown
/// back to `cooldown`): drafting that did not pay at 16 streams may at one. Not
/// thread-safe.
class SpeculationSwitch {
 public:
  explicit SpeculationSwitch(double min_speedup = 1.0, int32_t cooldown = 64, double decay = 0.95);
  /// One pass: `sequences` decode sequences, `tokens_out` tokens they produced,
  /// `draft_tokens` draft tokens asked for (0: a plain pass, not counted; a pass whose
  /// drafts failed or came back empty counts, its wait is a cost of speculation),
  /// `seconds` the pass plus the wait for its drafts, `plain_seconds` the model's time
  /// of the pass without drafts.
  void Observe(int32_t sequences, int32_t tokens_out, int32_t draft_tokens, double seconds, double plain_seconds);
  /// Whether drafts should be asked for now.
  bool Enabled() const { return cooldown_left_ <= 0; }
  /// The recent speedup estimate (1 before any speculative pass).
  double speedup() const;
  /// Times the switch turned speculation off.
  int64_t offs() const { return offs_; }
  /// The cooldown of the next switch-off, in passes.
  int32_t next_cooldown() const { return next_cooldown_; }
  static constexpr int32_t kMaxCooldownFactor = 8;

 private:
  double min_speedup_, decay_;
  int32_t cooldown_;
  int32_t cooldown_left_ = 0;
  int32_t next_cooldown_;
  // Decayed sums over speculative passes: tokens produced and seconds taken, and the
  // sequences and model seconds of the same passes without drafts.
  double tokens_ = 0, seconds_ = 0, plain_tokens_ = 0, plain_seconds_ = 0;
  int32_t since_on_ = 0;       // speculative passes since drafting was (re)enabled
  int32_t off_sequences_ = 0;  // sequences in the pass that last switched drafting off
  int64_t offs_ = 0;
};

}  // namespace herd::engine::spec
