#include "libs/engine/spec/spec_generate.h"

#include <chrono>
#include <climits>
#include <random>

#include "absl/strings/str_cat.h"

#include "libs/engine/spec/spec_loop.h"
#include "libs/engine/spec/verify.h"

namespace herd::engine::spec {
namespace {

// Forwards to a SpecSession and adds the wall time of each Propose to `*ms`.
class TimedSource : public DraftSource {
 public:
  TimedSource(SpecSession* s, double* ms) : s_(s), ms_(ms) {}
  void Append(const std::vector<int32_t>& tokens) override { s_->Append(tokens); }
  absl::StatusOr<DraftResult> Propose(int32_t n_max) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<DraftResult> r = s_->Propose(n_max);
    *ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  void Accept(int32_t n_accepted) override { s_->Accept(n_accepted); }
  SpecStats Stats() const override { return s_->Stats(); }

 private:
  SpecSession* s_;
  double* ms_;
};

}  // namespace

absl::StatusOr<SpecGenerateResult> GenerateSpeculative(Engine& engine, const tokenizer::Vocab& vocab,
                                                       const GenerateParams& params, SpecSession* session,
                                                       const std::function<void(const std::string&)>& on_text) {
  if (absl::Status vs = ValidateSamplingParams(params.sampling); !vs.ok()) return vs;
  if (!params.sampling.grammar.empty()) {
    return absl::UnimplementedError("grammar: not supported by the single-process speculative loop (use the services)");
  }
  SpecGenerateResult out;
  GenerateResult& res = out.gen;
  res.prompt_ids = params.prompt_ids.empty() ? vocab.Tokenize(params.prompt, params.add_special, params.parse_special)
                                             : params.prompt_ids;
  if (res.prompt_ids.empty()) {
    return absl::InvalidArgumentError("prompt: empty after tokenization and the vocabulary adds no BOS");
  }
  const int64_t n_prompt = static_cast<int64_t>(res.prompt_ids.size());
  if (n_prompt >= engine.n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", n_prompt, " tokens do not fit in n_ctx ", engine.n_ctx(),
                                                   " (prompt + completion must fit; at most n_ctx - 1 prompt tokens)"));
  }
  engine.kv().Clear();
  Sampler sampler(params.sampling, static_cast<int32_t>(engine.n_vocab()));
  for (int32_t id : res.prompt_ids) (void)sampler.Accept(id, /*accept_grammar=*/false);
  std::mt19937 rng(sampler.seed() ^ 0x5bd1e995u);  // for rejection steps of sampled drafts
  const bool greedy = params.sampling.temp <= 0.0f;

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  Batch batch;
  for (int64_t i = 0; i < n_prompt; ++i) {
    batch.Add(res.prompt_ids[static_cast<size_t>(i)], static_cast<int32_t>(i), 0, i == n_prompt - 1);
  }
  if (absl::Status s = engine.Decode(batch); !s.ok()) return s;
  res.pp_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  res.pp_tokens = n_prompt;
  session->Append(res.prompt_ids);

  tokenizer::StreamingDetokenizer detok(vocab, /*special=*/false);
  const int64_t n_predict = params.n_predict < 0 ? INT64_MAX : params.n_predict;
  auto tg0 = Clock::now();
  res.stop = StopReason::kLength;
  // Emits a sampled (and Accept()ed) token; false when generation ends (EOG or n_predict).
  auto emit = [&](int32_t id) {
    if (!params.ignore_eos && vocab.IsEog(id)) {
      res.stop = StopReason::kEog;
      return false;
    }
    res.output_ids.push_back(id);
    std::string piece = detok.Push(id);
    res.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    return static_cast<int64_t>(res.output_ids.size()) < n_predict;
  };

  if (n_predict > 0) {
    int32_t id = sampler.Sample(engine.Logits(0));
    (void)sampler.Accept(id);
    int64_t n_past = n_prompt;  // KV positions filled; `id` (pending) goes to position n_past
    if (emit(id)) {
      session->Append({id});
      session->set_draft_temp(greedy ? 0.0f : params.sampling.temp);
      TimedSource source(session, &out.draft_ms);
      SpecLoopLimits limits;
      limits.draft_min = session->config().draft_min;
      limits.draft_max = session->config().draft_max;
      limits.n_vocab = engine.n_vocab();
      SpecLoopHooks hooks;
      // Room for the draft: output left (the pass yields accepted + 1 tokens) and context
      // (after the pass, n_past + 1 + accepted cells plus the new pending token <= n_ctx).
      hooks.room = [&] {
        return std::min<int64_t>(n_predict - static_cast<int64_t>(res.output_ids.size()) - 1,
                                 engine.n_ctx() - n_past - 2);
      };
      hooks.verify = [&](const DraftResult& d) -> absl::StatusOr<SpecPass> {
        SpecPass pass;
        if (n_past + 1 >= engine.n_ctx()) {  // prompt + completion == n_ctx
          res.stop = StopReason::kContextFull;
          pass.end = true;
          return pass;
        }
        batch.Clear();
        batch.Add(id, static_cast<int32_t>(n_past), 0, true);
        for (size_t k = 0; k < d.tokens.size(); ++k) {
          batch.Add(d.tokens[k], static_cast<int32_t>(n_past + 1 + static_cast<int64_t>(k)), 0, true);
        }
        if (absl::Status s = engine.Decode(batch); !s.ok()) return s;
        ++out.target_passes;
        res.tg_tokens += static_cast<int64_t>(batch.size());
        VerifyResult v = VerifyDraft(
            sampler, [&](size_t i) { return engine.Logits(static_cast<int64_t>(i)); }, d.tokens, d.probs, rng, vocab,
            params.ignore_eos);
        if (!v.status.ok()) return v.status;
        // Keep `id` and the accepted draft tokens; drop the rejected cells.
        engine.kv().SeqRemove(0, static_cast<int32_t>(n_past + 1 + v.n_accepted), -1);
        n_past += 1 + v.n_accepted;
        id = v.tokens.back();
        pass.n_accepted = v.n_accepted;
        pass.tokens = std::move(v.tokens);
        return pass;
      };
      hooks.deliver = [&](SpecPass& pass) {
        for (int32_t t : pass.tokens) {
          if (!emit(t)) {
            pass.end = true;
            break;
          }
        }
        return absl::OkStatus();
      };
      if (absl::Status s = RunSpecLoop(source, limits, hooks); !s.ok()) return s;
    }
  }
  std::string tail = detok.Flush();
  res.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  res.tg_ms = std::chrono::duration<double, std::milli>(Clock::now() - tg0).count();
  out.stats = session->stats();
  return out;
}

}  // namespace herd::engine::spec
