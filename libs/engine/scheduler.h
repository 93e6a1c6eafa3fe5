// Continuous batching over one Engine (llama-server's slot loop, vLLM's scheduler).
//
// Sequences are started with a prompt and sampling parameters and receive a handle
// (Sequence). One scheduler thread loops: every iteration it gathers the pending work
// of ALL active sequences into ONE Batch -- prompt chunks (prefill; a long prompt is
// split over several iterations so that a batch stays within n_batch tokens), single
// decode tokens, and draft verifications (the sequence's last token followed by its
// draft tokens, logits for all) -- runs one Engine::Decode, then, per sequence, samples
// with that sequence's own Sampler and delivers a StepResult to the sequence's
// consumer.
//
// Positions and the "pending" token. The prompt's tokens 0..n-2 are prefilled eagerly
// as soon as the sequence is admitted. The last prompt token, and afterwards the last
// sampled token, is the sequence's *pending* token: it is not in the KV cache yet. A
// step evaluates [pending, draft...] at positions n_past, n_past+1, ..., samples
// position 0, and accepts draft token i while the token sampled at position i equals
// it ("sample and match": exact for greedy sampling and for deterministic drafts such
// as the n-gram drafters'). A draft sampled from a draft model at temperature > 0 comes
// with the distribution q_i each token was drawn from (Step's draft_probs); then, with
// a sampling (temp > 0) target, position i is settled by speculative (rejection)
// sampling, spec::RejectionStep(p_i, draft[i], q_i) with p_i the sampler's final
// distribution (Sampler::Candidates), and the token after a fully accepted draft is
// drawn from p_n with the same per-sequence RNG -- together exactly
// spec::RejectionSample, so outputs follow the target's distribution. A greedy target
// ignores q (sample and match is exact there). The result is the accepted draft
// tokens plus one sampled token; the KV cells of rejected draft tokens
// are removed (KvCache::SeqRemove(seq, pos, -1)) and the last sampled token becomes the
// new pending token. A step without draft is the same with an empty draft.
//
// A sequence advances only when its consumer asked for steps: Step(n_steps=K) yields up
// to K results without further requests, Step(draft) one verification. A result with
// eos (an end-of-generation token, unless ignore_eos) or context_full (the pending
// token makes prompt + completion = n_ctx_seq, llama.cpp's full context) drops the
// steps still requested; Step() after context_full is FAILED_PRECONDITION, after eos it
// continues generating (the consumer decides).
//
// The KV pool. All sequences take cells from the engine's one KV cache as they grow (no
// fixed share: a sequence may hold up to n_ctx_seq cells, n_ctx by default). The cache
// policy below (room for admission, prefix cache, eviction, the choice of the sequence
// to preempt) is KvCacheManager's (kv_cache_manager.h, tested without a model); the
// scheduler keeps the queue, plans batches, runs them and requeues what the manager
// preempts. At most `capacity()` = max_sequences sequences are active at once; the
// queue's head is admitted when a slot is free and the pool has room for its prompt
// beside the running sequences' next steps. When no slot or no room is free a new
// sequence waits in a FIFO queue (QueuePolicy::kWait, at most max_queue waiting, beyond
// that RESOURCE_EXHAUSTED) or is refused at once with RESOURCE_EXHAUSTED when no slot is
// free (kReject). When
// running sequences outgrow the pool, cached prefixes are evicted first (least recently
// used), then the most recently admitted sequence is preempted (vLLM's preemption by
// recomputation): its cells are freed and it goes back to the head of the queue; on
// re-admission it prefills its prompt and the tokens it has generated again, and
// continues with the same sampler and requests (its consumer sees only a pause). A
// sequence is never corrupted and never ended for lack of cells: alone it always fits
// (n_ctx_seq <= n_ctx).
//
// Prefix caching (config.prefix_cache; vLLM's automatic prefix caching, llama-server's
// cache_prompt). An ended (or cancelled) sequence's cells stay in the pool as a cached
// prefix (its tokens, up to max_cached_prefixes of them, least recently used dropped
// first). A new sequence shares the cells of the longest prefix of its prompt (all but
// the last token) that a cached prefix or a running sequence holds
// (KvCache::SeqCopy: the same tokens at the same positions have the same K/V) and
// prefills only the rest. Cells held only by cached prefixes count as free for
// admission and are evicted on demand. Stats: prefix_cache_lookups/hits,
// prefix_tokens_reused, prefix_evictions, preemptions, kv_cells_cached.
//
// Determinism. Every sequence has its own Sampler (penalty history seeded with the
// prompt), and the engine computes each token's logits from its own sequence's cells
// only, so with greedy sampling a sequence's tokens equal its solo output whatever else
// shares the batch (verified by scheduler_test). KvCache::Allocate gives each sequence
// cells that ascend with its positions while the pool has free cells after its last
// one, and the CPU attention skips other sequences' (masked) cells exactly, so attention
// sums its keys in the same order as alone; a shared prefix's cells hold the values the
// sequence would have computed itself. (After a preemption the recomputed cells come
// from a batched prefill, and in a fragmented pool the order may differ: outputs then
// agree within rounding, not bit for bit.) With a
// fixed seed and a deterministic draft, the sampled tokens also equal the no-draft ones:
// one Sample() call per emitted token, in the same order. Drafts with probabilities
// draw from a second per-sequence RNG seeded with Sampler::seed() ^ 0x5bd1e995 (as
// spec::GenerateSpeculative does), so a fixed seed gives the same output again.
//
// Embeddings. Embed() queues a job that the scheduler thread runs between two
// iterations (never inside one), with Engine::Embed on a temporary sequence id no slot
// uses, in free cells of the pool (cached prefixes are evicted to make room). The
// cells are freed before the next forward pass, so running sequences see neither the
// job's cells nor a change in their own cell order: their outputs are unchanged. Each
// iteration runs queued jobs of up to n_batch tokens in total (at least one job) before
// its batch, so embeddings and generation take turns.
//
// Thread-safety. Scheduler and Sequence methods may be called from any thread. The
// Engine (and its KV cache) belongs to the scheduler thread from Create() until the
// Scheduler is destroyed: do not touch it meanwhile. Events are delivered through a
// per-sequence queue (Sequence::Next/TryNext, safe to wait on from a gRPC thread with a
// timeout and woken by Cancel) and an optional notify callback run on the scheduler
// thread (or the thread calling Cancel/Start) without any scheduler lock held.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/engine.h"
#include "libs/engine/sampling.h"
#include "libs/engine/spec/drafter.h"
#include "libs/engine/spec/spec_config.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::engine {

/// What to do with a new sequence when every slot is taken.
enum class QueuePolicy { kWait, kReject };

/// Counters of one scheduler iteration, passed to the iteration observer.
struct IterationStats {
  int32_t batch_tokens = 0;      // tokens in the batch (0: no forward pass this iteration)
  int32_t batch_sequences = 0;   // sequences with tokens in the batch
  int32_t prompt_tokens = 0;     // prompt tokens evaluated
  int32_t generated_tokens = 0;  // tokens delivered in StepResults
  double seconds = 0;            // wall time of decode + sampling
  // Gauges after the iteration.
  int32_t active = 0;
  int32_t queued = 0;
  int64_t kv_cells_used = 0;
  int64_t kv_cells_cached = 0;  // held only by cached prefixes (evictable)
  int64_t kv_cells_total = 0;
};

/// A snapshot of the scheduler's state and cumulative counters.
struct SchedulerStats {
  int32_t active = 0;                      // admitted sequences (prefilling or generating)
  int32_t queued = 0;                      // waiting for admission
  int64_t kv_cells_used = 0;               // KV cells holding tokens (running or cached)
  int64_t kv_cells_cached = 0;             // KV cells held only by cached prefixes (evictable)
  int64_t kv_cells_total = 0;              // n_ctx
  int32_t cached_prefixes = 0;             // ended sequences kept for prefix caching
  uint64_t iterations = 0;                 // forward passes run
  uint64_t multi_sequence_iterations = 0;  // forward passes with > 1 sequence
  int32_t max_batch_sequences = 0;         // most sequences in one forward pass
  int32_t max_batch_tokens = 0;            // most tokens in one forward pass
  uint64_t batch_tokens_total = 0;         // sum of tokens over forward passes
  uint64_t tokens_generated = 0;           // tokens sampled: delivered in StepResults, or
                                           // dropped when Cancel landed during their pass
  uint64_t prompt_tokens = 0;              // prompt tokens evaluated
  uint64_t sequences_started = 0;          // admitted so far
  uint64_t embeddings = 0;                 // Embed() jobs run (successful or not)
  uint64_t embedding_tokens = 0;           // tokens evaluated by Embed() jobs
  uint64_t prefix_cache_lookups = 0;       // admissions with prefix caching on
  uint64_t prefix_cache_hits = 0;          // admissions that reused cached/running cells
  uint64_t prefix_tokens_reused = 0;       // prompt tokens not recomputed thanks to them
  uint64_t prefix_evictions = 0;           // cached prefixes dropped for room
  uint64_t preemptions = 0;                // sequences sent back to the queue for room
  // Speculation driven by the scheduler (sequences with a draft_source).
  uint64_t spec_passes = 0;           // verification passes that carried a draft
  uint64_t spec_draft_tokens = 0;     // draft tokens verified
  uint64_t spec_accepted_tokens = 0;  // of them, accepted
  uint64_t spec_draft_errors = 0;     // drafts that failed or missed their deadline (empty)
  uint64_t spec_switch_offs = 0;      // times the switch turned drafting off
  bool spec_enabled = true;           // the switch's state now
  double spec_speedup = 1.0;          // its recent speedup estimate
  double spec_draft_wait_ms = 0;      // total time the scheduler waited for drafts
};

struct SchedulerConfig {
  /// Most sequences active at once (>= 1).
  int32_t max_sequences = 8;
  /// Most KV cells one sequence may use (its context); 0 = n_ctx (the whole pool).
  /// Must be in [0, n_ctx].
  int64_t n_ctx_seq = 0;
  /// Keep ended sequences' cells and share prompt prefixes (see the file comment).
  bool prefix_cache = true;
  /// Most cached prefixes kept (>= 0; least recently used dropped first).
  int32_t max_cached_prefixes = 64;
  /// Most prompt tokens one iteration prefills while more than one sequence is active
  /// (0 = n_batch): prompts that arrive together are prefilled over several iterations,
  /// so the first of them start streaming sooner and running streams keep their pace
  /// (vLLM's chunked-prefill token budget). A sequence alone prefills n_batch at a time.
  int32_t max_prefill_tokens = 256;
  /// With more than one sequence active, also bound a pass's prompt tokens by time:
  /// those that fit in this many milliseconds beside the pass's decode steps, at the
  /// pass cost fitted online (t0 + c*T; at least 16 tokens). 0 = off. On a slow or
  /// shared host it keeps running streams' inter-token latency and the wait of short or
  /// cached prompts behind a long uncached one near this bound (Sarathi-Serve's
  /// latency-bounded chunk size). Prompts are prefilled shortest remaining first.
  int32_t max_prefill_ms = 0;
  /// Most sequences waiting for admission under QueuePolicy::kWait (>= 0).
  int32_t max_queue = 64;
  QueuePolicy queue_policy = QueuePolicy::kWait;
  /// Longest draft a Step may carry (>= 0; longer: INVALID_ARGUMENT). A verification
  /// evaluates at most n_batch - 1 draft tokens and no more than the room left in the
  /// sequence's context: longer drafts are cut (the accept rule then applies to the cut
  /// draft). Default: common.proto's largest draft_max.
  int32_t max_draft = 1024;
  /// Largest SequenceParams::logprobs (top-n alternatives per token).
  int32_t max_logprobs = 20;
  /// Sequences with a draft_source: choose each draft's length from the sequence's
  /// acceptance and the per-token cost of a pass, and stop drafting while drafts
  /// measurably do not pay (spec/adaptive.h). false: every draft asks for draft_max.
  bool adaptive_speculation = true;
  /// A sequence whose drafts stopped paying probes again with a short draft after this
  /// many passes (>= 1); the interval doubles (up to 256) after each probe that is
  /// rejected or fails, and resets when a draft token is accepted.
  int32_t spec_probe_interval = 16;
};

/// The outcome of one forward pass of one sequence.
struct StepResult {
  std::vector<int32_t> tokens;          // accepted draft tokens, then one sampled token
  int32_t n_accepted = 0;               // draft tokens accepted (= tokens.size() - 1)
  std::vector<TokenLogprobs> logprobs;  // one per token when logprobs > 0
  bool eos = false;                     // the last token is end-of-generation (not with ignore_eos)
  bool context_full = false;            // no room for another token in this sequence
  double prompt_ms = 0;                 // cumulative prompt-processing wall time
  double generation_ms = 0;             // cumulative generation wall time
  /// Prompt tokens whose K/V came from other sequences' cells, not computed: the prefix
  /// cache's at admission (SequenceEvent::n_cached) plus those taken from a sequence
  /// prefilling the same prompt beside this one (in-flight sharing).
  int32_t n_cached = 0;
  /// Sequences with a draft_source: their drafts' cumulative statistics (type kNone
  /// otherwise).
  spec::SpecStats spec_stats;
};

/// What a sequence's consumer receives, in order: kStarted once (on admission), kStep per
/// forward pass, kEnded once (last event; status CANCELLED after Cancel, UNAVAILABLE when
/// the scheduler shuts down, or the engine's error).
struct SequenceEvent {
  enum class Kind { kStarted, kStep, kEnded };
  Kind kind = Kind::kStarted;
  int32_t n_prompt = 0;  // kStarted
  // kStarted: prompt tokens whose K/V came from the prefix cache (StepResult::n_cached
  // adds the tokens shared in flight).
  int32_t n_cached = 0;
  double queue_ms = 0;  // kStarted: time from Start() to admission
  StepResult step;      // kStep
  absl::Status status;  // kEnded
};

/// Parameters of a new sequence.
struct SequenceParams {
  std::vector<int32_t> prompt;  // 1..n_ctx_seq-1 token ids in [0, n_vocab)
  /// n_probs is ignored (set from logprobs). With a grammar every sampled token
  /// continues it (prompt tokens are not matched against it); when no token can (a
  /// dead end), the sequence ends with kEnded(FAILED_PRECONDITION).
  SamplingParams sampling;
  int32_t logprobs = 0;     // top-n per token, 0..max_logprobs
  bool ignore_eos = false;  // never flag eos
  /// Optional: called after each event is queued (see Sequence::SetNotify).
  std::function<void()> on_event;
  /// Optional: speculative decoding driven by the scheduler. Each pass a plain Step
  /// asks for, the scheduler first asks this source for a draft (all such sequences of
  /// the pass together: spec::ProposeAll, so a draft worker gets one call per pass) and
  /// verifies it in the same batched forward pass as the other sequences; the
  /// StepResult then holds the accepted draft tokens and one sampled token. The source
  /// sees the prompt, every produced token and every acceptance; a failing source costs
  /// speed only (an empty draft). Once started, only the scheduler thread uses it (the
  /// caller must not); shared so that SequenceParams stays copyable.
  std::shared_ptr<spec::DraftSource> draft_source;
  /// Draft bounds for draft_source (0 <= draft_min <= draft_max <= max_draft): drafts
  /// shorter than draft_min are not verified (llama.cpp's n_min).
  int32_t draft_min = 0;
  int32_t draft_max = 16;
  /// Most tokens this sequence will generate (the caller's n_predict; 0 = no bound):
  /// no draft runs past it.
  int32_t n_predict = 0;
};

namespace internal {
struct SeqState;
struct Core;
}  // namespace internal

/// Handle of one sequence. Thread-safe. Destroying it cancels the sequence (its KV
/// cells are freed by the scheduler's next iteration at the latest). Handles may
/// outlive the Scheduler (they then report UNAVAILABLE).
class Sequence {
 public:
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  /// Requests forward passes. Empty draft: n_steps passes (0 counts as 1), one
  /// StepResult each. Non-empty draft: one verification (n_steps must be 0 or 1).
  /// `draft_probs`: empty for a deterministic draft (sample and match), else one sparse
  /// distribution per draft token, the one it was drawn from (an empty entry = that
  /// token is deterministic); a sampling sequence then verifies by rejection sampling
  /// (see the file comment). Errors: INVALID_ARGUMENT naming n_steps, draft[i] (token
  /// outside the vocabulary, draft longer than max_draft) or draft_probs[i] (count not
  /// matching the draft, an id outside the vocabulary, a negative or non-finite
  /// probability, no mass, or the draft token itself with probability 0);
  /// FAILED_PRECONDITION after context_full or after the sequence ended (cancelled /
  /// failed); UNAVAILABLE after shutdown.
  absl::Status Step(int32_t n_steps, std::vector<int32_t> draft = {}, std::vector<spec::SparseDist> draft_probs = {});

  /// Ends the sequence: the scheduler frees its KV cells (immediately if idle, else after
  /// the current iteration), drops pending steps and queues kEnded(CANCELLED). Idempotent.
  void Cancel();

  /// Pops the next event if there is one.
  bool TryNext(SequenceEvent* ev);
  /// Waits up to `timeout` for the next event; false on timeout.
  bool Next(SequenceEvent* ev, std::chrono::milliseconds timeout);

  /// Replaces the notify callback (called, without scheduler locks, after every queued
  /// event). nullptr detaches: once SetNotify returns, the old callback is not running
  /// and will not be called again. The callback must not call SetNotify or destroy
  /// this handle.
  void SetNotify(std::function<void()> fn);

  int32_t n_prompt() const;
  /// Unique id of the sequence within its scheduler (1, 2, ...).
  uint64_t id() const;

 private:
  friend class Scheduler;
  Sequence(std::shared_ptr<internal::Core> core, std::shared_ptr<internal::SeqState> st)
      : core_(std::move(core)), st_(std::move(st)) {}
  std::shared_ptr<internal::Core> core_;
  std::shared_ptr<internal::SeqState> st_;
};

class Scheduler {
 public:
  /// Starts the scheduler thread over `engine` (whose KV cache is cleared). `engine` and
  /// `vocab` (for IsEog) must outlive the Scheduler. Errors: INVALID_ARGUMENT naming a
  /// config field out of range (max_sequences, n_ctx_seq, max_queue, max_draft,
  /// max_logprobs) or a null engine/vocab.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(Engine* engine, const tokenizer::Vocab* vocab,
                                                           const SchedulerConfig& config);
  /// Shutdown(), then joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Validates and enqueues a sequence; the handle's first event is kStarted once it is
  /// admitted. The sampler (with its grammar, if sampling.grammar is set: the
  /// vocabulary's pieces are decoded once per scheduler, on the first such request) is
  /// built here. Errors: INVALID_ARGUMENT naming the field (prompt empty or longer than
  /// n_ctx_seq, prompt[i] outside the vocabulary, sampling ranges per
  /// ValidateSamplingParams(sampling, n_vocab) including logit_bias ids and grammar parse
  /// errors, logprobs outside 0..max_logprobs); RESOURCE_EXHAUSTED for a grammar too
  /// ambiguous to match; RESOURCE_EXHAUSTED when
  /// every slot is taken and the policy is kReject or the queue holds max_queue;
  /// UNAVAILABLE after StopAdmitting()/Shutdown().
  absl::StatusOr<std::unique_ptr<Sequence>> Start(SequenceParams params);

  /// Called once with the pooled, not normalized, embedding (n_embd floats) or the error.
  using EmbedCallback = std::function<void(absl::StatusOr<std::vector<float>>)>;
  /// Queues the embedding of `tokens` (one sequence from position 0) with `pooling`;
  /// `done` runs on the scheduler thread once the job ran (see the file comment), or
  /// with UNAVAILABLE if the scheduler shuts down first; it must not block. Returns
  /// without calling `done` on errors: INVALID_ARGUMENT naming "tokens" (empty, longer
  /// than n_ctx_seq, an id outside the vocabulary); RESOURCE_EXHAUSTED when max_queue
  /// jobs wait already; UNAVAILABLE after StopAdmitting()/Shutdown(). A job that finds
  /// too few free cells (running sequences hold them) ends with RESOURCE_EXHAUSTED (retry).
  absl::Status Embed(std::vector<int32_t> tokens, Pooling pooling, EmbedCallback done);

  /// For a backend whose memory was lost (a remote compute server that restarted:
  /// Backend::CheckDevice's DATA_LOSS): ends every admitted sequence with `why` (an OK
  /// status becomes DATA_LOSS) and empties the KV cache, prefix cache included; queued
  /// sequences are admitted afresh. Returns once the scheduler thread has done it (at once
  /// after Shutdown).
  void DropKvCache(absl::Status why);

  /// New Start() calls fail with UNAVAILABLE; active and queued sequences continue.
  void StopAdmitting();
  /// Ends every sequence (kEnded with UNAVAILABLE), frees the KV cache and stops the
  /// thread. Idempotent.
  void Shutdown();

  /// Called on the scheduler thread after every iteration that ran a forward pass or
  /// changed the gauges (admission, release). nullptr removes it; once SetIterationObserver
  /// returns, the previous observer is not running.
  void SetIterationObserver(std::function<void(const IterationStats&)> fn);

  SchedulerStats Stats() const;
  /// The prompts whose K/V the prefix cache can share with a new sequence: each cached
  /// prefix's tokens and each active sequence's prompt (for cache-aware routing:
  /// libs/serving/prefix_blocks.h). Empty with prefix caching off. *version (optional)
  /// gets PrefixCacheVersion() of the same moment.
  std::vector<std::vector<int32_t>> CachedPrompts(uint64_t* version = nullptr) const;
  /// Changes whenever the set CachedPrompts() returns may have changed (a prefix cached or
  /// dropped, a sequence admitted or ended); 0 with prefix caching off.
  uint64_t PrefixCacheVersion() const;
  int64_t n_ctx() const;
  int64_t n_ctx_seq() const;
  int32_t max_sequences() const;
  /// Sequences that can be active at once: max_sequences.
  int32_t capacity() const;
  int32_t max_draft() const;
  int64_t n_vocab() const;

 private:
  explicit Scheduler(std::shared_ptr<internal::Core> core) : core_(std::move(core)) {}
  std::shared_ptr<internal::Core> core_;
};

}  // namespace herd::engine
