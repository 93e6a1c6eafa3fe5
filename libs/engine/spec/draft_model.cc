#include "libs/engine/spec/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

#include "libs/backend/registry.h"
#include "libs/base/log.h"

namespace herd::engine::spec {
namespace {

absl::Status Incompatible(const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat("draft model vocabulary is incompatible with the target's: ", why));
}

std::string Shown(const std::string& s) {
  std::string r = s.size() > 40 ? s.substr(0, 40) + "..." : s;
  return absl::StrCat("'", r, "'");
}

}  // namespace

absl::Status CheckVocabCompatible(const tokenizer::Vocab& target, const tokenizer::Vocab& draft) {
  if (target.type() != draft.type()) {
    return Incompatible(absl::StrCat("tokenizer type ", tokenizer::VocabTypeName(draft.type()), " (draft) vs ",
                                     tokenizer::VocabTypeName(target.type()), " (target)"));
  }
  if (target.add_bos() != draft.add_bos() || (target.add_bos() && target.bos() != draft.bos())) {
    return Incompatible(absl::StrCat("BOS differs: target add_bos=", target.add_bos(), " bos=", target.bos(),
                                     ", draft add_bos=", draft.add_bos(), " bos=", draft.bos()));
  }
  if (target.add_eos() != draft.add_eos() || (target.add_eos() && target.eos() != draft.eos())) {
    return Incompatible(absl::StrCat("EOS differs: target add_eos=", target.add_eos(), " eos=", target.eos(),
                                     ", draft add_eos=", draft.add_eos(), " eos=", draft.eos()));
  }
  const int32_t nt = target.n_tokens(), nd = draft.n_tokens();
  if (std::abs(nt - nd) > kSpecVocabMaxSizeDifference) {
    return Incompatible(absl::StrCat("sizes ", nd, " (draft) and ", nt, " (target) differ by ", std::abs(nt - nd),
                                     ", more than ", kSpecVocabMaxSizeDifference));
  }
  for (int32_t i = kSpecVocabCheckStartTokenId; i < std::min(nt, nd); ++i) {
    if (target.TokenText(i) != draft.TokenText(i)) {
      return Incompatible(absl::StrCat("token ", i, " is ", Shown(target.TokenText(i)), " in the target and ",
                                       Shown(draft.TokenText(i)), " in the draft"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Load(const std::string& path, const DraftModelParams& params) {
  if (params.top_k < 1) return absl::InvalidArgumentError(absl::StrCat("top_k: ", params.top_k, " must be >= 1"));
  if (params.n_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n_threads: ", params.n_threads, " must be >= 1"));
  }
  std::unique_ptr<DraftModel> dm(new DraftModel());
  dm->path_ = path;
  dm->params_ = params;
  auto model = model::Model::Load(path);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat("draft model ", path, ": ", model.status().message()));
  }
  dm->model_ = *std::move(model);
  auto vocab = tokenizer::Vocab::FromGguf(dm->model_->file());
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(), absl::StrCat("draft model ", path, ": ", vocab.status().message()));
  }
  dm->vocab_ = *std::move(vocab);
  BackendOptions bo;
  bo.n_threads = params.n_threads;
  bo.device = params.device;
  auto backend = CreateBackend(params.backend, bo);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(), absl::StrCat("draft model ", path, ": --backend ", params.backend,
                                                              ": ", backend.status().message()));
  }
  dm->backend_ = *std::move(backend);
  if (absl::Status s = dm->model_->PlaceWeights(dm->backend_.get()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("draft model ", path, ": ", s.message()));
  }
  EngineParams ep;
  ep.n_ctx = params.n_ctx;
  ep.n_batch = params.n_batch;
  ep.kv_type = params.kv_type;
  auto engine = Engine::Create(*dm->model_, ep, dm->backend_.get());
  if (!engine.ok()) {
    return absl::Status(engine.status().code(), absl::StrCat("draft model ", path, ": ", engine.status().message()));
  }
  dm->engine_ = *std::move(engine);
  const int64_t n_train = dm->model_->hparams().n_ctx_train;
  dm->seq_window_ = n_train > 0 ? std::min(n_train, dm->engine_->n_ctx()) : dm->engine_->n_ctx();
  dm->n_vocab_ = dm->engine_->n_vocab();
  dm->MeasureCatchUp();
  if (params.draft_ahead) dm->ahead_thread_ = std::thread([p = dm.get()] { p->AheadLoop(); });
  return dm;
}

DraftModel::~DraftModel() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  ahead_cv_.notify_all();
  if (ahead_thread_.joinable()) ahead_thread_.join();
}

void DraftModel::MeasureCatchUp() {
  const int64_t n = std::min<int64_t>({kFirstCatchUpTokens, seq_window_, engine_->n_ctx()});
  if (n < 1) return;
  Batch b;
  for (int64_t i = 0; i < n; ++i) b.Add(static_cast<int32_t>(i % n_vocab_), static_cast<int32_t>(i), 0, i == n - 1);
  // The second of two evaluations (the first pays for one-time allocations).
  for (int rep = 0; rep < 2; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = engine_->Decode(b);
    engine_->kv().SeqRemove(0, 0, -1);
    if (!s.ok()) return;  // measured on the first real evaluation instead
    catchup_tok_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
  }
}

absl::Status DraftModel::AttachTarget(const tokenizer::Vocab& target) {
  if (absl::Status s = CheckVocabCompatible(target, *vocab_); !s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  target_n_vocab_ = target.n_tokens();
  return absl::OkStatus();
}

std::unique_ptr<Drafter> DraftModel::NewDrafter() {
  int32_t seq;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!free_seqs_.empty()) {
      seq = free_seqs_.back();
      free_seqs_.pop_back();
    } else {
      seq = next_seq_++;
    }
  }
  return std::make_unique<DraftModelDrafter>(this, seq);
}

size_t DraftModel::n_cached_seqs() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [seq, st] : seqs_) n += st.kv_tokens.empty() ? 0 : 1;
  return n;
}

int64_t DraftModel::n_kv_evictions() const {
  std::lock_guard<std::mutex> l(mu_);
  return kv_evictions_;
}

void DraftModel::ReleaseSeq(int32_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  engine_->kv().SeqRemove(seq, 0, -1);
  seqs_.erase(seq);
  ahead_.erase(seq);
  free_seqs_.push_back(seq);
}

int64_t DraftModel::n_ahead_steps() const {
  std::lock_guard<std::mutex> l(mu_);
  return n_ahead_steps_;
}

int64_t DraftModel::n_ahead_hits() const {
  std::lock_guard<std::mutex> l(mu_);
  return n_ahead_hits_;
}

int64_t DraftModel::n_batches() const {
  std::lock_guard<std::mutex> l(mu_);
  return n_batches_;
}

bool DraftModel::EvictOtherLocked(const std::set<int32_t>& busy) {
  int32_t victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (const auto& [s, st] : seqs_) {
    if (busy.count(s) == 0 && !st.kv_tokens.empty() && st.last_use < oldest) {
      oldest = st.last_use;
      victim = s;
    }
  }
  if (victim < 0) return false;
  engine_->kv().SeqRemove(victim, 0, -1);
  SeqState& st = seqs_[victim];
  st.kv_tokens.clear();
  st.kv_p.clear();
  st.has_next = false;
  ahead_.erase(victim);
  ++kv_evictions_;
  return true;
}

absl::Status DraftModel::DecodeLocked(const Batch& batch, const std::set<int32_t>& busy,
                                      const std::vector<std::pair<int32_t, int32_t>>& undo) {
  for (;;) {
    absl::Status s = engine_->Decode(batch);
    if (s.ok()) return s;
    // Whatever part of the batch may have landed.
    for (const auto& [seq, p0] : undo) engine_->kv().SeqRemove(seq, p0, -1);
    if (s.code() != absl::StatusCode::kResourceExhausted || !EvictOtherLocked(busy)) return s;
  }
}

void DraftModel::TopK(const float* logits, float temp, SparseDist* out) const {
  const int64_t n = n_vocab_;
  const int64_t k = std::min<int64_t>(params_.top_k, n);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto better = [logits](int32_t a, int32_t b) {
    const float la = std::isnan(logits[a]) ? -INFINITY : logits[a], lb = std::isnan(logits[b]) ? -INFINITY : logits[b];
    return la > lb || (la == lb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  out->clear();
  const float t = temp > 0 ? temp : 1.0f;
  const float max_l = logits[ids[0]];
  double sum = 0;
  std::vector<double> e(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const float l = logits[ids[static_cast<size_t>(i)]];
    e[static_cast<size_t>(i)] = std::isfinite(l) ? std::exp((static_cast<double>(l) - max_l) / t) : 0.0;
    sum += e[static_cast<size_t>(i)];
  }
  if (!(sum > 0)) sum = 1, e[0] = 1;  // degenerate logits: all mass on the first
  for (int64_t i = 0; i < k; ++i) {
    out->push_back({ids[static_cast<size_t>(i)], static_cast<float>(e[static_cast<size_t>(i)] / sum)});
  }
}

DraftResult DraftModel::DraftFor(int32_t seq, const std::vector<int32_t>& h, const DraftParams& params) {
  DraftModelJob job;
  job.seq = seq;
  job.history = &h;
  job.params = params;
  return std::move(DraftBatch({job})[0]);
}

std::vector<DraftResult> DraftModel::DraftBatch(const std::vector<DraftModelJob>& jobs) {
  std::vector<DraftResult> results(jobs.size());
  if (jobs.empty()) return results;
  // Draft-ahead steps stop while a call is in progress (AheadLoop).
  callers_.fetch_add(1);
  struct Done {
    DraftModel* m;
    ~Done() {
      {
        std::lock_guard<std::mutex> l(m->mu_);
        m->callers_.fetch_sub(1);
      }
      m->ahead_cv_.notify_all();
    }
  } done{this};
  Request req{&jobs, &results};
  std::unique_lock<std::mutex> ql(q_mu_);
  queue_.push_back(&req);
  for (;;) {
    q_cv_.wait(ql, [&] { return req.done || !leading_; });
    if (req.done) return results;
    // Lead: draft everything queued (our own request included) as one batch.
    leading_ = true;
    std::vector<Request*> taken(queue_.begin(), queue_.end());
    queue_.clear();
    ql.unlock();
    std::vector<const DraftModelJob*> all;
    std::vector<DraftResult*> outs;
    for (Request* r : taken) {
      for (size_t i = 0; i < r->jobs->size(); ++i) {
        all.push_back(&(*r->jobs)[i]);
        outs.push_back(&(*r->results)[i]);
      }
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      // Go on past the drafts of greedy jobs after the call, where few sequences draft
      // (a step over many would delay the next call, and drafts seldom pay there).
      ahead_.clear();
      if (params_.draft_ahead && static_cast<int64_t>(all.size()) <= params_.draft_ahead_max_seqs) {
        for (const DraftModelJob* j : all) {
          const bool greedy = !(j->params.temp > 0 && j->params.seed.has_value());
          // n_max + 1 steps: the guess for the target's own token, then a whole draft;
          // not after one-token asks (probes, a prompt's warm-up call).
          if (greedy && j->params.n_max > 1) ahead_[j->seq] = Ahead{j->params.n_max + 1, j->params.p_min};
        }
      }
      while (!all.empty()) {  // rounds in which each sequence appears once
        std::set<int32_t> seen;
        std::vector<const DraftModelJob*> round, rest;
        std::vector<DraftResult*> round_out, rest_out;
        for (size_t i = 0; i < all.size(); ++i) {
          const bool first = seen.insert(all[i]->seq).second;
          (first ? round : rest).push_back(all[i]);
          (first ? round_out : rest_out).push_back(outs[i]);
        }
        RunBatchLocked(round, round_out);
        all = std::move(rest);
        outs = std::move(rest_out);
      }
    }
    ql.lock();
    for (Request* r : taken) r->done = true;
    leading_ = false;
    q_cv_.notify_all();
  }
}

bool DraftModel::CatchUpLocked(Active* a) {
  if (a->job->history == nullptr) return false;
  const std::vector<int32_t>& h = *a->job->history;
  const int32_t seq = a->job->seq;
  const int64_t L = static_cast<int64_t>(h.size());
  const int64_t n_max = a->job->params.n_max;
  if (L == 0 || n_max <= 0 || seq < 0) return false;
  const int64_t W = seq_window_ - n_max - 1;  // history tokens that fit with a full draft
  if (W < 1) return false;
  int64_t start = 0;
  if (L > W) {
    const int64_t step = std::max<int64_t>(1, W / 2);
    start = (L - W + step - 1) / step * step;
  }
  for (int64_t i = start; i < L; ++i) {
    if (h[static_cast<size_t>(i)] < 0 || h[static_cast<size_t>(i)] >= n_vocab_) return false;  // not in the vocab
  }
  SeqState& st = seqs_[seq];
  st.last_use = ++clock_;
  KvCache& kv = engine_->kv();
  if (st.start != start) {
    kv.SeqRemove(seq, 0, -1);
    st.kv_tokens.clear();
    st.kv_p.clear();
    st.has_next = false;
    st.start = start;
  }
  const int64_t n_win = L - start;
  const DraftParams& params = a->job->params;
  if (params_.draft_ahead && !(params.temp > 0 && params.seed.has_value())) {
    AheadDraftLocked(st, h, start, n_win, params, a->out);
    if (!a->out->tokens.empty()) {
      ++n_ahead_hits_;
      return false;
    }
  }
  // Keep the common prefix, but always re-evaluate the last token (its logits are needed).
  int64_t keep = 0;
  const int64_t max_keep = std::min<int64_t>(static_cast<int64_t>(st.kv_tokens.size()), n_win - 1);
  while (keep < max_keep && st.kv_tokens[static_cast<size_t>(keep)] == h[static_cast<size_t>(start + keep)]) ++keep;
  kv.SeqRemove(seq, static_cast<int32_t>(keep), -1);
  st.kv_tokens.resize(static_cast<size_t>(keep));
  st.kv_p.resize(static_cast<size_t>(keep));
  st.has_next = false;
  a->st = &st;
  a->n_win = n_win;
  a->keep = keep;
  a->n_eval = n_win - keep;
  return true;
}

int64_t DraftModel::CatchUpBudgetLocked(const std::vector<Active>& act) const {
  auto stop_by = std::chrono::steady_clock::time_point::max();
  for (const Active& a : act) stop_by = std::min(stop_by, a.job->params.stop_by);
  if (stop_by == std::chrono::steady_clock::time_point::max()) return std::numeric_limits<int64_t>::max();
  const double left = std::chrono::duration<double>(stop_by - std::chrono::steady_clock::now()).count();
  if (!(left > 0)) return kMinCatchUpTokens;
  // Before any measurement: a small first evaluation that gives one.
  const double by_time = catchup_tok_s_ > 0 ? left / catchup_tok_s_ : static_cast<double>(kFirstCatchUpTokens);
  return std::max<int64_t>(kMinCatchUpTokens, static_cast<int64_t>(std::min(by_time, 1e12)));
}

void DraftModel::RunBatchLocked(const std::vector<const DraftModelJob*>& jobs,
                                const std::vector<DraftResult*>& results) {
  ++n_batches_;
  std::vector<Active> act;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Active a{jobs[i], results[i]};
    if (CatchUpLocked(&a)) act.push_back(a);
  }
  if (act.empty()) return;
  // The time left covers this many new tokens: the sequences with the fewest go first
  // (those drafted last call: a draft each), the first that does not fit is evaluated
  // in part (kept: the next call goes on from there) and drafts nothing, the rest wait.
  int64_t budget = CatchUpBudgetLocked(act);
  std::vector<size_t> order(act.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return act[x].n_eval < act[y].n_eval; });
  for (size_t i : order) {
    Active& a = act[i];
    if (a.n_eval > budget) a.n_eval = std::max<int64_t>(0, budget);
    budget -= a.n_eval;
  }
  Batch batch;
  std::set<int32_t> busy;
  std::vector<std::pair<int32_t, int32_t>> undo;
  int64_t n_outputs = 0;
  for (Active& a : act) {
    if (a.n_eval == 0) continue;
    const std::vector<int32_t>& h = *a.job->history;
    const int64_t start = static_cast<int64_t>(h.size()) - a.n_win;
    const bool whole = a.keep + a.n_eval == a.n_win;
    for (int64_t i = a.keep; i < a.keep + a.n_eval; ++i) {
      batch.Add(h[static_cast<size_t>(start + i)], static_cast<int32_t>(i), a.job->seq, whole && i == a.n_win - 1);
    }
    if (whole) a.out_idx = n_outputs++;
    busy.insert(a.job->seq);
    undo.emplace_back(a.job->seq, static_cast<int32_t>(a.keep));
  }
  if (batch.size() == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = DecodeLocked(batch, busy, undo); !s.ok()) {
    if (s.code() == absl::StatusCode::kResourceExhausted && busy.size() > 1) {
      // No room for all of them at once: one at a time (each may evict the others).
      for (const Active& a : act) {
        if (a.n_eval > 0) RunBatchLocked({a.job}, {a.out});
      }
      return;
    }
    for (const Active& a : act) {
      if (a.n_eval == 0) continue;
      HERD_LOG(Warning) << "draft model: sequence " << a.job->seq << ": " << s.message();
      engine_->kv().SeqRemove(a.job->seq, 0, -1);
      a.st->kv_tokens.clear();
      a.st->kv_p.clear();
    }
    return;
  }
  if (batch.size() >= static_cast<size_t>(kFirstCatchUpTokens)) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per_token = took / static_cast<double>(batch.size());
    catchup_tok_s_ = catchup_tok_s_ > 0 ? 0.5 * (catchup_tok_s_ + per_token) : per_token;
  }
  for (const Active& a : act) {
    const std::vector<int32_t>& h = *a.job->history;
    const int64_t start = static_cast<int64_t>(h.size()) - a.n_win;
    for (int64_t i = a.keep; i < a.keep + a.n_eval; ++i) {
      a.st->kv_tokens.push_back(h[static_cast<size_t>(start + i)]);
      a.st->kv_p.push_back(0.0f);
    }
  }
  DraftStepsLocked(&act);
}

void DraftModel::DraftStepsLocked(std::vector<Active>* act) {
  const int64_t limit_vocab = target_n_vocab_ > 0 ? std::min(target_n_vocab_, n_vocab_) : n_vocab_;
  std::set<int32_t> busy;
  for (const Active& a : *act) busy.insert(a.job->seq);
  SparseDist cand;
  for (;;) {
    // A step that would end after a job's stop_by is not started for it.
    const auto step_start = std::chrono::steady_clock::now();
    const auto step_end = step_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(step_s_));
    Batch step;
    std::vector<std::pair<int32_t, int32_t>> undo;
    std::vector<Active*> next;
    for (Active& a : *act) {
      if (a.out_idx < 0) continue;
      const float* logits = engine_->Logits(a.out_idx);
      a.out_idx = -1;
      if (logits == nullptr) continue;
      const DraftParams& params = a.job->params;
      const float temp = params.temp > 0 && params.seed.has_value() ? params.temp : 0.0f;
      TopK(logits, temp, &cand);
      if (cand.empty() || cand[0].p < params.p_min) continue;  // only very confident drafts
      int32_t id = cand[0].id;
      if (temp > 0) {
        const int64_t pos_h = static_cast<int64_t>(a.job->history->size() + a.out->tokens.size());
        const double u = DraftUniform(*params.seed, pos_h);
        double acc = 0;
        for (const TokenProb& c : cand) {
          acc += c.p;
          id = c.id;
          if (u < acc) break;
        }
      }
      if (id >= limit_vocab) continue;
      a.out->tokens.push_back(id);
      if (temp > 0) a.out->probs.push_back(cand);
      // The draft's token, not evaluated yet: where it ends here, draft-ahead's start.
      a.st->has_next = temp == 0;
      a.st->next = id;
      a.st->next_p = cand[0].p;
      if (static_cast<int64_t>(a.out->tokens.size()) >= params.n_max) continue;
      if (step_end > params.stop_by) continue;
      const int32_t pos = static_cast<int32_t>(a.n_win + static_cast<int64_t>(a.out->tokens.size()) - 1);
      step.Add(id, pos, a.job->seq, true);
      undo.emplace_back(a.job->seq, pos);
      next.push_back(&a);
    }
    if (next.empty()) return;
    if (!DecodeLocked(step, busy, undo).ok()) {  // the drafts end here
      for (const Active* a : next) a->st->has_next = false;
      return;
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    step_s_ = step_s_ > 0 ? 0.5 * (step_s_ + took) : took;
    for (size_t j = 0; j < next.size(); ++j) {
      next[j]->out_idx = static_cast<int64_t>(j);
      next[j]->st->kv_tokens.push_back(step.tokens[j]);
      next[j]->st->kv_p.push_back(next[j]->st->next_p);
      next[j]->st->has_next = false;
    }
  }
}

void DraftModel::AheadDraftLocked(const SeqState& st, const std::vector<int32_t>& h, int64_t start, int64_t n_win,
                                  const DraftParams& params, DraftResult* out) const {
  const int64_t n_kv = static_cast<int64_t>(st.kv_tokens.size());
  if (n_kv < n_win || (n_kv == n_win && !st.has_next)) return;
  for (int64_t i = 0; i < n_win; ++i) {
    if (st.kv_tokens[static_cast<size_t>(i)] != h[static_cast<size_t>(start + i)]) return;
  }
  const int64_t limit_vocab = target_n_vocab_ > 0 ? std::min(target_n_vocab_, n_vocab_) : n_vocab_;
  for (int64_t i = n_win; static_cast<int64_t>(out->tokens.size()) < params.n_max; ++i) {
    int32_t id;
    float p;
    if (i < n_kv) {
      id = st.kv_tokens[static_cast<size_t>(i)];
      p = st.kv_p[static_cast<size_t>(i)];
    } else if (i == n_kv && st.has_next) {
      id = st.next;
      p = st.next_p;
    } else {
      break;
    }
    // kv_p is 0 for history tokens: those are never a continuation.
    if (!(p > 0) || p < params.p_min || id < 0 || id >= limit_vocab) break;
    out->tokens.push_back(id);
  }
}

void DraftModel::AheadLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    ahead_cv_.wait(l, [this] { return stop_ || (!ahead_.empty() && callers_.load() == 0); });
    if (stop_) return;
    if (!AheadStepLocked()) ahead_.clear();
    // Let a caller that waits for mu_ in.
    l.unlock();
    std::this_thread::yield();
    l.lock();
  }
}

bool DraftModel::AheadStepLocked() {
  const int64_t limit_vocab = target_n_vocab_ > 0 ? std::min(target_n_vocab_, n_vocab_) : n_vocab_;
  Batch step;
  std::vector<int32_t> seqs;
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    auto st = seqs_.find(it->first);
    const bool go = st != seqs_.end() && st->second.has_next && it->second.left > 0 &&
                    st->second.next_p >= it->second.p_min &&
                    static_cast<int64_t>(st->second.kv_tokens.size()) + 1 < seq_window_;
    if (!go) {
      it = ahead_.erase(it);
      continue;
    }
    step.Add(st->second.next, static_cast<int32_t>(st->second.kv_tokens.size()), it->first, true);
    seqs.push_back(it->first);
    ++it;
  }
  if (seqs.empty()) return false;
  // No eviction for a step nobody asked for: where the cells are full, ahead stops.
  if (!engine_->Decode(step).ok()) {
    for (size_t j = 0; j < seqs.size(); ++j) engine_->kv().SeqRemove(seqs[j], step.pos[j], -1);
    for (int32_t seq : seqs) seqs_[seq].has_next = false;
    return false;
  }
  ++n_ahead_steps_;
  SparseDist cand;
  for (size_t j = 0; j < seqs.size(); ++j) {
    SeqState& st = seqs_[seqs[j]];
    st.kv_tokens.push_back(st.next);
    st.kv_p.push_back(st.next_p);
    st.has_next = false;
    const float* logits = engine_->Logits(static_cast<int64_t>(j));
    if (logits == nullptr) continue;
    TopK(logits, 0.0f, &cand);
    if (cand.empty() || cand[0].id >= limit_vocab) continue;
    st.has_next = true;
    st.next = cand[0].id;
    st.next_p = cand[0].p;
    --ahead_[seqs[j]].left;
  }
  return true;
}

}  // namespace herd::engine::spec
