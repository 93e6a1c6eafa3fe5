// Continuous-batching scheduler tests on stories260K: batched greedy output equals
// each sequence's solo output, long prompts split over iterations, draft
// verification (accept all / a prefix, outputs unchanged), cancellation frees KV
// cells, admission control (queue / reject / queue bound), validation.
#include "libs/engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "gtest/gtest.h"

#include "libs/engine/generate.h"
#include "libs/engine/spec/rejection.h"
#include "libs/gguf/gguf.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"
#include "tests/stories_model_test.h"

namespace herd::engine {
namespace {

using std::chrono::milliseconds;

SamplingParams Greedy() {
  SamplingParams p;
  p.temp = 0.0f;
  return p;
}

class SchedulerTest : public StoriesModelTest {
 protected:
  std::unique_ptr<Engine> MakeEngine(int64_t n_ctx, int64_t n_batch) {
    EngineParams p;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    auto e = Engine::Create(*model_, p, &backend_);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  std::unique_ptr<Scheduler> MakeScheduler(Engine* e, SchedulerConfig cfg) {
    auto s = Scheduler::Create(e, vocab_.get(), cfg);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  // A scheduler of `max_sequences` slots, the other settings at their defaults.
  std::unique_ptr<Scheduler> MakeScheduler(Engine* e, int max_sequences) {
    SchedulerConfig cfg;
    cfg.max_sequences = max_sequences;
    return MakeScheduler(e, cfg);
  }

  // A request for `prompt` with `sampling` (greedy unless given) that ignores eos unless told.
  static SequenceParams SeqParams(std::vector<int32_t> prompt, const SamplingParams& sampling = Greedy(),
                                  bool ignore_eos = true) {
    SequenceParams p;
    p.prompt = std::move(prompt);
    p.sampling = sampling;
    p.ignore_eos = ignore_eos;
    return p;
  }

  // Starts a greedy sequence (ignoring eos) for each prompt; empty (with a failure
  // recorded) when one does not start.
  static std::vector<std::unique_ptr<Sequence>> StartGreedy(Scheduler* sched,
                                                            const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (const auto& prompt : prompts) {
      auto s = sched->Start(SeqParams(prompt));
      if (!s.ok()) {
        ADD_FAILURE() << s.status();
        return {};
      }
      seqs.push_back(*std::move(s));
    }
    return seqs;
  }

  // Each sequence starts and its next `n` tokens equal `solo`'s entry.
  static void ExpectSoloOutputs(const std::vector<std::unique_ptr<Sequence>>& seqs, int32_t n,
                                const std::vector<std::vector<int32_t>>& solo) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      ExpectStarted(seqs[i].get());
      EXPECT_EQ(Collect(seqs[i].get(), n), solo[i]) << "sequence " << i;
    }
  }

  // Solo reference: the single-sequence generation loop on a fresh engine.
  std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, int32_t n, const SamplingParams& sp,
                            bool ignore_eos = true, StopReason* stop = nullptr) {
    auto e = MakeEngine(512, 512);
    GenerateParams gp;
    gp.prompt_ids = prompt;
    gp.n_predict = n;
    gp.sampling = sp;
    gp.ignore_eos = ignore_eos;
    auto r = Generate(*e, *vocab_, gp);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    if (stop != nullptr) *stop = r->stop;
    return r->output_ids;
  }

  // Waits for the next event (fails the test on a 30 s timeout; 150 s under
  // ThreadSanitizer, which runs the model passes 5-15x slower).
#if defined(__SANITIZE_THREAD__)
  static constexpr int kEventTimeoutS = 150;
#else
  static constexpr int kEventTimeoutS = 30;
#endif
  static SequenceEvent NextEvent(Sequence* s) {
    SequenceEvent ev;
    if (!s->Next(&ev, milliseconds(kEventTimeoutS * 1000))) {
      ADD_FAILURE() << "no event within " << kEventTimeoutS << " s";
      ev.kind = SequenceEvent::Kind::kEnded;
      ev.status = absl::DeadlineExceededError("timeout");
    }
    return ev;
  }

  static void ExpectStarted(Sequence* s) {
    SequenceEvent ev = NextEvent(s);
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStarted) << ev.status;
    EXPECT_EQ(ev.n_prompt, s->n_prompt());
  }

  // Collects step results until `n` tokens, eos or context_full (one Step(n) request).
  static std::vector<int32_t> Collect(Sequence* s, int32_t n, bool one_by_one = false) {
    std::vector<int32_t> out;
    if (!one_by_one) {
      EXPECT_TRUE(s->Step(n).ok());
    }
    while (static_cast<int32_t>(out.size()) < n) {
      if (one_by_one) {
        EXPECT_TRUE(s->Step(1).ok());
      }
      SequenceEvent ev = NextEvent(s);
      if (ev.kind != SequenceEvent::Kind::kStep) {
        ADD_FAILURE() << "unexpected event " << static_cast<int>(ev.kind) << " " << ev.status;
        break;
      }
      EXPECT_EQ(ev.step.tokens.size(), 1u);
      out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
      if (ev.step.eos || ev.step.context_full) break;
    }
    return out;
  }

  // Cells held by running sequences (shared ones included), not only by cached prefixes.
  static int64_t RunningCells(const SchedulerStats& s) { return s.kv_cells_used - s.kv_cells_cached; }

  static std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len) {
    std::vector<int32_t> p = {1};
    std::uniform_int_distribution<int32_t> tok(3, 511);
    while (static_cast<int>(p.size()) < len) p.push_back(tok(rng));
    return p;
  }

  std::unique_ptr<Backend> backend_owner_ = CpuBackendForTests(2);
  Backend& backend_ = *backend_owner_;
};

TEST_F(SchedulerTest, SixteenConcurrentSequencesEqualTheirSoloOutput) {
  constexpr int kSeqs = 16;
  std::mt19937 rng(1234);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> lens;
  std::vector<SamplingParams> sps;
  for (int i = 0; i < kSeqs; ++i) {
    prompts.push_back(RandomPrompt(rng, 1 + (i * 7) % 40));
    lens.push_back(8 + (i * 13) % 40);
    SamplingParams sp = Greedy();
    if (i % 3 == 1) {  // penalties whose history includes the prompt
      sp.repeat_penalty = 1.3f;
      sp.penalty_last_n = 32;
      sp.presence_penalty = 0.5f;
    }
    sps.push_back(sp);
  }
  std::vector<std::vector<int32_t>> solo;
  const auto t_solo = std::chrono::steady_clock::now();
  for (int i = 0; i < kSeqs; ++i) solo.push_back(Solo(prompts[i], lens[i], sps[i]));
  const double solo_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_solo).count();

  auto engine = MakeEngine(kSeqs * 128, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = kSeqs;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::vector<std::vector<int32_t>> got(kSeqs);
  const auto t_batch = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kSeqs; ++i) {
    threads.emplace_back([&, i] {
      SequenceParams p;
      p.prompt = prompts[i];
      p.sampling = sps[i];
      p.ignore_eos = true;
      auto seq = sched->Start(p);
      ASSERT_TRUE(seq.ok()) << seq.status();
      ExpectStarted(seq->get());
      got[i] = Collect(seq->get(), lens[i], /*one_by_one=*/i % 2 == 0);
    });
  }
  for (auto& t : threads) t.join();
  const double batch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_batch).count();
  for (int i = 0; i < kSeqs; ++i) EXPECT_EQ(got[i], solo[i]) << "sequence " << i;
  const SchedulerStats st = sched->Stats();
  EXPECT_GT(st.multi_sequence_iterations, 0u);
  EXPECT_GT(st.max_batch_sequences, 1);
  EXPECT_LE(st.max_batch_tokens, 64);
  uint64_t want_gen = 0, want_prompt = 0;
  for (int i = 0; i < kSeqs; ++i) {
    want_gen += static_cast<uint64_t>(lens[i]);
    want_prompt += prompts[i].size();
  }
  EXPECT_EQ(st.tokens_generated, want_gen);
  // Every prompt starts with BOS: the prefix cache serves it to all but the first.
  EXPECT_EQ(st.prompt_tokens + st.prefix_tokens_reused, want_prompt);
  EXPECT_EQ(st.prefix_cache_lookups, static_cast<uint64_t>(kSeqs));
  EXPECT_GE(st.prefix_tokens_reused, st.prefix_cache_hits);
  EXPECT_EQ(st.sequences_started, static_cast<uint64_t>(kSeqs));
  // Handles are gone: no running sequence holds a cell (by the next iteration at the
  // latest); what stays is the prefix cache's, within the pool.
  for (int i = 0; i < 100 && RunningCells(sched->Stats()) != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(RunningCells(sched->Stats()), 0);
  EXPECT_GT(sched->Stats().cached_prefixes, 0);
  EXPECT_EQ(sched->Stats().active, 0);
  std::printf(
      "16 sequences: %llu forward passes, %llu with >1 sequence, max %d sequences / %d tokens per pass; "
      "%.0f ms batched vs %.0f ms one after another (solo Generate)\n",
      static_cast<unsigned long long>(st.iterations), static_cast<unsigned long long>(st.multi_sequence_iterations),
      st.max_batch_sequences, st.max_batch_tokens, batch_ms, solo_ms);
}

TEST_F(SchedulerTest, LongPromptSplitAcrossIterationsEqualsSolo) {
  std::mt19937 rng(99);
  const std::vector<int32_t> prompt = RandomPrompt(rng, 150);
  const std::vector<int32_t> solo = Solo(prompt, 20, Greedy());
  auto engine = MakeEngine(512, 16);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  // A second, short sequence decodes while the long prompt is being processed. It asks
  // for 200 steps (checking the first 30) so that it is still decoding when the long
  // prompt arrives: 30 steps of stories260K can all run before the second Start.
  SequenceParams q = SeqParams({1, 403, 407});
  const std::vector<int32_t> solo_short = Solo(q.prompt, 30, Greedy());
  auto other = sched->Start(q);
  ASSERT_TRUE(other.ok());
  ExpectStarted(other->get());
  ASSERT_TRUE((*other)->Step(200).ok());

  SequenceParams p = SeqParams(prompt);
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok()) << seq.status();
  ExpectStarted(seq->get());
  EXPECT_EQ(Collect(seq->get(), 20), solo);
  std::vector<int32_t> short_out;
  while (short_out.size() < 30) {
    SequenceEvent ev = NextEvent(other->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    short_out.insert(short_out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  }
  short_out.resize(30);
  EXPECT_EQ(short_out, solo_short);
  const SchedulerStats st = sched->Stats();
  EXPECT_LE(st.max_batch_tokens, 16);
  EXPECT_GE(st.iterations, 149u / 16u);
  EXPECT_GT(st.multi_sequence_iterations, 0u);
}

TEST_F(SchedulerTest, DraftVerificationAcceptsTheMatchingPrefix) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
  const std::vector<int32_t> cont = Solo(prompt, 40, Greedy());
  ASSERT_EQ(cont.size(), 40u);
  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams(prompt);
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok());
  Sequence* s = seq->get();
  ExpectStarted(s);
  std::vector<int32_t> out;

  // The correct continuation as draft: all of it accepted, plus one token.
  ASSERT_TRUE(s->Step(0, std::vector<int32_t>(cont.begin(), cont.begin() + 10)).ok());
  SequenceEvent ev = NextEvent(s);
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_EQ(ev.step.n_accepted, 10);
  EXPECT_EQ(ev.step.tokens, std::vector<int32_t>(cont.begin(), cont.begin() + 11));
  out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  // Cells: the prompt and every token but the last (pending) one.
  EXPECT_EQ(sched->Stats().kv_cells_used, static_cast<int64_t>(prompt.size() + out.size() - 1));

  // A draft that goes wrong at its third token: two accepted, then the right token.
  std::vector<int32_t> wrong = {cont[11], cont[12], (cont[13] + 1) % 512, cont[14], cont[15]};
  ASSERT_TRUE(s->Step(1, wrong).ok());
  ev = NextEvent(s);
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_EQ(ev.step.n_accepted, 2);
  EXPECT_EQ(ev.step.tokens, std::vector<int32_t>(cont.begin() + 11, cont.begin() + 14));
  out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  // Rejected cells are gone.
  EXPECT_EQ(sched->Stats().kv_cells_used, static_cast<int64_t>(prompt.size() + out.size() - 1));

  // A draft wrong from its first token: nothing accepted, one correct token.
  ASSERT_TRUE(s->Step(0, {(cont[14] + 7) % 512, cont[15]}).ok());
  ev = NextEvent(s);
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_EQ(ev.step.n_accepted, 0);
  EXPECT_EQ(ev.step.tokens, std::vector<int32_t>({cont[14]}));
  out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());

  // Plain steps for the rest: the output is the no-draft output.
  const std::vector<int32_t> rest = Collect(s, 40 - static_cast<int32_t>(out.size()));
  out.insert(out.end(), rest.begin(), rest.end());
  EXPECT_EQ(out, cont);
}

TEST_F(SchedulerTest, LongDraftsAreCutToTheBatch) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
  const std::vector<int32_t> cont = Solo(prompt, 40, Greedy());
  auto engine = MakeEngine(256, 8);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams(prompt);
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  // 20 correct draft tokens, n_batch 8: 7 are verified, all accepted, plus one.
  ASSERT_TRUE((*seq)->Step(0, std::vector<int32_t>(cont.begin(), cont.begin() + 20)).ok());
  SequenceEvent ev = NextEvent(seq->get());
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_EQ(ev.step.n_accepted, 7);
  EXPECT_EQ(ev.step.tokens, std::vector<int32_t>(cont.begin(), cont.begin() + 8));
  EXPECT_LE(sched->Stats().max_batch_tokens, 8);
}

TEST_F(SchedulerTest, SeededSamplingWithDraftsEqualsWithout) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  SamplingParams sp;
  sp.temp = 0.9f;
  sp.seed = 42;
  sp.repeat_penalty = 1.1f;
  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams(prompt, sp);
  auto a = sched->Start(p);
  ASSERT_TRUE(a.ok());
  ExpectStarted(a->get());
  const std::vector<int32_t> ref = Collect(a->get(), 30);
  ASSERT_EQ(ref.size(), 30u);

  auto b = sched->Start(p);
  ASSERT_TRUE(b.ok());
  ExpectStarted(b->get());
  std::vector<int32_t> out;
  int round = 0;
  while (out.size() < ref.size()) {
    // Alternate right drafts, half-right drafts and no draft.
    std::vector<int32_t> draft;
    for (size_t i = out.size(); i < std::min(ref.size(), out.size() + 4); ++i) draft.push_back(ref[i]);
    if (round % 3 == 1 && draft.size() > 2) draft[2] = (draft[2] + 1) % 512;
    if (round % 3 == 2) draft.clear();
    ++round;
    ASSERT_TRUE((*b)->Step(0, draft).ok());
    SequenceEvent ev = NextEvent(b->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  }
  out.resize(ref.size());
  EXPECT_EQ(out, ref);
}

// Drafts sampled by a draft model carry the distributions q they were drawn from: a
// sampling sequence verifies them by speculative (rejection) sampling, and with a fixed
// seed a verification is exactly spec::RejectionSample over the target's final
// distributions (penalties included) with the sequence's RNG. A greedy sequence
// ignores q (sample and match). Bad distributions are INVALID_ARGUMENT naming them.
TEST_F(SchedulerTest, DraftsWithProbabilitiesAreVerifiedByRejectionSampling) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
  const std::vector<int32_t> cont = Solo(prompt, 8, Greedy());
  ASSERT_EQ(cont.size(), 8u);
  const int32_t n_vocab = 512;
  // Two drafts: the greedy continuation, and one that goes wrong at its third token.
  std::vector<std::vector<int32_t>> drafts = {std::vector<int32_t>(cont.begin(), cont.begin() + 4),
                                              std::vector<int32_t>(cont.begin(), cont.begin() + 5)};
  drafts[1][2] = (drafts[1][2] + 5) % n_vocab;
  auto q_for = [&](const std::vector<int32_t>& d) {
    std::vector<spec::SparseDist> q;
    for (int32_t t : d) q.push_back({{t, 0.6f}, {(t + 1) % n_vocab, 0.3f}, {(t + 2) % n_vocab, 0.1f}});
    return q;
  };
  SamplingParams sp;
  sp.temp = 0.8f;
  sp.repeat_penalty = 1.1f;

  // The target's logits at [pending, draft...], computed in a separate engine the way
  // the scheduler evaluates them (prefill, then one verification batch).
  auto logits_for = [&](const std::vector<int32_t>& d) {
    auto e = MakeEngine(256, 64);
    Batch b;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, false);
    EXPECT_TRUE(e->Decode(b).ok());
    b.Clear();
    b.Add(prompt.back(), static_cast<int32_t>(prompt.size() - 1), 0, true);
    for (size_t j = 0; j < d.size(); ++j) b.Add(d[j], static_cast<int32_t>(prompt.size() + j), 0, true);
    EXPECT_TRUE(e->Decode(b).ok());
    std::vector<std::vector<float>> rows;
    for (size_t j = 0; j <= d.size(); ++j)
      rows.emplace_back(e->Logits(static_cast<int64_t>(j)), e->Logits(static_cast<int64_t>(j)) + n_vocab);
    return rows;
  };

  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  int all_accepted = 0, rejected = 0, some_accepted = 0;
  for (size_t di = 0; di < drafts.size(); ++di) {
    const std::vector<int32_t>& draft = drafts[di];
    const std::vector<spec::SparseDist> q = q_for(draft);
    const auto rows = logits_for(draft);
    for (uint32_t seed = 1; seed <= 16; ++seed) {
      SCOPED_TRACE(testing::Message() << "draft " << di << ", seed " << seed);
      sp.seed = seed;
      // Expected: RejectionSample over p_i = the sampler chain after the prompt and
      // draft[0..i) (position i is only reached when those were accepted).
      Sampler ref(sp, n_vocab);
      for (int32_t t : prompt) ASSERT_TRUE(ref.Accept(t).ok());
      std::vector<spec::SparseDist> target;
      for (size_t i = 0; i <= draft.size(); ++i) {
        target.push_back(spec::DistFromCandidates(ref.Candidates(rows[i].data())));
        if (i < draft.size()) {
          ASSERT_TRUE(ref.Accept(draft[i]).ok());
        }
      }
      std::mt19937 rng(ref.seed() ^ 0x5bd1e995u);
      auto want = spec::RejectionSample(target, draft, q, rng);
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<int32_t> want_tokens(draft.begin(), draft.begin() + want->n_accepted);
      want_tokens.push_back(want->token);

      SequenceParams p = SeqParams(prompt, sp);
      p.logprobs = 2;
      auto seq = sched->Start(p);
      ASSERT_TRUE(seq.ok()) << seq.status();
      ExpectStarted(seq->get());
      ASSERT_TRUE((*seq)->Step(0, draft, q).ok());
      SequenceEvent ev = NextEvent(seq->get());
      ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep) << ev.status;
      EXPECT_EQ(ev.step.tokens, want_tokens);
      EXPECT_EQ(ev.step.n_accepted, want->n_accepted);
      ASSERT_EQ(ev.step.logprobs.size(), ev.step.tokens.size());
      for (const TokenLogprobs& lp : ev.step.logprobs) EXPECT_LE(lp.logprob, 0.0f);
      if (want->n_accepted == static_cast<int32_t>(draft.size())) {
        ++all_accepted;
      } else {
        ++rejected;
      }
      if (want->n_accepted > 0) ++some_accepted;
      // The sequence goes on normally afterwards (rejected cells are gone).
      EXPECT_EQ(RunningCells(sched->Stats()), static_cast<int64_t>(prompt.size() + ev.step.tokens.size() - 1));
      ASSERT_TRUE((*seq)->Step(2).ok());
      for (int k = 0; k < 2; ++k) EXPECT_EQ(NextEvent(seq->get()).kind, SequenceEvent::Kind::kStep);
    }
  }
  // Both outcomes occurred (fixed seeds: deterministic).
  EXPECT_GT(all_accepted, 0);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(some_accepted, 0);

  // A greedy sequence ignores q: the greedy continuation is accepted whole.
  {
    SequenceParams p = SeqParams(prompt);
    auto seq = sched->Start(p);
    ASSERT_TRUE(seq.ok());
    ExpectStarted(seq->get());
    ASSERT_TRUE((*seq)->Step(0, drafts[0], q_for(drafts[0])).ok());
    SequenceEvent ev = NextEvent(seq->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    EXPECT_EQ(ev.step.tokens, std::vector<int32_t>(cont.begin(), cont.begin() + 5));
    // Validation of the distributions.
    absl::Status st = (*seq)->Step(0, {1, 2}, {{{1, 1.0f}}});
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("draft_probs"), std::string::npos) << st;
    st = (*seq)->Step(0, {1, 2}, {{{1, 1.0f}}, {{3, 1.0f}}});
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("draft_probs[1]"), std::string::npos) << st;
    st = (*seq)->Step(0, {1, 2}, {{{1, -1.0f}}, {{2, 1.0f}}});
    EXPECT_NE(st.message().find("draft_probs[0].p[0]"), std::string::npos) << st;
    st = (*seq)->Step(0, {1, 2}, {{{1, 1.0f}}, {{2, 1.0f}, {9999, 0.5f}}});
    EXPECT_NE(st.message().find("draft_probs[1].ids[1]"), std::string::npos) << st;
    // An empty entry is a deterministic token.
    EXPECT_TRUE((*seq)->Step(0, {1, 2}, {{}, {{2, 1.0f}}}).ok());
  }
}

// Sequences verifying drafts side by side free KV cells all the time (rejected
// draft tokens) and start and end at different times; each still produces exactly its
// solo greedy output (a sequence's new cells come after its last one, so its cells stay
// in position order and attention sums its keys in the same order as alone).
TEST_F(SchedulerTest, InterleavedDraftRejectionsKeepSoloOutputs) {
  std::mt19937 rng(7);
  const int n_seq = 10;
  const int32_t n_out = 96;
  std::vector<std::vector<int32_t>> prompts, solo;
  for (int i = 0; i < n_seq; ++i) {
    // This story's greedy continuation has near-ties that a different summation order
    // of the attention would flip (seen through the gateway before slots had regions).
    prompts.push_back(i % 2 == 0 ? vocab_->Tokenize("One day, Lily met a Shoggoth", true, false)
                                 : RandomPrompt(rng, 5 + 7 * i));
    solo.push_back(Solo(prompts.back(), n_out, Greedy()));
  }
  // A pool the 10 sequences (~1700 cells in all, kept as cached prefixes when they end)
  // never wrap around: a sequence whose next cell had to come from below its last one
  // would sum its attention in another order than alone (kv_cache.h, "Cell order").
  auto engine = MakeEngine(4096, 128);
  SchedulerConfig cfg;
  cfg.max_sequences = 4;  // 10 sequences through 4 slots: some wait, then take freed slots
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::vector<std::vector<int32_t>> out(n_seq);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_seq; ++i) {
    threads.emplace_back([&, i] {
      SequenceParams p = SeqParams(prompts[i]);
      auto seq = sched->Start(p);
      ASSERT_TRUE(seq.ok()) << seq.status();
      ExpectStarted(seq->get());
      std::vector<int32_t>& o = out[i];
      int round = 0;
      while (static_cast<int32_t>(o.size()) < n_out) {
        // Drafts that go wrong after a few tokens (so cells are rejected), of varying
        // lengths, with plain steps in between.
        std::vector<int32_t> draft;
        const size_t len = 1 + static_cast<size_t>((round * 3 + i) % 6);
        for (size_t k = o.size(); k < std::min(solo[i].size(), o.size() + len); ++k) draft.push_back(solo[i][k]);
        if (draft.size() > 1 && round % 2 == 0) draft[draft.size() / 2] = (draft[draft.size() / 2] + 1) % 512;
        if (round % 5 == 4) draft.clear();
        ++round;
        ASSERT_TRUE((*seq)->Step(0, draft).ok());
        SequenceEvent ev = NextEvent(seq->get());
        ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep) << ev.status;
        o.insert(o.end(), ev.step.tokens.begin(), ev.step.tokens.end());
      }
      o.resize(static_cast<size_t>(n_out));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n_seq; ++i) EXPECT_EQ(out[i], solo[i]) << "sequence " << i;
  EXPECT_GT(sched->Stats().multi_sequence_iterations, 0u);
}

TEST_F(SchedulerTest, CancelAndCloseFreeKvCells) {
  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams({1, 403, 407, 261, 378});
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  EXPECT_EQ(Collect(seq->get(), 5).size(), 5u);
  EXPECT_EQ(sched->Stats().kv_cells_used, 9);
  // Steps requested but not yet run are dropped by Cancel (the scheduler may have run a
  // few of them before the cancellation: each added one cell).
  ASSERT_TRUE((*seq)->Step(1000).ok());
  (*seq)->Cancel();
  SequenceEvent ev;
  int64_t ran = 0;
  do {
    ev = NextEvent(seq->get());
    if (ev.kind == SequenceEvent::Kind::kStep) ran += static_cast<int64_t>(ev.step.tokens.size());
  } while (ev.kind == SequenceEvent::Kind::kStep);
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kEnded);
  EXPECT_TRUE(absl::IsCancelled(ev.status)) << ev.status;
  EXPECT_LT(ran, 1000);
  EXPECT_EQ(RunningCells(sched->Stats()), 0);
  // Kept for prefix caching: the prompt and every generated token but the last sampled
  // one. A step that was already in its forward pass when Cancel landed added its cell
  // (the K/V of the last delivered token) but its result was dropped, not delivered: so
  // 9 + ran cells, or 10 + ran. tokens_generated counts every sampled token, delivered
  // or dropped, which pins the count exactly (5 prompt tokens, the last sampled token
  // has no cell).
  const SchedulerStats after_cancel = sched->Stats();
  const int64_t cached = after_cancel.kv_cells_cached;
  EXPECT_TRUE(cached == 9 + ran || cached == 10 + ran) << cached << " cells cached after " << ran << " steps";
  EXPECT_EQ(cached, 5 + static_cast<int64_t>(after_cancel.tokens_generated) - 1);
  EXPECT_EQ(sched->Stats().active, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition((*seq)->Step(1)));

  // Dropping the handle (a closed stream) frees too.
  auto seq2 = sched->Start(p);
  ASSERT_TRUE(seq2.ok());
  ExpectStarted(seq2->get());
  EXPECT_EQ(Collect(seq2->get(), 3).size(), 3u);
  // 4 of its 7 cells are the cached prompt's (shared): 3 more cells in use.
  EXPECT_EQ(RunningCells(sched->Stats()), 7);
  EXPECT_EQ(sched->Stats().kv_cells_used, cached + 3);
  EXPECT_EQ(sched->Stats().prefix_tokens_reused, 4u);
  seq2->reset();
  for (int i = 0; i < 100 && RunningCells(sched->Stats()) != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(RunningCells(sched->Stats()), 0);
  // seq2's prefix is covered by the first's cached one: nothing new cached.
  EXPECT_EQ(sched->Stats().kv_cells_used, cached);
  EXPECT_EQ(sched->Stats().cached_prefixes, 1);
  EXPECT_EQ(sched->Stats().active, 0);
}

TEST_F(SchedulerTest, AdmissionQueuesOrRejects) {
  auto engine = MakeEngine(256, 64);
  SequenceParams p = SeqParams({1, 403, 407});
  {
    SchedulerConfig cfg;
    cfg.max_sequences = 2;
    cfg.max_queue = 1;
    cfg.queue_policy = QueuePolicy::kWait;
    auto sched = MakeScheduler(engine.get(), cfg);
    ASSERT_NE(sched, nullptr);
    EXPECT_EQ(sched->n_ctx_seq(), 256);  // 0 = the whole pool
    auto a = sched->Start(p);
    auto b = sched->Start(p);
    ASSERT_TRUE(a.ok() && b.ok());
    ExpectStarted(a->get());
    ExpectStarted(b->get());
    auto c = sched->Start(p);  // waits
    ASSERT_TRUE(c.ok()) << c.status();
    SequenceEvent ev;
    EXPECT_FALSE((*c)->Next(&ev, milliseconds(100)));
    EXPECT_EQ(sched->Stats().queued, 1);
    EXPECT_EQ(sched->Stats().active, 2);
    auto d = sched->Start(p);  // the queue is full
    EXPECT_TRUE(absl::IsResourceExhausted(d.status())) << d.status();
    // Steps may be requested while queued; they run after admission.
    ASSERT_TRUE((*c)->Step(2).ok());
    (*a)->Cancel();
    ExpectStarted(c->get());
    for (int i = 0; i < 2; ++i) EXPECT_EQ(NextEvent(c->get()).kind, SequenceEvent::Kind::kStep);
  }
  {
    SchedulerConfig cfg;
    cfg.max_sequences = 2;
    cfg.queue_policy = QueuePolicy::kReject;
    auto sched = MakeScheduler(engine.get(), cfg);
    ASSERT_NE(sched, nullptr);
    auto a = sched->Start(p);
    auto b = sched->Start(p);
    ASSERT_TRUE(a.ok() && b.ok());
    auto c = sched->Start(p);
    EXPECT_TRUE(absl::IsResourceExhausted(c.status())) << c.status();
    b->reset();
    // The slot frees at the next iteration.
    absl::StatusOr<std::unique_ptr<Sequence>> d = absl::UnknownError("");
    for (int i = 0; i < 100; ++i) {
      d = sched->Start(p);
      if (d.ok()) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    EXPECT_TRUE(d.ok()) << d.status();
  }
  {
    // Cancelling a queued sequence ends it without admission.
    auto sched = MakeScheduler(engine.get(), 1);
    ASSERT_NE(sched, nullptr);
    auto a = sched->Start(p);
    auto b = sched->Start(p);
    ASSERT_TRUE(a.ok() && b.ok());
    ExpectStarted(a->get());
    (*b)->Cancel();
    SequenceEvent ev = NextEvent(b->get());
    EXPECT_EQ(ev.kind, SequenceEvent::Kind::kEnded);
    EXPECT_TRUE(absl::IsCancelled(ev.status));
    EXPECT_EQ(sched->Stats().queued, 0);
  }
}

TEST_F(SchedulerTest, ValidationErrorsNameTheField) {
  auto engine = MakeEngine(256, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.n_ctx_seq = 64;
  cfg.max_draft = 64;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  auto start = [&](SequenceParams p) { return sched->Start(std::move(p)).status(); };
  SequenceParams p;
  p.sampling = Greedy();
  absl::Status s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("prompt"), std::string::npos) << s;
  p.prompt.assign(65, 5);
  s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("n_ctx_seq"), std::string::npos) << s;
  p.prompt = {1, 512};
  s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("prompt[1]"), std::string::npos) << s;
  p.prompt = {1, -3};
  EXPECT_TRUE(absl::IsInvalidArgument(start(p)));
  p.prompt = {1, 2};
  p.logprobs = 21;
  s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("logprobs"), std::string::npos) << s;
  p.logprobs = 0;
  p.sampling.top_p = 1.5f;
  s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("top_p"), std::string::npos) << s;
  p.sampling = Greedy();
  p.prompt.assign(64, 5);  // n_ctx_seq tokens leave no room for a completion (llama.cpp)
  s = start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("prompt"), std::string::npos) << s;
  p.prompt.assign(63, 5);  // n_ctx_seq - 1 is allowed
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok()) << seq.status();
  Sequence* q = seq->get();
  s = q->Step(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("n_steps"), std::string::npos) << s;
  s = q->Step(0, std::vector<int32_t>(65, 3));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("draft"), std::string::npos) << s;
  s = q->Step(0, {3, 600});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("draft[1]"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(q->Step(2, {3})));
  // A full prompt leaves room for exactly one token.
  ExpectStarted(q);
  ASSERT_TRUE(q->Step(5, {3, 4}).code() == absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(q->Step(0, {3, 4}).ok());  // the draft is cut to the room left (none)
  SequenceEvent ev = NextEvent(q);
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_EQ(ev.step.tokens.size(), 1u);
  EXPECT_TRUE(ev.step.context_full);
  EXPECT_TRUE(absl::IsFailedPrecondition(q->Step(1)));

  // Config errors.
  SchedulerConfig bad;
  bad.max_sequences = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Scheduler::Create(engine.get(), vocab_.get(), bad).status()));
}

TEST_F(SchedulerTest, ContextFullAfterNCtxSeqTokens) {
  auto engine = MakeEngine(64, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.n_ctx_seq = 16;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams({1, 403, 407, 261, 378, 432, 383, 286, 300, 301});
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  const std::vector<int32_t> out = Collect(seq->get(), 100);
  // prompt + completion = n_ctx_seq = 16, as llama.cpp counts the context: 6 tokens.
  EXPECT_EQ(out.size(), 6u);
  EXPECT_TRUE(absl::IsFailedPrecondition((*seq)->Step(1)));
  auto e2 = MakeEngine(16, 64);
  GenerateParams gp;
  gp.prompt_ids = p.prompt;
  gp.n_predict = 100;
  gp.sampling = Greedy();
  gp.ignore_eos = true;
  auto r = Generate(*e2, *vocab_, gp);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop, StopReason::kContextFull);
  EXPECT_EQ(r->output_ids, out);
}

TEST_F(SchedulerTest, Logprobs) {
  auto engine = MakeEngine(1024, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p;
  p.prompt = vocab_->Tokenize("Once upon a time", true, true);
  p.sampling = Greedy();
  p.logprobs = 5;
  auto seq = sched->Start(p);
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  ASSERT_TRUE((*seq)->Step(60).ok());
  std::vector<int32_t> out;
  double last_gen_ms = 0;
  while (out.size() < 60) {
    SequenceEvent ev = NextEvent(seq->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    ASSERT_EQ(ev.step.logprobs.size(), 1u);
    const TokenLogprobs& lp = ev.step.logprobs[0];
    EXPECT_EQ(lp.id, ev.step.tokens[0]);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].id, lp.id);  // greedy: the argmax
    EXPECT_EQ(lp.top[0].logprob, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_GE(ev.step.generation_ms, last_gen_ms);
    last_gen_ms = ev.step.generation_ms;
    EXPECT_GT(ev.step.prompt_ms, 0.0);
    out.push_back(ev.step.tokens[0]);
  }
  EXPECT_EQ(out, Solo(p.prompt, 60, Greedy()));

  // Sampling mode: the chosen token's logprob comes from the distribution it was drawn from.
  p.sampling.temp = 1.0f;
  p.sampling.seed = 7;
  p.logprobs = 1;
  auto s2 = sched->Start(p);
  ASSERT_TRUE(s2.ok());
  ExpectStarted(s2->get());
  ASSERT_TRUE((*s2)->Step(30).ok());
  for (int i = 0; i < 30; ++i) {
    SequenceEvent ev = NextEvent(s2->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    ASSERT_EQ(ev.step.logprobs.size(), 1u);
    EXPECT_TRUE(std::isfinite(ev.step.logprobs[0].logprob));
    EXPECT_LE(ev.step.logprobs[0].logprob, 0.0f);
  }
}

// stories260K never samples its EOS greedily, so this test declares a token that it
// does produce to be the EOS (a copy of the model's vocabulary with eos_token_id changed).
TEST_F(SchedulerTest, EosEndsPendingStepsUnlessIgnored) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
  const std::vector<int32_t> cont = Solo(prompt, 30, Greedy());
  ASSERT_EQ(cont.size(), 30u);
  // The first token that does not occur before position 6.
  size_t k = 6;
  while (k < cont.size() &&
         std::find(cont.begin(), cont.begin() + static_cast<long>(k), cont[k]) != cont.begin() + static_cast<long>(k)) {
    ++k;
  }
  ASSERT_LT(k, cont.size());
  gguf::GgufWriter w = gguf::GgufWriter::FromFile(model_->file());
  w.SetValue("tokenizer.ggml.eos_token_id", gguf::Value::U32(static_cast<uint32_t>(cont[k])));
  auto f = gguf::GgufFile::FromBytes(w.WriteToString());
  ASSERT_TRUE(f.ok()) << f.status();
  auto vocab = tokenizer::Vocab::FromGguf(**f);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  ASSERT_TRUE((*vocab)->IsEog(cont[k]));

  auto engine = MakeEngine(256, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  auto sched = Scheduler::Create(engine.get(), vocab->get(), cfg);
  ASSERT_TRUE(sched.ok());
  SequenceParams p;
  p.prompt = prompt;
  p.sampling = Greedy();
  auto seq = (*sched)->Start(p);
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  // Asked for 30 steps, gets k + 1: the last one is the EOS, the rest are dropped.
  std::vector<int32_t> out = Collect(seq->get(), 30);
  EXPECT_EQ(out, std::vector<int32_t>(cont.begin(), cont.begin() + static_cast<long>(k) + 1));
  SequenceEvent ev;
  EXPECT_FALSE((*seq)->Next(&ev, milliseconds(100)));
  // Asking again continues after the EOS.
  ASSERT_TRUE((*seq)->Step(2).ok());
  for (int i = 0; i < 2; ++i) {
    ev = NextEvent(seq->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
    EXPECT_EQ(ev.step.tokens, std::vector<int32_t>({cont[k + 1 + static_cast<size_t>(i)]}));
    EXPECT_FALSE(ev.step.eos);
  }

  // A draft running through the EOS stops at it: the EOS is the "one more" token.
  auto s2 = (*sched)->Start(p);
  ASSERT_TRUE(s2.ok());
  ExpectStarted(s2->get());
  ASSERT_TRUE((*s2)->Step(0, std::vector<int32_t>(cont.begin(), cont.begin() + static_cast<long>(k) + 4)).ok());
  ev = NextEvent(s2->get());
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep);
  EXPECT_TRUE(ev.step.eos);
  EXPECT_EQ(ev.step.n_accepted, static_cast<int32_t>(k));
  EXPECT_EQ(ev.step.tokens, std::vector<int32_t>(cont.begin(), cont.begin() + static_cast<long>(k) + 1));
  // Cells: s2 keeps its prompt and k accepted tokens; seq its prompt and out + 2 tokens
  // but the pending one; s2's first prompt.size() - 1 cells are seq's (a shared prefix).
  EXPECT_EQ(RunningCells((*sched)->Stats()), static_cast<int64_t>(prompt.size() + k) +
                                                 static_cast<int64_t>(prompt.size() + out.size() + 2 - 1) -
                                                 static_cast<int64_t>(prompt.size() - 1));
  s2->reset();

  // ignore_eos: never flagged.
  p.ignore_eos = true;
  auto s3 = (*sched)->Start(p);
  ASSERT_TRUE(s3.ok());
  ExpectStarted(s3->get());
  EXPECT_EQ(Collect(s3->get(), 30), cont);
}

// Embed() runs between iterations on a temporary sequence: the vector equals
// Engine::Embed on a fresh engine, and sequences generating at the same time keep their
// solo output (their cells are untouched); validation and shutdown errors.
TEST_F(SchedulerTest, EmbeddingsBesideRunningSequences) {
  const std::vector<int32_t> p1 = {1, 403, 407, 261, 378};
  const std::vector<int32_t> p2 = {1, 346, 306, 414};
  const std::vector<int32_t> text = {1, 500, 42, 7, 9, 300, 301};
  const std::vector<int32_t> want1 = Solo(p1, 24, Greedy()), want2 = Solo(p2, 24, Greedy());
  auto fresh = MakeEngine(64, 512);
  auto want_emb = fresh->Embed(text, Pooling::kMean, 0);
  ASSERT_TRUE(want_emb.ok()) << want_emb.status();

  auto e = MakeEngine(256, 512);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;  // both slots busy: embeddings use free cells under a spare id
  auto sched = MakeScheduler(e.get(), cfg);
  SequenceParams sp1, sp2;
  sp1.prompt = p1;
  sp1.sampling = Greedy();
  sp1.ignore_eos = true;
  sp2 = sp1;
  sp2.prompt = p2;
  auto s1 = sched->Start(sp1);
  auto s2 = sched->Start(sp2);
  ASSERT_TRUE(s1.ok() && s2.ok());
  ExpectStarted(s1->get());
  ExpectStarted(s2->get());
  std::mutex mu;
  std::vector<absl::StatusOr<std::vector<float>>> got;
  std::atomic<bool> stop_embedding{false};
  std::promise<void> first;   // the first job is done (or failed to start)
  std::thread embedder([&] {  // one job at a time, each waited for, until generation ends
    bool first_set = false;
    while (!stop_embedding.load()) {
      std::promise<void> ran;
      absl::Status st = sched->Embed(text, Pooling::kMean, [&](absl::StatusOr<std::vector<float>> r) {
        {
          std::lock_guard<std::mutex> l(mu);
          got.push_back(std::move(r));
        }
        ran.set_value();
      });
      EXPECT_TRUE(st.ok()) << st;
      if (st.ok()) ran.get_future().wait();
      if (!first_set) {
        first.set_value();
        first_set = true;
      }
      if (!st.ok()) break;
    }
  });
  // The sequences step only when asked (Step), so both are mid-generation, holding their
  // cells, while the first embedding runs: it is beside them whatever the timing.
  first.get_future().wait();
  std::vector<int32_t> out1, out2;
  std::thread t2([&] { out2 = Collect(s2->get(), 24, /*one_by_one=*/true); });
  out1 = Collect(s1->get(), 24, /*one_by_one=*/true);
  t2.join();
  stop_embedding = true;
  embedder.join();
  EXPECT_EQ(out1, want1);
  EXPECT_EQ(out2, want2);
  std::lock_guard<std::mutex> l(mu);
  ASSERT_FALSE(got.empty());
  for (const auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.status();
    double d = 0;
    for (size_t i = 0; i < r->size(); ++i) d = std::max(d, std::fabs(static_cast<double>((*r)[i]) - (*want_emb)[i]));
    EXPECT_LT(d, 1e-3);  // F16 KV here and in `fresh`, same cells order
  }
  // Embedding cells are gone; the two sequences' cells remain (a prefix they share,
  // when the second was admitted after the first's prefill, is stored once).
  const SchedulerStats st = sched->Stats();
  EXPECT_EQ(RunningCells(st) + static_cast<int64_t>(st.prefix_tokens_reused),
            static_cast<int64_t>(p1.size() + p2.size() + 2 * 24 - 2));
}

TEST_F(SchedulerTest, EmbedValidationAndShutdown) {
  auto e = MakeEngine(64, 512);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.n_ctx_seq = 32;
  auto sched = MakeScheduler(e.get(), cfg);
  auto noop = [](absl::StatusOr<std::vector<float>>) {};
  EXPECT_EQ(sched->Embed({}, Pooling::kMean, noop).code(), absl::StatusCode::kInvalidArgument);
  absl::Status too_long = sched->Embed(std::vector<int32_t>(33, 1), Pooling::kMean, noop);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("n_ctx_seq = 32"), std::string::npos) << too_long;
  absl::Status bad = sched->Embed({1, 99999}, Pooling::kMean, noop);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("tokens[1]"), std::string::npos) << bad;
  // A full-length input fits (a free slot's region).
  std::promise<absl::StatusOr<std::vector<float>>> done;
  ASSERT_TRUE(sched
                  ->Embed(std::vector<int32_t>(32, 1), Pooling::kLast,
                          [&](absl::StatusOr<std::vector<float>> r) { done.set_value(std::move(r)); })
                  .ok());
  auto r = done.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(static_cast<int64_t>(r->size()), e->n_embd());
  sched->StopAdmitting();
  EXPECT_EQ(sched->Embed({1}, Pooling::kMean, noop).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace herd::engine

namespace herd::engine {
namespace {

// A grammar is enforced per sequence: seeded sampling with a grammar gives the same
// tokens alone (Generate), in the scheduler, and in the scheduler with drafts (right,
// half-right, none); the text matches the grammar and ends with EOS where it is complete.
TEST_F(SchedulerTest, GrammarWithDraftsEqualsSoloAndMatches) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  SamplingParams sp;
  sp.temp = 0.9f;
  sp.seed = 7;
  sp.grammar = "root ::= \"The \" [a-z]{1,8} \" is \" (\"big\" | \"small\") \".\"";
  StopReason stop = StopReason::kLength;
  const std::vector<int32_t> solo = Solo(prompt, 64, sp, /*ignore_eos=*/false, &stop);
  ASSERT_FALSE(solo.empty());
  EXPECT_EQ(stop, StopReason::kEog);
  std::string text;
  for (int32_t t : solo) text += vocab_->TokenToPiece(t, false);
  auto g = grammar::Grammar::Parse(sp.grammar);
  ASSERT_TRUE(g.ok());
  auto m = grammar::Matcher::Create(*g);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->AcceptBytes(text).ok() && m->CanEnd()) << text;

  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  SequenceParams p = SeqParams(prompt, sp, /*ignore_eos=*/false);
  auto a = sched->Start(p);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectStarted(a->get());
  std::vector<int32_t> ref = Collect(a->get(), 64);
  ASSERT_FALSE(ref.empty());
  EXPECT_TRUE(vocab_->IsEog(ref.back()));
  ref.pop_back();
  EXPECT_EQ(ref, solo);

  auto b = sched->Start(p);
  ASSERT_TRUE(b.ok());
  ExpectStarted(b->get());
  std::vector<int32_t> out;
  bool eos = false;
  for (int round = 0; !eos && out.size() < ref.size() + 1 && round < 100; ++round) {
    std::vector<int32_t> draft;
    for (size_t i = out.size(); i < std::min(ref.size(), out.size() + 4); ++i) draft.push_back(ref[i]);
    if (round % 3 == 1 && draft.size() > 2) draft[2] = (draft[2] + 1) % 512;
    if (round % 3 == 2) draft.clear();
    ASSERT_TRUE((*b)->Step(0, draft).ok());
    SequenceEvent ev = NextEvent(b->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep) << ev.status;
    out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
    eos = ev.step.eos;
  }
  ASSERT_TRUE(eos);
  out.pop_back();
  EXPECT_EQ(out, solo);
}

TEST_F(SchedulerTest, GrammarAndLogitBiasValidation) {
  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), SchedulerConfig());
  ASSERT_NE(sched, nullptr);
  SequenceParams p;
  p.prompt = {1, 403};
  p.sampling.grammar = "root ::= \"a\" | ";
  EXPECT_TRUE(sched->Start(p).ok());  // an empty alternative is fine
  p.sampling.grammar = "root ::= x";
  auto s = sched->Start(p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("grammar: undefined rule 'x'"), std::string::npos) << s.status();
  p.sampling.grammar.clear();
  p.sampling.logit_bias = {{512, -1.0f}};
  s = sched->Start(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("logit_bias[0]: token id 512 is outside the vocabulary [0, 512)"),
            std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace herd::engine

namespace herd::engine {
namespace {

// Runs `prompt` for n greedy tokens on `sched` and returns them.
std::vector<int32_t> RunOne(Scheduler* sched, const std::vector<int32_t>& prompt, int32_t n) {
  SequenceParams p;
  p.prompt = prompt;
  p.sampling.temp = 0.0f;
  p.ignore_eos = true;
  auto seq = sched->Start(p);
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return {};
  std::vector<int32_t> out;
  EXPECT_TRUE((*seq)->Step(n).ok());
  SequenceEvent ev;
  while (static_cast<int32_t>(out.size()) < n && (*seq)->Next(&ev, std::chrono::seconds(60))) {
    if (ev.kind == SequenceEvent::Kind::kStarted) continue;
    if (ev.kind != SequenceEvent::Kind::kStep) break;
    out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  }
  const uint64_t id = (*seq)->id();
  seq->reset();  // ends the sequence: its cells are released by the next iteration
  // Wait for that release (stats count sequences ended by then).
  for (int i = 0; i < 500; ++i) {
    const SchedulerStats st = sched->Stats();
    if (st.active == 0 || st.sequences_started > id + 64) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return out;
}

}  // namespace

// Prefix caching: a prompt that shares a cached (ended) sequence's prefix, or a running
// sequence's, reuses its cells and prefills only the rest; its output equals its solo
// output; the cached prefix is kept and counted as evictable.
TEST_F(SchedulerTest, PrefixCacheReusesCellsAndKeepsSoloOutputs) {
  std::mt19937 rng(77);
  const std::vector<int32_t> system = RandomPrompt(rng, 40);  // a shared "system prompt"
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = system;
    for (int k = 0; k < 5 + i; ++k) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> solo;
  for (const auto& p : prompts) solo.push_back(Solo(p, 12, Greedy()));

  auto engine = MakeEngine(512, 64);
  auto sched = MakeScheduler(engine.get(), 4);
  ASSERT_NE(sched, nullptr);
  EXPECT_EQ(RunOne(sched.get(), prompts[0], 12), solo[0]);
  SchedulerStats st = sched->Stats();
  EXPECT_EQ(st.prefix_cache_hits, 0u);
  EXPECT_EQ(st.cached_prefixes, 1);
  // prompt + 12 tokens but the last (pending) one are cached.
  EXPECT_EQ(st.kv_cells_cached, static_cast<int64_t>(prompts[0].size() + 11));
  EXPECT_EQ(RunOne(sched.get(), prompts[1], 12), solo[1]);
  st = sched->Stats();
  EXPECT_EQ(st.prefix_cache_hits, 1u);
  EXPECT_EQ(st.prefix_tokens_reused, system.size());
  EXPECT_EQ(st.prompt_tokens, prompts[0].size() + prompts[1].size() - system.size());
  // The same prompt again: everything but its last token comes from the cache.
  EXPECT_EQ(RunOne(sched.get(), prompts[1], 12), solo[1]);
  EXPECT_EQ(sched->Stats().prefix_tokens_reused, system.size() + prompts[1].size() - 1);

  // Concurrent sequences share a running one's prefix.
  SequenceParams p = SeqParams(prompts[2]);
  auto a = sched->Start(p);
  ASSERT_TRUE(a.ok());
  ExpectStarted(a->get());
  p.prompt = prompts[3];
  auto b = sched->Start(p);
  ASSERT_TRUE(b.ok());
  ExpectStarted(b->get());
  std::vector<int32_t> got_b = Collect(b->get(), 12);
  std::vector<int32_t> got_a = Collect(a->get(), 12);
  EXPECT_EQ(got_a, solo[2]);
  EXPECT_EQ(got_b, solo[3]);
  st = sched->Stats();
  EXPECT_EQ(st.prefix_cache_lookups, 5u);
  EXPECT_EQ(st.prefix_cache_hits, 4u);
  EXPECT_LE(st.kv_cells_used, st.kv_cells_total);
}

// Prompts that arrive together with a shared 120-token system prompt compute it once:
// while the first prefills it (two 64-token passes), the others wait, then take its
// cells and prefill only their own suffixes. Outputs equal solo runs.
// A backend that lost its memory: every admitted sequence ends with the reason, the
// prefix cache is emptied, and a new sequence runs from scratch with the solo output.
TEST_F(SchedulerTest, DropKvCacheEndsAdmittedSequencesAndEmptiesTheCache) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const std::vector<int32_t> solo = Solo(prompt, 4, Greedy());
  auto engine = MakeEngine(256, 64);
  auto sched = MakeScheduler(engine.get(), 2);
  ASSERT_NE(sched, nullptr);
  EXPECT_EQ(RunOne(sched.get(), prompt, 4), solo);  // leaves a cached prefix (once released)
  for (int i = 0; i < 200 && sched->Stats().cached_prefixes != 1; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(sched->Stats().cached_prefixes, 1);
  auto seq = sched->Start(SeqParams(prompt));
  ASSERT_TRUE(seq.ok());
  ExpectStarted(seq->get());
  EXPECT_EQ(Collect(seq->get(), 2).size(), 2u);
  EXPECT_GT(sched->Stats().kv_cells_used, 0);
  const uint64_t hits = sched->Stats().prefix_cache_hits;
  EXPECT_EQ(hits, 1u);  // the second sequence reused the first's prompt

  sched->DropKvCache(absl::UnavailableError("remote backend 10.0.0.7:50061: restarted"));
  // Done when DropKvCache returns: no waiting on timing.
  EXPECT_EQ(sched->Stats().kv_cells_used, 0);
  EXPECT_EQ(sched->Stats().cached_prefixes, 0);
  EXPECT_EQ(sched->Stats().active, 0);
  SequenceEvent ev = NextEvent(seq->get());
  ASSERT_EQ(ev.kind, SequenceEvent::Kind::kEnded);
  EXPECT_TRUE(absl::IsUnavailable(ev.status)) << ev.status;
  EXPECT_NE(ev.status.message().find("10.0.0.7:50061"), std::string::npos);
  EXPECT_EQ(RunOne(sched.get(), prompt, 4), solo);
  EXPECT_EQ(sched->Stats().prefix_cache_hits, hits);  // nothing left to reuse
}

TEST_F(SchedulerTest, PromptsArrivingTogetherComputeTheirSharedPrefixOnce) {
  std::mt19937 rng(99);
  const std::vector<int32_t> system = RandomPrompt(rng, 120);
  std::vector<std::vector<int32_t>> prompts, solo;
  size_t total = 0, suffixes = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = system;
    for (int k = 0; k < 5 + i; ++k) p.push_back(10 + 100 * i + k);  // distinct from the first token on
    prompts.push_back(p);
    solo.push_back(Solo(p, 8, Greedy()));
    total += p.size();
    if (i > 0) suffixes += p.size() - system.size();
  }
  auto engine = MakeEngine(1024, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.max_prefill_tokens = 64;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::vector<std::unique_ptr<Sequence>> seqs = StartGreedy(sched.get(), prompts);
  ASSERT_EQ(seqs.size(), prompts.size());
  // Every step reports the prompt tokens the sequence did not compute itself (shared on
  // admission or in flight); together they are the scheduler's reused tokens.
  uint64_t reported = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    ExpectStarted(seqs[i].get());
    ASSERT_TRUE(seqs[i]->Step(8).ok());
    std::vector<int32_t> out;
    int32_t n_cached = -1;
    while (out.size() < 8) {
      SequenceEvent ev = NextEvent(seqs[i].get());
      ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep) << ev.status;
      if (n_cached >= 0) {
        EXPECT_EQ(ev.step.n_cached, n_cached) << "sequence " << i << ": changed after the prompt";
      }
      n_cached = ev.step.n_cached;
      out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
    }
    EXPECT_EQ(out, solo[i]) << "sequence " << i;
    reported += static_cast<uint64_t>(n_cached);
  }
  const SchedulerStats st = sched->Stats();
  EXPECT_EQ(reported, st.prefix_tokens_reused);
  EXPECT_EQ(st.prompt_tokens + st.prefix_tokens_reused, total);
  // Each follower takes the system prompt's cells: at most kMinSharedPrefill (16) of its
  // tokens are computed twice, however the arrivals fall between passes.
  EXPECT_GE(st.prefix_tokens_reused, 3 * (system.size() - 16));
  EXPECT_LE(st.prompt_tokens, prompts[0].size() + suffixes + 3 * 16);
}

// Prompts arriving together are prefilled at most max_prefill_tokens per pass (several
// passes), with unchanged outputs; a sequence alone prefills n_batch at a time.
TEST_F(SchedulerTest, PrefillTokenBudgetSplitsPromptsArrivingTogether) {
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(RandomPrompt(rng, 50));
    solo.push_back(Solo(prompts.back(), 6, Greedy()));
  }
  auto engine = MakeEngine(512, 256);
  SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.max_prefill_tokens = 64;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::mutex mu;
  int32_t max_prompt_tokens = 0, max_prompt_tokens_multi = 0;
  sched->SetIterationObserver([&](const IterationStats& it) {
    std::lock_guard<std::mutex> l(mu);
    max_prompt_tokens = std::max(max_prompt_tokens, it.prompt_tokens);
    if (it.active > 1) max_prompt_tokens_multi = std::max(max_prompt_tokens_multi, it.prompt_tokens);
  });
  std::vector<std::unique_ptr<Sequence>> seqs = StartGreedy(sched.get(), prompts);
  ASSERT_EQ(seqs.size(), prompts.size());
  ExpectSoloOutputs(seqs, 6, solo);
  seqs.clear();
  // Alone: the whole prompt in one pass (118 tokens: BOS comes from the prefix cache).
  EXPECT_EQ(RunOne(sched.get(), RandomPrompt(rng, 120), 2).size(), 2u);
  sched->SetIterationObserver(nullptr);
  // The prefill passes of the four (+ at most one pending token each) stayed within 64.
  EXPECT_LE(max_prompt_tokens_multi, 64 + 4);
  EXPECT_GE(max_prompt_tokens, 118);
}

// A short prompt that arrives while a long one is being prefilled is prefilled first
// (shortest remaining first) and streams while the long one still prefills; the long
// one keeps part of every pass, and both outputs equal their solo runs. The scheduler
// is held after every pass (its observer waits for the test), so what each sequence has
// delivered is read at pass boundaries.
TEST_F(SchedulerTest, ShortPromptIsPrefilledBeforeALongOneAheadOfIt) {
  std::mt19937 rng(33);
  const std::vector<int32_t> long_prompt = RandomPrompt(rng, 300);
  const std::vector<int32_t> short_prompt = RandomPrompt(rng, 10);
  const std::vector<int32_t> solo_long = Solo(long_prompt, 4, Greedy());
  const std::vector<int32_t> solo_short = Solo(short_prompt, 4, Greedy());
  auto engine = MakeEngine(1024, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.max_prefill_tokens = 32;
  cfg.prefix_cache = false;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  // The gate: the observer counts passes and waits until the test allows the next one.
  std::mutex mu;
  std::condition_variable cv;
  int64_t passes = 0, allowed = 1;
  bool free_run = false;
  sched->SetIterationObserver([&](const IterationStats&) {
    std::unique_lock<std::mutex> l(mu);
    ++passes;
    cv.notify_all();
    cv.wait_for(l, std::chrono::seconds(30), [&] { return free_run || passes < allowed; });
  });
  auto wait_held = [&](int64_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(30), [&] { return passes >= n; });
  };
  auto allow = [&](int64_t n) {
    std::lock_guard<std::mutex> l(mu);
    allowed = n;
    cv.notify_all();
  };
  auto start = [&](const std::vector<int32_t>& prompt) {
    SequenceParams p;
    p.prompt = prompt;
    p.sampling.temp = 0.0f;
    p.ignore_eos = true;
    auto seq = sched->Start(p);
    EXPECT_TRUE(seq.ok()) << seq.status();
    if (seq.ok()) {
      EXPECT_TRUE((*seq)->Step(4).ok());
    }
    return seq.ok() ? *std::move(seq) : nullptr;
  };
  auto drain = [](Sequence* s, std::vector<int32_t>* out) {
    SequenceEvent ev;
    while (s->TryNext(&ev)) {
      if (ev.kind == SequenceEvent::Kind::kStep) out->insert(out->end(), ev.step.tokens.begin(), ev.step.tokens.end());
    }
  };
  std::unique_ptr<Sequence> a = start(long_prompt);
  ASSERT_NE(a, nullptr);
  // Held after the long prompt's first pass (alone: n_batch = 64 of its 300 tokens).
  ASSERT_TRUE(wait_held(1));
  std::unique_ptr<Sequence> b = start(short_prompt);
  ASSERT_NE(b, nullptr);
  std::vector<int32_t> got_a, got_b;
  bool b_first = false;
  for (int64_t n = 2; n < 200 && got_b.empty(); ++n) {
    allow(n);
    ASSERT_TRUE(wait_held(n)) << "pass " << n;
    drain(b.get(), &got_b);
    drain(a.get(), &got_a);
    if (!got_b.empty()) b_first = got_a.empty();
  }
  EXPECT_TRUE(b_first) << "the short prompt's first token came with or after the long prompt's";
  {
    std::lock_guard<std::mutex> l(mu);
    free_run = true;
    cv.notify_all();
  }
  SequenceEvent ev;
  while (got_a.size() < 4 && a->Next(&ev, std::chrono::seconds(60))) {
    if (ev.kind == SequenceEvent::Kind::kStep) got_a.insert(got_a.end(), ev.step.tokens.begin(), ev.step.tokens.end());
    if (ev.kind == SequenceEvent::Kind::kEnded) break;
  }
  while (got_b.size() < 4 && b->Next(&ev, std::chrono::seconds(60))) {
    if (ev.kind == SequenceEvent::Kind::kStep) got_b.insert(got_b.end(), ev.step.tokens.begin(), ev.step.tokens.end());
    if (ev.kind == SequenceEvent::Kind::kEnded) break;
  }
  sched->SetIterationObserver(nullptr);
  EXPECT_EQ(got_a, solo_long);
  EXPECT_EQ(got_b, solo_short);
}

// max_prefill_ms is validated.
TEST_F(SchedulerTest, NegativePrefillTimeBudgetIsRefused) {
  auto engine = MakeEngine(256, 64);
  SchedulerConfig cfg;
  cfg.max_prefill_ms = -1;
  auto s = Scheduler::Create(engine.get(), vocab_.get(), cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("max_prefill_ms"), std::string::npos) << s.status();
}

// A pool too small for every sequence at once: sequences are preempted (their cells
// freed, recomputed on re-admission) instead of corrupted or failed; all finish with
// their solo output, and no cell leaks.
TEST_F(SchedulerTest, PreemptionWhenThePoolRunsOutKeepsOutputs) {
  std::mt19937 rng(5);
  constexpr int kSeqs = 4;
  constexpr int32_t kGen = 40;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < kSeqs; ++i) {
    prompts.push_back(RandomPrompt(rng, 12 + i));
    solo.push_back(Solo(prompts.back(), kGen, Greedy()));
  }
  auto engine = MakeEngine(96, 64);  // 4 x (~14 + 40) cells do not fit in 96
  SchedulerConfig cfg;
  cfg.max_sequences = kSeqs;
  cfg.prefix_cache = false;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  int64_t max_used = 0;
  std::mutex mu;
  sched->SetIterationObserver([&](const IterationStats& it) {
    std::lock_guard<std::mutex> l(mu);
    max_used = std::max(max_used, it.kv_cells_used);
  });
  std::vector<std::vector<int32_t>> got(kSeqs);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSeqs; ++i) {
    threads.emplace_back([&, i] { got[i] = RunOne(sched.get(), prompts[i], kGen); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSeqs; ++i) EXPECT_EQ(got[i], solo[i]) << "sequence " << i;
  const SchedulerStats st = sched->Stats();
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_EQ(st.tokens_generated, static_cast<uint64_t>(kSeqs * kGen));
  sched->SetIterationObserver(nullptr);
  EXPECT_LE(max_used, 96);
  for (int i = 0; i < 100 && sched->Stats().kv_cells_used != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(sched->Stats().kv_cells_used, 0);
  EXPECT_EQ(sched->Stats().active, 0);
}

// Cached prefixes: at most max_cached_prefixes (least recently used dropped), evicted
// for room when a new sequence needs their cells; cancelling a sequence keeps its
// cells as a cached prefix, which leaves nothing when the scheduler shuts down.
TEST_F(SchedulerTest, CachedPrefixesAreEvictedLeastRecentlyUsedFirst) {
  std::mt19937 rng(9);
  auto engine = MakeEngine(64, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.max_cached_prefixes = 2;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = {3 + i};  // no common first token
    while (p.size() < 10) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    prompts.push_back(p);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(RunOne(sched.get(), prompts[i], 4).size(), 4u);
  SchedulerStats st = sched->Stats();
  EXPECT_EQ(st.cached_prefixes, 2);  // the first was dropped for the third
  EXPECT_EQ(st.prefix_evictions, 1u);
  EXPECT_EQ(st.kv_cells_cached, 2 * 13);
  // prompts[0] is no longer cached; prompts[2] is.
  (void)RunOne(sched.get(), prompts[2], 2);
  EXPECT_EQ(sched->Stats().prefix_cache_hits, 1u);

  // A sequence needing most of the pool evicts cached cells instead of waiting.
  std::vector<int32_t> big = {1};
  while (big.size() < 50) big.push_back(3 + static_cast<int32_t>(rng() % 500));
  EXPECT_EQ(RunOne(sched.get(), big, 8).size(), 8u);
  st = sched->Stats();
  EXPECT_GE(st.prefix_evictions, 2u);
  EXPECT_LE(st.kv_cells_used, 64);

  // Cancel mid-generation: the cells become a cached prefix (none leak), reusable.
  SequenceParams p = SeqParams(prompts[1]);
  auto s = sched->Start(p);
  ASSERT_TRUE(s.ok());
  ExpectStarted(s->get());
  ASSERT_TRUE((*s)->Step(3).ok());
  for (int k = 0; k < 3; ++k) EXPECT_EQ(NextEvent(s->get()).kind, SequenceEvent::Kind::kStep);
  (*s)->Cancel();
  EXPECT_EQ(NextEvent(s->get()).kind, SequenceEvent::Kind::kEnded);
  st = sched->Stats();
  EXPECT_EQ(RunningCells(st), 0);
  EXPECT_EQ(st.kv_cells_used, st.kv_cells_cached);
  sched->Shutdown();
  EXPECT_EQ(engine->kv().used(), 0);
}

// ---------------------------------------------------------------- scheduler-driven speculation

namespace {

// Drafts from a known continuation: the tokens that follow the history it was given
// (Append) in `truth`, or, with `wrong`, each of them plus one (never accepted).
class OracleSource : public spec::DraftSource {
 public:
  OracleSource(std::vector<int32_t> truth, bool wrong, spec::DraftBatcher* batcher = nullptr)
      : truth_(std::move(truth)), wrong_(wrong), batcher_(batcher) {}
  void Append(const std::vector<int32_t>& tokens) override {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }
  absl::StatusOr<spec::DraftResult> Propose(int32_t n_max) override {
    ++stats_.calls;
    spec::DraftResult r;
    // The history must be a prefix of the truth (the scheduler appends every token).
    if (history_.size() > truth_.size() || !std::equal(history_.begin(), history_.end(), truth_.begin())) {
      return absl::InternalError("history diverged from the expected continuation");
    }
    for (size_t i = history_.size(); i < truth_.size() && static_cast<int32_t>(r.tokens.size()) < n_max; ++i) {
      r.tokens.push_back(wrong_ ? (truth_[i] + 1) % 512 : truth_[i]);
    }
    last_ = static_cast<int32_t>(r.tokens.size());
    if (last_ > 0) {
      ++stats_.gen_drafts;
      stats_.gen_tokens += last_;
    }
    return r;
  }
  void Accept(int32_t n) override {
    stats_.acc_tokens += n;
    stats_.acc_drafts += n > 0;
  }
  spec::SpecStats Stats() const override { return stats_; }
  spec::DraftBatcher* batcher() override { return batcher_; }

 private:
  std::vector<int32_t> truth_, history_;
  bool wrong_;
  spec::DraftBatcher* batcher_;
  int32_t last_ = 0;
  spec::SpecStats stats_;
};

// Proposes each job through its source, recording the group sizes.
class RecordingBatcher : public spec::DraftBatcher {
 public:
  void ProposeBatch(const std::vector<spec::DraftJob*>& jobs) override {
    max_group = std::max(max_group, jobs.size());
    ++calls;
    for (spec::DraftJob* j : jobs) j->result = j->source->Propose(j->n_max);
  }
  size_t max_group = 0;
  int calls = 0;
};

// A source whose every draft fails (a draft worker that is down).
class FailingSource : public spec::DraftSource {
 public:
  void Append(const std::vector<int32_t>&) override {}
  absl::StatusOr<spec::DraftResult> Propose(int32_t) override { return absl::UnavailableError("draft worker down"); }
  void Accept(int32_t) override {}
  spec::SpecStats Stats() const override { return {}; }
};

// Runs `sources.size()` greedy sequences of `prompts` with those draft sources, n
// tokens each (n_predict = n), and returns their outputs; *passes gets the StepResults.
std::vector<std::vector<int32_t>> RunWithSources(Scheduler* sched, const std::vector<std::vector<int32_t>>& prompts,
                                                 std::vector<std::shared_ptr<spec::DraftSource>> sources, int32_t n,
                                                 int32_t* passes, spec::SpecStats* last_stats = nullptr) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceParams p;
    p.prompt = prompts[i];
    p.sampling.temp = 0.0f;
    p.ignore_eos = true;
    p.draft_source = std::move(sources[i]);
    p.draft_max = 8;
    p.n_predict = n;
    auto s = sched->Start(std::move(p));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    EXPECT_TRUE((*s)->Step(n).ok());
    seqs.push_back(*std::move(s));
  }
  std::vector<std::vector<int32_t>> out(seqs.size());
  *passes = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    SequenceEvent ev;
    while (static_cast<int32_t>(out[i].size()) < n && seqs[i]->Next(&ev, std::chrono::seconds(120))) {
      if (ev.kind == SequenceEvent::Kind::kStarted) continue;
      if (ev.kind != SequenceEvent::Kind::kStep) {
        ADD_FAILURE() << "sequence " << i << " ended: " << ev.status;
        break;
      }
      ++*passes;
      EXPECT_EQ(ev.step.tokens.size(), static_cast<size_t>(ev.step.n_accepted + 1));
      out[i].insert(out[i].end(), ev.step.tokens.begin(), ev.step.tokens.end());
      if (last_stats != nullptr) *last_stats = ev.step.spec_stats;
    }
    EXPECT_EQ(static_cast<int32_t>(out[i].size()), n) << "sequence " << i << " never reached n_predict";
  }
  return out;
}

}  // namespace

// The scheduler asks each sequence's source for a draft every pass and verifies it in
// the batch: with drafts that are always right, outputs equal the solo ones in far fewer
// passes, every draft token is accepted, and the draft sources of one batcher are asked
// together (one ProposeBatch for several sequences).
TEST_F(SchedulerTest, SchedulerDrivenDraftsKeepOutputsAndSavePasses) {
  auto engine = MakeEngine(1024, 256);
  // The mechanism, not the policy: on stories260K a pass's time grows with every token
  // (compute-bound), so the adaptive switch may rightly find drafts do not pay.
  SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.adaptive_speculation = false;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::mt19937 rng(7);
  const int32_t n = 48;
  std::vector<std::vector<int32_t>> prompts, solo;
  std::vector<std::shared_ptr<spec::DraftSource>> sources;
  RecordingBatcher batcher;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(RandomPrompt(rng, 6 + 3 * i));
    solo.push_back(Solo(prompts.back(), n, Greedy()));
    std::vector<int32_t> truth = prompts.back();
    truth.insert(truth.end(), solo.back().begin(), solo.back().end());
    sources.push_back(std::make_unique<OracleSource>(truth, false, &batcher));
  }
  int32_t passes = 0;
  spec::SpecStats last;
  const auto out = RunWithSources(sched.get(), prompts, std::move(sources), n, &passes, &last);
  EXPECT_EQ(out, solo);
  const SchedulerStats st = sched->Stats();
  EXPECT_GT(st.spec_passes, 0u);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);  // every oracle token accepted
  EXPECT_EQ(st.spec_draft_errors, 0u);
  EXPECT_LT(passes, 4 * n / 2) << "drafts that are always right should at least halve the passes";
  EXPECT_GT(batcher.max_group, 1u) << "sequences decoding together should be drafted together";
  EXPECT_GT(last.gen_tokens, 0);
  EXPECT_EQ(last.acc_tokens, last.gen_tokens);
}

// Drafts that are never accepted, or that fail, change no output; with adaptive
// speculation the scheduler soon stops asking for long drafts (it probes with short ones).
TEST_F(SchedulerTest, RejectedOrFailingDraftsKeepOutputsAndFadeOut) {
  auto engine = MakeEngine(1024, 256);
  auto sched = MakeScheduler(engine.get(), 4);
  ASSERT_NE(sched, nullptr);
  std::mt19937 rng(11);
  const int32_t n = 64;
  std::vector<std::vector<int32_t>> prompts, solo;
  std::vector<std::shared_ptr<spec::DraftSource>> sources;
  for (int i = 0; i < 2; ++i) {
    prompts.push_back(RandomPrompt(rng, 8 + i));
    solo.push_back(Solo(prompts.back(), n, Greedy()));
    std::vector<int32_t> truth = prompts.back();
    truth.insert(truth.end(), solo.back().begin(), solo.back().end());
    if (i == 0) {
      sources.push_back(std::make_unique<OracleSource>(truth, /*wrong=*/true));
    } else {
      sources.push_back(std::make_unique<FailingSource>());
    }
  }
  int32_t passes = 0;
  const auto out = RunWithSources(sched.get(), prompts, std::move(sources), n, &passes);
  EXPECT_EQ(out, solo);
  const SchedulerStats st = sched->Stats();
  EXPECT_EQ(st.spec_accepted_tokens, 0u);
  // Without adaptation every pass of the wrong source would carry up to 8 draft tokens
  // (~8 * 64); adapted, a few early drafts and one-token probes remain. (Whether the
  // failing source is asked at all depends on timing: a sequence that starts after the
  // other's rejections starts from their acceptance, and may never draft.)
  EXPECT_LT(st.spec_draft_tokens, 8u * n / 4) << "drafts that never pay should fade out";
  EXPECT_EQ(passes, 2 * n);  // one token per pass: nothing accepted

  // The failures themselves, without the policy: every step asks (draft_max 8 while
  // n_predict leaves room: all steps but the last), every ask is a counted error.
  sched.reset();  // one scheduler per engine
  SchedulerConfig plain_cfg;
  plain_cfg.max_sequences = 4;
  plain_cfg.adaptive_speculation = false;
  auto plain = MakeScheduler(engine.get(), plain_cfg);
  ASSERT_NE(plain, nullptr);
  std::vector<std::shared_ptr<spec::DraftSource>> failing;
  failing.push_back(std::make_shared<FailingSource>());
  const auto out2 = RunWithSources(plain.get(), {prompts[1]}, std::move(failing), n, &passes);
  EXPECT_EQ(out2, std::vector<std::vector<int32_t>>{solo[1]});
  EXPECT_EQ(plain->Stats().spec_draft_errors, static_cast<uint64_t>(n - 1));
  EXPECT_EQ(passes, n);
}

// An always-right drafter whose tokens take far longer than the target's passes (100 ms
// per token against passes of a few milliseconds, even on a loaded machine): the
// scheduler measures the wait for its first draft and stops asking; what re-measures it
// is one probe (spec::DraftWaitModel: 3 drafts of at most 4 tokens) after 32 passes
// stopped so, and the probe's waits stop it again. Outputs stay solo.
TEST_F(SchedulerTest, DraftsSlowerThanTheyPayAreNotAskedFor) {
  class SlowOracle : public OracleSource {
   public:
    using OracleSource::OracleSource;
    absl::StatusOr<spec::DraftResult> Propose(int32_t n_max) override {
      auto r = OracleSource::Propose(n_max);
      if (r.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100) * r->tokens.size());
      return r;
    }
  };
  auto engine = MakeEngine(1024, 256);
  auto sched = MakeScheduler(engine.get(), 4);
  ASSERT_NE(sched, nullptr);
  std::mt19937 rng(13);
  const int32_t n = 64;
  const std::vector<int32_t> prompt = RandomPrompt(rng, 8);
  const std::vector<int32_t> solo = Solo(prompt, n, Greedy());
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), solo.begin(), solo.end());
  std::vector<std::shared_ptr<spec::DraftSource>> sources;
  sources.push_back(std::make_shared<SlowOracle>(truth, false));
  int32_t passes = 0;
  const auto out = RunWithSources(sched.get(), {prompt}, std::move(sources), n, &passes);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], solo);
  const SchedulerStats st = sched->Stats();
  EXPECT_GT(st.spec_draft_tokens, 0u);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
  EXPECT_LE(st.spec_passes, 1u + 3u) << "a drafter this slow should be dropped after its first draft and one probe";
  EXPECT_LE(st.spec_draft_tokens, 8u + 3u * 4u);
}

// A draft model evaluates the prompt while the prompt's own step runs (a one-token draft
// asked beside the pass, not verified), and its first verified draft comes at the next
// step, so its prompt evaluation does not delay the first token; an n-gram drafter, free
// to ask, drafts on the prompt's step. Outputs stay solo either way.
TEST_F(SchedulerTest, DraftModelSourcesEvaluateThePromptBesideItsStep) {
  class TypedOracle : public OracleSource {
   public:
    TypedOracle(std::vector<int32_t> truth, spec::SpecType type) : OracleSource(std::move(truth), false), type_(type) {}
    void Append(const std::vector<int32_t>& tokens) override {
      seen_ += tokens.size();
      OracleSource::Append(tokens);
    }
    absl::StatusOr<spec::DraftResult> Propose(int32_t n_max) override {
      asked.emplace_back(seen_, n_max);
      return OracleSource::Propose(n_max);
    }
    spec::SpecStats Stats() const override {
      spec::SpecStats st = OracleSource::Stats();
      st.type = type_;
      return st;
    }
    std::vector<std::pair<size_t, int32_t>> asked;  // (history length, n_max) per Propose

   private:
    spec::SpecType type_;
    size_t seen_ = 0;
  };
  auto engine = MakeEngine(1024, 256);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.adaptive_speculation = false;  // the mechanism: every step drafts (draft_max 8)
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  std::mt19937 rng(17);
  const int32_t n = 24;
  const std::vector<int32_t> prompt = RandomPrompt(rng, 12);
  const std::vector<int32_t> solo = Solo(prompt, n, Greedy());
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), solo.begin(), solo.end());
  using Asked = std::pair<size_t, int32_t>;
  for (spec::SpecType type : {spec::SpecType::kDraftModel, spec::SpecType::kNgramSimple}) {
    const SchedulerStats before = sched->Stats();
    auto src = std::make_shared<TypedOracle>(truth, type);
    int32_t passes = 0;
    const auto out = RunWithSources(sched.get(), {prompt}, {src}, n, &passes);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], solo);
    ASSERT_GE(src->asked.size(), 2u);
    const SchedulerStats after = sched->Stats();
    if (type == spec::SpecType::kDraftModel) {
      EXPECT_EQ(src->asked[0], Asked(prompt.size(), 1));      // beside the prompt's step
      EXPECT_EQ(src->asked[1], Asked(prompt.size() + 1, 8));  // the first verified draft
      // Every draft token verified came from the later calls: all accepted (oracle).
      EXPECT_EQ(after.spec_accepted_tokens - before.spec_accepted_tokens,
                after.spec_draft_tokens - before.spec_draft_tokens);
    } else {
      EXPECT_EQ(src->asked[0], Asked(prompt.size(), 8));
    }
  }
}

// Drafts the scheduler asks for take only cells that are free beyond every step's own
// demand: beside another sequence that holds much of the pool, drafts shrink instead of
// failing the forward pass (before: RESOURCE_EXHAUSTED "KV cache full"), and the output
// stays the solo one.
TEST_F(SchedulerTest, SchedulerDraftsFitTheKvPool) {
  const int32_t n = 64;
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomPrompt(rng, 10), other = RandomPrompt(rng, 60);
  // The oracle knows 16 tokens more than are read, so drafts near the end are long.
  const std::vector<int32_t> longer = Solo(prompt, n + 16, Greedy());
  const std::vector<int32_t> solo(longer.begin(), longer.begin() + n);
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), longer.begin(), longer.end());
  // 136 cells: the other sequence holds 59, this one ends with 10 + 63 and one pending
  // token; passes of 9 tokens (8 accepted drafts) reach 63 generated, where a pass of 9
  // more finds 4 free cells.
  auto engine = MakeEngine(136, 64);
  SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.adaptive_speculation = false;
  cfg.prefix_cache = false;
  auto sched = MakeScheduler(engine.get(), cfg);
  ASSERT_NE(sched, nullptr);
  auto holder = sched->Start(SeqParams(other));  // prefills, then waits for steps
  ASSERT_TRUE(holder.ok()) << holder.status();
  ExpectStarted(holder->get());
  SequenceParams p = SeqParams(prompt);
  p.draft_source = std::make_shared<OracleSource>(truth, false);
  p.draft_max = 8;
  auto seq = sched->Start(std::move(p));
  ASSERT_TRUE(seq.ok()) << seq.status();
  ExpectStarted(seq->get());
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < n) {
    ASSERT_TRUE((*seq)->Step(1).ok());
    SequenceEvent ev = NextEvent(seq->get());
    ASSERT_EQ(ev.kind, SequenceEvent::Kind::kStep) << ev.status;
    out.insert(out.end(), ev.step.tokens.begin(), ev.step.tokens.end());
  }
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + n), solo);
  const SchedulerStats st = sched->Stats();
  EXPECT_GT(st.spec_passes, 0u);
  EXPECT_EQ(st.preemptions, 0u) << "no sequence is preempted for a draft";
}

}  // namespace herd::engine
