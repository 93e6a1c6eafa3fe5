// The draft-model drafter: a small GGUF model with its own engine and KV cache drafts
// greedily (llama.cpp common_speculative_state_draft / common_speculative_gen_draft),
// plus the vocabulary compatibility check of common_speculative_are_compatible.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/engine/engine.h"
#include "libs/engine/spec/drafter.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::engine::spec {

/// SPEC_VOCAB_MAX_SIZE_DIFFERENCE: the draft and target vocabularies may differ in size by at most this.
inline constexpr int32_t kSpecVocabMaxSizeDifference = 128;
/// SPEC_VOCAB_CHECK_START_TOKEN_ID: token texts must be equal from this id on.
inline constexpr int32_t kSpecVocabCheckStartTokenId = 5;

/// llama.cpp common_speculative_are_compatible: the same tokenizer type, the same
/// add_bos (and BOS id when added), the same add_eos (and EOS id when added), sizes
/// within kSpecVocabMaxSizeDifference, and equal token texts for every id from
/// kSpecVocabCheckStartTokenId up to the smaller size. FAILED_PRECONDITION
/// "draft model vocabulary is incompatible with the target's: <first difference>"
/// otherwise.
absl::Status CheckVocabCompatible(const tokenizer::Vocab& target, const tokenizer::Vocab& draft);

struct DraftModelParams {
  /// KV cells shared by all sequences of the draft model (0 = the model's context
  /// length capped at 4096). When a sequence needs cells and none are free, the least
  /// recently used other sequence loses its cells (it re-evaluates its history on its
  /// next draft), so memory stays bounded whatever the number of sessions.
  int64_t n_ctx = 4096;
  int64_t n_batch = 512;
  int n_threads = 2;
  std::string backend = "cpu";  // the draft model's own backend (libs/backend/registry.h)
  int device = 0;
  GgmlType kv_type = GgmlType::F16;
  /// Candidates of the draft distribution (llama.cpp's draft sampler keeps top_k 10):
  /// the probability compared with p_min, and the distribution sampled when temp > 0,
  /// is the softmax over these.
  int32_t top_k = 10;
  /// Draft ahead: between calls, a background thread goes on drafting greedily past the
  /// last draft of the sequences just asked for drafts of 2 or more tokens (at most one
  /// token more than each asked for), as if the target were to accept the whole draft and pick the draft model's
  /// own next token; a call whose history turns out to be that continuation gets the
  /// rest of it at once instead of waiting for draft steps (the draft runs while the
  /// target verifies the previous one: parallel speculative decoding, Liu et al. 2024,
  /// "PEARL", post-verify). Steps run only while no call waits; a call waits for at most
  /// the step in progress. Pays where the draft model has cores of its own (a draft
  /// worker); off where it shares them with the target (in-process drafting).
  bool draft_ahead = false;
  /// Draft ahead only after calls that drafted for at most this many sequences (one
  /// step over many sequences would delay the next call, and a full batch seldom drafts).
  int64_t draft_ahead_max_seqs = 4;
};

/// One sequence's draft request of DraftModel::DraftBatch.
struct DraftModelJob {
  int32_t seq = 0;                                // the sequence's KV id (DraftModelDrafter::seq())
  const std::vector<int32_t>* history = nullptr;  // its history (Drafter::Draft); null = an empty draft
  DraftParams params;                             // its rng (temp > 0) is used by this job only
};

/// A loaded draft model shared by the sequences of one process. Thread-safe, with group
/// commit: concurrent DraftFor / DraftBatch callers queue their jobs, one of them (the
/// leader) drafts everything queued as one batch while the others wait for their
/// results. Each sequence gets a DraftModelDrafter (NewDrafter) that owns one KV
/// sequence id. The DraftModel must outlive its drafters.
class DraftModel {
 public:
  /// Loads the GGUF at `path` and allocates the KV cache. Errors: the model loader's
  /// and the engine's (INVALID_ARGUMENT / NOT_FOUND naming the problem), INVALID_ARGUMENT
  /// for top_k < 1 or n_threads < 1.
  static absl::StatusOr<std::unique_ptr<DraftModel>> Load(const std::string& path, const DraftModelParams& params);
  ~DraftModel();

  /// CheckVocabCompatible(target, vocab()); on success remembers the target's size so
  /// that drafts stop before a token the target does not have. Call at start-up.
  absl::Status AttachTarget(const tokenizer::Vocab& target);

  /// A drafter for one new sequence.
  std::unique_ptr<Drafter> NewDrafter();

  const tokenizer::Vocab& vocab() const { return *vocab_; }
  const model::Model& model() const { return *model_; }
  const std::string& path() const { return path_; }
  int64_t n_ctx() const { return engine_->n_ctx(); }
  /// Most positions one sequence may use (history window + draft).
  int64_t seq_window() const { return seq_window_; }
  /// Sequences that currently hold KV cells.
  size_t n_cached_seqs() const;
  /// Times a sequence lost its cells to make room for another.
  int64_t n_kv_evictions() const;

  /// Drafts for sequence `seq` (see DraftModelDrafter): DraftBatch of one job.
  /// Thread-safe.
  DraftResult DraftFor(int32_t seq, const std::vector<int32_t>& history, const DraftParams& params);
  /// Drafts for several sequences at once; result i is job i's draft, the same as
  /// DraftFor(jobs[i]) alone would give (bit for bit when greedy, cells permitting).
  /// One Decode brings every sequence's KV up to its history (only what changed is
  /// evaluated), then one Decode per draft position carries the next token of every
  /// sequence still drafting. With a stop_by (DraftParams), the evaluation is bounded
  /// by the earliest one: the sequences with the fewest new tokens are evaluated first,
  /// the first that does not fit is evaluated in part and kept (empty draft), the
  /// others wait for a later call (empty drafts). When the KV cache has no room for the whole catch-up,
  /// the jobs are drafted one after another instead. A job that fails (vocabulary, no
  /// KV room) gets an empty draft; a sequence listed twice is drafted twice, in order.
  /// The histories must not change until the call returns. Concurrent calls are merged
  /// into one batch (group commit). Thread-safe.
  std::vector<DraftResult> DraftBatch(const std::vector<DraftModelJob>& jobs);
  /// Batches run so far (a batch = one catch-up Decode plus its draft steps); with
  /// group commit, fewer than the DraftFor / DraftBatch calls under concurrency.
  int64_t n_batches() const;
  /// Frees the cells of `seq` and forgets it. Thread-safe.
  void ReleaseSeq(int32_t seq);
  /// Draft-ahead steps run so far, and drafts served from their tokens (draft_ahead).
  int64_t n_ahead_steps() const;
  int64_t n_ahead_hits() const;

  /// A DraftBatch with a stop_by evaluates at least this many new history tokens
  /// whatever the time left (so a sequence drafted last call, which has 1 + its
  /// accepted tokens new, always gets its next draft, and every call makes progress).
  static constexpr int64_t kMinCatchUpTokens = 8;
  /// The catch-up speed is measured from evaluations of at least this many tokens (the
  /// first at Load); with none measured, a stop_by allows this many.
  static constexpr int64_t kFirstCatchUpTokens = 16;

 private:
  struct SeqState {
    int64_t start = 0;               // history index of KV position 0
    std::vector<int32_t> kv_tokens;  // tokens at KV positions 0..
    // kv_p[i]: the draft model's top probability for kv_tokens[i] where it drafted that
    // token (0 for history tokens); the same length as kv_tokens.
    std::vector<float> kv_p;
    // The greedy token after kv_tokens (drafted, not evaluated yet) and its probability,
    // where has_next: the last draft's last token, then draft-ahead's.
    bool has_next = false;
    int32_t next = 0;
    float next_p = 0;
    uint64_t last_use = 0;
  };
  // One job of a running batch.
  struct Active {
    const DraftModelJob* job;
    DraftResult* out;
    SeqState* st = nullptr;
    int64_t n_win = 0;     // history tokens in the window (KV positions 0..n_win-1)
    int64_t keep = 0;      // KV positions kept from before this batch
    int64_t n_eval = 0;    // history tokens evaluated now (from keep; n_win - keep = all)
    int64_t out_idx = -1;  // its logits in the last Decode (-1: done)
  };
  // A caller's jobs waiting in queue_ (group commit).
  struct Request {
    const std::vector<DraftModelJob>* jobs;
    std::vector<DraftResult>* results;
    bool done = false;
  };
  DraftModel() = default;
  // Times one evaluation of kFirstCatchUpTokens tokens (at Load) for catchup_tok_s_.
  void MeasureCatchUp();
  // Runs `jobs` (each seq at most once) with mu_ held; writes `results`.
  void RunBatchLocked(const std::vector<const DraftModelJob*>& jobs, const std::vector<DraftResult*>& results);
  // Prepares job `a` (window, KV reuse: keep, n_eval = all new tokens); false when the
  // job cannot draft (its result stays empty) or its draft was served from draft-ahead
  // tokens (AheadDraftLocked: its result is filled).
  bool CatchUpLocked(Active* a);
  // Where the history (window h[start, start + n_win)) is a prefix of st's evaluated
  // tokens, the greedy tokens that follow it (kv_tokens past it, then next) while their
  // probability reaches p_min, at most n_max: the draft-ahead continuation.
  void AheadDraftLocked(const SeqState& st, const std::vector<int32_t>& h, int64_t start, int64_t n_win,
                        const DraftParams& params, DraftResult* out) const;
  // The draft-ahead thread: one step at a time for ahead_ while no caller waits.
  void AheadLoop();
  bool AheadStepLocked();
  // New history tokens the earliest stop_by of `act` leaves time to evaluate (at the
  // measured catch-up speed), at least kMinCatchUpTokens; unbounded without a stop_by.
  int64_t CatchUpBudgetLocked(const std::vector<Active>& act) const;
  // The draft steps of the caught-up jobs `act` (out_idx set) until none continues.
  void DraftStepsLocked(std::vector<Active>* act);
  // Decode with eviction of other sequences (not in `busy`) on RESOURCE_EXHAUSTED; on
  // failure every (seq, p0) in `undo` is cut back to p0.
  absl::Status DecodeLocked(const Batch& batch, const std::set<int32_t>& busy,
                            const std::vector<std::pair<int32_t, int32_t>>& undo);
  bool EvictOtherLocked(const std::set<int32_t>& busy);
  void TopK(const float* logits, float temp, SparseDist* out) const;

  std::string path_;
  DraftModelParams params_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Engine> engine_;
  int64_t seq_window_ = 0;
  int64_t n_vocab_ = 0;
  int64_t target_n_vocab_ = 0;  // 0 = no target attached

  mutable std::mutex mu_;
  std::map<int32_t, SeqState> seqs_;
  int32_t next_seq_ = 0;
  std::vector<int32_t> free_seqs_;
  uint64_t clock_ = 0;
  int64_t kv_evictions_ = 0;
  int64_t n_batches_ = 0;
  double step_s_ = 0;         // recent draft steps' duration in seconds (running mean; 0 = none yet), under mu_
  double catchup_tok_s_ = 0;  // seconds per history token evaluated (running mean; 0 = none yet), under mu_

  // Group commit: requests wait in queue_; leading_ while one caller drafts them.
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<Request*> queue_;
  bool leading_ = false;

  // Draft ahead (params_.draft_ahead): the sequences to extend and the steps each may
  // still take (the n_max of its last draft), under mu_; callers_ counts DraftBatch
  // calls in progress (the thread steps only while it is 0).
  struct Ahead {
    int64_t left = 0;  // steps it may still take
    float p_min = 0;   // its last call's p_min: no step past a token below it
  };
  std::map<int32_t, Ahead> ahead_;
  std::atomic<int> callers_{0};
  std::condition_variable ahead_cv_;
  bool stop_ = false;
  int64_t n_ahead_steps_ = 0, n_ahead_hits_ = 0;
  std::thread ahead_thread_;
};

/// draft-model (llama.cpp common_speculative_state_draft::draft): keeps the
/// sequence's history in the draft model's KV cache (re-evaluating only what changed),
/// then drafts up to n_max tokens, each the most likely one (temp = 0) or sampled from
/// the top-k distribution at `temp`, stopping before the first token whose top
/// probability is below p_min. Histories longer than the window (seq_window - n_max - 1)
/// are cut to their most recent part, moved in steps of half a window.
class DraftModelDrafter : public Drafter {
 public:
  DraftModelDrafter(DraftModel* model, int32_t seq) : model_(model), seq_(seq) {}
  ~DraftModelDrafter() override { model_->ReleaseSeq(seq_); }
  SpecType type() const override { return SpecType::kDraftModel; }
  DraftResult Draft(const std::vector<int32_t>& history, const DraftParams& params) override {
    return model_->DraftFor(seq_, history, params);
  }
  int32_t seq() const { return seq_; }

 private:
  DraftModel* model_;
  int32_t seq_;
};

}  // namespace herd::engine::spec
