#include "libs/engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/engine/kv_cache_manager.h"
#include "libs/engine/spec/adaptive.h"
#include "libs/engine/spec/rejection.h"
#include "libs/engine/spec/spec_loop.h"
#include "libs/engine/spec/verify.h"

namespace herd::engine {
namespace internal {

using Clock = std::chrono::steady_clock;

static double MsSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// One Step() request: n_steps plain passes, or one verification of `draft` (with the
// draft's distributions when it was sampled).
struct Request {
  int32_t n_steps = 1;
  std::vector<int32_t> draft;
  std::vector<spec::SparseDist> draft_q;  // empty or one per draft token
};

struct SeqState {
  enum class Phase { kQueued, kActive, kEnded };

  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t logprobs = 0;
  bool ignore_eos = false;
  Clock::time_point t_start;

  // Guarded by Core::mu.
  Phase phase = Phase::kQueued;
  std::deque<Request> requests;
  bool cancel = false;
  bool context_full = false;

  // Scheduler thread only (set on admission).
  int32_t kv_seq = -1;
  bool started = false;           // admitted once (kStarted sent; a preempted sequence is re-admitted)
  std::vector<int32_t> tokens;    // prompt, then accepted tokens; tokens[n_past] is the pending one
  int32_t n_past = 0;             // tokens of this sequence in the KV cache (positions 0..n_past-1)
  int32_t pending = -1;           // the next token to evaluate, at position n_past
  bool pending_is_prompt = true;  // pending is still the last prompt token
  // Prompt tokens whose K/V this sequence took from other sequences' cells instead of
  // computing them (the prefix cache on admission, then CatchUp from a sequence
  // prefilling the same prompt beside it); final once the prompt is done.
  int32_t n_cached = 0;
  std::unique_ptr<Sampler> sampler;
  std::mt19937 spec_rng;  // rejection sampling of drafts with probabilities
  // Scheduler-driven speculation (SequenceParams::draft_source).
  std::shared_ptr<spec::DraftSource> draft_source;
  int32_t draft_min = 0, draft_max = 0, n_predict = 0;
  size_t source_len = 0;  // tokens of `tokens` the source has seen (Append)
  spec::AcceptanceEstimate acceptance;
  spec::SpecType spec_type = spec::SpecType::kNone;
  int32_t passes_since_draft = 0;  // passes without a draft (probe timing)
  // How the last pass's draft ended (kNone: the last pass carried none, or its draft failed).
  spec::DraftOutcome last_outcome = spec::DraftOutcome::kNone;
  int32_t probe_interval = 0;  // passes between probes (0: spec_probe_interval); doubles
                               // after each probe that is rejected or fails
  double prompt_ms = 0, generation_ms = 0;

  // Events (ev_mu is a leaf lock).
  std::mutex ev_mu;
  std::condition_variable ev_cv;
  std::deque<SequenceEvent> events;
  bool ended = false;  // kEnded queued
  // Notify callback (held while it runs, so that SetNotify(nullptr) can wait it out).
  std::mutex notify_mu;
  std::function<void()> notify;

  int32_t n_prompt() const { return static_cast<int32_t>(prompt.size()); }
  // Prefill covers tokens 0..n-2 (the prompt's, or after a preemption the prompt and
  // the tokens accepted so far); the last one is the pending token.
  bool PrefillDone() const { return n_past >= static_cast<int32_t>(tokens.size()) - 1; }
  int32_t PrefillRemaining() const { return std::max(0, static_cast<int32_t>(tokens.size()) - 1 - n_past); }

  void Post(SequenceEvent ev) {
    {
      std::lock_guard<std::mutex> l(ev_mu);
      if (ended) return;
      if (ev.kind == SequenceEvent::Kind::kEnded) ended = true;
      events.push_back(std::move(ev));
    }
    ev_cv.notify_all();
    std::lock_guard<std::mutex> l(notify_mu);
    if (notify) notify();
  }
};

// Events gathered under Core::mu and delivered after it is released.
class Outbox {
 public:
  void Add(std::shared_ptr<SeqState> s, SequenceEvent ev) { items_.emplace_back(std::move(s), std::move(ev)); }
  void Deliver() {
    for (auto& [s, ev] : items_) s->Post(std::move(ev));
    items_.clear();
  }

 private:
  std::vector<std::pair<std::shared_ptr<SeqState>, SequenceEvent>> items_;
};

SequenceEvent Ended(absl::Status s) {
  SequenceEvent ev;
  ev.kind = SequenceEvent::Kind::kEnded;
  ev.status = std::move(s);
  return ev;
}

// One sequence's share of an iteration's batch.
struct Work {
  std::shared_ptr<SeqState> s;
  bool prefill = false;
  int32_t n_prefill = 0;                  // prefill: prompt tokens in this chunk
  std::vector<int32_t> draft;             // verify: draft tokens after the pending token
  std::vector<spec::SparseDist> draft_q;  // verify: empty, or one distribution per draft token
  int64_t out_begin = 0;                  // verify: index of the pending token's logits
  bool was_prompt = false;                // verify: the pending token was the last prompt token
  int32_t auto_draft = 0;                 // verify: draft tokens to ask s->draft_source for
  bool draft_failed = false;              // verify: that request failed (error or deadline)
  bool warm_draft = false;                // verify: ask a draft model beside the pass (WarmDraftJobs)
  bool cold_draft = false;                // verify: auto_draft after a pass without one (catch-up)
  StepResult result;
  absl::Status error;  // verify: the sequence cannot continue (grammar dead end)
};

// One queued Scheduler::Embed() call.
struct EmbedJob {
  std::vector<int32_t> tokens;
  Pooling pooling = Pooling::kLast;
  Scheduler::EmbedCallback done;
};

// Length of the common prefix of a and b[0..b_len).
static int32_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t b_len) {
  const size_t n = std::min({a.size(), b.size(), b_len});
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int32_t>(i);
}

struct Core {
  Engine* engine = nullptr;
  const tokenizer::Vocab* vocab = nullptr;
  SchedulerConfig cfg;
  int64_t n_ctx = 0, n_ctx_seq = 0, n_vocab = 0, n_batch = 0;
  int32_t capacity = 0, max_draft = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool admitting = true;
  // DropKvCache: pending (not OK) until the loop has ended every admitted sequence with
  // it and emptied the KV cache; drop_epoch counts the drops done.
  absl::Status drop_kv = absl::OkStatus();
  uint64_t drop_epoch = 0;
  uint64_t next_id = 1;
  std::deque<std::shared_ptr<SeqState>> queue;    // admission order
  std::vector<std::shared_ptr<SeqState>> active;  // admission order
  std::vector<int32_t> free_ids;                  // KV sequence ids of free slots: 0..capacity-1
  int32_t embed_seq = 0;                          // KV sequence id of embedding jobs (= capacity)
  // The cache policy: pool accounting, prefix cache (ids from capacity + 1 up), room
  // checks, eviction and preemption. Called under mu (its counters and cached set are
  // read by Stats() and CachedPrompts()).
  std::unique_ptr<KvCacheManager> kvm;
  std::deque<EmbedJob> embed_jobs;
  size_t rr = 0;  // round-robin start of the decode scan
  // Adaptive speculation (spec/adaptive.h): the fits of a pass's time (over its batch
  // tokens) and of the wait for its drafts (in units of the plain pass time at as many
  // tokens as sequences drafted, spec::NormalizedDraftWait, over its longest draft;
  // mostly per token before the data says otherwise; steady and cold passes apart, with
  // probes), and the switch.
  spec::IterationCostModel pass_cost;
  spec::DraftWaitModel draft_wait;
  spec::SpeculationSwitch spec_switch;
  // Acceptance over all sequences, per speculative type: a new sequence's estimate
  // starts from it (a fleet whose drafts are rejected does not pay a few rejected drafts
  // per new request before each sequence learns it on its own).
  std::map<spec::SpecType, spec::AcceptanceEstimate> type_acceptance;
  // Acceptance after each draft outcome, per speculative type: after a draft rejected at
  // its first token (or partly accepted) a sequence plans its next draft with at most
  // the acceptance measured after such drafts (spec::OutcomeAcceptance).
  std::map<spec::SpecType, spec::OutcomeAcceptance> type_outcomes;
  void RecordAcceptance(SeqState& s, int32_t drafted, int32_t accepted);
  SchedulerStats stats;
  std::thread thread;

  std::mutex obs_mu;
  std::function<void(const IterationStats&)> observer;

  // The vocabulary decoded for grammars, built on first use (grammar::TokenPieces).
  std::mutex pieces_mu;
  std::shared_ptr<const grammar::TokenPieces> pieces;
  std::shared_ptr<const grammar::TokenPieces> Pieces() {
    std::lock_guard<std::mutex> l(pieces_mu);
    if (pieces == nullptr) pieces = grammar::TokenPieces::FromVocab(*vocab);
    return pieces;
  }
  // Parsed grammars and their token masks, shared by the requests that send the same
  // grammar (grammar::GrammarCache over Pieces()), built on first use.
  std::unique_ptr<grammar::GrammarCache> grammars;
  grammar::GrammarCache* Grammars() {
    std::shared_ptr<const grammar::TokenPieces> p = Pieces();
    std::lock_guard<std::mutex> l(pieces_mu);
    if (grammars == nullptr) grammars = std::make_unique<grammar::GrammarCache>(std::move(p));
    return grammars.get();
  }

  void Run();
  bool HasWorkLocked() const;
  bool ReleaseCancelledLocked(Outbox* out);
  void ReleaseLocked(const std::shared_ptr<SeqState>& s, absl::Status status, Outbox* out);
  bool AdmitLocked(Outbox* out);
  // The active sequences as the KV-cache manager sees them (admission order).
  std::vector<RunningSeq> RunningLocked() const;
  bool CatchUpOrWaitLocked(SeqState* s);
  void PlanPrefillLocked(std::vector<Work>* plan, int64_t used);
  int64_t PrefillBudgetLocked(int64_t used) const;
  bool CanAdmitLocked(const SeqState& s) const;
  void PreemptLocked(const std::shared_ptr<SeqState>& s);
  void UpdateKvStatsLocked();
  std::vector<Work> PlanLocked();
  absl::Status Execute(std::vector<Work>* plan, double* seconds);
  using DraftCosts = spec::DraftCosts;
  int32_t AutoDraftLength(const SeqState& s, int64_t k_cap, const DraftCosts& costs, bool* cost_stopped) const;
  double ProposeDrafts(std::vector<Work>* plan, int32_t* errors);
  // One-token drafts for the plan's warm_draft steps (draft-model sequences at their
  // prompt's step that the policy drafts for), to be asked while the pass runs (their
  // drafts are not used: the draft worker evaluates the prompt meanwhile), with the
  // pass's expected time as deadline. After ProposeDrafts (which hands the sources
  // their tokens).
  std::vector<spec::DraftJob> WarmDraftJobs(const std::vector<Work>& plan) const;
  void AfterPass(std::vector<Work>* plan, double pass_seconds, double draft_seconds, int32_t batch_tokens);
  void VerifyDraft(Work* w);
  void FillGaugesLocked(IterationStats* it) const;
  void Observe(const IterationStats& it);
  std::deque<EmbedJob> TakeEmbedJobsLocked();
  void RunEmbedJobs(std::deque<EmbedJob> jobs, int32_t temp_seq);
  void ShutdownAndJoin();
};

bool Core::HasWorkLocked() const {
  if (!embed_jobs.empty() || !drop_kv.ok()) return true;
  for (const auto& s : queue) {
    if (s->cancel) return true;
  }
  if (!queue.empty() && static_cast<int32_t>(active.size()) < capacity && CanAdmitLocked(*queue.front())) return true;
  for (const auto& s : active) {
    if (s->cancel || !s->PrefillDone()) return true;
    if (!s->requests.empty() && !s->context_full) return true;
  }
  return false;
}

void Core::ReleaseLocked(const std::shared_ptr<SeqState>& s, absl::Status status, Outbox* out) {
  if (s->phase == SeqState::Phase::kActive) {
    kvm->Release(s->kv_seq, s->tokens, s->n_past);  // with prefix caching its cells stay cached
    free_ids.push_back(s->kv_seq);
    s->kv_seq = -1;
    s->sampler.reset();
    active.erase(std::find(active.begin(), active.end(), s));
  } else if (s->phase == SeqState::Phase::kQueued) {
    queue.erase(std::find(queue.begin(), queue.end(), s));
  }
  s->phase = SeqState::Phase::kEnded;
  s->requests.clear();
  UpdateKvStatsLocked();
  out->Add(s, Ended(std::move(status)));
}

bool Core::ReleaseCancelledLocked(Outbox* out) {
  std::vector<std::shared_ptr<SeqState>> gone;
  for (const auto& s : active) {
    if (s->cancel) gone.push_back(s);
  }
  for (const auto& s : queue) {
    if (s->cancel) gone.push_back(s);
  }
  for (const auto& s : gone) ReleaseLocked(s, absl::CancelledError("sequence cancelled"), out);
  return !gone.empty();
}

// Each active sequence's tokens with their K/V in the cache and the cells its next
// decode or verification step takes (0 while prefilling, idle or full).
std::vector<RunningSeq> Core::RunningLocked() const {
  std::vector<RunningSeq> running;
  running.reserve(active.size());
  for (const auto& a : active) {
    RunningSeq r;
    r.kv_seq = a->kv_seq;
    r.tokens = a->tokens;
    r.n_past = a->n_past;
    if (a->PrefillDone() && !a->requests.empty() && !a->context_full) {
      r.next_step_cells = 1 + std::min<int64_t>(static_cast<int64_t>(a->requests.front().draft.size()),
                                                std::max<int64_t>(0, n_batch - 1));
    }
    running.push_back(r);
  }
  return running;
}

// Prompts that arrive together and share a prefix (a system prompt) compute it once: a
// prefilling sequence first takes the cells another sequence or a cached prefix has
// computed since for its next prompt tokens (the K/V of the same tokens at the same
// positions; only cells after its own, so its cells still ascend with its positions and
// attention sums them in a solo run's order), then waits while a sequence admitted
// before it is still computing at least kMinSharedPrefill more of them. The first of such a group never waits, so every
// group progresses. Returns true when s prefills nothing this iteration.
constexpr int32_t kMinSharedPrefill = 16;

bool Core::CatchUpOrWaitLocked(SeqState* s) {
  if (!cfg.prefix_cache || s->PrefillDone()) return false;
  const int32_t before = s->n_past;
  s->n_past = kvm->CatchUp(s->kv_seq, s->tokens, s->n_past, RunningLocked());
  if (s->pending_is_prompt) s->n_cached += s->n_past - before;
  if (s->PrefillDone()) return true;
  const size_t limit = s->tokens.size() - 1;
  for (const auto& a : active) {
    if (a.get() == s) break;  // only sequences admitted before s
    if (a->PrefillDone()) continue;
    const int32_t common = CommonPrefix(s->tokens, a->tokens, std::min(limit, a->tokens.size() - 1));
    if (common - std::max(s->n_past, a->n_past) >= kMinSharedPrefill) return true;
  }
  return false;
}

// Whether a slot is free and the pool has room for s beside the running sequences' next
// steps (KvCacheManager::CanAdmit).
bool Core::CanAdmitLocked(const SeqState& s) const {
  if (free_ids.empty()) return false;
  return kvm->CanAdmit(s.tokens, RunningLocked());
}

bool Core::AdmitLocked(Outbox* out) {
  bool any = false;
  while (!queue.empty() && static_cast<int32_t>(active.size()) < capacity && CanAdmitLocked(*queue.front())) {
    std::shared_ptr<SeqState> s = queue.front();
    queue.pop_front();
    s->kv_seq = free_ids.back();
    free_ids.pop_back();
    s->phase = SeqState::Phase::kActive;
    // Shares the longest cached or running prefix's cells; only the rest is prefilled.
    const int32_t reuse = kvm->Admit(s->kv_seq, s->tokens, RunningLocked());
    s->n_past = reuse;
    if (s->pending_is_prompt) s->n_cached = reuse;  // this admission's; earlier ones' cells are gone
    active.push_back(s);
    any = true;
    if (s->started) continue;  // re-admitted after a preemption: tokens, sampler and pending kept
    s->started = true;
    // The sampler was built by Start(); penalties see the prompt, the grammar does not.
    for (int32_t t : s->prompt) (void)s->sampler->Accept(t, /*accept_grammar=*/false);
    s->spec_rng.seed(s->sampler->seed() ^ 0x5bd1e995u);
    if (s->draft_source != nullptr) {
      s->spec_type = s->draft_source->Stats().type;
      auto it = type_acceptance.find(s->spec_type);
      if (it != type_acceptance.end() && it->second.drafts() >= 4) {
        s->acceptance = spec::AcceptanceEstimate(it->second.rate());
      }
    }
    s->pending = s->prompt.back();
    s->pending_is_prompt = true;
    ++stats.sequences_started;
    SequenceEvent ev;
    ev.kind = SequenceEvent::Kind::kStarted;
    ev.n_prompt = s->n_prompt();
    ev.n_cached = reuse;
    ev.queue_ms = MsSince(s->t_start, Clock::now());
    out->Add(s, std::move(ev));
  }
  if (any) UpdateKvStatsLocked();
  return any;
}

// Takes an active sequence back to the head of the queue, freeing its cells (vLLM's
// preemption by recomputation): on re-admission it prefills its prompt and the tokens
// accepted so far again and continues with the same pending token, sampler and requests.
void Core::PreemptLocked(const std::shared_ptr<SeqState>& s) {
  kvm->Preempt(s->kv_seq);
  free_ids.push_back(s->kv_seq);
  s->kv_seq = -1;
  s->n_past = 0;
  s->phase = SeqState::Phase::kQueued;
  active.erase(std::find(active.begin(), active.end(), s));
  queue.push_front(s);
  HERD_LOG(Info) << "scheduler: KV cache full, sequence " << s->id << " preempted (" << s->tokens.size()
                 << " tokens to recompute)";
}

void Core::UpdateKvStatsLocked() {
  stats.kv_cells_used = engine->kv().used();
  stats.kv_cells_cached = kvm->cells_cached();
  stats.cached_prefixes = kvm->n_cached();
}

std::vector<Work> Core::PlanLocked() {
  std::vector<Work> plan;
  const int64_t budget = n_batch;
  int64_t used = 0;
  // Room for this iteration's decode steps: the manager evicts cached prefixes, then
  // names the sequence to preempt (the most recently admitted) until the rest fit.
  for (;;) {
    const int32_t victim = kvm->ChoosePreemption(RunningLocked());
    if (victim < 0) break;
    PreemptLocked(active[static_cast<size_t>(victim)]);
  }
  bool prefill_pending = false;
  for (const auto& s : active) prefill_pending |= !s->PrefillDone();
  // Decode and verification steps first (they are latency-bound), but leave at least a
  // quarter of the batch to prompt processing while some prompt is waiting.
  const int64_t decode_budget =
      prefill_pending ? std::max<int64_t>(1, budget - std::max<int64_t>(1, budget / 4)) : budget;
  const size_t n = active.size();
  // What a draft token costs in this pass, at one token per decoding sequence.
  int32_t n_decoding = 0, n_drafting = 0;
  for (const auto& s : active) {
    const bool decoding = s->PrefillDone() && !s->requests.empty() && !s->context_full;
    n_decoding += decoding;
    n_drafting += decoding && s->draft_source != nullptr;
  }
  const DraftCosts draft_costs = spec::DraftCostsFor(pass_cost, draft_wait.fit(n_drafting), n_decoding, n_drafting);
  bool cost_stopped = false, drafted_by_costs = false;
  // Cells for the drafts the scheduler asks for: what is free beyond every step's own
  // demand (ensured above); cached prefixes are evicted for them, running sequences are
  // never preempted for a draft.
  int64_t step_cells = 0;
  for (const RunningSeq& r : RunningLocked()) step_cells += r.next_step_cells;
  int64_t draft_cells = 0;
  for (size_t k = 0; k < n; ++k) {
    const std::shared_ptr<SeqState>& s = active[(rr + k) % n];
    if (!s->PrefillDone() || s->requests.empty() || s->context_full) continue;
    Request& r = s->requests.front();
    // Room left in the sequence: after the pass, the cells kept (pending + accepted
    // drafts) plus the new pending token must fit in n_ctx_seq (prompt + completion <=
    // n_ctx_seq, as llama.cpp's server counts the context).
    const int64_t room = n_ctx_seq - s->n_past - 2;
    const size_t n_draft = static_cast<size_t>(std::max<int64_t>(
        0, std::min<int64_t>(static_cast<int64_t>(r.draft.size()), std::min<int64_t>(room, budget - 1))));
    // A plain step of a sequence with a draft source: the scheduler drafts for it.
    bool stopped = false;
    int32_t auto_draft = r.draft.empty() && s->draft_source != nullptr
                             ? AutoDraftLength(*s, std::min<int64_t>(room, budget - 1), draft_costs, &stopped)
                             : 0;
    cost_stopped |= stopped;
    drafted_by_costs |= auto_draft > 0 && !stopped;
    // A draft model's first draft would wait for it to evaluate the whole prompt: where
    // the policy drafts, it evaluates the prompt during the prompt's own step instead
    // (WarmDraftJobs) and drafts from the next step (n-gram drafters draft from the
    // prompt at no cost).
    const bool warm = auto_draft > 0 && s->pending_is_prompt && s->spec_type == spec::SpecType::kDraftModel;
    if (warm) auto_draft = 0;
    // A draft shrinks to the batch budget left rather than delaying its sequence's step.
    const int64_t limit = used == 0 ? budget : decode_budget;
    auto_draft =
        static_cast<int32_t>(std::clamp<int64_t>(limit - used - 1 - static_cast<int64_t>(n_draft), 0, auto_draft));
    if (auto_draft > 0 && auto_draft < std::max(1, s->draft_min)) auto_draft = 0;
    if (auto_draft > 0) {
      const int64_t want = step_cells + draft_cells + auto_draft;
      if (engine->kv().n_free() < want) (void)kvm->EnsureFreeCells(want);
      const int64_t fit = engine->kv().n_free() - step_cells - draft_cells;
      auto_draft = static_cast<int32_t>(std::clamp<int64_t>(fit, 0, auto_draft));
      if (auto_draft < std::max(1, s->draft_min)) auto_draft = 0;
      draft_cells += auto_draft;
    }
    const int64_t cost = 1 + static_cast<int64_t>(n_draft) + auto_draft;
    // The first step of an iteration may use the whole batch, so a long draft cannot starve.
    if (used + cost > (used == 0 ? budget : decode_budget)) continue;
    Work w;
    w.s = s;
    w.auto_draft = auto_draft;
    w.warm_draft = warm;
    w.cold_draft = auto_draft > 0 && (s->passes_since_draft > 0 || s->acceptance.drafts() == 0);
    w.draft.assign(r.draft.begin(), r.draft.begin() + static_cast<long>(n_draft));
    if (!r.draft_q.empty()) w.draft_q.assign(r.draft_q.begin(), r.draft_q.begin() + static_cast<long>(n_draft));
    if (!r.draft.empty() || --r.n_steps <= 0) s->requests.pop_front();
    used += cost;
    plan.push_back(std::move(w));
  }
  if (n > 0) rr = (rr + 1) % n;
  draft_wait.Planned(cost_stopped, drafted_by_costs);
  PlanPrefillLocked(&plan, used);
  return plan;
}

// The prompt chunks of a pass that already holds `used` tokens of steps. While several
// sequences are active a pass prefills at most PrefillBudgetLocked() tokens, shortest
// remaining prompt first (a prompt whose prefix is cached, or a short one, starts
// streaming in the next pass instead of waiting behind a long uncached one: the
// shortest-remaining-first order that minimizes mean time to first token), except that
// the sequence admitted first among those still prefilling keeps a quarter of the
// budget, so a stream of short prompts cannot starve a long one.
void Core::PlanPrefillLocked(std::vector<Work>* plan, int64_t used) {
  const int64_t budget = n_batch;
  std::vector<std::shared_ptr<SeqState>> order;
  for (const auto& s : active) {
    if (!s->PrefillDone() && !CatchUpOrWaitLocked(s.get())) order.push_back(s);
  }
  if (order.empty()) return;
  const std::shared_ptr<SeqState> oldest = order.front();
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a->PrefillRemaining() < b->PrefillRemaining(); });
  const int64_t prefill_budget = PrefillBudgetLocked(used);
  int64_t reserve = order.front() == oldest
                        ? 0
                        : std::min<int64_t>(oldest->PrefillRemaining(), std::max<int64_t>(1, prefill_budget / 4));
  int64_t prefill_used = 0;
  for (const auto& s : order) {
    if (s == oldest) reserve = 0;
    const int64_t want =
        std::min<int64_t>({s->PrefillRemaining(), budget - used, prefill_budget - prefill_used - reserve});
    if (want <= 0) continue;
    (void)kvm->EnsureFreeCells(used + want);  // evicts cached prefixes; never preempts for prefill
    const int64_t chunk = std::min<int64_t>(want, engine->kv().n_free() - used);
    if (chunk <= 0) break;
    prefill_used += chunk;
    Work w;
    w.s = s;
    w.prefill = true;
    w.n_prefill = static_cast<int32_t>(chunk);
    used += chunk;
    plan->push_back(std::move(w));
  }
}

// Most prompt tokens this pass prefills: n_batch for a sequence alone; with several
// active, max_prefill_tokens and, with max_prefill_ms, the tokens that fit in that time
// beside the pass's `used` step tokens at the fitted cost t0 + c*T (IterationCostModel;
// at least kMinTimedPrefill, and only once the fit has seen a few passes).
int64_t Core::PrefillBudgetLocked(int64_t used) const {
  const int64_t budget = n_batch;
  if (active.size() <= 1) return budget;
  int64_t b = cfg.max_prefill_tokens > 0 ? std::min<int64_t>(budget, cfg.max_prefill_tokens) : budget;
  constexpr int64_t kMinTimedPrefill = 16;
  constexpr int64_t kMinPassesForFit = 8;
  if (cfg.max_prefill_ms > 0 && pass_cost.n() >= kMinPassesForFit && pass_cost.c() > 0) {
    const double left_s = cfg.max_prefill_ms / 1000.0 - pass_cost.t0() - pass_cost.c() * static_cast<double>(used);
    const double fit = std::floor(left_s / pass_cost.c());
    b = std::min<int64_t>(b, std::max<int64_t>(kMinTimedPrefill, fit > 1e9 ? budget : static_cast<int64_t>(fit)));
  }
  return b;
}

// Settles positions 0..n_draft of a verification (spec::VerifyDraft: sample and match,
// or rejection sampling with the sequence's spec_rng for drafts that carry their
// distributions). The result is the accepted prefix plus one token; rejected draft cells
// are removed from the KV cache.
void Core::VerifyDraft(Work* w) {
  SeqState& s = *w->s;
  StepResult& r = w->result;
  const size_t n_draft = w->draft.size();
  spec::VerifyResult v = spec::VerifyDraft(
      *s.sampler, [&](size_t i) { return engine->Logits(w->out_begin + static_cast<int64_t>(i)); }, w->draft,
      w->draft_q, s.spec_rng, *vocab, s.ignore_eos, s.logprobs);
  r.tokens = std::move(v.tokens);
  r.logprobs = std::move(v.logprobs);
  r.eos = v.eos;
  w->error = v.status;
  if (!w->error.ok()) return;  // the sequence ends (Run releases it)
  r.n_accepted = static_cast<int32_t>(r.tokens.size()) - 1;
  // Kept in the cache: the pending token and the accepted draft tokens.
  const int32_t keep_end = s.n_past + 1 + r.n_accepted;
  if (static_cast<size_t>(r.n_accepted) < n_draft) engine->kv().SeqRemove(s.kv_seq, keep_end, -1);
  s.n_past = keep_end;
  s.tokens.insert(s.tokens.end(), r.tokens.begin(), r.tokens.end());
  s.pending = r.tokens.back();
  s.pending_is_prompt = false;
  // The sequence now holds n_past tokens plus the pending one: full at n_ctx_seq.
  r.context_full = s.n_past + 1 >= n_ctx_seq;
}

// The draft length for a plain step of s: at most draft_max, the room in its context and
// batch, and what its n_predict leaves (the pass yields one token of its own); with
// adaptive speculation, the length with the most tokens per second (DraftLengthFor over
// s's acceptance, capped after a missed draft by spec::OutcomeAcceptance, and the draft's
// costs, plus spec::kDraftGainMargin), none while the switch is off, and a probe
// every spec_probe_interval passes once s's own acceptance stopped its drafts (while its
// type's acceptance would draft at these costs). Where only the measured wait for drafts
// stops them (they would pay were drafting free), *cost_stopped is set, and during a
// probe (spec::DraftWaitModel) the draft is the length it would be were drafting free,
// at most DraftWaitModel::kProbeTokens.
// Drafts shorter than max(1, draft_min) are not asked for.
int32_t Core::AutoDraftLength(const SeqState& s, int64_t k_cap, const DraftCosts& costs, bool* cost_stopped) const {
  int64_t k_max = std::min<int64_t>({s.draft_max, k_cap, max_draft});
  if (s.n_predict > 0) {
    const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.n_prompt();
    k_max = std::min<int64_t>(k_max, s.n_predict - generated - 1);
  }
  const int32_t k_min = std::max(1, s.draft_min);
  if (k_max < k_min) return 0;
  if (!cfg.adaptive_speculation) return static_cast<int32_t>(k_max);
  if (!spec_switch.Enabled()) return 0;
  const double fixed = costs.fixed + spec::kDraftGainMargin;
  // The sequence's acceptance, at most what drafts that followed one ending as its last
  // one did were accepted (acceptance comes in runs).
  double a_next = s.acceptance.rate();
  if (auto it = type_outcomes.find(s.spec_type); it != type_outcomes.end()) {
    a_next = it->second.Adjust(a_next, s.last_outcome);
  }
  int32_t k = spec::DraftLengthFor(a_next, costs.per_token, fixed, static_cast<int32_t>(k_max));
  if (k >= k_min) return k;
  const int32_t k_free =
      spec::DraftLengthFor(a_next, costs.verify_per_token, spec::kDraftGainMargin, static_cast<int32_t>(k_max));
  if (k_free >= k_min) {
    *cost_stopped = true;
    return draft_wait.probing() ? std::max(k_min, std::min(k_free, spec::DraftWaitModel::kProbeTokens)) : 0;
  }
  // A probe re-measures a sequence whose own acceptance stopped its drafts, while drafts
  // at the acceptance of its type's sequences would pay at these costs (not while the
  // costs alone rule drafting out, as in a full compute-bound batch).
  const int32_t probe = s.probe_interval > 0 ? s.probe_interval : cfg.spec_probe_interval;
  if (s.passes_since_draft < probe) return 0;
  double a = s.acceptance.rate();
  if (auto it = type_acceptance.find(s.spec_type); it != type_acceptance.end()) a = std::max(a, it->second.rate());
  return spec::DraftLengthFor(a, costs.per_token, fixed, static_cast<int32_t>(k_max)) > 0 ? k_min : 0;
}

// Asks the draft sources of the plan's auto-drafting steps for their drafts, all in one
// spec::ProposeAll (one call per draft worker), and puts them in the plan. Runs on the
// scheduler thread without the lock. Returns the seconds spent waiting; *errors gets
// the drafts that failed (they are empty).
double Core::ProposeDrafts(std::vector<Work>* plan, int32_t* errors) {
  *errors = 0;
  std::vector<spec::DraftJob> jobs;
  std::vector<Work*> owners;
  for (Work& w : *plan) {
    if (w.prefill || w.s->draft_source == nullptr) continue;
    SeqState& s = *w.s;
    // The source sees every token of the sequence before it drafts.
    if (s.source_len < s.tokens.size()) {
      s.draft_source->Append(std::vector<int32_t>(s.tokens.begin() + static_cast<long>(s.source_len), s.tokens.end()));
      s.source_len = s.tokens.size();
    }
    if (w.auto_draft <= 0) continue;
    spec::DraftJob j;
    j.source = s.draft_source.get();
    j.n_max = w.auto_draft;
    jobs.push_back(std::move(j));
    owners.push_back(&w);
  }
  if (jobs.empty()) return 0;
  const auto t0 = Clock::now();
  spec::ProposeAll(&jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Work& w = *owners[i];
    if (!jobs[i].result.ok()) {
      ++*errors;
      w.draft_failed = true;
      continue;
    }
    spec::DraftResult d = *std::move(jobs[i].result);
    spec::SanitizeDraft(&d, n_vocab, w.auto_draft);
    if (static_cast<int32_t>(d.tokens.size()) < std::max(1, w.s->draft_min)) continue;
    w.draft = std::move(d.tokens);
    if (!d.probs.empty()) w.draft_q = std::move(d.probs);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<spec::DraftJob> Core::WarmDraftJobs(const std::vector<Work>& plan) const {
  std::vector<spec::DraftJob> jobs;
  int32_t pass_tokens = 0;
  for (const Work& w : plan) pass_tokens += w.prefill ? w.n_prefill : 1 + static_cast<int32_t>(w.draft.size());
  for (const Work& w : plan) {
    const SeqState& s = *w.s;
    if (!w.warm_draft || s.draft_source == nullptr) continue;
    spec::DraftJob j;
    j.source = s.draft_source.get();
    j.n_max = 1;
    jobs.push_back(std::move(j));
  }
  if (jobs.empty() || pass_cost.n() < 2) return jobs;
  const double expected_ms = 1000 * (pass_cost.t0() + pass_cost.c() * std::max(1, pass_tokens));
  const auto ms = std::chrono::milliseconds(static_cast<int64_t>(std::clamp(expected_ms, 1.0, 10000.0)));
  for (spec::DraftJob& j : jobs) j.deadline = ms;
  return jobs;
}

void Core::RecordAcceptance(SeqState& s, int32_t drafted, int32_t accepted) {
  s.acceptance.Record(drafted, accepted);
  auto it = type_acceptance.try_emplace(s.spec_type, 0.6, 2.0, 0.95).first;
  it->second.Record(drafted, accepted);
}

// After a pass (under mu, on the scheduler thread): reports acceptance to the draft sources, updates each sequence's
// acceptance estimate and statistics, the pass-time fit and the switch.
void Core::AfterPass(std::vector<Work>* plan, double pass_seconds, double draft_seconds, int32_t batch_tokens) {
  if (batch_tokens > 0) pass_cost.Observe(batch_tokens, pass_seconds);
  // The wait for drafts, in units of the plain pass time at the drafting sequences'
  // count (spec::NormalizedDraftWait), over the longest draft that came back (a pass
  // whose drafts all came back empty measured no draft step); cold passes (Work::cold_draft)
  // apart (spec::DraftWaitModel).
  int32_t longest = 0, n_asked = 0;
  bool cold = false;
  for (const Work& w : *plan) {
    if (w.auto_draft <= 0) continue;
    ++n_asked;
    cold |= w.cold_draft;
    longest = std::max(longest, static_cast<int32_t>(w.draft.size()));
  }
  draft_wait.Observe(longest, spec::NormalizedDraftWait(pass_cost, n_asked, draft_seconds), cold, n_asked);
  int32_t seqs = 0, out = 0, drafted = 0, asked = 0;
  // Probes back off exponentially (to this many passes) while they do not pay.
  constexpr int32_t kMaxProbeInterval = 256;
  for (Work& w : *plan) {
    if (w.prefill || w.s->draft_source == nullptr) continue;
    SeqState& s = *w.s;
    ++seqs;
    asked += w.auto_draft;
    out += static_cast<int32_t>(w.result.tokens.size());
    const int32_t probe = s.probe_interval > 0 ? s.probe_interval : cfg.spec_probe_interval;
    if (w.draft_failed) {
      // A failed or late draft cost a wait and gave nothing: for the sequence's policy
      // it is a fully rejected draft, so a source that keeps failing fades out too.
      RecordAcceptance(s, w.auto_draft, 0);
      s.last_outcome = spec::DraftOutcome::kNone;  // no word on the text
      s.passes_since_draft = 0;
      s.probe_interval = std::min(kMaxProbeInterval, 2 * probe);
    } else if (!w.draft.empty() && w.error.ok()) {
      const int32_t n_draft = static_cast<int32_t>(w.draft.size());
      s.draft_source->Accept(w.result.n_accepted);
      RecordAcceptance(s, n_draft, w.result.n_accepted);
      type_outcomes[s.spec_type].Record(s.last_outcome, n_draft, w.result.n_accepted);
      s.last_outcome = spec::OutcomeOf(n_draft, w.result.n_accepted);
      s.passes_since_draft = 0;
      s.probe_interval = w.result.n_accepted > 0 ? 0 : std::min(kMaxProbeInterval, 2 * probe);
      drafted += n_draft;
      ++stats.spec_passes;
      stats.spec_draft_tokens += static_cast<uint64_t>(n_draft);
      stats.spec_accepted_tokens += static_cast<uint64_t>(w.result.n_accepted);
    } else {
      ++s.passes_since_draft;
      s.last_outcome = spec::AfterPlainPass(s.last_outcome, s.passes_since_draft);
    }
    w.result.spec_stats = s.draft_source->Stats();
  }
  if (seqs == 0 || !cfg.adaptive_speculation) return;
  // What the same sequences' plain pass would have taken: one token each instead of
  // their drafts, by the fitted t(T).
  const double plain = pass_cost.t0() + pass_cost.c() * std::max(1, batch_tokens - drafted);
  const bool was_on = spec_switch.Enabled();
  // Passes that asked for drafts count, drafts or not: a failed or empty draft's wait is
  // part of what speculation costs. Cold passes do not (their catch-up is the cost of the
  // pause before them; the probes that make them back off on their own), so a probe
  // after a pause cannot switch off drafting that pays while it goes on.
  spec_switch.Observe(seqs, out, cold ? 0 : asked, pass_seconds + draft_seconds, plain);
  if (was_on && !spec_switch.Enabled()) {
    HERD_LOG(Info) << "scheduler: speculation paused: measured speedup " << spec_switch.speedup() << " < 1";
  }
  stats.spec_switch_offs = static_cast<uint64_t>(spec_switch.offs());
  stats.spec_enabled = spec_switch.Enabled();
  stats.spec_speedup = spec_switch.speedup();
}

absl::Status Core::Execute(std::vector<Work>* plan, double* seconds) {
  const auto t0 = Clock::now();
  Batch b;
  int64_t n_out = 0;
  for (Work& w : *plan) {
    SeqState& s = *w.s;
    if (w.prefill) {
      for (int32_t i = 0; i < w.n_prefill; ++i) {
        const int32_t p = s.n_past + i;
        b.Add(s.tokens[static_cast<size_t>(p)], p, s.kv_seq, false);
      }
    } else {
      w.out_begin = n_out;
      w.was_prompt = s.pending_is_prompt;
      b.Add(s.pending, s.n_past, s.kv_seq, true);
      for (size_t j = 0; j < w.draft.size(); ++j) {
        b.Add(w.draft[j], s.n_past + 1 + static_cast<int32_t>(j), s.kv_seq, true);
      }
      n_out += 1 + static_cast<int64_t>(w.draft.size());
    }
  }
  absl::Status st = engine->Decode(b);
  if (!st.ok()) return st;
  for (Work& w : *plan) {
    if (w.prefill) {
      w.s->n_past += w.n_prefill;
    } else {
      VerifyDraft(&w);
    }
  }
  const double ms = MsSince(t0, Clock::now());
  *seconds = ms / 1000.0;
  for (Work& w : *plan) {
    SeqState& s = *w.s;
    if (w.prefill || w.was_prompt) {
      s.prompt_ms += ms;
    } else {
      s.generation_ms += ms;
    }
    w.result.prompt_ms = s.prompt_ms;
    w.result.generation_ms = s.generation_ms;
    w.result.n_cached = s.n_cached;
  }
  return absl::OkStatus();
}

void Core::FillGaugesLocked(IterationStats* it) const {
  it->active = static_cast<int32_t>(active.size());
  it->queued = static_cast<int32_t>(queue.size());
  it->kv_cells_used = stats.kv_cells_used;
  it->kv_cells_cached = stats.kv_cells_cached;
  it->kv_cells_total = n_ctx;
}

void Core::Observe(const IterationStats& it) {
  std::lock_guard<std::mutex> l(obs_mu);
  if (observer) observer(it);
}

// The embedding jobs of one iteration: queued ones up to n_batch tokens in total (at
// least one), so that embeddings and running sequences take turns.
std::deque<EmbedJob> Core::TakeEmbedJobsLocked() {
  std::deque<EmbedJob> jobs;
  int64_t tokens = 0;
  while (!embed_jobs.empty()) {
    const int64_t n = static_cast<int64_t>(embed_jobs.front().tokens.size());
    if (!jobs.empty() && tokens + n > n_batch) break;
    tokens += n;
    jobs.push_back(std::move(embed_jobs.front()));
    embed_jobs.pop_front();
  }
  return jobs;
}

// Runs on the scheduler thread between iterations: nothing else touches the engine.
// temp_seq: the id no slot uses (Core::embed_seq); the caller made room for the
// largest job by evicting cached prefixes. Every job frees its cells (Engine::Embed).
void Core::RunEmbedJobs(std::deque<EmbedJob> jobs, int32_t temp_seq) {
  uint64_t tokens = 0;
  for (EmbedJob& j : jobs) {
    auto r = engine->Embed(j.tokens, j.pooling, temp_seq);
    if (absl::IsResourceExhausted(r.status())) {
      r = absl::ResourceExhaustedError(absl::StrCat("embedding: the KV cache has too few free cells for ",
                                                    j.tokens.size(), " tokens; retry later (", r.status().message(),
                                                    ")"));
    }
    tokens += j.tokens.size();
    j.done(std::move(r));
  }
  std::lock_guard<std::mutex> l(mu);
  stats.embeddings += jobs.size();
  stats.embedding_tokens += tokens;
}

void Core::Run() {
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    cv.wait(l, [&] { return stop || HasWorkLocked(); });
    if (stop) break;
    Outbox out;
    bool changed = ReleaseCancelledLocked(&out);
    if (!drop_kv.ok()) {  // the backend lost its memory: nothing computed before is valid
      std::vector<std::shared_ptr<SeqState>> all(active.begin(), active.end());
      for (const auto& s : all) ReleaseLocked(s, drop_kv, &out);
      kvm->Clear();
      UpdateKvStatsLocked();
      drop_kv = absl::OkStatus();
      ++drop_epoch;
      cv.notify_all();
      changed = true;
    }
    changed |= AdmitLocked(&out);
    std::deque<EmbedJob> jobs = TakeEmbedJobsLocked();
    int64_t largest_job = 0;
    for (const EmbedJob& j : jobs) largest_job = std::max<int64_t>(largest_job, static_cast<int64_t>(j.tokens.size()));
    if (largest_job > 0) (void)kvm->EnsureFreeCells(largest_job);
    std::vector<Work> plan = PlanLocked();
    l.unlock();
    out.Deliver();
    if (!jobs.empty()) RunEmbedJobs(std::move(jobs), embed_seq);

    IterationStats it;
    absl::Status st;
    double draft_seconds = 0;
    int32_t draft_errors = 0;
    if (!plan.empty()) {
      draft_seconds = ProposeDrafts(&plan, &draft_errors);
      // The draft worker evaluates new prompts while this pass runs (drafts not used).
      std::vector<spec::DraftJob> warm = WarmDraftJobs(plan);
      std::thread warm_thread;
      if (!warm.empty()) warm_thread = std::thread([&warm] { spec::ProposeAll(&warm); });
      st = Execute(&plan, &it.seconds);
      if (warm_thread.joinable()) warm_thread.join();
    }

    l.lock();
    if (!plan.empty() && !st.ok()) {
      HERD_LOG(Error) << "scheduler: forward pass of " << plan.size() << " sequences failed: " << st;
      for (Work& w : plan) {
        if (w.s->phase == SeqState::Phase::kActive) ReleaseLocked(w.s, st, &out);
      }
      changed = true;
    } else if (!plan.empty()) {
      stats.spec_draft_errors += static_cast<uint64_t>(draft_errors);
      stats.spec_draft_wait_ms += draft_seconds * 1000;
      int32_t pass_tokens = 0;
      for (const Work& w : plan) pass_tokens += w.prefill ? w.n_prefill : 1 + static_cast<int32_t>(w.draft.size());
      AfterPass(&plan, it.seconds, draft_seconds, pass_tokens);
      for (const Work& w : plan) {
        if (w.prefill) {
          it.batch_tokens += w.n_prefill;
          it.prompt_tokens += w.n_prefill;
        } else {
          it.batch_tokens += 1 + static_cast<int32_t>(w.draft.size());
          it.prompt_tokens += w.was_prompt ? 1 : 0;
          it.generated_tokens += static_cast<int32_t>(w.result.tokens.size());
        }
      }
      // Distinct sequences in the batch (a sequence appears at most once per plan).
      it.batch_sequences = static_cast<int32_t>(plan.size());
      ++stats.iterations;
      if (it.batch_sequences > 1) ++stats.multi_sequence_iterations;
      stats.max_batch_sequences = std::max(stats.max_batch_sequences, it.batch_sequences);
      stats.max_batch_tokens = std::max(stats.max_batch_tokens, it.batch_tokens);
      stats.batch_tokens_total += static_cast<uint64_t>(it.batch_tokens);
      stats.tokens_generated += static_cast<uint64_t>(it.generated_tokens);
      stats.prompt_tokens += static_cast<uint64_t>(it.prompt_tokens);
      UpdateKvStatsLocked();
      for (Work& w : plan) {
        SeqState& s = *w.s;
        if (w.prefill || s.cancel || s.phase != SeqState::Phase::kActive) continue;
        if (!w.error.ok()) {
          HERD_LOG(Warning) << "scheduler: sequence " << s.id << " ends: " << w.error;
          ReleaseLocked(w.s, w.error, &out);
          changed = true;
          continue;
        }
        if (w.result.context_full) s.context_full = true;
        if (w.result.eos || w.result.context_full) s.requests.clear();
        SequenceEvent ev;
        ev.kind = SequenceEvent::Kind::kStep;
        ev.step = std::move(w.result);
        out.Add(w.s, std::move(ev));
      }
    }
    FillGaugesLocked(&it);
    l.unlock();
    // Observe first: a consumer that has seen a step then finds it in the metrics.
    if (changed || !plan.empty()) Observe(it);
    out.Deliver();
    l.lock();
  }
  // Shutdown: end everything, free the cache.
  Outbox out;
  std::vector<std::shared_ptr<SeqState>> all(active.begin(), active.end());
  all.insert(all.end(), queue.begin(), queue.end());
  for (const auto& s : all) ReleaseLocked(s, absl::UnavailableError("scheduler shut down"), &out);
  kvm->Clear();
  UpdateKvStatsLocked();
  std::deque<EmbedJob> jobs;
  jobs.swap(embed_jobs);
  l.unlock();
  out.Deliver();
  for (EmbedJob& j : jobs) j.done(absl::UnavailableError("scheduler shut down"));
}

void Core::ShutdownAndJoin() {
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    admitting = false;
  }
  cv.notify_all();
  if (thread.joinable()) thread.join();
}

}  // namespace internal

using internal::Core;
using internal::SeqState;

// ---------------------------------------------------------------- Sequence

Sequence::~Sequence() {
  SetNotify(nullptr);
  Cancel();
}

absl::Status Sequence::Step(int32_t n_steps, std::vector<int32_t> draft, std::vector<spec::SparseDist> draft_probs) {
  if (n_steps < 0) return absl::InvalidArgumentError(absl::StrCat("n_steps: ", n_steps, " must be >= 0"));
  if (!draft.empty() && n_steps > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_steps: ", n_steps, " with a draft; a draft is verified in one pass (use 0 or 1)"));
  }
  if (static_cast<int64_t>(draft.size()) > core_->max_draft) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft: ", draft.size(), " tokens exceed the limit of ", core_->max_draft));
  }
  for (size_t i = 0; i < draft.size(); ++i) {
    if (draft[i] < 0 || draft[i] >= core_->n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft[", i, "]: token id ", draft[i], " is outside the vocabulary [0, ", core_->n_vocab, ")"));
    }
  }
  if (!draft_probs.empty()) {
    if (draft_probs.size() != draft.size()) {
      return absl::InvalidArgumentError(absl::StrCat("draft_probs: ", draft_probs.size(),
                                                     " distributions for a draft of ", draft.size(),
                                                     " tokens (need none or one per token)"));
    }
    for (size_t i = 0; i < draft_probs.size(); ++i) {
      const spec::SparseDist& q = draft_probs[i];
      if (q.empty()) continue;  // a deterministic token
      double sum = 0, q_x = 0;
      for (size_t j = 0; j < q.size(); ++j) {
        if (q[j].id < 0 || q[j].id >= core_->n_vocab) {
          return absl::InvalidArgumentError(absl::StrCat("draft_probs[", i, "].ids[", j, "]: token id ", q[j].id,
                                                         " is outside the vocabulary [0, ", core_->n_vocab, ")"));
        }
        if (!std::isfinite(q[j].p) || q[j].p < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("draft_probs[", i, "].p[", j, "]: ", q[j].p, " is not a probability (finite, >= 0)"));
        }
        sum += q[j].p;
        if (q[j].id == draft[i]) q_x += q[j].p;
      }
      if (!(sum > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("draft_probs[", i, "]: the distribution has no mass"));
      }
      if (!(q_x > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("draft_probs[", i, "]: draft token ", draft[i],
                                                       " has probability 0 in the distribution it was drawn from"));
      }
    }
  }
  {
    std::lock_guard<std::mutex> l(core_->mu);
    if (core_->stop) return absl::UnavailableError("scheduler shut down");
    if (st_->phase == SeqState::Phase::kEnded || st_->cancel) {
      return absl::FailedPreconditionError("sequence has ended");
    }
    if (st_->context_full) {
      return absl::FailedPreconditionError(
          absl::StrCat("context full: the sequence holds n_ctx_seq = ", core_->n_ctx_seq, " tokens"));
    }
    internal::Request r;
    r.n_steps = std::max(1, n_steps);
    r.draft = std::move(draft);
    r.draft_q = std::move(draft_probs);
    st_->requests.push_back(std::move(r));
  }
  core_->cv.notify_all();
  return absl::OkStatus();
}

void Sequence::Cancel() {
  {
    std::lock_guard<std::mutex> l(core_->mu);
    if (core_->stop || st_->phase == SeqState::Phase::kEnded || st_->cancel) return;
    st_->cancel = true;
  }
  core_->cv.notify_all();
}

bool Sequence::TryNext(SequenceEvent* ev) {
  std::lock_guard<std::mutex> l(st_->ev_mu);
  if (st_->events.empty()) return false;
  *ev = std::move(st_->events.front());
  st_->events.pop_front();
  return true;
}

bool Sequence::Next(SequenceEvent* ev, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(st_->ev_mu);
  if (!st_->ev_cv.wait_for(l, timeout, [&] { return !st_->events.empty(); })) return false;
  *ev = std::move(st_->events.front());
  st_->events.pop_front();
  return true;
}

void Sequence::SetNotify(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(st_->notify_mu);
  st_->notify = std::move(fn);
}

int32_t Sequence::n_prompt() const { return st_->n_prompt(); }
uint64_t Sequence::id() const { return st_->id; }

// ---------------------------------------------------------------- Scheduler

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(Engine* engine, const tokenizer::Vocab* vocab,
                                                             const SchedulerConfig& config) {
  if (engine == nullptr) return absl::InvalidArgumentError("engine: null");
  if (vocab == nullptr) return absl::InvalidArgumentError("vocab: null");
  const int64_t n_ctx = engine->n_ctx();
  if (config.max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequences: ", config.max_sequences, " must be >= 1"));
  }
  int64_t n_ctx_seq = config.n_ctx_seq;
  if (n_ctx_seq == 0) n_ctx_seq = n_ctx;
  if (n_ctx_seq < 1 || n_ctx_seq > n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_ctx_seq: ", n_ctx_seq, " must be in [1, n_ctx = ", n_ctx, "] (0: n_ctx)"));
  }
  if (config.max_prefill_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_prefill_ms: ", config.max_prefill_ms, " must be >= 0"));
  }
  if (config.max_prefill_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_prefill_tokens: ", config.max_prefill_tokens, " must be >= 0"));
  }
  if (config.max_cached_prefixes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_cached_prefixes: ", config.max_cached_prefixes, " must be >= 0"));
  }
  if (config.max_queue < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_queue: ", config.max_queue, " must be >= 0"));
  }
  if (config.max_draft < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_draft: ", config.max_draft, " must be >= 0"));
  }
  if (config.spec_probe_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec_probe_interval: ", config.spec_probe_interval, " must be >= 1"));
  }
  if (config.max_logprobs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_logprobs: ", config.max_logprobs, " must be >= 0"));
  }
  auto core = std::make_shared<Core>();
  core->engine = engine;
  core->vocab = vocab;
  core->cfg = config;
  core->n_ctx = n_ctx;
  core->n_ctx_seq = n_ctx_seq;
  core->n_vocab = engine->n_vocab();
  core->n_batch = engine->n_batch();
  core->capacity = config.max_sequences;
  core->max_draft = config.max_draft;
  for (int32_t i = core->capacity - 1; i >= 0; --i) core->free_ids.push_back(i);
  core->embed_seq = core->capacity;
  core->stats.kv_cells_total = n_ctx;
  KvCacheManagerConfig kc;
  kc.prefix_cache = config.prefix_cache;
  kc.max_cached_prefixes = config.max_cached_prefixes;
  kc.first_cache_seq = core->capacity + 1;
  core->kvm = std::make_unique<KvCacheManager>(&engine->kv(), kc);  // clears the cache
  // One pool: every sequence may take any free cell (KvCache::Allocate keeps each
  // sequence's cells in position order while the pool has room after them).
  for (int32_t i = 0; i <= core->capacity; ++i) engine->kv().SetSeqRange(i, 0, 0);
  core->thread = std::thread([c = core.get()] { c->Run(); });
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(core)));
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Shutdown() { core_->ShutdownAndJoin(); }

void Scheduler::DropKvCache(absl::Status why) {
  if (why.ok()) why = absl::DataLossError("the KV cache was dropped");
  std::unique_lock<std::mutex> l(core_->mu);
  if (core_->stop) return;
  const uint64_t epoch = core_->drop_epoch;
  core_->drop_kv = std::move(why);
  core_->cv.notify_all();
  core_->cv.wait(l, [&] { return core_->stop || core_->drop_epoch != epoch; });
}

void Scheduler::StopAdmitting() {
  std::lock_guard<std::mutex> l(core_->mu);
  core_->admitting = false;
}

absl::StatusOr<std::unique_ptr<Sequence>> Scheduler::Start(SequenceParams params) {
  Core& c = *core_;
  const int64_t n = static_cast<int64_t>(params.prompt.size());
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: empty (1 to n_ctx_seq = ", c.n_ctx_seq, " tokens)"));
  }
  if (n >= c.n_ctx_seq) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", n, " tokens do not fit in n_ctx_seq = ", c.n_ctx_seq,
                                                   " (prompt + completion; at most n_ctx_seq - 1 prompt tokens)"));
  }
  for (size_t i = 0; i < params.prompt.size(); ++i) {
    if (params.prompt[i] < 0 || params.prompt[i] >= c.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt[", i, "]: token id ", params.prompt[i],
                                                     " is outside the vocabulary [0, ", c.n_vocab, ")"));
    }
  }
  if (params.logprobs < 0 || params.logprobs > c.cfg.max_logprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs: ", params.logprobs, " is outside [0, ", c.cfg.max_logprobs, "]"));
  }
  if (params.draft_source != nullptr) {
    if (params.draft_max < 0 || params.draft_max > c.max_draft) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_max: ", params.draft_max, " is outside [0, ", c.max_draft, "]"));
    }
    if (params.draft_min < 0 || params.draft_min > params.draft_max) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_min: ", params.draft_min, " is outside [0, draft_max = ", params.draft_max, "]"));
    }
  }
  if (params.n_predict < 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_predict: ", params.n_predict, " is negative"));
  }
  SamplingParams sp = params.sampling;
  sp.n_probs = params.logprobs;
  std::shared_ptr<const grammar::TokenPieces> pieces;
  grammar::GrammarCache* grammars = nullptr;
  if (!sp.grammar.empty()) {
    pieces = c.Pieces();
    grammars = c.Grammars();
  }
  // Validates the parameters (grammar included) and builds the sampler here, on the
  // caller's thread, so that the scheduler thread never parses grammars.
  auto sampler = Sampler::Create(sp, static_cast<int32_t>(c.n_vocab), std::move(pieces), grammars);
  if (!sampler.ok()) return sampler.status();

  auto st = std::make_shared<SeqState>();
  st->sampler = std::move(*sampler);
  st->prompt = std::move(params.prompt);
  st->tokens = st->prompt;
  st->sampling = params.sampling;
  st->logprobs = params.logprobs;
  st->ignore_eos = params.ignore_eos;
  st->notify = std::move(params.on_event);
  st->draft_source = std::move(params.draft_source);
  st->draft_min = params.draft_min;
  st->draft_max = params.draft_max;
  st->n_predict = params.n_predict;
  st->t_start = internal::Clock::now();
  {
    std::lock_guard<std::mutex> l(c.mu);
    if (c.stop || !c.admitting) return absl::UnavailableError("worker is shutting down: not admitting sequences");
    const int64_t free_slots = static_cast<int64_t>(c.capacity) - static_cast<int64_t>(c.active.size());
    const int64_t waiting = static_cast<int64_t>(c.queue.size()) - std::max<int64_t>(0, free_slots);
    if (waiting >= 0) {  // no slot for this one
      if (c.cfg.queue_policy == QueuePolicy::kReject) {
        return absl::ResourceExhaustedError(
            absl::StrCat("all ", c.capacity, " sequence slots are busy (max_sequences ", c.cfg.max_sequences, ")"));
      }
      if (waiting >= c.cfg.max_queue) {
        return absl::ResourceExhaustedError(absl::StrCat("admission queue is full (max_queue ", c.cfg.max_queue, ", ",
                                                         c.capacity, " sequences active)"));
      }
    }
    st->id = c.next_id++;
    c.queue.push_back(st);
  }
  c.cv.notify_all();
  return std::unique_ptr<Sequence>(new Sequence(core_, std::move(st)));
}

absl::Status Scheduler::Embed(std::vector<int32_t> tokens, Pooling pooling, EmbedCallback done) {
  Core& c = *core_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens: empty (1 to n_ctx_seq = ", c.n_ctx_seq, " tokens)"));
  }
  if (n > c.n_ctx_seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens: ", n, " tokens exceed the context of n_ctx_seq = ", c.n_ctx_seq, " cells"));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens[", i, "]: token id ", tokens[i], " is outside the vocabulary [0, ", c.n_vocab, ")"));
    }
  }
  if (!done) return absl::InvalidArgumentError("done: null callback");
  {
    std::lock_guard<std::mutex> l(c.mu);
    if (c.stop || !c.admitting) return absl::UnavailableError("worker is shutting down: not admitting requests");
    if (static_cast<int64_t>(c.embed_jobs.size()) >= std::max<int64_t>(1, c.cfg.max_queue)) {
      return absl::ResourceExhaustedError(absl::StrCat("embedding queue is full (max_queue ", c.cfg.max_queue, ")"));
    }
    internal::EmbedJob j;
    j.tokens = std::move(tokens);
    j.pooling = pooling;
    j.done = std::move(done);
    c.embed_jobs.push_back(std::move(j));
  }
  c.cv.notify_all();
  return absl::OkStatus();
}

void Scheduler::SetIterationObserver(std::function<void(const IterationStats&)> fn) {
  std::lock_guard<std::mutex> l(core_->obs_mu);
  core_->observer = std::move(fn);
}

SchedulerStats Scheduler::Stats() const {
  std::lock_guard<std::mutex> l(core_->mu);
  SchedulerStats s = core_->stats;
  s.active = static_cast<int32_t>(core_->active.size());
  s.queued = static_cast<int32_t>(core_->queue.size());
  const KvCacheManagerStats& k = core_->kvm->stats();
  s.prefix_cache_lookups = k.prefix_cache_lookups;
  s.prefix_cache_hits = k.prefix_cache_hits;
  s.prefix_tokens_reused = k.prefix_tokens_reused;
  s.prefix_evictions = k.prefix_evictions;
  s.preemptions = k.preemptions;
  return s;
}

namespace {
uint64_t MixVersion(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}
}  // namespace

// The manager's cache version and the ids of the active sequences (ids are never
// reused), so any admission, end or cache change gives another value.
static uint64_t PrefixVersionLocked(const internal::Core& c) {
  if (!c.cfg.prefix_cache) return 0;
  uint64_t h = MixVersion(1, c.kvm->version());
  for (const auto& a : c.active) h = MixVersion(h, a->id);
  return h == 0 ? 1 : h;
}

uint64_t Scheduler::PrefixCacheVersion() const {
  std::lock_guard<std::mutex> l(core_->mu);
  return PrefixVersionLocked(*core_);
}

std::vector<std::vector<int32_t>> Scheduler::CachedPrompts(uint64_t* version) const {
  std::lock_guard<std::mutex> l(core_->mu);
  std::vector<std::vector<int32_t>> out;
  if (version != nullptr) *version = PrefixVersionLocked(*core_);
  if (!core_->cfg.prefix_cache) return out;
  out = core_->kvm->CachedTokens();
  for (const auto& a : core_->active) out.push_back(a->prompt);
  return out;
}

int64_t Scheduler::n_ctx() const { return core_->n_ctx; }
int64_t Scheduler::n_ctx_seq() const { return core_->n_ctx_seq; }
int32_t Scheduler::max_sequences() const { return core_->cfg.max_sequences; }
int32_t Scheduler::capacity() const { return core_->capacity; }
int32_t Scheduler::max_draft() const { return core_->max_draft; }
int64_t Scheduler::n_vocab() const { return core_->n_vocab; }

}  // namespace herd::engine
